"""Algorithms with the round's clients trained in groups, as one computation.

`binaries.train --client_vectorization=K` (K > 0) runs an algorithm's round
with `tff_opt/round/vectorized_training.py`'s client work: the sampled clients
are split into groups of at most K (10 clients by 4: 4, 3, 3), and each
group's local training is one TensorFlow computation over stacked weights
(a `VectorizedModel`, e.g. `tasks/shakespeare_vectorized.py`). Everything else
is the algorithm's own recipe (`recipe.py`): its distributor (what is
broadcast), its local objective (the penalty and look-ahead hooks, run per
client on each client's own stacked weights), its aggregator, finalizer and
state, so a run can switch between the two paths from one round to the
next (the state types are the same).

`vectorize(process, vectorized_model, group_size=K)` is the entry point: it
rebuilds any process that `recipe.assemble` built (every builder of the
package; `process.assembly` holds its arguments) with the vectorized client
work, so an algorithm's hyper-parameters are stated once, to its own
builder. What runs (checked against the per-client process,
`tests/test_vectorized.py`):

    FedOpt     plain local training, every server optimizer
    FedProx    its proximal penalty against the broadcast w_t
    FedFOR     its two-model broadcast and Eq. 7 penalty, its constants
               (d = w_{t-1} - w_t, alpha/eta) computed once per group
    FedCurv    the stateless variant (`cross_silo=False`): u, v broadcast,
               the elastic penalty, each client's Fisher and Fisher * w
               reported (`ClientPasses.vectorized_report_fn`) and summed
    FedADC     Algorithm 3, heavy ball and Nesterov: m_bar = beta m_t / H_k
               per client (H_k its own number of batches) as the recipe's
               linear penalty, and the Nesterov look-ahead
    SlowMo     FedADC's server rule over plain local SGD

Refused, with a ValueError naming what the vectorized client work lacks:
client state (SCAFFOLD, FedDyn, FedDC, MOON, FedCurv's Eq. 3, client-side
FedPTR), a loss hook (FedADC+'s distillation, FedNTD, FedRS, FedGKD), a
pre-pass or a report without a vectorized form, a client optimizer with state
beyond one tensor per weight (FedADC's Algorithm 4 local momentum keeps a
step count; Adam), a model with non-trainable variables (FedBN's).

Design: a TFF client computation sees one client's data, so a group of K
real clients is one TFF *client*: `VectorizedLearningProcess.next(state,
client_datasets)` takes the round's per-client datasets (what the training
loop passes to any process), reads them (`vectorized_training.group_datasets`:
padded, step-major arrays, one dataset per group; with `by_steps`, clients
of similar numbers of batches grouped together) and calls the composed
process on the group datasets. Each group reports the example-weighted mean
of its clients' deltas with their total weight (and the sums of what a
report pass adds, FedCurv's Fisher), so the server's weighted mean over
groups is the per-client path's (see `vectorized_training`); the metrics are
the per-client ones.

What differs from the per-client process:
- `next` is a Python callable (with the inner computation's
  `type_signature`, whose data parameter is the group dataset type); it
  reads the client datasets in this process instead of on TFF's worker.
- The `communication` metrics count bytes per TFF client, i.e. per group
  (a group receives one broadcast and sends one update, as one client
  does); so does the aggregator's count of participating clients that
  `aggregators.mean_delta_sum_rest` passes to FedCurv's finalizer (which
  does not read it).
"""

from collections.abc import Callable, Sequence
from typing import Any, Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.algorithms import _common
from tff_opt.algorithms import fed_opt
from tff_opt.algorithms import recipe as recipe_lib
from tff_opt.round import vectorized_training


class _VectorizedNext:
  """`next(state, client_datasets)`: group the datasets, run the round."""

  def __init__(self, inner_next: tff.Computation, group_size: int,
               by_steps: bool = False):
    self._inner_next = inner_next
    self._group_size = group_size
    self._by_steps = by_steps
    self.type_signature = inner_next.type_signature

  def __call__(self, state: Any, client_datasets: Sequence[tf.data.Dataset]):
    groups = vectorized_training.group_datasets(
        list(client_datasets), self._group_size, by_steps=self._by_steps)
    return self._inner_next(state, groups)


class VectorizedLearningProcess(tff.learning.templates.LearningProcess):
  """A `LearningProcess` whose `next` takes per-client datasets and trains
  them in groups of at most `group_size` (module docstring).

  `initialize`, `get_model_weights`, `set_model_weights`, `get_hparams`,
  `set_hparams` are the composed process's computations. With `by_steps`,
  the round's clients are ordered by their numbers of batches before they
  are grouped (`vectorized_training.group_datasets`).
  """

  def __init__(self, inner: tff.learning.templates.LearningProcess,
               group_size: int, by_steps: bool = False):
    super().__init__(inner.initialize, inner.next, inner.get_model_weights,
                     inner.set_model_weights,
                     get_hparams_fn=inner.get_hparams,
                     set_hparams_fn=inner.set_hparams)
    self._vectorized_next = _VectorizedNext(inner.next, group_size, by_steps)
    self.group_size = group_size
    self.by_steps = by_steps
    self.inner = inner

  @property
  def next(self) -> _VectorizedNext:
    """`next(state, client_datasets)` -> `LearningProcessOutput`."""
    return self._vectorized_next


def _check_supported_recipe(recipe: recipe_lib.Recipe) -> None:
  """Raises ValueError if the vectorized client work cannot run the recipe."""
  problems = []
  if recipe.initial_client_state is not None:
    problems.append('client state')
  objective = recipe.objective
  if (objective.loss_fn_builder is not None or
      objective.client_stats_fn is not None):
    problems.append('a loss hook (loss_fn_builder, client_stats_fn)')
  if recipe.passes.prepare_fn is not None:
    problems.append('a pre-pass (prepare_fn)')
  if (recipe.passes.report_fn is not None and
      recipe.passes.vectorized_report_fn is None):
    problems.append('a report pass without a vectorized form '
                    '(vectorized_report_fn)')
  if recipe.to_server is not None:
    problems.append('a transformed update (to_server)')
  if problems:
    raise ValueError('vectorized client training cannot run this algorithm: it '
                     f'has {", ".join(problems)}.')


def assemble_vectorized(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    recipe_fn: recipe_lib.RecipeFn,
    vectorized_model: vectorized_training.VectorizedModel,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting = (
        tff.learning.ClientWeighting.NUM_EXAMPLES),
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
) -> tff.learning.templates.LearningProcess:
  """`recipe.assemble` with the vectorized client work (one client = a group).

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel`.
    recipe_fn: Model-weights type -> `Recipe` (the algorithm's own).
    vectorized_model: `model_fn`'s model as a `VectorizedModel`.
    client_optimizer_fn: The client optimizer (SGD, with or without
      momentum).
    client_weighting: `NUM_EXAMPLES` (default) or `UNIFORM`.
    client_lr_schedule: Optional round number -> client learning rate.

  Returns:
    The composed `LearningProcess`; its next takes one group dataset per
    TFF client (`vectorized_training.group_datasets`).

  Raises:
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
    ValueError: If the recipe has a part without a vectorized form (client
      state, a loss hook, a pre-pass, a report pass without a
      `vectorized_report_fn`, a transformed update), the model has
      non-trainable variables, or the optimizer keeps shared state.
  """
  _common.check_optimizer('client_optimizer_fn', client_optimizer_fn)
  initial_weights_fn = _common.initial_model_weights_fn(model_fn)
  weights_type = initial_weights_fn.type_signature.result
  recipe = recipe_lib.with_shared_non_trainables(recipe_fn(weights_type),
                                                 weights_type)
  _check_supported_recipe(recipe)
  client_work = vectorized_training.build_vectorized_local_training(
      model_fn, vectorized_model, client_optimizer_fn,
      objective=recipe.objective,
      broadcast_type=recipe.work_broadcast_type,
      report_fn=recipe.passes.vectorized_report_fn,
      client_weighting=client_weighting,
      learning_rate_schedule=client_lr_schedule)
  return recipe_lib.compose_around(initial_weights_fn, recipe, client_work)


def build_vectorized(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    recipe_fn: recipe_lib.RecipeFn,
    vectorized_model: vectorized_training.VectorizedModel,
    *,
    group_size: int,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting = (
        tff.learning.ClientWeighting.NUM_EXAMPLES),
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    by_steps: bool = False,
) -> VectorizedLearningProcess:
  """An algorithm's recipe with its clients trained in groups.

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel` on each call.
    recipe_fn: The algorithm's `RecipeFn` (e.g. `fed_prox.fed_prox_recipe(
      mu=..., server_optimizer_fn=...)`).
    vectorized_model: The same model as a `vectorized_training.VectorizedModel`.
    group_size: At most this many clients train as one computation.
    client_optimizer_fn: The client optimizer (SGD, with or without
      momentum).
    client_weighting: `NUM_EXAMPLES` (default) or `UNIFORM`.
    client_lr_schedule: Optional round number -> client learning rate.
    by_steps: Group clients of similar numbers of batches together.

  Returns:
    A `VectorizedLearningProcess` with the state type of `recipe.assemble`'s
    process for the same arguments.

  Raises:
    TypeError, ValueError: As `assemble_vectorized`; ValueError also if
      `group_size` is not a positive integer.
  """
  vectorized_training.group_sizes(0, group_size)  # Checks group_size.
  inner = assemble_vectorized(model_fn, recipe_fn, vectorized_model,
                              client_optimizer_fn, client_weighting,
                              client_lr_schedule)
  return VectorizedLearningProcess(inner, group_size, by_steps)


def vectorize(process: Any,
              vectorized_model: vectorized_training.VectorizedModel, *,
              group_size: int, by_steps: bool = False
              ) -> VectorizedLearningProcess:
  """The same algorithm as `process`, with its clients trained in groups.

  Args:
    process: A process built by `recipe.assemble` (any builder of the
      package, e.g. `build_fed_prox(...)`): its `assembly` holds the
      model, recipe, client optimizer, weighting and schedule it was built
      from, and they are reused as they are.
    vectorized_model: The process's model as a `VectorizedModel`.
    group_size: At most this many clients train as one computation.
    by_steps: Group clients of similar numbers of batches together.

  Returns:
    A `VectorizedLearningProcess` whose state has the type of `process`'s.

  Raises:
    ValueError: If `process` was not built by `recipe.assemble`, or as
      `build_vectorized` (the algorithm has a part without a vectorized form).
  """
  assembly = getattr(process, 'assembly', None)
  if not isinstance(assembly, recipe_lib.Assembly):
    raise ValueError('vectorize needs a process built by recipe.assemble '
                     '(any builder of tff_opt.algorithms); got '
                     f'{type(process).__name__} without an assembly.')
  return build_vectorized(
      assembly.model_fn, assembly.recipe_fn, vectorized_model,
      group_size=group_size,
      client_optimizer_fn=assembly.client_optimizer_fn,
      client_weighting=assembly.client_weighting,
      client_lr_schedule=assembly.client_lr_schedule, by_steps=by_steps)


def build_vectorized_fed_opt(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    vectorized_model: vectorized_training.VectorizedModel,
    *,
    group_size: int,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting = (
        tff.learning.ClientWeighting.NUM_EXAMPLES),
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
    by_steps: bool = False,
) -> VectorizedLearningProcess:
  """FedOpt (`fed_opt.build_fed_opt`) with clients trained in groups.

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel` on each call.
    vectorized_model: The same model as a `vectorized_training.VectorizedModel`
      (e.g. `tasks.shakespeare_vectorized.VectorizedCharLstm`).
    group_size: At most this many clients train as one computation.
    client_optimizer_fn: The client optimizer (SGD, with or without
      momentum).
    server_optimizer_fn: The server optimizer.
    client_weighting: `NUM_EXAMPLES` (default) or `UNIFORM`.
    client_lr_schedule: Optional round number -> client learning rate.
    model_aggregator: Weighted aggregation factory for the deltas;
      `tff.aggregators.MeanFactory()` by default.
    by_steps: Group clients of similar numbers of batches together.

  Returns:
    A `VectorizedLearningProcess`: `next(state, client_datasets)` takes the
    per-client datasets, as `build_fed_opt`'s process does, and its state
    has the same type as that process's.

  Raises:
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
    ValueError: If `group_size` is not a positive integer, the client
      optimizer keeps shared state (e.g. Adam) or the model has
      non-trainable variables.
  """
  recipe_fn = fed_opt.fed_opt_recipe(server_optimizer_fn=server_optimizer_fn,
                                     model_aggregator=model_aggregator)
  return build_vectorized(
      model_fn, recipe_fn, vectorized_model, group_size=group_size,
      client_optimizer_fn=client_optimizer_fn,
      client_weighting=client_weighting,
      client_lr_schedule=client_lr_schedule, by_steps=by_steps)
