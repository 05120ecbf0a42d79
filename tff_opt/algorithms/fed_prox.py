"""FedProx (Li et al., "Federated Optimization in Heterogeneous Networks").

Client k minimises, from the broadcast model w_t,

    L_k(w) + (mu/2) ||w - w_t||^2            (gradient: g + mu (w - w_t))

with its client optimizer over its local epochs; the server averages the
deltas by example count (or uniformly) and applies its server optimizer, as
FedOpt does (`fed_opt.py`). mu = 0 is FedAvg.

TFF 0.87's `tff.learning.algorithms.build_weighted_fed_prox` writes the
proximal gradient by hand with the opposite sign (its result is textbook
FedProx with -mu); this module does not use it. The penalty is `proximal`
below, differentiated by autodiff; the fine-tuning of
`tff_opt.program.personalization` uses it too.
"""

import functools
from collections.abc import Callable
from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.algorithms import hparams
from tff_opt.algorithms import recipe
from tff_opt.round import ground


MU = hparams.FEDPROX_MU
SPEC = hparams.Spec(
    summary=('FedProx: local objective L_k + (mu/2)||w - w_t||^2 '
             '(--fedprox_mu), server optimizer from --server_opt'),
    hparams=(MU,),
    client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES)  # FedAvg's.


def proximal(weights, broadcast, *, learning_rate, mu) -> tf.Tensor:
  """FedProx's proximal term (mu/2) ||w - w_t||^2 (gradient mu (w - w_t)).

  Written as mu * sum(l2_loss(w - w_t)) (l2_loss(x) = ||x||^2 / 2): the same
  value, and autodiff gives the gradient as (w - w_t) * mu in one
  multiplication (the same numbers as through `tf.square`, fewer passes).

  Args:
    weights: The trainable variables, in model order.
    broadcast: What the distributor sent; its model weights are w_t.
    learning_rate: Unused (every penalty takes it).
    mu: The proximal strength, >= 0.

  Returns:
    A scalar tensor.
  """
  del learning_rate
  anchor = ground.model_weights_of(broadcast).trainable
  return mu * tf.add_n(
      [tf.nn.l2_loss(w - a) for w, a in zip(weights, anchor)])


def fed_prox_recipe(
    *,
    mu: float,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
) -> recipe.RecipeFn:
  """FedProx's recipe: `recipe.penalized_fed_opt` with `proximal`.

  Raises:
    ValueError: If `mu` is negative or not a finite number.
  """
  MU.check(mu)
  return functools.partial(
      recipe.penalized_fed_opt,
      distributor_fn=tff.learning.templates.build_broadcast_process,
      penalty=functools.partial(proximal, mu=mu),
      server_optimizer_fn=server_optimizer_fn,
      model_aggregator=model_aggregator)


def build_fed_prox(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    mu: float,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting = SPEC.client_weighting,
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
) -> tff.learning.templates.LearningProcess:
  """Builds a FedProx `LearningProcess`.

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel` on each call.
    mu: The proximal strength, >= 0.
    client_optimizer_fn: The client's `tff.learning.optimizers.Optimizer`.
    server_optimizer_fn: The server's optimizer.
    client_weighting: `NUM_EXAMPLES` (default) or `UNIFORM`.
    client_lr_schedule: Optional round number -> client learning rate.
    model_aggregator: Weighted aggregation factory for the deltas;
      `tff.aggregators.MeanFactory()` by default.

  Returns:
    A `tff.learning.templates.LearningProcess`; its metrics include
    `communication/{bytes_server_to_client, bytes_client_to_server}`.

  Raises:
    ValueError: If `mu` is negative or not a finite number.
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
  """
  recipe_fn = fed_prox_recipe(mu=mu, server_optimizer_fn=server_optimizer_fn,
                              model_aggregator=model_aggregator)
  return recipe.assemble(model_fn, recipe_fn, client_optimizer_fn,
                         client_weighting, client_lr_schedule)
