"""Per-client state (`tff_opt/round/client_states.py`) outside any algorithm.

The checkpoint layout (`pack`/`unpack` of `{client_id: state}`), what a
`ClientStatefulProcess` checks and hands out before it runs a round, and the
type a stateful client work receives. The algorithms with client state
(SCAFFOLD, FedDyn, FedCurv's cross-silo variant, FedBN, client-side FedPTR)
test `compose` end to end in their own files.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import tff_types
from tff_opt.algorithms import fed_adc_momentum
from tff_opt.round import client_states
from tff_opt.round import ground


def test_pack_unpack_round_trip():
  initial = {'initialized': np.bool_(False),
             'control_variate': [np.zeros((2,), np.float32)]}
  states = {'b': {'initialized': np.bool_(True),
                  'control_variate': [np.float32([1.0, 2.0])]}}
  packed = client_states.pack(['a', 'b', 'c'], states, initial)
  np.testing.assert_array_equal(packed['seen'], [False, True, False])
  assert packed['states']['control_variate'][0].shape == (3, 2)
  unpacked = client_states.unpack(['a', 'b', 'c'], packed, initial)
  assert list(unpacked) == ['b']
  np.testing.assert_array_equal(unpacked['b']['control_variate'][0],
                                [1.0, 2.0])


def _process(calls):
  def next_computation(state, data, states):
    calls.append((state, data, states))
    return 'output', [s + 1 for s in states]

  return client_states.ClientStatefulProcess(
      initialize=None, next_computation=next_computation,
      get_model_weights=None, set_model_weights=None, get_hparams=None,
      set_hparams=None,
      initial_client_state={'g': np.zeros(2, np.float32)},
      client_state_type=None)


def test_next_needs_one_state_per_dataset_and_runs_nothing_otherwise():
  calls = []
  process = _process(calls)
  with pytest.raises(ValueError,
                     match=r'^Got 2 client datasets but 1 client states\.$'):
    process.next('state', ['d0', 'd1'], [0])
  assert not calls
  assert process.next('state', ('d0', 'd1'), (0, 5)) == ('output', [1, 6])
  assert calls == [('state', ['d0', 'd1'], [0, 5])]
  assert client_states.is_client_stateful(process)
  assert not client_states.is_client_stateful(object())


def test_each_new_client_gets_its_own_copy_of_the_initial_state():
  process = _process([])
  first = process.initial_client_state()
  first['g'][0] = 5.0
  np.testing.assert_array_equal(process.initial_client_state()['g'],
                                [0.0, 0.0])


def test_client_broadcast_type_pairs_the_broadcast_with_the_client_state():
  weights_type = tff.types.tensorflow_to_type(
      tff.learning.models.ModelWeights(
          trainable=[tf.TensorSpec((3,), tf.float32)], non_trainable=[]))
  broadcast_type = tff_types.named_tuple_type(
      fed_adc_momentum.Broadcast, weights_type,
      tff.types.to_type([(np.float32, [3])]))
  state_type = tff.types.to_type(collections.OrderedDict(
      initialized=np.bool_))
  merged = client_states.client_broadcast_type(broadcast_type, state_type)
  assert isinstance(merged, tff.StructWithPythonType)
  assert merged.python_container is ground.ClientInput
  assert [name for name, _ in tff.structure.iter_elements(merged)] == [
      'broadcast', 'client_state']
  assert merged.client_state == state_type
  assert merged.broadcast == broadcast_type
  assert merged.broadcast.momentum == broadcast_type.momentum
