"""FedOpt with the round's clients trained in groups, as one computation each.

`binaries.train --client_vectorization=K` (K > 0) runs FedOpt's round with
`tff_opt/round/stacked_training.py`'s client work: the sampled clients are
split into groups of at most K (10 clients by 4: 4, 3, 3), and each group's
local training is one TensorFlow computation over stacked weights (a
`StackedModel`, e.g. `tasks/shakespeare_functional.py`). The server side
is FedOpt's own recipe (`fed_opt.fed_opt_recipe`): the same distributor,
example-weighted mean, server optimizer and state, so a run can switch
between the two paths from one round to the next (the state types are the
same).

Design: a TFF client computation sees one client's data, so a group of K
real clients is one TFF *client*: `GroupedLearningProcess.next(state,
client_datasets)` takes the round's per-client datasets (what the training
loop passes to any process), reads them (`stacked_training.group_datasets`:
padded, step-major arrays, one dataset per group) and calls the composed
process on the group datasets. Each group reports the example-weighted mean
of its clients' deltas with their total weight, so the server's weighted
mean over groups is the per-client path's (see `stacked_training`); the
metrics are the per-client ones. Checked (`tests/test_vectorized.py`): the
server state after rounds equals the per-client process's to 1e-5 of the
change it made, for the server optimizers sgd, sgdm, adagrad, adam, yogi.

What differs from the per-client process:
- `next` is a Python callable (with the inner computation's
  `type_signature`, whose data parameter is the group dataset type); it
  reads the client datasets in this process instead of on TFF's worker.
- The `communication` metrics count bytes per TFF client, i.e. per group
  (a group receives one model and sends one update, as one client does).
- Only FedOpt's plain local training: the recipe must have no penalty,
  hook, pass or client state, and the client optimizer must be SGD (with
  or without momentum); models without non-trainable variables.
"""

from collections.abc import Callable, Sequence
from typing import Any, Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.algorithms import _common
from tff_opt.algorithms import fed_opt
from tff_opt.algorithms import recipe as recipe_lib
from tff_opt.round import client_work as client_work_lib
from tff_opt.round import composers
from tff_opt.round import stacked_training


class _GroupedNext:
  """`next(state, client_datasets)`: group the datasets, run the round."""

  def __init__(self, inner_next: tff.Computation, group_size: int):
    self._inner_next = inner_next
    self._group_size = group_size
    self.type_signature = inner_next.type_signature

  def __call__(self, state: Any, client_datasets: Sequence[tf.data.Dataset]):
    groups = stacked_training.group_datasets(list(client_datasets),
                                             self._group_size)
    return self._inner_next(state, groups)


class GroupedLearningProcess(tff.learning.templates.LearningProcess):
  """A `LearningProcess` whose `next` takes per-client datasets and trains
  them in groups of at most `group_size` (module docstring).

  `initialize`, `get_model_weights`, `set_model_weights`, `get_hparams`,
  `set_hparams` are the composed process's computations.
  """

  def __init__(self, inner: tff.learning.templates.LearningProcess,
               group_size: int):
    super().__init__(inner.initialize, inner.next, inner.get_model_weights,
                     inner.set_model_weights,
                     get_hparams_fn=inner.get_hparams,
                     set_hparams_fn=inner.set_hparams)
    self._grouped_next = _GroupedNext(inner.next, group_size)
    self.group_size = group_size
    self.inner = inner

  @property
  def next(self) -> _GroupedNext:
    """`next(state, client_datasets)` -> `LearningProcessOutput`."""
    return self._grouped_next


def _check_plain_recipe(recipe: recipe_lib.Recipe,
                        weights_type: tff.Type) -> None:
  """Raises ValueError unless the recipe trains with FedOpt's plain loop."""
  problems = []
  if recipe.objective != client_work_lib.LocalObjective():
    problems.append('a local objective (penalty or hook)')
  if recipe.passes != client_work_lib.ClientPasses():
    problems.append('client passes')
  if recipe.initial_client_state is not None:
    problems.append('client state')
  if recipe.to_server is not None:
    problems.append('a transformed update')
  if not recipe.work_broadcast_type.is_equivalent_to(weights_type):
    problems.append('a broadcast beyond the model')
  if problems:
    raise ValueError('Stacked client training runs FedOpt\'s plain local '
                     f'SGD; this algorithm has {", ".join(problems)}.')


def assemble_stacked(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    recipe_fn: recipe_lib.RecipeFn,
    stacked_model: stacked_training.StackedModel,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting = (
        tff.learning.ClientWeighting.NUM_EXAMPLES),
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
) -> tff.learning.templates.LearningProcess:
  """`recipe.assemble` with the stacked client work (one client = a group).

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel`.
    recipe_fn: Model-weights type -> `Recipe` (FedOpt's).
    stacked_model: `model_fn`'s model as a `StackedModel`.
    client_optimizer_fn: The client optimizer (SGD, with or without
      momentum).
    client_weighting: `NUM_EXAMPLES` (default) or `UNIFORM`.
    client_lr_schedule: Optional round number -> client learning rate.

  Returns:
    The composed `LearningProcess`; its `next` takes one group dataset per
    TFF client (`stacked_training.group_datasets`).

  Raises:
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
    ValueError: If the recipe is not FedOpt's plain training, the model has
      non-trainable variables, or the optimizer keeps shared state.
  """
  _common.check_optimizer('client_optimizer_fn', client_optimizer_fn)
  initial_weights_fn = _common.initial_model_weights_fn(model_fn)
  weights_type = initial_weights_fn.type_signature.result
  recipe = recipe_lib.with_shared_non_trainables(recipe_fn(weights_type),
                                                 weights_type)
  _check_plain_recipe(recipe, weights_type)
  client_work = stacked_training.build_stacked_local_training(
      model_fn, stacked_model, client_optimizer_fn,
      client_weighting=client_weighting,
      learning_rate_schedule=client_lr_schedule)
  result_type = client_work.next.type_signature.result.result.member
  aggregator = recipe.aggregator_fn(result_type.update,
                                    result_type.update_weight)
  finalizer = recipe.finalizer_fn(
      aggregator.next.type_signature.result.result.member)
  distributor = recipe.distributor_fn(
      finalizer.initialize.type_signature.result.member)
  return composers.compose_learning_process(
      initial_weights_fn, distributor, client_work, aggregator, finalizer)


def build_vectorized_fed_opt(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    stacked_model: stacked_training.StackedModel,
    *,
    group_size: int,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting = (
        tff.learning.ClientWeighting.NUM_EXAMPLES),
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
) -> GroupedLearningProcess:
  """FedOpt (`fed_opt.build_fed_opt`) with clients trained in groups.

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel` on each call.
    stacked_model: The same model as a `stacked_training.StackedModel`
      (e.g. `tasks.shakespeare_functional.StackedCharLstm`).
    group_size: At most this many clients train as one computation.
    client_optimizer_fn: The client optimizer (SGD, with or without
      momentum).
    server_optimizer_fn: The server optimizer.
    client_weighting: `NUM_EXAMPLES` (default) or `UNIFORM`.
    client_lr_schedule: Optional round number -> client learning rate.
    model_aggregator: Weighted aggregation factory for the deltas;
      `tff.aggregators.MeanFactory()` by default.

  Returns:
    A `GroupedLearningProcess`: `next(state, client_datasets)` takes the
    per-client datasets, as `build_fed_opt`'s process does, and its state
    has the same type as that process's.

  Raises:
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
    ValueError: If `group_size` is not a positive integer, the client
      optimizer keeps shared state (e.g. Adam) or the model has
      non-trainable variables.
  """
  stacked_training.group_sizes(0, group_size)  # Checks group_size.
  recipe_fn = fed_opt.fed_opt_recipe(server_optimizer_fn=server_optimizer_fn,
                                     model_aggregator=model_aggregator)
  inner = assemble_stacked(model_fn, recipe_fn, stacked_model,
                           client_optimizer_fn, client_weighting,
                           client_lr_schedule)
  return GroupedLearningProcess(inner, group_size)
