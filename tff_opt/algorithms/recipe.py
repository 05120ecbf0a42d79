"""An algorithm as a recipe of parts, assembled into a process.

An algorithm is four parts (distributor, client work, aggregator,
finalizer). Written as a `Recipe` -- what its parts are, before they are
built -- another algorithm can *change* it before it is built (FedBN keeps
the batch-norm variables of any base algorithm on the clients, `fed_bn.py`).
FedOpt, FedProx, FedFOR and FedPTR are one recipe, `penalized_fed_opt`
(`build_penalized_fed_opt` assembles it); FedDyn has its own; FedCurv and
SCAFFOLD still compose their parts in one go. `assemble` then builds and composes them; `fed_bn`
transforms a base recipe into a FedBN recipe first.

The parts are built in this order, each from the types of the previous
ones: the client work (`client_work.build_local_training` with the
recipe's penalty, report hook and `work_broadcast_type`), the aggregator
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
    penalty: The local objective's penalty (`penalties`), or `None`.
    report_fn: The client work's report hook, or `None`.
    initial_client_state: A new client's state (NumPy structure); `None`
      for an algorithm without client state.
    client_state_update: `(client work input, update) -> new client state`.
    client_input_fn: `(broadcast, client state) -> client work input`;
      `None` adds the state under `'client_state'`.
    to_server: `update -> what the client sends`; `None` sends the update.
    prepare_fn: The client work's pre-pass before local training (see
      `client_work.build_local_training`), or `None`.
  """
  work_broadcast_type: tff.Type
  distributor_fn: Callable[[tff.Type], Any]
  aggregator_fn: Callable[[tff.Type, tff.Type], Any]
  finalizer_fn: Callable[[tff.Type], Any]
  penalty: Optional[Callable[..., tf.Tensor]] = None
  report_fn: Optional[Callable[..., Any]] = None
  initial_client_state: Any = None
  client_state_update: Optional[Callable[[Any, Any], Any]] = None
  client_input_fn: Optional[Callable[[Any, Any], Any]] = None
  to_server: Optional[Callable[[Any], Any]] = None
  prepare_fn: Optional[Callable[..., Any]] = None


def assemble(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    recipe_fn: Callable[[tff.Type], Recipe],
    *,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting,
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]],
):
  """Builds the recipe's parts and composes them (see the module docstring).

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel` on each call.
    recipe_fn: Model-weights type -> `Recipe`.
    client_optimizer_fn: The client's optimizer.
    server_optimizer_fn: The server's optimizer (checked here; the recipe's
      finalizer uses it).
    client_weighting: `NUM_EXAMPLES` or `UNIFORM`.
    client_lr_schedule: Optional round number -> client learning rate.

  Returns:
    A `tff.learning.templates.LearningProcess`, or a
    `client_states.ClientStatefulProcess` when the recipe has client state.

  Raises:
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
  """
  _common.check_optimizers(client_optimizer_fn, server_optimizer_fn)
  initial_weights_fn = _common.initial_model_weights_fn(model_fn)
  recipe = recipe_fn(initial_weights_fn.type_signature.result)
  client_work = client_work_lib.build_local_training(
      model_fn,
      client_optimizer_fn,
      penalty=recipe.penalty,
      broadcast_type=recipe.work_broadcast_type,
      client_weighting=client_weighting,
      learning_rate_schedule=client_lr_schedule,
      report_fn=recipe.report_fn,
      prepare_fn=recipe.prepare_fn)
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
    prepare_fn: Optional[Callable[..., Any]] = None,
) -> Recipe:
  """The FedOpt round with an algorithm's own broadcast and local penalty.

  FedOpt, FedProx, FedFOR and FedPTR differ only in what the server
  broadcasts (`distributor_fn(weights_type)`) and in the penalty the clients
  add to their loss (client-side FedPTR also runs a pre-pass, `prepare_fn`,
  before local training); the client training, the weighted mean of the
  deltas (`model_aggregator`, `tff.aggregators.MeanFactory()` by default)
  and the server optimizer step (which rejects a non-finite round) are the
  same.
  """
  distributor = distributor_fn(weights_type)
  return Recipe(
      work_broadcast_type=distributor.next.type_signature.result.result.member,
      distributor_fn=lambda _: distributor,
      aggregator_fn=(model_aggregator or tff.aggregators.MeanFactory()).create,
      finalizer_fn=lambda _: (
          tff.learning.templates.build_apply_optimizer_finalizer(
              server_optimizer_fn, weights_type)),
      penalty=penalty,
      prepare_fn=prepare_fn)


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
    prepare_fn: Optional[Callable[..., Any]] = None,
) -> tff.learning.templates.LearningProcess:
  """Assembles `penalized_fed_opt` (FedOpt, FedProx, FedFOR, FedPTR).

  Raises:
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
  """
  return assemble(
      model_fn,
      lambda weights_type: penalized_fed_opt(
          weights_type, distributor_fn=distributor_fn, penalty=penalty,
          server_optimizer_fn=server_optimizer_fn,
          model_aggregator=model_aggregator, prepare_fn=prepare_fn),
      client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn,
      client_weighting=client_weighting,
      client_lr_schedule=client_lr_schedule)
