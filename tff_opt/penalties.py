"""Penalties: pure functions added to a client's batch loss.

Every penalty has the signature

    penalty(weights, broadcast, *, learning_rate, <hyper-parameter>) -> scalar

where `weights` is the list of trainable variables (model order), `broadcast`
what the distributor sent (see `client_work.model_weights_of`) and
`learning_rate` the round's client learning rate eta. An algorithm binds its
hyper-parameter with `functools.partial` and hands the result to
`client_work.build_local_training`, which adds it to the loss inside the
gradient tape: gradients come from autodiff, never from a hand-written
formula.

    proximal              FedProx      (mu/2) ||w - w_t||^2
    first_order_positive  FedFOR Eq.7  (alpha/eta) sum_i relu(d_i (w_i - w_t,i)),
                                       d = w_{t-1} - w_t; zero without w_{t-1}
    elastic               FedCurv      lam (w^T diag(u) w - 2 w^T v)
    linear_correction     SCAFFOLD     <w, c - c_i>  (gradient c - c_i)
    dynamic               FedDyn       -<g_k, w> + (alpha/2) ||w - w_t||^2

Broadcast entries read here (names are module constants):
`previous_model_weights` and `has_previous` (FedFOR, from
`distributors.with_previous_model`), `fisher_sum` and `fisher_weight_sum`
(FedCurv's u and v), `control_variate` (SCAFFOLD's c) and `client_state`
(the client's own state, added by `client_states`; FedDyn's g_k is its
`local_gradient`).

Choice: FedFOR's relu has TensorFlow's gradient, 0 at 0; at the start of
local training w = w_t, so the first local step carries no FedFOR gradient
(the paper's U(x) is x for x >= 0, whose right derivative at 0 would be 1;
the issue fixes the gradient as (alpha/eta) d_i where d_i (w_i - w_t,i) > 0).
"""

import tensorflow as tf

from tff_opt import client_work

PREVIOUS_MODEL_KEY = 'previous_model_weights'
HAS_PREVIOUS_KEY = 'has_previous'
FISHER_SUM_KEY = 'fisher_sum'
FISHER_WEIGHT_SUM_KEY = 'fisher_weight_sum'
CONTROL_VARIATE_KEY = 'control_variate'
CLIENT_STATE_KEY = 'client_state'
LOCAL_GRADIENT_KEY = 'local_gradient'


def _sum(tensors) -> tf.Tensor:
  return tf.add_n([tf.reduce_sum(t) for t in tensors])


def proximal(weights, broadcast, *, learning_rate, mu) -> tf.Tensor:
  """FedProx's proximal term (mu/2) ||w - w_t||^2 (gradient mu (w - w_t)).

  Args:
    weights: The trainable variables, in model order.
    broadcast: What the distributor sent; its model weights are w_t.
    learning_rate: Unused (every penalty takes it).
    mu: The proximal strength, >= 0.

  Returns:
    A scalar tensor.
  """
  del learning_rate
  anchor = client_work.model_weights_of(broadcast).trainable
  return 0.5 * mu * _sum([tf.square(w - a) for w, a in zip(weights, anchor)])


def first_order_positive(weights, broadcast, *, learning_rate,
                         alpha) -> tf.Tensor:
  """FedFOR's first-order penalty (Eq. 7 of Tian, Smith, Kira).

  (alpha/eta) sum_i relu(d_i (w_i - w_t,i)) with d = w_{t-1} - w_t; zero when
  the broadcast's `has_previous` is false (first round).

  Args:
    weights: The trainable variables, in model order.
    broadcast: A mapping with `model_weights` (w_t), `previous_model_weights`
      (w_{t-1}) and `has_previous` (a boolean scalar).
    learning_rate: The client learning rate eta.
    alpha: The penalty strength, >= 0.

  Returns:
    A scalar tensor.
  """
  current = client_work.model_weights_of(broadcast).trainable
  previous = broadcast[PREVIOUS_MODEL_KEY].trainable
  scale = tf.cast(broadcast[HAS_PREVIOUS_KEY], tf.float32) * (
      alpha / tf.cast(learning_rate, tf.float32))
  return scale * _sum([
      tf.nn.relu((p - c) * (w - c))
      for w, c, p in zip(weights, current, previous)
  ])


def elastic(weights, broadcast, *, learning_rate, lam) -> tf.Tensor:
  """FedCurv's penalty, Eq. 3 as rearranged in Sec. 3.1 (constant dropped).

  lam (w^T diag(u) w - 2 w^T v), gradient 2 lam (u w - v), where u and v are
  the broadcast's `fisher_sum` and `fisher_weight_sum`.

  Args:
    weights: The trainable variables, in model order.
    broadcast: A mapping with `fisher_sum` (u) and `fisher_weight_sum` (v),
      each a list shaped like the trainable weights.
    learning_rate: Unused.
    lam: The penalty strength lambda, >= 0.

  Returns:
    A scalar tensor.
  """
  del learning_rate
  u = broadcast[FISHER_SUM_KEY]
  v = broadcast[FISHER_WEIGHT_SUM_KEY]
  return lam * _sum([
      a * tf.square(w) - 2.0 * b * w for w, a, b in zip(weights, u, v)
  ])


def linear_correction(weights, broadcast, *, learning_rate) -> tf.Tensor:
  """SCAFFOLD's drift correction as a penalty: <w, c - c_i>.

  Its gradient c - c_i is constant within a round, so a local SGD step
  w <- w - eta (g + c - c_i) is Karimireddy et al.'s corrected step. c is
  the broadcast's `control_variate`; c_i is the client's own control variate
  (`client_state['control_variate']`), or c when the client has none yet
  (`client_state['initialized']` false).

  Args:
    weights: The trainable variables, in model order.
    broadcast: A mapping with `control_variate` and `client_state`.
    learning_rate: Unused.

  Returns:
    A scalar tensor.
  """
  del learning_rate
  c = broadcast[CONTROL_VARIATE_KEY]
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
    broadcast: A mapping with `model_weights` (w_t) and `client_state`.
    learning_rate: Unused.
    alpha: The regularization strength, > 0.

  Returns:
    A scalar tensor.
  """
  del learning_rate
  anchor = client_work.model_weights_of(broadcast).trainable
  g = broadcast[CLIENT_STATE_KEY][LOCAL_GRADIENT_KEY]
  return _sum([
      0.5 * alpha * tf.square(w - a) - gk * w
      for w, a, gk in zip(weights, anchor, g)
  ])


def effective_client_control_variate(broadcast):
  """c_i, or the server's c for a client seen for the first time."""
  state = broadcast[CLIENT_STATE_KEY]
  c = broadcast[CONTROL_VARIATE_KEY]
  return [
      tf.where(state['initialized'], own, server)
      for own, server in zip(state[CONTROL_VARIATE_KEY], c)
  ]
