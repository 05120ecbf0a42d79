"""FedFOR (Tian, Smith, Kira): stateless first-order regularization.

Round t broadcasts the current and the previous global model (w_t, w_{t-1})
(`distributors.with_previous_model`). With d = w_{t-1} - w_t and eta the
round's client learning rate, client k minimises (Eq. 7 of the paper)

    L_k(w) + (alpha/eta) sum_i relu(d_i (w_i - w_t,i)),

whose gradient adds (alpha/eta) d_i on the coordinates where
d_i (w_i - w_t,i) > 0 (moving back towards w_{t-1}) and 0 elsewhere
(`penalties.first_order_positive_hook`). Clients are averaged as in FedAvg and
the server optimizer applies the mean delta. Nothing is kept per client.

Choices the paper leaves open, written down and tested:
- First round (no w_{t-1}): no penalty, the round is FedAvg's.
- eta is the client optimizer's learning rate of the round (after
  `client_lr_schedule`), read from the client work's hyper-parameters.
- relu's gradient at 0 is 0, so the first local step of a round is plain
  (w = w_t there).
- alpha = 0 is FedAvg; the paper uses alpha = 5.
- Communication: server -> client is two models plus the one-byte
  `has_previous` flag (the paper's Table 1: {W^{t-1}, W^{t-2}}).
- d and alpha/eta are computed once per client, before its local steps
  (`penalties.first_order_positive_hook`), not at every step.
"""

import functools
from collections.abc import Callable
from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.algorithms import hparams
from tff_opt.algorithms import recipe
from tff_opt.round import distributors
from tff_opt.round import penalties


ALPHA = hparams.HParam(
    'fedfor_alpha', 5.0, 'FedFOR penalty strength alpha (Eq. 7; the paper '
    'uses 5).', lower=0.0, argument='alpha', aliases=('alpha',))
GRAD_AT_ZERO = hparams.HParam(
    'fedfor_grad_at_zero', 0, 'FedFOR: derivative of U(x) = max(x, 0) at '
    '0, where every coordinate starts local training: 0 = relu\'s (no push '
    'on the first step), 1 = the paper\'s x-branch (first step moves by '
    '-alpha (w_{t-1} - w_t)).', kind='integer', lower=0, upper=1,
    argument='grad_at_zero')
SPEC = hparams.Spec(
    summary=('FedFOR (Eq. 7): two-model broadcast, local penalty '
             '(alpha/eta) sum U((w_{t-1} - w_t)(w - w_t)) (--fedfor_alpha; '
             'U\'(0) from --fedfor_grad_at_zero), server optimizer from '
             '--server_opt'),
    hparams=(ALPHA, GRAD_AT_ZERO),
    # Tian et al. Algorithm 1: the plain mean of the clients' models.
    client_weighting=tff.learning.ClientWeighting.UNIFORM)


def fed_for_recipe(
    *,
    alpha: float,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    grad_at_zero: int = 0,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
) -> recipe.RecipeFn:
  """FedFOR's recipe: `recipe.penalized_fed_opt` with the two-model
  broadcast and `penalties.first_order_positive_hook`.

  Raises:
    ValueError: If `alpha` is negative or not a finite number, or
      `grad_at_zero` is not 0 or 1.
  """
  ALPHA.check(alpha)
  GRAD_AT_ZERO.check(grad_at_zero)
  return functools.partial(
      recipe.penalized_fed_opt,
      distributor_fn=distributors.with_previous_model,
      penalty=penalties.first_order_positive_hook(alpha, grad_at_zero),
      server_optimizer_fn=server_optimizer_fn,
      model_aggregator=model_aggregator)


def build_fed_for(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    alpha: float,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting = SPEC.client_weighting,
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
    grad_at_zero: int = 0,
) -> tff.learning.templates.LearningProcess:
  """Builds a FedFOR `LearningProcess`.

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel` on each call.
    alpha: The penalty strength, >= 0 (the paper uses 5).
    client_optimizer_fn: The client's `tff.learning.optimizers.Optimizer`;
      its learning rate is the eta of Eq. 7.
    server_optimizer_fn: The server's optimizer.
    client_weighting: `UNIFORM` (default, `SPEC.client_weighting`: Algorithm
      1's plain mean of the clients' models) or `NUM_EXAMPLES`.
    client_lr_schedule: Optional round number -> client learning rate.
    model_aggregator: Weighted aggregation factory for the deltas;
      `tff.aggregators.MeanFactory()` by default.
    grad_at_zero: U'(0) of the penalty, 0 (relu's) or 1 (the paper's
      x-branch); see `tff_opt.round.penalties`.

  Returns:
    A `tff.learning.templates.LearningProcess`; its metrics include
    `communication/{bytes_server_to_client, bytes_client_to_server}`.

  Raises:
    ValueError: If `alpha` is negative or not a finite number, or
      `grad_at_zero` is not 0 or 1.
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
  """
  recipe_fn = fed_for_recipe(
      alpha=alpha, server_optimizer_fn=server_optimizer_fn,
      grad_at_zero=grad_at_zero, model_aggregator=model_aggregator)
  return recipe.assemble(model_fn, recipe_fn, client_optimizer_fn,
                         client_weighting, client_lr_schedule)
