"""`finalizers`: the server step, with extras and as TFF's own.

The server optimizer's step on `aggregate['delta']` must be the one of
`w <- w - lr * delta` (plain SGD here), the extras must follow
`update_extras` after an accepted round and stay as they were after a
rejected (non-finite) one, and the hyper-parameters are the optimizer's.
Checked on hand-made aggregates against NumPy. `apply_optimizer` must be
TFF's `build_apply_optimizer_finalizer` step for step.
`with_non_trainable_mean` sets the averaged non-trainables beside any of
them, never through the optimizer, and keeps them on a rejected round.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.round import finalizers
from tff_opt.round import ground

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
  assert outputs[0].measurements[ground.UPDATE_NON_FINITE_KEY] == 1
  assert not np.array_equal(results[0].trainable[0], weights.trainable[0])
  hparams = ours.get_hparams(states[0])
  assert hparams == theirs.get_hparams(states[1])
  hparams['learning_rate'] = 0.01
  assert ours.get_hparams(ours.set_hparams(states[0], hparams))[
      'learning_rate'] == pytest.approx(0.01)


BN_WEIGHTS_TYPE = tff.types.tensorflow_to_type(
    tff.learning.models.ModelWeights(
        trainable=[tf.TensorSpec((2,), tf.float32)],
        non_trainable=[tf.TensorSpec((1,), tf.float32),
                       tf.TensorSpec((2,), tf.float32)]))
# What `aggregators.with_non_trainable_mean` hands the finalizer when only
# the second non-trainable is shared.
BN_AGGREGATE_TYPE = tff.types.to_type(collections.OrderedDict(
    update=[(np.float32, [2])],
    non_trainable=collections.OrderedDict(
        mean=[(np.float32, [2])], total_weight=np.float32)))


@pytest.fixture(scope='module')
def adam_with_non_trainables():
  adam = tff.learning.optimizers.build_adam(learning_rate=0.1)
  base = finalizers.apply_optimizer(adam, BN_WEIGHTS_TYPE)
  return base, finalizers.with_non_trainable_mean(
      base, BN_WEIGHTS_TYPE, BN_AGGREGATE_TYPE, shared=(1,))


def _bn_aggregate(delta, mean, total_weight):
  return collections.OrderedDict(
      update=[np.float32(delta)],
      non_trainable=collections.OrderedDict(
          mean=[np.float32(mean)], total_weight=np.float32(total_weight)))


def test_non_trainables_are_set_to_the_mean_not_through_the_optimizer(
    adam_with_non_trainables):
  base, finalizer = adam_with_non_trainables
  weights = tff.learning.models.ModelWeights(
      trainable=[np.float32([1.0, -2.0])],
      non_trainable=[np.float32([7.0]), np.float32([0.0, 1.0])])
  states = [base.initialize(), finalizer.initialize()]
  results = [weights, weights]
  for delta, mean in (([0.5, -1.0], [0.25, 2.0]), ([0.1, 0.3], [0.5, 3.0])):
    ours = finalizer.next(states[1], results[1],
                          _bn_aggregate(delta, mean, 2.0))
    theirs = base.next(states[0], results[0], [np.float32(delta)])
    states, results = [theirs.state, ours.state], [theirs.result, ours.result]
    # The optimizer's step and state are the base finalizer's, bit for bit.
    tf.nest.map_structure(np.testing.assert_array_equal, ours.state,
                          theirs.state)
    np.testing.assert_array_equal(ours.result.trainable[0],
                                  theirs.result.trainable[0])
    assert ours.measurements == theirs.measurements
    # The shared non-trainable is the mean itself; the other is kept.
    np.testing.assert_array_equal(ours.result.non_trainable[1],
                                  np.float32(mean))
    np.testing.assert_array_equal(ours.result.non_trainable[0], [7.0])
  assert finalizer.get_hparams(states[1]) == base.get_hparams(states[0])


@pytest.mark.parametrize('delta, mean, total_weight', [
    ([np.nan, 1.0], [0.5, 0.5], 2.0),  # A rejected round.
    ([0.0, 0.0], [0.0, 0.0], 0.0),  # No client took part.
    ([0.1, 0.1], [np.inf, 0.5], 2.0),  # A non-finite mean.
])
def test_non_trainables_are_kept_when_the_round_does_not_count(
    adam_with_non_trainables, delta, mean, total_weight):
  _, finalizer = adam_with_non_trainables
  weights = tff.learning.models.ModelWeights(
      trainable=[np.float32([1.0, -2.0])],
      non_trainable=[np.float32([7.0]), np.float32([0.3, 1.5])])
  output = finalizer.next(finalizer.initialize(), weights,
                          _bn_aggregate(delta, mean, total_weight))
  np.testing.assert_array_equal(output.result.non_trainable[1],
                                np.float32([0.3, 1.5]))
  assert output.measurements[ground.UPDATE_NON_FINITE_KEY] == int(
      np.isnan(delta[0]))


def test_non_trainable_finalizer_needs_the_rejection_measurement():
  @tff.federated_computation
  def init_fn():
    return tff.federated_value((), tff.SERVER)

  @tff.federated_computation(
      init_fn.type_signature.result,
      tff.FederatedType(BN_WEIGHTS_TYPE, tff.SERVER),
      tff.FederatedType(BN_AGGREGATE_TYPE['update'], tff.SERVER))
  def next_fn(state, weights, update):
    del update
    return tff.templates.MeasuredProcessOutput(
        state, weights, tff.federated_value((), tff.SERVER))

  keeps = tff.learning.templates.FinalizerProcess(init_fn, next_fn)
  with pytest.raises(ValueError, match="must measure 'update_non_finite'"):
    finalizers.with_non_trainable_mean(keeps, BN_WEIGHTS_TYPE,
                                       BN_AGGREGATE_TYPE, shared=(1,))
