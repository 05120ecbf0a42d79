"""Aggregators for client updates that carry more than a model delta.

When the client work has a report pass (`client_work.ClientPasses` with a
`report_fn`), a client's update is a mapping

    {'delta': Delta_k, <name>: <statistic>, ...}

`mean_delta_sum_rest` aggregates it the way FedCurv and SCAFFOLD need: the
delta by the usual weighted mean (`tff.aggregators.MeanFactory`, so weights
and zero-weight clients behave exactly as for FedAvg), every other entry by
a plain SUM over the participating clients (FedCurv's u = sum_k F_k and
v = sum_k F_k * w_k; SCAFFOLD's sum_k Delta c_k), and reports the number of
clients that took part (those with a positive weight) so a finalizer can
turn sums into means.

`with_non_trainable_mean` puts the model's non-trainable variables (batch
norm's moving mean and variance) beside any weighted aggregator: each
client sends its values after local training with its update, the inner
aggregator gets the update alone, and the non-trainables are averaged with
the client's own aggregation weight, the update's (examples or uniform):

    mean = sum_k weight_k * value_k / sum_k weight_k

(the weighted mean of PyTorch FedAvg's state_dict, running statistics
included). A finalizer (`finalizers.with_non_trainable_mean`) then sets
them on the global model.
"""

import collections
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.round import ground

SUMS_KEY = 'sums'
NUM_CLIENTS_KEY = 'num_clients'


def _fields(struct_type):
  return [name for name, _ in tff.structure.iter_elements(struct_type)]


def mean_delta_sum_rest(
    update_type: tff.Type,
    weight_type: tff.Type = tff.TensorType(np.float32),
) -> tff.templates.AggregationProcess:
  """Weighted mean of `update['delta']`, sum of the other entries.

  Args:
    update_type: The unplaced type of a client's update, a struct with a
      'delta' entry and at least one other.
    weight_type: The unplaced type of a client's weight.

  Returns:
    A weighted `tff.templates.AggregationProcess` whose result (at the
    server) is `{'delta': weighted mean, 'sums': {other entries summed},
    'num_clients': int32 count of clients with a positive weight}`; state and
    measurements are those of the delta's `MeanFactory` process.

  Raises:
    ValueError: If `update_type` has no 'delta' entry or nothing else.
  """
  names = _fields(update_type)
  if ground.DELTA_KEY not in names or len(names) < 2:
    raise ValueError("update_type must be a struct with a 'delta' entry and "
                     f'at least one other; got entries {names}.')
  rest = [n for n in names if n != ground.DELTA_KEY]
  mean_process = tff.aggregators.MeanFactory().create(
      update_type[ground.DELTA_KEY], weight_type)

  @tff.tensorflow.computation(update_type)
  def delta_of(update):
    return update[ground.DELTA_KEY]

  @tff.tensorflow.computation(update_type)
  def rest_of(update):
    return collections.OrderedDict([(n, update[n]) for n in rest])

  @tff.tensorflow.computation(weight_type)
  def took_part(weight):
    return tf.cast(weight > 0, tf.int32)

  @tff.federated_computation(
      mean_process.initialize.type_signature.result,
      tff.FederatedType(update_type, tff.CLIENTS),
      tff.FederatedType(weight_type, tff.CLIENTS))
  def next_fn(state, update, weight):
    mean_output = mean_process.next(state, tff.federated_map(delta_of, update),
                                    weight)
    result = tff.federated_zip(collections.OrderedDict([
        (ground.DELTA_KEY, mean_output.result),
        (SUMS_KEY, tff.federated_sum(tff.federated_map(rest_of, update))),
        (NUM_CLIENTS_KEY, tff.federated_sum(
            tff.federated_map(took_part, weight))),
    ]))
    return tff.templates.MeasuredProcessOutput(mean_output.state, result,
                                               mean_output.measurements)

  return tff.templates.AggregationProcess(mean_process.initialize, next_fn)


def _sum_dtype(dtype: tf.DType) -> tf.DType:
  """The dtype a non-trainable's weighted sum is taken in (float64 for ints)."""
  return dtype if dtype.is_floating else tf.float64


def with_non_trainable_mean(
    inner_fn: Callable[[tff.Type, tff.Type], tff.templates.AggregationProcess],
    sent_type: tff.Type,
    weight_type: tff.Type,
    *,
    update_of: Callable[[Any], Any],
    non_trainable_of: Callable[[Any], Any],
) -> tff.templates.AggregationProcess:
  """`inner_fn`'s aggregator, plus the weighted mean of the non-trainables.

  Args:
    inner_fn: `(update type, weight type) ->` weighted
      `AggregationProcess`, the algorithm's own aggregator.
    sent_type: The unplaced type of what a client sends: its update and its
      non-trainable values, which `update_of` and `non_trainable_of` take
      apart.
    weight_type: The unplaced type of a client's weight.
    update_of: TF function `sent -> update` (what `inner_fn`'s process
      aggregates).
    non_trainable_of: TF function `sent -> list of tensors`, the client's
      non-trainable values after local training (float or integer).

  Returns:
    A weighted `AggregationProcess` with the inner one's state and
    measurements, whose result is `{'update': the inner result,
    'non_trainable': {'mean': [sum_k w_k v_k / sum_k w_k, ...],
    'total_weight': sum_k w_k}}`. A float variable's sums are taken in its
    dtype, an integer one's in float64 and its mean rounded to the nearest
    integer. With a total weight of 0 the mean is 0 (the finalizer then
    keeps the global values).
  """
  # Over 80 lines with its docstring: the aggregation's computations
  # share the types read here and are read in one place.

  @tff.tensorflow.computation(sent_type)
  def update_part(sent):
    return update_of(sent)

  @tff.tensorflow.computation(sent_type, weight_type)
  def weighted_values(sent, weight):
    values = non_trainable_of(sent)
    return collections.OrderedDict([
        (ground.MEAN_KEY, [tf.cast(weight, _sum_dtype(v.dtype)) *
                    tf.cast(v, _sum_dtype(v.dtype)) for v in values]),
        (ground.TOTAL_WEIGHT_KEY, weight),
    ])

  @tff.tensorflow.computation(sent_type)
  def non_trainable_part(sent):
    return non_trainable_of(sent)

  value_dtypes = [spec.dtype for spec in tf.nest.flatten(
      tff.types.type_to_tf_tensor_specs(
          non_trainable_part.type_signature.result))]
  inner_process = inner_fn(update_part.type_signature.result, weight_type)

  @tff.tensorflow.computation(weighted_values.type_signature.result)
  def mean_of(sums):
    total = sums[ground.TOTAL_WEIGHT_KEY]
    means = []
    for weighted, dtype in zip(sums[ground.MEAN_KEY], value_dtypes):
      mean = tf.math.divide_no_nan(weighted, tf.cast(total, weighted.dtype))
      if not tf.as_dtype(dtype).is_floating:
        mean = tf.round(mean)
      means.append(tf.cast(mean, dtype))
    return collections.OrderedDict([(ground.MEAN_KEY, means),
                                    (ground.TOTAL_WEIGHT_KEY, total)])

  @tff.federated_computation(
      inner_process.initialize.type_signature.result,
      tff.FederatedType(sent_type, tff.CLIENTS),
      tff.FederatedType(weight_type, tff.CLIENTS))
  def next_fn(state, sent, weight):
    inner_output = inner_process.next(
        state, tff.federated_map(update_part, sent), weight)
    sums = tff.federated_sum(tff.federated_map(weighted_values,
                                               (sent, weight)))
    result = tff.federated_zip(collections.OrderedDict([
        (ground.UPDATE_KEY, inner_output.result),
        (ground.NON_TRAINABLE_KEY, tff.federated_map(mean_of, sums)),
    ]))
    return tff.templates.MeasuredProcessOutput(
        inner_output.state, result, inner_output.measurements)

  return tff.templates.AggregationProcess(inner_process.initialize, next_fn)
