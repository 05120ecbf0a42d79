"""Aggregators for client updates that carry more than a model delta.

When the client work has a report hook (`client_work.build_local_training`
with `report_fn`), a client's update is a mapping

    {'delta': Delta_k, <name>: <statistic>, ...}

`mean_delta_sum_rest` aggregates it the way FedCurv and SCAFFOLD need: the
delta by the usual weighted mean (`tff.aggregators.MeanFactory`, so weights
and zero-weight clients behave exactly as for FedAvg), every other entry by
a plain SUM over the participating clients (FedCurv's u = sum_k F_k and
v = sum_k F_k * w_k; SCAFFOLD's sum_k Delta c_k), and reports the number of
clients that took part (those with a positive weight) so a finalizer can
turn sums into means.
"""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import client_work

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
  if client_work.DELTA_KEY not in names or len(names) < 2:
    raise ValueError("update_type must be a struct with a 'delta' entry and "
                     f'at least one other; got entries {names}.')
  rest = [n for n in names if n != client_work.DELTA_KEY]
  mean_process = tff.aggregators.MeanFactory().create(
      update_type[client_work.DELTA_KEY], weight_type)

  @tff.tensorflow.computation(update_type)
  def delta_of(update):
    return update[client_work.DELTA_KEY]

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
        (client_work.DELTA_KEY, mean_output.result),
        (SUMS_KEY, tff.federated_sum(tff.federated_map(rest_of, update))),
        (NUM_CLIENTS_KEY, tff.federated_sum(
            tff.federated_map(took_part, weight))),
    ]))
    return tff.templates.MeasuredProcessOutput(mean_output.state, result,
                                               mean_output.measurements)

  return tff.templates.AggregationProcess(mean_process.initialize, next_fn)
