"""An algorithm as a recipe of parts, assembled into a process.

An algorithm is four parts (distributor, client work, aggregator,
finalizer). Written as a `Recipe` -- what its parts are, before they are
built -- another algorithm can *change* it before it is built (FedBN keeps
the batch-norm variables of any base algorithm on the clients, `fed_bn.py`).
Every algorithm of the package is a recipe, and `assemble` is the one place
that builds and composes one:

    FedOpt, FedProx, FedFOR, FedPTR   `penalized_fed_opt` (one recipe, each
                                      with its broadcast and penalty)
    FedCurv, FedDyn, SCAFFOLD         their own (`fed_curv_recipe`, ...)
    FedNTD, FedRS                     `penalized_fed_opt` with a loss hook
    FedGKD, MOON, FedDC               their own (`fed_gkd_recipe`, ...)
    FedADC, FedADC+, SlowMo           `fed_adc.fed_adc_recipe`
    FedBN                             `fed_bn.with_local_batch_norm` of a
                                      base algorithm's recipe

An algorithm module exposes its recipe as a function of its
hyper-parameters (`fed_prox.fed_prox_recipe(mu=..., server_optimizer_fn=...)`)
that checks them and returns a `RecipeFn`, model-weights type -> `Recipe`;
its public builder is that function handed to `assemble`.

The parts are built in this order, each from the types of the previous
ones: the client work (`client_work.build_local_training` with the
recipe's `objective`, `passes` and `work_broadcast_type`), the aggregator
(for the type the client sends), the finalizer (for the aggregate's type),
the distributor (which may read the finalizer's state). A recipe with an
initial client state is composed by `client_states.compose` (a
`ClientStatefulProcess`), one without by `composers.compose_learning_process`.

Non-trainable variables (batch norm's moving mean and variance). TFF's
round sends and applies the trainable weights only
(`tff.learning.templates.build_apply_optimizer_finalizer` keeps the
non-trainables as they are), so a BN model's global statistics would stay
at their initial values while every client updates its own copy. PyTorch
FedAvg, which the papers with BN models ran, averages the state_dict,
running statistics included. So `assemble` hands every recipe to
`with_shared_non_trainables` first: each client also sends its
non-trainable values after local training, they are averaged with the
client's aggregation weight (the one its update gets: its examples, or 1
under uniform weighting) and the global model takes that mean directly,
after the algorithm's own finalizer (never through a server optimizer).
Every algorithm assembled here gets this (FedOpt with every server
optimizer, FedProx, FedFOR, FedCurv, SCAFFOLD, FedDyn, FedADC(+), SlowMo,
FedPTR(-S); FedPTR's trajectory matching cannot run a BN model at all,
`algorithms/fed_ptr_mtt.py`, so there it only matters for non-trainables no
forward pass changes); a recipe names the non-trainables that stay on the
clients in `local_non_trainables` (FedBN: its BN statistics). Choices:
- A round the finalizer rejects (`update_non_finite` = 1) keeps the global
  non-trainables too; so does a round in which no client took part (total
  weight 0) and one whose mean is not finite.
- A client whose update or non-trainables are not finite is dropped
  (weight 0) as for any non-finite update (`client_work`).
- The non-trainables are a plain weighted mean beside the recipe's own
  aggregator (`model_aggregator` factories, FedDyn's h, FedCurv's sums see
  only the update); they count in `bytes_client_to_server`. Integer ones
  are averaged and rounded; bool ones are not sent and keep their value.
- A model without (shared) non-trainable variables -- every model of this
  package but the BN ones -- is assembled unchanged: nothing is
  added.
"""

import collections
import dataclasses
from collections.abc import Callable
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.algorithms import _common
from tff_opt.round import aggregators
from tff_opt.round import client_states
from tff_opt.round import client_work as client_work_lib
from tff_opt.round import composers
from tff_opt.round import finalizers
from tff_opt.round import ground


@dataclasses.dataclass(frozen=True)
class Recipe:
  """The parts of an algorithm, for a given model-weights type.

  Attributes:
    work_broadcast_type: What the client work receives (the distributor's
      broadcast; for a stateful algorithm a `ground.ClientInput` of it and
      the client state, `client_states.client_broadcast_type`).
    distributor_fn: finalizer state type -> `DistributionProcess`.
    aggregator_fn: `(sent update type, weight type) ->` weighted
      `AggregationProcess`.
    finalizer_fn: aggregate type -> `FinalizerProcess`.
    objective: The client's local objective (`client_work.LocalObjective`:
      penalty, look-ahead, loss hook).
    passes: The client's passes before and after local training
      (`client_work.ClientPasses`).
    initial_client_state: A new client's state (NumPy structure); `None`
      for an algorithm without client state.
    client_state_update: `(client work input, update) -> new client state`.
    client_input_fn: `(broadcast, client state) -> client work input`;
      `None` pairs them as a `ground.ClientInput`.
    to_server: `update -> what the client sends`; `None` sends the update.
    local_non_trainables: Indices into `ModelWeights.non_trainable` of the
      variables that stay on the clients (FedBN's BN statistics); all
      others are averaged (`with_shared_non_trainables`).
  """
  work_broadcast_type: tff.Type
  distributor_fn: Callable[[tff.Type], Any]
  aggregator_fn: Callable[[tff.Type, tff.Type], Any]
  finalizer_fn: Callable[[tff.Type], Any]
  objective: client_work_lib.LocalObjective = client_work_lib.LocalObjective()
  passes: client_work_lib.ClientPasses = client_work_lib.ClientPasses()
  initial_client_state: Any = None
  client_state_update: Optional[Callable[[Any, Any], Any]] = None
  client_input_fn: Optional[Callable[[Any, Any], Any]] = None
  to_server: Optional[Callable[[Any], Any]] = None
  local_non_trainables: tuple[int, ...] = ()


RecipeFn = Callable[[tff.Type], Recipe]


def from_built_parts(distributor, finalizer, objective, *,
                     model_aggregator=None) -> Recipe:
  """A recipe whose distributor and finalizer are built already.

  For an algorithm whose server side does not depend on the types
  `assemble` passes (FedADC's momentum, FedGKD's buffer of models): the
  client work receives the distributor's broadcast, and the deltas are
  averaged by `model_aggregator` (TFF's `MeanFactory` by default).
  """
  return Recipe(
      work_broadcast_type=distributor.next.type_signature.result.result.member,
      distributor_fn=lambda _: distributor,
      aggregator_fn=(model_aggregator or tff.aggregators.MeanFactory()).create,
      finalizer_fn=lambda _: finalizer,
      objective=objective)


@dataclasses.dataclass(frozen=True)
class Assembly:
  """What `assemble` built a process from: its arguments.

  `assemble` records them on the process it returns (`process.assembly`),
  so that the same algorithm can be rebuilt with another client work
  (`vectorized.vectorize`: the round's clients trained in groups) from
  the process alone, without restating its hyper-parameters.
  """
  model_fn: Callable[[], tff.learning.models.VariableModel]
  recipe_fn: RecipeFn
  client_optimizer_fn: tff.learning.optimizers.Optimizer
  client_weighting: tff.learning.ClientWeighting
  client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]]


def assemble(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    recipe_fn: RecipeFn,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting = (
        tff.learning.ClientWeighting.NUM_EXAMPLES),
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
):
  """Builds the recipe's parts and composes them (see the module docstring).

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel` on each call.
    recipe_fn: Model-weights type -> `Recipe`.
    client_optimizer_fn: The client's optimizer. (A server optimizer, where
      the algorithm has one, is part of its recipe: its finalizer.)
    client_weighting: `NUM_EXAMPLES` (default) or `UNIFORM`.
    client_lr_schedule: Optional round number -> client learning rate.

  Every builder forwards its own three client arguments, in this order:
  `assemble(model_fn, recipe_fn, client_optimizer_fn, client_weighting,
  client_lr_schedule)`.

  Returns:
    A `tff.learning.templates.LearningProcess`, or a
    `client_states.ClientStatefulProcess` when the recipe has client state;
    its `assembly` attribute is an `Assembly` of these arguments.

  Raises:
    TypeError: If an optimizer (the client's, or the server's of the
      recipe) is not a `tff.learning.optimizers.Optimizer`.
  """
  _common.check_optimizer('client_optimizer_fn', client_optimizer_fn)
  initial_weights_fn = _common.initial_model_weights_fn(model_fn)
  weights_type = initial_weights_fn.type_signature.result
  recipe = with_shared_non_trainables(recipe_fn(weights_type), weights_type)
  client_work = client_work_lib.build_local_training(
      model_fn,
      client_optimizer_fn,
      objective=recipe.objective,
      passes=recipe.passes,
      broadcast_type=recipe.work_broadcast_type,
      client_weighting=client_weighting,
      learning_rate_schedule=client_lr_schedule)
  process = compose_around(initial_weights_fn, recipe, client_work)
  process.assembly = Assembly(model_fn, recipe_fn, client_optimizer_fn,
                              client_weighting, client_lr_schedule)
  return process


def compose_around(initial_weights_fn: tff.Computation, recipe: Recipe,
                   client_work: tff.learning.templates.ClientWorkProcess):
  """The recipe's other parts, built for `client_work`'s types, composed.

  `assemble`'s second half, shared with the vectorized client path
  (`vectorized.py`, whose client work trains a group of clients).

  Args:
    initial_weights_fn: () -> the initial `ModelWeights`.
    recipe: The `Recipe` (after `with_shared_non_trainables`).
    client_work: The client work built from the recipe's objective.

  Returns:
    As `assemble`, without the `assembly` attribute.
  """
  result_type = client_work.next.type_signature.result.result.member
  sent_type = result_type.update
  if recipe.to_server is not None:

    @tff.tensorflow.computation(result_type.update)
    def sent(update):
      return recipe.to_server(update)

    sent_type = sent.type_signature.result
  aggregator = recipe.aggregator_fn(sent_type, result_type.update_weight)
  finalizer = recipe.finalizer_fn(
      aggregator.next.type_signature.result.result.member)
  distributor = recipe.distributor_fn(
      finalizer.initialize.type_signature.result.member)
  if recipe.initial_client_state is None:
    return composers.compose_learning_process(
        initial_weights_fn, distributor, client_work, aggregator, finalizer)
  return client_states.compose(
      initial_weights_fn, distributor, client_work, aggregator, finalizer,
      initial_client_state=recipe.initial_client_state,
      client_state_update=recipe.client_state_update,
      client_input_fn=recipe.client_input_fn,
      to_server=recipe.to_server)


# The client's non-trainable values, in the update it sends.
NON_TRAINABLE_KEY = 'model_non_trainable'
# What the recipe's own `to_server` sends, beside them.
SENT_KEY = 'sent'


def shared_non_trainables(weights_type: tff.Type,
                          local: tuple[int, ...] = ()) -> tuple[int, ...]:
  """Indices of the non-trainables that are averaged: all but `local` and
  bool ones."""
  return tuple(
      i for i, (_, t) in enumerate(
          tff.structure.iter_elements(weights_type.non_trainable))
      if i not in local and t.dtype != np.bool_)


def with_shared_non_trainables(recipe: Recipe,
                               weights_type: tff.Type) -> Recipe:
  """`recipe` with its non-trainables averaged (see the module docstring).

  The client's report pass also returns its non-trainable values after
  local training, under `'model_non_trainable'`; the recipe's own pieces
  (its `to_server`, `client_state_update` and aggregator) see its update
  without them, as before. The aggregator is
  `aggregators.with_non_trainable_mean` around the recipe's, the finalizer
  `finalizers.with_non_trainable_mean` around the recipe's.

  Args:
    recipe: An algorithm's recipe.
    weights_type: The model's `ModelWeights` type.

  Returns:
    The recipe with the non-trainables shared; `recipe` itself when none is
    shared (`shared_non_trainables` is empty).

  Raises:
    ValueError: If the recipe's report pass already returns
      `'model_non_trainable'`.
  """
  # Over 80 lines with its docstring: the report pass, the aggregation and the
  # finalizer it wraps share the indices read here and are read in one place.
  shared = shared_non_trainables(weights_type, recipe.local_non_trainables)
  if not shared:
    return recipe
  base_report_fn = recipe.passes.report_fn

  def report_fn(model, dataset, broadcast, **kwargs):
    values = [model.non_trainable_variables[i].read_value() for i in shared]
    extras = collections.OrderedDict()
    if base_report_fn is not None:
      extras.update(base_report_fn(model, dataset, broadcast, **kwargs))
      if NON_TRAINABLE_KEY in extras:
        raise ValueError('The report pass already returns '
                         f'{NON_TRAINABLE_KEY!r}.')
    extras[NON_TRAINABLE_KEY] = values
    return extras

  def base_update(update):
    """The update the recipe's own client work would have made."""
    if base_report_fn is None:
      return update[ground.DELTA_KEY]
    return collections.OrderedDict(
        [(k, v) for k, v in update.items() if k != NON_TRAINABLE_KEY])

  def non_trainable_of(sent):
    return sent[NON_TRAINABLE_KEY]

  if recipe.to_server is None:
    to_server = None
    update_of = base_update
  else:

    def to_server(update):
      return collections.OrderedDict([
          (SENT_KEY, recipe.to_server(base_update(update))),
          (NON_TRAINABLE_KEY, non_trainable_of(update)),
      ])

    def update_of(sent):
      return sent[SENT_KEY]

  def aggregator_fn(sent_type, weight_type):
    return aggregators.with_non_trainable_mean(
        recipe.aggregator_fn, sent_type, weight_type, update_of=update_of,
        non_trainable_of=non_trainable_of)

  def finalizer_fn(aggregate_type):
    return finalizers.with_non_trainable_mean(
        recipe.finalizer_fn(aggregate_type[ground.UPDATE_KEY]),
        weights_type, aggregate_type, shared=shared)

  client_state_update = None
  if recipe.client_state_update is not None:

    def client_state_update(client_input, update):
      return recipe.client_state_update(client_input, base_update(update))

  return dataclasses.replace(
      recipe,
      aggregator_fn=aggregator_fn,
      finalizer_fn=finalizer_fn,
      passes=recipe.passes.with_report(report_fn),
      client_state_update=client_state_update,
      to_server=to_server)


def penalized_fed_opt(
    weights_type: tff.Type,
    *,
    distributor_fn: Callable[[tff.Type],
                             tff.learning.templates.DistributionProcess],
    penalty: Optional[client_work_lib.Penalty] = None,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    model_aggregator: Optional[
        tff.aggregators.WeightedAggregationFactory] = None,
    passes: client_work_lib.ClientPasses = client_work_lib.ClientPasses(),
    objective: Optional[client_work_lib.LocalObjective] = None,
) -> Recipe:
  """The FedOpt round with an algorithm's own broadcast and local objective.

  FedOpt, FedProx, FedFOR, FedPTR, FedNTD and FedRS differ only in what the
  server broadcasts (`distributor_fn(weights_type)`) and in what the
  clients minimise: a penalty added to their loss (`penalty`), or a whole
  `objective` (FedNTD's and FedRS's loss hooks); client-side FedPTR also
  runs passes before and after local training (`passes`). The client
  training, the weighted mean of the deltas (`model_aggregator`,
  `tff.aggregators.MeanFactory()` by default) and the server optimizer
  step (which rejects a non-finite round) are the same.

  Raises:
    TypeError: If `server_optimizer_fn` is not a
      `tff.learning.optimizers.Optimizer`.
    ValueError: If both `penalty` and `objective` are given.
  """
  if penalty is not None and objective is not None:
    raise ValueError('Give a penalty or an objective, not both (an '
                     'objective holds its own penalty).')
  _common.check_server_optimizer(server_optimizer_fn)
  distributor = distributor_fn(weights_type)
  return Recipe(
      work_broadcast_type=distributor.next.type_signature.result.result.member,
      distributor_fn=lambda _: distributor,
      aggregator_fn=(model_aggregator or tff.aggregators.MeanFactory()).create,
      finalizer_fn=lambda _: (
          finalizers.apply_optimizer(server_optimizer_fn, weights_type)),
      objective=(objective if objective is not None else
                 client_work_lib.LocalObjective(penalty=penalty)),
      passes=passes)
