"""Finalizers: server updates that do more than apply an optimizer.

`apply_optimizer_with_extras` applies a server optimizer to the averaged
delta exactly as `tff.learning.templates.build_apply_optimizer_finalizer`
does (a non-finite round is rejected: model and optimizer state are kept and
`update_non_finite` is 1), and keeps beside it algorithm state ("extras")
computed from the rest of the aggregate:

    FedCurv    u, v <- the sums of F_k and F_k * w_k of this round's clients
    SCAFFOLD   c    <- c + (1/N) sum_k Delta c_k

The extras are kept unchanged on a rejected round. A distributor reads them
from the finalizer's state (`distributors.with_finalizer_state`).

`with_non_trainable_mean` wraps any of these finalizers (and FedADC's) so
that it also sets the model's non-trainable variables (batch norm's moving
statistics) to the clients' weighted mean of them
(`aggregators.with_non_trainable_mean`). They never pass through the
server optimizer: the optimizer (SGD, Adam, Yogi, ...) steps the trainable
weights from the update, and the non-trainables are replaced by the mean.
TFF's `build_apply_optimizer_finalizer` leaves them as they are, so without
this wrapper a BN model's global statistics keep their initial values.
The mean replaces them only when the round's update was accepted
(`update_non_finite` is 0), some client took part (total weight > 0) and
every mean is finite; otherwise the global values are kept, as the
trainable weights are on a rejected round.
"""

import collections
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import checks
from tff_opt.round import ground

OPTIMIZER_STATE_KEY = 'optimizer'
EXTRAS_KEY = 'extras'


class _AsWritten(tff.learning.optimizers.Optimizer):
  """An optimizer whose `initialize` and `next` AutoGraph leaves as written.

  TFF traces a finalizer's optimizer calls inside a converted function, so
  AutoGraph converts the optimizer's `next` and everything it calls (TFF's
  type checks, sparse-gradient handling): ~0.7 s of FedOpt's process
  build. TFF's optimizers branch on Python values only (as in the client
  loop, `ground.unconverted`), so the graph is the same.
  """

  def __init__(self, optimizer: tff.learning.optimizers.Optimizer):
    self._optimizer = optimizer

  @tf.autograph.experimental.do_not_convert
  def initialize(self, specs):
    return self._optimizer.initialize(specs)

  @tf.autograph.experimental.do_not_convert
  def next(self, state, weights, gradients):
    return self._optimizer.next(state, weights, gradients)

  def get_hparams(self, state):
    return self._optimizer.get_hparams(state)

  def set_hparams(self, state, hparams):
    return self._optimizer.set_hparams(state, hparams)


def apply_optimizer(
    server_optimizer: tff.learning.optimizers.Optimizer,
    model_weights_type: tff.Type,
) -> tff.learning.templates.FinalizerProcess:
  """TFF's `build_apply_optimizer_finalizer`, the optimizer left unconverted.

  The same process and the same update (see `_AsWritten`); what every
  tff-opt algorithm with a server optimizer uses.

  Args:
    server_optimizer: A `tff.learning.optimizers.Optimizer`.
    model_weights_type: The unplaced `ModelWeights` type of the model.

  Returns:
    TFF's `FinalizerProcess`.
  """
  return tff.learning.templates.build_apply_optimizer_finalizer(
      _AsWritten(server_optimizer), model_weights_type)


def apply_optimizer_with_extras(
    server_optimizer: tff.learning.optimizers.Optimizer,
    model_weights_type: tff.Type,
    aggregate_type: tff.Type,
    *,
    initial_extras: Any,
    update_extras: Callable[[Any, Any], Any],
) -> tff.learning.templates.FinalizerProcess:
  """Applies `server_optimizer` to `aggregate['delta']` and keeps extras.

  Args:
    server_optimizer: A `tff.learning.optimizers.Optimizer`.
    model_weights_type: The unplaced `ModelWeights` type of the model.
    aggregate_type: The unplaced type of the aggregator's result (a struct
      with a 'delta' entry, e.g. from `aggregators.mean_delta_sum_rest`).
    initial_extras: The extras' initial value (NumPy structure).
    update_extras: A TF function `(extras, aggregate) -> new extras`, run at
      the server after a round whose update was accepted.

  Returns:
    A `FinalizerProcess` whose state is `{'optimizer': the optimizer's
    state, 'extras': ...}`, whose hyper-parameters are the optimizer's and
    whose measurements are `{'update_non_finite'}`.
  """
  # Over 80 lines with its docstring: the finalizer's two computations
  # share the types read here and are read in one place.
  base = apply_optimizer(server_optimizer, model_weights_type)

  @tff.federated_computation
  def init_fn():
    return tff.federated_zip(collections.OrderedDict([
        (OPTIMIZER_STATE_KEY, base.initialize()),
        (EXTRAS_KEY, tff.federated_value(initial_extras, tff.SERVER)),
    ]))

  state_type = init_fn.type_signature.result.member
  extras_type = state_type[EXTRAS_KEY]

  @tff.tensorflow.computation(aggregate_type)
  def delta_of(aggregate):
    return aggregate[ground.DELTA_KEY]

  @tff.tensorflow.computation(extras_type, aggregate_type, tf.int32)
  def next_extras(extras, aggregate, non_finite):
    return tf.cond(tf.equal(non_finite, 0),
                   lambda: update_extras(extras, aggregate),
                   lambda: tf.nest.map_structure(tf.identity, extras))

  @tff.tensorflow.computation(base.next.type_signature.result.measurements
                              .member)
  def non_finite_of(measurements):
    return tf.cast(measurements[ground.UPDATE_NON_FINITE_KEY], tf.int32)

  @tff.federated_computation(
      tff.FederatedType(state_type, tff.SERVER),
      tff.FederatedType(model_weights_type, tff.SERVER),
      tff.FederatedType(aggregate_type, tff.SERVER))
  def next_fn(state, weights, aggregate):
    output = base.next(state[OPTIMIZER_STATE_KEY], weights,
                       tff.federated_map(delta_of, aggregate))
    extras = tff.federated_map(next_extras, (
        state[EXTRAS_KEY], aggregate,
        tff.federated_map(non_finite_of, output.measurements)))
    new_state = tff.federated_zip(collections.OrderedDict([
        (OPTIMIZER_STATE_KEY, output.state), (EXTRAS_KEY, extras)]))
    return tff.templates.MeasuredProcessOutput(new_state, output.result,
                                               output.measurements)

  @tff.tensorflow.computation(state_type)
  def get_hparams_fn(state):
    return base.get_hparams(state[OPTIMIZER_STATE_KEY])

  @tff.tensorflow.computation(state_type,
                              base.get_hparams.type_signature.result)
  def set_hparams_fn(state, hparams):
    return collections.OrderedDict([
        (OPTIMIZER_STATE_KEY,
         base.set_hparams(state[OPTIMIZER_STATE_KEY], hparams)),
        (EXTRAS_KEY, state[EXTRAS_KEY]),
    ])

  return tff.learning.templates.FinalizerProcess(
      init_fn, next_fn, get_hparams_fn=get_hparams_fn,
      set_hparams_fn=set_hparams_fn)


def with_non_trainable_mean(
    base: tff.learning.templates.FinalizerProcess,
    model_weights_type: tff.Type,
    aggregate_type: tff.Type,
    *,
    shared: Sequence[int],
) -> tff.learning.templates.FinalizerProcess:
  """`base`, then the non-trainables set to the clients' mean (module doc).

  Args:
    base: The algorithm's finalizer, built for `aggregate_type['update']`;
      its measurements must have `update_non_finite`.
    model_weights_type: The unplaced `ModelWeights` type of the model.
    aggregate_type: The unplaced type of the result of
      `aggregators.with_non_trainable_mean`.
    shared: The indices into `ModelWeights.non_trainable` of the averaged
      variables, in the order of the aggregate's means.

  Returns:
    A `FinalizerProcess` with `base`'s state, hyper-parameters and
    measurements.

  Raises:
    ValueError: If `base` does not measure `update_non_finite`, or `shared`
      and the aggregate's means differ in length.
  """
  measurements_type = base.next.type_signature.result.measurements.member
  if ground.UPDATE_NON_FINITE_KEY not in [
      name for name, _ in tff.structure.iter_elements(measurements_type)]:
    raise ValueError('The finalizer must measure '
                     f'{ground.UPDATE_NON_FINITE_KEY!r} '
                     'to decide whether to set the non-trainables; its '
                     f'measurements are {measurements_type}.')
  shared = tuple(shared)
  mean_type = aggregate_type[ground.NON_TRAINABLE_KEY]
  if len(mean_type[ground.MEAN_KEY]) != len(shared):
    raise ValueError(f'{len(shared)} shared non-trainables but '
                     f'{len(mean_type[ground.MEAN_KEY])} means.')

  @tff.tensorflow.computation(aggregate_type)
  def update_of(aggregate):
    return aggregate[ground.UPDATE_KEY]

  @tff.tensorflow.computation(model_weights_type, mean_type,
                              measurements_type)
  def set_non_trainables(weights, non_trainable, measurements):
    means = list(non_trainable[ground.MEAN_KEY])
    accepted = tf.logical_and(
        tf.equal(tf.cast(measurements[ground.UPDATE_NON_FINITE_KEY],
                         tf.int32), 0),
        non_trainable[ground.TOTAL_WEIGHT_KEY] > 0)
    floats = [m for m in means if m.dtype.is_floating]
    if floats:
      accepted = tf.logical_and(accepted, checks.all_finite(floats))
    values = list(tf.nest.flatten(weights.non_trainable))
    for i, mean in zip(shared, means):
      values[i] = tf.where(accepted, mean, values[i])
    return tff.learning.models.ModelWeights(
        trainable=weights.trainable,
        non_trainable=tf.nest.pack_sequence_as(weights.non_trainable,
                                               values))

  @tff.federated_computation(
      base.initialize.type_signature.result,
      tff.FederatedType(model_weights_type, tff.SERVER),
      tff.FederatedType(aggregate_type, tff.SERVER))
  def next_fn(state, weights, aggregate):
    output = base.next(state, weights, tff.federated_map(update_of, aggregate))
    new_weights = tff.federated_map(set_non_trainables, (
        output.result, aggregate[ground.NON_TRAINABLE_KEY],
        output.measurements))
    return tff.templates.MeasuredProcessOutput(output.state, new_weights,
                                               output.measurements)

  return tff.learning.templates.FinalizerProcess(
      base.initialize, next_fn, get_hparams_fn=base.get_hparams,
      set_hparams_fn=base.set_hparams)
