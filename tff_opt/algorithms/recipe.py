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
"""

import dataclasses
from collections.abc import Callable
from typing import Any, Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.algorithms import _common
from tff_opt.round import client_states
from tff_opt.round import client_work as client_work_lib
from tff_opt.round import composers
from tff_opt.round import finalizers


@dataclasses.dataclass(frozen=True)
class Recipe:
  """The parts of an algorithm, for a given model-weights type.

  Attributes:
    work_broadcast_type: What the client work receives (the distributor's
      broadcast, plus `'client_state'` for a stateful algorithm).
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
      `None` adds the state under `'client_state'`.
    to_server: `update -> what the client sends`; `None` sends the update.
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


RecipeFn = Callable[[tff.Type], Recipe]


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
    `client_states.ClientStatefulProcess` when the recipe has client state.

  Raises:
    TypeError: If an optimizer (the client's, or the server's of the
      recipe) is not a `tff.learning.optimizers.Optimizer`.
  """
  _common.check_optimizer('client_optimizer_fn', client_optimizer_fn)
  initial_weights_fn = _common.initial_model_weights_fn(model_fn)
  recipe = recipe_fn(initial_weights_fn.type_signature.result)
  client_work = client_work_lib.build_local_training(
      model_fn,
      client_optimizer_fn,
      objective=recipe.objective,
      passes=recipe.passes,
      broadcast_type=recipe.work_broadcast_type,
      client_weighting=client_weighting,
      learning_rate_schedule=client_lr_schedule)
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


def penalized_fed_opt(
    weights_type: tff.Type,
    *,
    distributor_fn: Callable[[tff.Type],
                             tff.learning.templates.DistributionProcess],
    penalty: Optional[client_work_lib.Penalty],
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    model_aggregator: Optional[
        tff.aggregators.WeightedAggregationFactory] = None,
    passes: client_work_lib.ClientPasses = client_work_lib.ClientPasses(),
) -> Recipe:
  """The FedOpt round with an algorithm's own broadcast and local penalty.

  FedOpt, FedProx, FedFOR and FedPTR differ only in what the server
  broadcasts (`distributor_fn(weights_type)`) and in the penalty the clients
  add to their loss (client-side FedPTR also runs passes before and after
  local training, `passes`); the client training, the weighted mean of the
  deltas (`model_aggregator`, `tff.aggregators.MeanFactory()` by default)
  and the server optimizer step (which rejects a non-finite round) are the
  same.

  Raises:
    TypeError: If `server_optimizer_fn` is not a
      `tff.learning.optimizers.Optimizer`.
  """
  _common.check_server_optimizer(server_optimizer_fn)
  distributor = distributor_fn(weights_type)
  return Recipe(
      work_broadcast_type=distributor.next.type_signature.result.result.member,
      distributor_fn=lambda _: distributor,
      aggregator_fn=(model_aggregator or tff.aggregators.MeanFactory()).create,
      finalizer_fn=lambda _: (
          finalizers.apply_optimizer(server_optimizer_fn, weights_type)),
      objective=client_work_lib.LocalObjective(penalty=penalty),
      passes=passes)
