"""The distributors of `tff_opt/round/distributors.py`: what is broadcast.

`with_previous_model` (FedFOR's two-model broadcast: w_t, w_{t-1} and
`has_previous`, zeros and False in the first round) and
`with_finalizer_state` (the model and extras read from the finalizer's
state), each run as a `DistributionProcess` on hand-made values. How the
composer feeds them is tests/test_composers.py's.
"""

import collections

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
  assert not sent[ground.HAS_PREVIOUS_KEY]
  np.testing.assert_array_equal(sent['model_weights'].trainable[0],
                                [1.0, 2.0])
  np.testing.assert_array_equal(
      sent[ground.PREVIOUS_MODEL_KEY].trainable[0], [0.0, 0.0])
  assert sent[ground.PREVIOUS_MODEL_KEY].non_trainable[0] == 0.0
  # Round 2: w_{t-1} is the model broadcast in round 1.
  _, sent = broadcast(state, second)
  assert sent[ground.HAS_PREVIOUS_KEY]
  np.testing.assert_array_equal(sent['model_weights'].trainable[0],
                                [4.0, 5.0])
  np.testing.assert_array_equal(
      sent[ground.PREVIOUS_MODEL_KEY].trainable[0], [1.0, 2.0])
  assert sent[ground.PREVIOUS_MODEL_KEY].non_trainable[0] == 3.0


def test_finalizer_state_extras_are_broadcast_with_the_model():
  process = distributors.with_finalizer_state(
      WEIGHTS_TYPE, tff.TensorType(np.float32, [2]),
      lambda state: collections.OrderedDict(doubled=2.0 * state))
  _, sent = _with_one_client(process)(
      process.initialize(),
      ground.ServerState(_weights([1.0, 2.0], 3.0),
                            np.float32([0.5, -1.5])))
  assert list(sent) == ['model_weights', 'doubled']
  np.testing.assert_array_equal(sent['model_weights'].trainable[0],
                                [1.0, 2.0])
  np.testing.assert_array_equal(sent['doubled'], [1.0, -3.0])


def test_reserved_extra_name_is_rejected():
  with tf.Graph().as_default():
    weights_type = tff.learning.models.weights_type_from_model(tiny.model_fn())
  with pytest.raises(ValueError, match="extras_fn must not return the reserved "
                     "key 'model_weights'"):
    distributors.with_finalizer_state(
        weights_type, tff.TensorType(np.float32),
        lambda s: {'model_weights': s})
