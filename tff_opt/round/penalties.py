"""Penalties: pure functions added to a client's batch loss.

Every penalty has the signature

    penalty(weights, broadcast, *, learning_rate, <hyper-parameter>) -> scalar

where `weights` is the list of trainable variables (model order), `broadcast`
what the distributor sent (see `ground.model_weights_of`) and
`learning_rate` the round's client learning rate eta. An algorithm binds its
hyper-parameter with `functools.partial` and hands the result to the client
work (`client_work.LocalObjective(penalty=...)`), which adds it to the loss
inside the gradient tape: gradients come from autodiff, never from a
hand-written formula.

A penalty with per-client constants (FedFOR's d = w_{t-1} - w_t, FedCurv's
sqrt(u)) has one form, `<name>_hook(<hyper-parameters>)`: a
`ground.PrecomputedHook` of `<name>_constants(broadcast, *,
learning_rate)`, which the client work runs once per client, and
`<name>_step(weights, constants)`, run at every local step (the same
numbers as the paper's formula, fewer passes over model-sized tensors). A
hook is callable with the penalty signature above, so the formula's value
is `<name>_hook(...)(weights, broadcast, learning_rate=eta)`.

    proximal                   FedProx   (mu/2) ||w - w_t||^2
    first_order_positive_hook  FedFOR    (alpha/eta) sum relu(d (w - w_t)),
                               (Eq. 7)   d = w_{t-1} - w_t; zero without w_{t-1}
    elastic_hook               FedCurv   lam (w^T diag(u) w - 2 w^T v) + const
    linear_correction          SCAFFOLD  <w, c - c_i>  (gradient c - c_i)
    dynamic                    FedDyn    -<g_k, w> + (alpha/2) ||w - w_t||^2
    local_drift_hook           FedDC     (alpha/2) ||w + h_i - w_t||^2
                                         + (1/(eta K)) <w, g_i - g>

What each penalty reads is typed: the broadcasts are NamedTuples defined
here beside the penalty that reads them (`FisherSums`: FedCurv's u and v;
`ControlVariate`: SCAFFOLD's c; `GlobalUpdate`: FedDC's g) or in `ground`
(`TwoModels`: FedFOR's w_t and w_{t-1}); a stateful client's penalty gets
a `ground.ClientInput(broadcast, client_state)`, its state keyed by the
constants below (FedDyn's g_k is its `local_gradient`).

Choice: FedFOR's U (the paper: U(x) = x for x >= 0, else 0) needs a
derivative at 0, and every coordinate sits at 0 at the start of local
training (w = w_t). `grad_at_zero=0` (the default here) takes relu's, 0, so
the first local step carries no FedFOR gradient and later steps push back
only the coordinates that moved toward w_{t-1} (d_i (w_i - w_t,i) > 0);
`grad_at_zero=1` takes the derivative of the paper's x-branch, which holds
at 0 (x >= 0), so the first step moves every coordinate by -alpha d_i (with
SGD at the same eta: the penalty's gradient is (alpha/eta) d_i), an
extrapolation of the last global step by alpha. The binary's
`--fedfor_grad_at_zero` chooses; `results/claims/fedfor` measures both.
"""

import functools
from typing import Any, NamedTuple

import tensorflow as tf

from tff_opt.round import ground

# The finalizer-state and client-state keys of the quantities below.
FISHER_SUM_KEY = 'fisher_sum'
FISHER_WEIGHT_SUM_KEY = 'fisher_weight_sum'
CONTROL_VARIATE_KEY = 'control_variate'
LOCAL_GRADIENT_KEY = 'local_gradient'


class FisherSums(NamedTuple):
  """FedCurv's broadcast (`algorithms/fed_curv.py`, stateless variant)."""
  model_weights: Any
  fisher_sum: Any  # u = sum_k diag(F_k), shaped like the trainables.
  fisher_weight_sum: Any  # v = sum_k diag(F_k) * w_k.


class ControlVariate(NamedTuple):
  """SCAFFOLD's broadcast (`algorithms/scaffold.py`)."""
  model_weights: Any
  control_variate: Any  # The server's c, shaped like the trainables.


def _sum(tensors) -> tf.Tensor:
  return tf.add_n([tf.reduce_sum(t) for t in tensors])


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


def elastic_constants(broadcast, *, learning_rate, lam):
  """FedCurv's per-client constants: (sqrt(u), v / sqrt(u), lam).

  Where u <= 0 the penalty has no term: a sum of Fisher diagonals is never
  negative and v = sum F w is 0 where it is 0; u - F_own of the cross-silo
  variant can round below 0 (with v - (F w)_own rounding near 0), and is
  clamped at 0 before the square root; v / sqrt(u) is 0 where u is 0.

  Args:
    broadcast: A `FisherSums` (or any broadcast with its `fisher_sum` u
      and `fisher_weight_sum` v, each a list shaped like the trainables).
    learning_rate: Unused.
    lam: The penalty strength lambda, >= 0.

  Returns:
    A tuple `(root, target, lam)`: sqrt(u) and v / sqrt(u) as lists in
    model order, and lam.
  """
  del learning_rate
  root = [tf.sqrt(tf.maximum(u, 0.0)) for u in broadcast.fisher_sum]
  target = [tf.math.divide_no_nan(v, r)
            for v, r in zip(broadcast.fisher_weight_sum, root)]
  return root, target, lam


def elastic_step(weights, constants) -> tf.Tensor:
  """FedCurv's penalty from its constants: lam sum (sqrt(u) w - v/sqrt(u))^2.

  Equal to lam (w^T diag(u) w - 2 w^T v) plus the constant lam sum v^2 / u,
  so with the same gradient 2 lam (u w - v); written as an `l2_loss` of one
  product and one difference, autodiff needs a few passes over the weights
  per step instead of a dozen.

  Args:
    weights: The trainable variables, in model order.
    constants: `elastic_constants(...)`.

  Returns:
    A scalar tensor.
  """
  root, target, lam = constants
  return (2.0 * lam) * tf.add_n([
      tf.nn.l2_loss(r * w - t) for w, r, t in zip(weights, root, target)])


def elastic_hook(lam: float, adjust=None) -> ground.PrecomputedHook:
  """FedCurv's penalty, Eq. 3 as rearranged in Sec. 3.1 (up to a constant):

      lam (w^T diag(u) w - 2 w^T v) + const,   gradient 2 lam (u w - v),

  where u and v are the broadcast's `fisher_sum` and `fisher_weight_sum`
  (Eq. 3's constant is not kept; `elastic_step` adds lam sum v^2 / u).
  sqrt(u) and v / sqrt(u) are computed once per client
  (`elastic_constants`), the sum at every step (`elastic_step`).

  Args:
    lam: The penalty strength lambda, >= 0.
    adjust: Optional `broadcast -> broadcast` applied first, once per
      client (FedCurv's cross-silo variant removes the client's own
      contribution from u and v with it).

  Returns:
    A `ground.PrecomputedHook`; called as `hook(weights, broadcast, *,
    learning_rate)` (a broadcast with `fisher_sum` and `fisher_weight_sum`,
    each a list shaped like the trainable weights) it returns the penalty's
    value (of the adjusted broadcast), a scalar tensor.
  """

  def constants(broadcast, *, learning_rate):
    if adjust is not None:
      broadcast = adjust(broadcast)
    return elastic_constants(broadcast, learning_rate=learning_rate, lam=lam)

  return ground.PrecomputedHook(constants, elastic_step)


def linear_correction(weights, broadcast, *, learning_rate) -> tf.Tensor:
  """SCAFFOLD's drift correction as a penalty: <w, c - c_i>.

  Its gradient c - c_i is constant within a round, so a local SGD step
  w <- w - eta (g + c - c_i) is Karimireddy et al.'s corrected step. c is
  the broadcast's `control_variate`; c_i is the client's own control variate
  (`client_state['control_variate']`), or c when the client has none yet
  (`client_state['initialized']` false).

  Args:
    weights: The trainable variables, in model order.
    broadcast: A `ground.ClientInput` of a `ControlVariate` and the
      client's state.
    learning_rate: Unused.

  Returns:
    A scalar tensor.
  """
  del learning_rate
  c = broadcast.broadcast.control_variate
  c_i = effective_client_control_variate(broadcast)
  return _sum([w * (a - b) for w, a, b in zip(weights, c, c_i)])


def dynamic(weights, broadcast, *, learning_rate, alpha) -> tf.Tensor:
  """FedDyn's dynamic regularizer (Acar et al., Algorithm 1).

  -<g_k, w> + (alpha/2) ||w - w_t||^2, gradient -g_k + alpha (w - w_t),
  where w_t is the broadcast model and g_k (the client's
  `client_state['local_gradient']`) its gradient of L_k at the end of its
  previous round, 0 before its first.

  Args:
    weights: The trainable variables, in model order.
    broadcast: A `ground.ClientInput` of the model (w_t) and the client's
      state.
    learning_rate: Unused.
    alpha: The regularization strength, > 0.

  Returns:
    A scalar tensor.
  """
  del learning_rate
  anchor = ground.model_weights_of(broadcast).trainable
  g = broadcast.client_state[LOCAL_GRADIENT_KEY]
  return _sum([
      0.5 * alpha * tf.square(w - a) - gk * w
      for w, a, gk in zip(weights, anchor, g)
  ])


def effective_client_control_variate(broadcast):
  """c_i, or the server's c for a client seen for the first time (of a
  `ground.ClientInput` of a `ControlVariate`)."""
  state = broadcast.client_state
  c = broadcast.broadcast.control_variate
  return [
      tf.where(state[ground.INITIALIZED_KEY], own, server)
      for own, server in zip(state[CONTROL_VARIATE_KEY], c)
  ]


# --- FedDC (Gao et al., CVPR 2022): local drift decoupling and correction ---

# The client state of FedDC: its local drift variable h_i and its last local
# update g_i; the broadcast's global update g.
DRIFT_KEY = 'drift'
LOCAL_UPDATE_KEY = 'local_update'
GLOBAL_UPDATE_KEY = 'global_update'


class GlobalUpdate(NamedTuple):
  """FedDC's broadcast (`algorithms/fed_dc.py`)."""
  model_weights: Any
  global_update: Any  # g, shaped like the trainables.


def local_drift_constants(broadcast, *, learning_rate, num_steps, alpha):
  """FedDC's per-client constants: (w - h_i, (g_i - g) / (eta K), alpha).

  The correction's scale 1/(eta K) is 0 when K = 0 (a client without a
  step never evaluates the penalty).

  Args:
    broadcast: A `ground.ClientInput` of a `GlobalUpdate` (w, g) and the
      client's state holding `drift` (h_i) and `local_update` (g_i), each
      a list shaped like the trainable weights.
    learning_rate: The client learning rate eta.
    num_steps: The client's number of local steps K this round.
    alpha: The strength of the penalized term, >= 0.

  Returns:
    A tuple `(target, correction, alpha)`: w - h_i and (g_i - g) / (eta K)
    as lists in model order, and alpha.
  """
  anchor = ground.model_weights_of(broadcast).trainable
  state = broadcast.client_state
  target = [w - h for w, h in zip(anchor, state[DRIFT_KEY])]
  scale = tf.math.divide_no_nan(
      1.0, tf.cast(learning_rate, tf.float32) *
      tf.cast(num_steps, tf.float32))
  correction = [(own - server) * scale for own, server in zip(
      state[LOCAL_UPDATE_KEY], broadcast.broadcast.global_update)]
  return target, correction, alpha


def local_drift_step(weights, constants) -> tf.Tensor:
  """FedDC's R + G from its constants (see `local_drift_hook`).

  (alpha/2) ||theta - (w - h_i)||^2 is written alpha * l2_loss(...)
  (l2_loss(x) = ||x||^2 / 2), the same value.

  Args:
    weights: The trainable variables theta, in model order.
    constants: `local_drift_constants(...)`.

  Returns:
    A scalar tensor.
  """
  target, correction, alpha = constants
  return (alpha * tf.add_n(
      [tf.nn.l2_loss(w - t) for w, t in zip(weights, target)]) +
          _sum([w * c for w, c in zip(weights, correction)]))


def local_drift_hook(alpha: float) -> ground.PrecomputedHook:
  """FedDC's penalized and gradient-correction terms (Gao et al.):

      R + G = (alpha/2) ||theta + h_i - w||^2 + (1/(eta K)) <theta, g_i - g>,

  gradient alpha (theta + h_i - w) + (g_i - g) / (eta K), where w is the
  broadcast model, g the broadcast's `global_update`, h_i and g_i the
  client's `client_state['drift']` and `client_state['local_update']`,
  eta the client learning rate and K the client's number of local steps
  this round (the client work must count them:
  `client_work.LocalObjective(count_steps=True)`). w - h_i and
  (g_i - g) / (eta K) are computed once per client
  (`local_drift_constants`), the sum at every step (`local_drift_step`).

  Args:
    alpha: The strength of the penalized term, >= 0.

  Returns:
    A `ground.PrecomputedHook`; called as `hook(weights, broadcast, *,
    learning_rate, num_steps)` it returns R + G, a scalar tensor.
  """
  return ground.PrecomputedHook(
      functools.partial(local_drift_constants, alpha=alpha),
      local_drift_step)
