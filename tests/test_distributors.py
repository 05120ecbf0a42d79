"""The distributors of `tff_opt/round/distributors.py`: what is broadcast.

`with_previous_model` (FedFOR's two-model broadcast: w_t, w_{t-1} and
`has_previous`, zeros and False in the first round) and
`with_finalizer_state` (a broadcast NamedTuple made of the model and the
finalizer's state, led by the model), each run as a `DistributionProcess`
on hand-made values. How the composer feeds them is
tests/test_composers.py's.
"""

import collections
from typing import Any, NamedTuple

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny
from tff_opt.round import distributors
from tff_opt.round import ground

WEIGHTS_TYPE = tff.types.tensorflow_to_type(
    tff.learning.models.ModelWeights(
        trainable=[tf.TensorSpec((2,), tf.float32)],
        non_trainable=[tf.TensorSpec((), tf.float32)]))


def _weights(trainable, non_trainable):
  return tff.learning.models.ModelWeights([np.float32(trainable)],
                                          [np.float32(non_trainable)])


def _with_one_client(process):
  """`process.next` as `(state, value) -> (new state, what a client gets)`.

  A broadcast's value at the clients comes back only from a computation
  that has clients: here one, through a placeholder argument.
  """
  state_type, value_type = process.next.type_signature.parameter

  @tff.federated_computation(state_type, value_type,
                             tff.FederatedType(np.int32, tff.CLIENTS))
  def run(state, value, clients):
    del clients
    output = process.next(state, value)
    return output.state, output.result

  return lambda state, value: run(state, value, [0])


def test_previous_model_is_last_rounds_broadcast():
  process = distributors.with_previous_model(WEIGHTS_TYPE)
  broadcast = _with_one_client(process)
  first, second = _weights([1.0, 2.0], 3.0), _weights([4.0, 5.0], 6.0)
  state, sent = broadcast(process.initialize(), first)
  # Round 1: no previous model, zeros in its place.
  assert isinstance(sent, ground.TwoModels)
  assert not sent.has_previous
  np.testing.assert_array_equal(sent.model_weights.trainable[0],
                                [1.0, 2.0])
  np.testing.assert_array_equal(
      sent.previous_model_weights.trainable[0], [0.0, 0.0])
  assert sent.previous_model_weights.non_trainable[0] == 0.0
  # Round 2: w_{t-1} is the model broadcast in round 1.
  _, sent = broadcast(state, second)
  assert isinstance(sent, ground.TwoModels)
  assert sent.has_previous
  np.testing.assert_array_equal(sent.model_weights.trainable[0],
                                [4.0, 5.0])
  np.testing.assert_array_equal(
      sent.previous_model_weights.trainable[0], [1.0, 2.0])
  assert sent.previous_model_weights.non_trainable[0] == 3.0


class Doubled(NamedTuple):
  model_weights: Any
  doubled: Any


def test_finalizer_state_broadcast_is_what_broadcast_fn_makes():
  process = distributors.with_finalizer_state(
      WEIGHTS_TYPE, tff.TensorType(np.float32, [2]),
      lambda weights, state: Doubled(weights, 2.0 * state))
  _, sent = _with_one_client(process)(
      process.initialize(),
      ground.ServerState(_weights([1.0, 2.0], 3.0),
                            np.float32([0.5, -1.5])))
  assert isinstance(sent, Doubled)
  assert sent._fields == ('model_weights', 'doubled')
  np.testing.assert_array_equal(sent.model_weights.trainable[0],
                                [1.0, 2.0])
  np.testing.assert_array_equal(sent.doubled, [1.0, -3.0])


class ModelLast(NamedTuple):
  extra: Any
  model_weights: Any


@pytest.mark.parametrize('broadcast_fn, got', [
    (lambda w, s: collections.OrderedDict(model_weights=w, extra=s),
     'OrderedDict'),
    (lambda w, s: ModelLast(s, w), 'ModelLast'),
    (lambda w, s: (w, s), 'tuple'),
])
def test_a_broadcast_not_led_by_the_model_is_rejected(broadcast_fn, got):
  with tf.Graph().as_default():
    weights_type = tff.learning.models.weights_type_from_model(tiny.model_fn())
  with pytest.raises(TypeError) as raised:
    distributors.with_finalizer_state(
        weights_type, tff.TensorType(np.float32), broadcast_fn)
  assert str(raised.value) == (
      "broadcast_fn must return a NamedTuple whose first field is "
      f"'model_weights', got {got}.")
