"""FedFOR (Tian, Smith, Kira): stateless first-order regularization.

Round t broadcasts the current and the previous global model (w_t, w_{t-1})
(`distributors.with_previous_model`). With d = w_{t-1} - w_t and eta the
round's client learning rate, client k minimises (Eq. 7 of the paper)

    L_k(w) + (alpha/eta) sum_i relu(d_i (w_i - w_t,i)),

whose gradient adds (alpha/eta) d_i on the coordinates where
d_i (w_i - w_t,i) > 0 (moving back towards w_{t-1}) and 0 elsewhere
(`first_order_positive_hook`). Clients are averaged as in FedAvg and
the server optimizer applies the mean delta. Nothing is kept per client.

Choices the paper leaves open, written down and tested:
- First round (no w_{t-1}): no penalty, the round is FedAvg's.
- eta is the client optimizer's learning rate of the round (after
  `client_lr_schedule`), read from the client work's hyper-parameters.
- U's derivative at 0. The paper's U (U(x) = x for x >= 0, else 0) needs
  one, and every coordinate sits at 0 at the start of local training
  (w = w_t). `grad_at_zero=0` (the default here) takes relu's, 0, so the
  first local step carries no FedFOR gradient and later steps push back
  only the coordinates that moved toward w_{t-1} (d_i (w_i - w_t,i) > 0);
  `grad_at_zero=1` takes the derivative of the paper's x-branch, which
  holds at 0 (x >= 0), so the first step moves every coordinate by
  -alpha d_i (with SGD at the same eta: the penalty's gradient is
  (alpha/eta) d_i), an extrapolation of the last global step by alpha. The
  binary's `--fedfor_grad_at_zero` chooses; `results/claims/fedfor`
  measures both.
- alpha = 0 is FedAvg; the paper uses alpha = 5.
- Communication: server -> client is two models plus the one-byte
  `has_previous` flag (the paper's Table 1: {W^{t-1}, W^{t-2}}).
- d and alpha/eta are computed once per client, before its local steps
  (`first_order_positive_hook`), not at every step.
"""

import functools
from collections.abc import Callable
from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.algorithms import hparams
from tff_opt.algorithms import recipe
from tff_opt.round import distributors
from tff_opt.round import ground


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


def _sum(tensors) -> tf.Tensor:
  return tf.add_n([tf.reduce_sum(t) for t in tensors])


def first_order_positive_constants(broadcast, *, learning_rate, alpha):
  """FedFOR's per-client constants: (w_t, d = w_{t-1} - w_t, alpha/eta).

  The scale is 0 when the broadcast's `has_previous` is false (first round).

  Args:
    broadcast: A `ground.TwoModels` (w_t, w_{t-1}, has_previous).
    learning_rate: The client learning rate eta.
    alpha: The penalty strength, >= 0.

  Returns:
    A tuple `(anchor, direction, scale)`: w_t and d as lists in model order,
    scale a float32 scalar.
  """
  current = ground.model_weights_of(broadcast).trainable
  previous = broadcast.previous_model_weights.trainable
  direction = [p - c for c, p in zip(current, previous)]
  scale = tf.cast(broadcast.has_previous, tf.float32) * (
      alpha / tf.cast(learning_rate, tf.float32))
  return list(current), direction, scale


def positive_part(x: tf.Tensor, grad_at_zero: int = 0) -> tf.Tensor:
  """FedFOR's U(x) = max(x, 0), with derivative `grad_at_zero` at x = 0."""
  if grad_at_zero == 0:
    return tf.nn.relu(x)  # Gradient 1 where x > 0, else 0.
  return tf.where(x >= 0.0, x, tf.zeros_like(x))  # Gradient 1 where x >= 0.


def first_order_positive_step(weights, constants, *,
                              grad_at_zero: int = 0) -> tf.Tensor:
  """FedFOR's Eq. 7 from its constants: scale * sum_i U(d_i (w_i - w_t,i)).

  Args:
    weights: The trainable variables, in model order.
    constants: `first_order_positive_constants(...)`.
    grad_at_zero: U'(0), 0 or 1 (see the module docstring).

  Returns:
    A scalar tensor.
  """
  anchor, direction, scale = constants
  return scale * _sum([
      positive_part(d * (w - c), grad_at_zero)
      for w, c, d in zip(weights, anchor, direction)
  ])


def first_order_positive_hook(alpha: float, grad_at_zero: int = 0
                              ) -> ground.PrecomputedHook:
  """FedFOR's first-order penalty (Eq. 7 of Tian, Smith, Kira):

      (alpha/eta) sum_i U(d_i (w_i - w_t,i)),   d = w_{t-1} - w_t,

  U(x) = max(x, 0), zero when the broadcast's `has_previous` is false (first
  round). d and alpha/eta are computed once per client
  (`first_order_positive_constants`), the sum at every step
  (`first_order_positive_step`).

  Args:
    alpha: The penalty strength, >= 0.
    grad_at_zero: U'(0), 0 or 1 (see the module docstring).

  Returns:
    A `ground.PrecomputedHook`; called as `hook(weights, broadcast, *,
    learning_rate)` (a broadcast with `model_weights` (w_t),
    `previous_model_weights` (w_{t-1}) and `has_previous`) it returns the
    penalty's value, a scalar tensor.

  Raises:
    ValueError: If `grad_at_zero` is not 0 or 1.
  """
  if grad_at_zero not in (0, 1):
    raise ValueError(
        f'grad_at_zero must be 0 or 1, got {grad_at_zero!r}.')
  return ground.PrecomputedHook(
      functools.partial(first_order_positive_constants, alpha=alpha),
      functools.partial(first_order_positive_step,
                        grad_at_zero=grad_at_zero))


def fed_for_recipe(
    *,
    alpha: float,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    grad_at_zero: int = 0,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
) -> recipe.RecipeFn:
  """FedFOR's recipe: `recipe.penalized_fed_opt` with the two-model
  broadcast and `first_order_positive_hook`.

  Raises:
    ValueError: If `alpha` is negative or not a finite number, or
      `grad_at_zero` is not 0 or 1.
  """
  ALPHA.check(alpha)
  GRAD_AT_ZERO.check(grad_at_zero)
  return functools.partial(
      recipe.penalized_fed_opt,
      distributor_fn=distributors.with_previous_model,
      penalty=first_order_positive_hook(alpha, grad_at_zero),
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
      x-branch); see the module docstring.

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
