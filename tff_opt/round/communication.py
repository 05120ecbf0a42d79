"""Per-client communication of a round, in bytes, reported as metrics.

Server -> client: one value of the distributor's broadcast type (FedAvg and
FedProx: the model; FedFOR: two models and a bool; FedCurv: the model, u and
v; SCAFFOLD: the model and c). Client -> server: one value of the client
work's update type (the delta; FedCurv adds F_k and F_k * w_k; SCAFFOLD adds
Delta c_k). Sizes are `tff_types.num_bytes` of those types (elements x dtype
size). Choice: the client's scalar aggregation weight (its example count)
is not counted, as the FedFOR paper's Table 1 counts models only; a
client's own state, never sent, is not counted either.

These numbers reproduce the FedFOR paper's Table 1 (cross-device columns)
from any run's `metrics.csv`, columns `bytes_server_to_client` and
`bytes_client_to_server`.
"""

import collections

import numpy as np
import tensorflow_federated as tff

from tff_opt import tff_types

COMMUNICATION_KEY = 'communication'
SERVER_TO_CLIENT_KEY = 'bytes_server_to_client'
CLIENT_TO_SERVER_KEY = 'bytes_client_to_server'


def bytes_per_client(
    distributor: tff.learning.templates.DistributionProcess,
    client_work: tff.learning.templates.ClientWorkProcess,
) -> collections.OrderedDict:
  """`{'bytes_server_to_client', 'bytes_client_to_server'}` of one client."""
  broadcast_type = distributor.next.type_signature.result.result.member
  update_type = client_work.next.type_signature.result.result.member.update
  return collections.OrderedDict([
      (SERVER_TO_CLIENT_KEY, np.int64(tff_types.num_bytes(broadcast_type))),
      (CLIENT_TO_SERVER_KEY, np.int64(tff_types.num_bytes(update_type))),
  ])


def with_communication_metrics(
    process: tff.learning.templates.LearningProcess,
    bytes_metrics: collections.OrderedDict,
) -> tff.learning.templates.LearningProcess:
  """Returns `process` with `metrics['communication'] = bytes_metrics`.

  Args:
    process: A `LearningProcess` whose metrics are a struct of named parts.
    bytes_metrics: From `bytes_per_client`.

  Returns:
    The same process (same state, same hyper-parameter accessors) whose
    metrics gain a 'communication' entry.
  """
  metrics_type = process.next.type_signature.result.metrics.member

  @tff.tensorflow.computation(metrics_type)
  def add_bytes(metrics):
    parts = (list(metrics.items()) if hasattr(metrics, 'items') else
             list(tff.structure.iter_elements(metrics)))
    return collections.OrderedDict(
        parts + [(COMMUNICATION_KEY, bytes_metrics)])

  @tff.federated_computation(*process.next.type_signature.parameter)
  def next_fn(state, client_data):
    output = process.next(state, client_data)
    return tff.learning.templates.LearningProcessOutput(
        output.state, tff.federated_map(add_bytes, output.metrics))

  return tff.learning.templates.LearningProcess(
      process.initialize,
      next_fn,
      process.get_model_weights,
      process.set_model_weights,
      get_hparams_fn=process.get_hparams,
      set_hparams_fn=process.set_hparams)
