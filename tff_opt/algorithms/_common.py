"""Checks and small pieces shared by the algorithm builders."""

import math
from collections.abc import Callable
from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import client_work as client_work_lib
from tff_opt import composers


def check_optimizers(client_optimizer_fn, server_optimizer_fn) -> None:
  """Raises TypeError unless both are `tff.learning.optimizers.Optimizer`s."""
  for name, value in (('client_optimizer_fn', client_optimizer_fn),
                      ('server_optimizer_fn', server_optimizer_fn)):
    if not isinstance(value, tff.learning.optimizers.Optimizer):
      raise TypeError(f'{name} must be a tff.learning.optimizers.Optimizer, '
                      f'got {type(value).__name__}.')


def check_non_negative(name: str, value) -> None:
  """Raises ValueError naming `name` unless `value` is a finite number >= 0."""
  if (isinstance(value, bool) or not isinstance(value, (int, float)) or
      not math.isfinite(value) or value < 0):
    raise ValueError(f'{name} must be a non-negative number, got {value!r}.')


def initial_model_weights_fn(model_fn) -> tff.Computation:
  """A no-arg TF computation returning the model's initial `ModelWeights`."""

  @tff.tensorflow.computation
  def initial_weights():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  return initial_weights


def build_penalized_fed_opt(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    distributor_fn: Callable[[tff.Type],
                             tff.learning.templates.DistributionProcess],
    penalty: Optional[client_work_lib.Penalty],
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting,
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]],
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory],
) -> tff.learning.templates.LearningProcess:
  """The FedOpt round with an algorithm's own broadcast and local penalty.

  FedOpt, FedProx, FedFOR and FedPTR differ only in what the server
  broadcasts (`distributor_fn(model_weights_type)`) and in the penalty the
  clients add to their loss; the client training, the weighted mean of the
  deltas and the server optimizer step (which rejects a non-finite round)
  are the same.

  Raises:
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
  """
  check_optimizers(client_optimizer_fn, server_optimizer_fn)
  initial_weights_fn = initial_model_weights_fn(model_fn)
  weights_type = initial_weights_fn.type_signature.result
  distributor = distributor_fn(weights_type)
  client_work = client_work_lib.build_local_training(
      model_fn,
      client_optimizer_fn,
      penalty=penalty,
      broadcast_type=distributor.next.type_signature.result.result.member,
      client_weighting=client_weighting,
      learning_rate_schedule=client_lr_schedule)
  update_type = client_work.next.type_signature.result.result.member
  aggregator = (model_aggregator or tff.aggregators.MeanFactory()).create(
      update_type.update, update_type.update_weight)
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      server_optimizer_fn, weights_type)
  return composers.compose_learning_process(initial_weights_fn, distributor,
                                            client_work, aggregator, finalizer)
