"""`finalizers`: the server step, with extras and as TFF's own.

The server optimizer's step on `aggregate['delta']` must be the one of
`w <- w - lr * delta` (plain SGD here), the extras must follow
`update_extras` after an accepted round and stay as they were after a
rejected (non-finite) one, and the hyper-parameters are the optimizer's.
Checked on hand-made aggregates against NumPy. `apply_optimizer` must be
TFF's `build_apply_optimizer_finalizer` step for step.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.round import finalizers

SERVER_LR = 0.5
WEIGHTS_TYPE = tff.types.tensorflow_to_type(
    tff.learning.models.ModelWeights(
        trainable=[tf.TensorSpec((2,), tf.float32)],
        non_trainable=[tf.TensorSpec((1,), tf.float32)]))
AGGREGATE_TYPE = tff.types.to_type(collections.OrderedDict(
    delta=[(np.float32, [2])],
    sums=collections.OrderedDict(stat=(np.float32, [2])),
    num_clients=np.int32))


def _update_extras(extras, aggregate):
  # A running mean-of-sums, as SCAFFOLD's c <- c + (1/N) sum Delta c_k.
  n = tf.cast(aggregate['num_clients'], tf.float32)
  return collections.OrderedDict(
      total=extras['total'] + aggregate['sums']['stat'] / n)


@pytest.fixture(scope='module')
def finalizer():
  return finalizers.apply_optimizer_with_extras(
      tff.learning.optimizers.build_sgdm(SERVER_LR), WEIGHTS_TYPE,
      AGGREGATE_TYPE,
      initial_extras=collections.OrderedDict(
          total=np.zeros(2, np.float32)),
      update_extras=_update_extras)


def _aggregate(delta, stat, num_clients):
  return collections.OrderedDict(
      delta=[np.float32(delta)],
      sums=collections.OrderedDict(stat=np.float32(stat)),
      num_clients=np.int32(num_clients))


def _weights(trainable):
  return tff.learning.models.ModelWeights([np.float32(trainable)],
                                          [np.float32([9.0])])


def test_accepted_round_steps_the_model_and_updates_the_extras(finalizer):
  output = finalizer.next(finalizer.initialize(), _weights([1.0, -1.0]),
                          _aggregate([0.2, 0.4], [3.0, 6.0], 3))
  assert output.measurements['update_non_finite'] == 0
  np.testing.assert_allclose(output.result.trainable[0],
                             [1.0 - SERVER_LR * 0.2, -1.0 - SERVER_LR * 0.4],
                             rtol=1e-6)
  np.testing.assert_array_equal(output.result.non_trainable[0], [9.0])
  np.testing.assert_allclose(
      output.state[finalizers.EXTRAS_KEY]['total'], [1.0, 2.0], rtol=1e-6)
  # A second round adds its own mean.
  output = finalizer.next(output.state, output.result,
                          _aggregate([0.0, 0.0], [1.0, 1.0], 2))
  np.testing.assert_allclose(
      output.state[finalizers.EXTRAS_KEY]['total'], [1.5, 2.5], rtol=1e-6)


def test_non_finite_round_keeps_model_optimizer_and_extras(finalizer):
  first = finalizer.next(finalizer.initialize(), _weights([1.0, -1.0]),
                         _aggregate([0.2, 0.4], [3.0, 6.0], 3))
  output = finalizer.next(first.state, first.result,
                          _aggregate([np.nan, 0.4], [5.0, 5.0], 1))
  assert output.measurements['update_non_finite'] == 1
  np.testing.assert_array_equal(output.result.trainable[0],
                                first.result.trainable[0])
  np.testing.assert_array_equal(
      output.state[finalizers.EXTRAS_KEY]['total'],
      first.state[finalizers.EXTRAS_KEY]['total'])


def test_hparams_are_the_optimizers_and_keep_the_extras(finalizer):
  first = finalizer.next(finalizer.initialize(), _weights([1.0, -1.0]),
                         _aggregate([0.2, 0.4], [3.0, 6.0], 3))
  hparams = finalizer.get_hparams(first.state)
  assert float(hparams['learning_rate']) == pytest.approx(SERVER_LR)
  hparams['learning_rate'] = np.float32(0.1)
  state = finalizer.set_hparams(first.state, hparams)
  np.testing.assert_array_equal(state[finalizers.EXTRAS_KEY]['total'],
                                first.state[finalizers.EXTRAS_KEY]['total'])
  output = finalizer.next(state, _weights([0.0, 0.0]),
                          _aggregate([1.0, -2.0], [0.0, 0.0], 1))
  np.testing.assert_allclose(output.result.trainable[0], [-0.1, 0.2],
                             rtol=1e-6)


def test_apply_optimizer_is_tffs_finalizer_step_for_step():
  """`apply_optimizer` leaves the optimizer unconverted, nothing else.

  Adam (a state that changes every step) through TFF's own finalizer and
  through `apply_optimizer`: the same state, weights and measurements after
  two accepted rounds and a rejected (non-finite) one, and the same
  hyper-parameters, set and read back.
  """
  adam = tff.learning.optimizers.build_adam(learning_rate=0.1)
  ours = finalizers.apply_optimizer(adam, WEIGHTS_TYPE)
  theirs = tff.learning.templates.build_apply_optimizer_finalizer(
      adam, WEIGHTS_TYPE)
  weights = tff.learning.models.ModelWeights(
      trainable=[np.float32([1.0, -2.0])], non_trainable=[np.float32([3.0])])
  states = [ours.initialize(), theirs.initialize()]
  results = [weights, weights]
  for delta in ([0.5, -1.0], [0.25, 2.0], [np.nan, 1.0]):
    outputs = [process.next(state, result, [np.float32(delta)])
               for process, state, result in zip((ours, theirs), states,
                                                 results)]
    states = [o.state for o in outputs]
    results = [o.result for o in outputs]
    tf.nest.map_structure(np.testing.assert_array_equal, states[0],
                          states[1])
    tf.nest.map_structure(np.testing.assert_array_equal, results[0],
                          results[1])
    assert outputs[0].measurements == outputs[1].measurements
  assert outputs[0].measurements[finalizers.UPDATE_NON_FINITE_KEY] == 1
  assert not np.array_equal(results[0].trainable[0], weights.trainable[0])
  hparams = ours.get_hparams(states[0])
  assert hparams == theirs.get_hparams(states[1])
  hparams['learning_rate'] = 0.01
  assert ours.get_hparams(ours.set_hparams(states[0], hparams))[
      'learning_rate'] == pytest.approx(0.01)
