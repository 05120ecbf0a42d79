"""The penalties, value and gradient, each where it lives with its algorithm
(`fed_prox`, `fed_for`, `fed_curv`, `scaffold`, `fed_dyn` in
`tff_opt/algorithms/`; FedDC's is tests/test_fed_dc_penalty.py's).

Each penalty (FedProx's proximal term, FedFOR's Eq. 7 and its per-client
constants, FedCurv's elastic term, SCAFFOLD's linear correction, FedDyn's
dynamic regularizer) is called directly on a hand-made broadcast; its value
and its autodiff gradient must be the paper's formula, computed
independently in NumPy. How the client loop runs them is
tests/test_client_work.py's; the algorithms end to end are in their own
files.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.algorithms import fed_curv
from tff_opt.algorithms import fed_dyn
from tff_opt.algorithms import fed_for
from tff_opt.algorithms import fed_prox
from tff_opt.algorithms import scaffold
from tff_opt.round import ground

RNG = np.random.default_rng(7)
SHAPES = ((4, 3), (3,))


def _arrays(scale=1.0):
  return [np.float32(scale * RNG.standard_normal(s)) for s in SHAPES]


# --- FedProx: (mu/2) ||w - w_t||^2 --------------------------------------------


def test_proximal_value_and_gradient_match_numpy():
  anchor, start = _arrays(), _arrays()
  weights = [tf.Variable(a) for a in start]
  broadcast = tff.learning.models.ModelWeights(anchor, [])
  with tf.GradientTape() as tape:
    value = fed_prox.proximal(weights, broadcast, learning_rate=0.1, mu=0.7)
  grads = tape.gradient(value, weights)
  want = sum(0.35 * np.square(w - a).sum() for w, a in zip(start, anchor))
  assert float(value) == pytest.approx(want, rel=1e-6)
  for g, w, a in zip(grads, start, anchor):
    np.testing.assert_allclose(g, 0.7 * (w - a), rtol=1e-6)


def test_proximal_penalty_gradient_is_mu_times_distance():
  anchor = [np.float32([[1.0, -2.0]]), np.float32([0.5])]
  weights = [tf.Variable([[2.0, 1.0]]), tf.Variable([0.0])]
  broadcast = tff.learning.models.ModelWeights(trainable=anchor,
                                               non_trainable=[])
  with tf.GradientTape() as tape:
    value = fed_prox.proximal(weights, broadcast, learning_rate=0.1, mu=0.3)
  grads = tape.gradient(value, weights)
  assert float(value) == pytest.approx(0.15 * (1 + 9 + 0.25))
  np.testing.assert_allclose(grads[0], [[0.3, 0.9]], rtol=1e-6)
  np.testing.assert_allclose(grads[1], [-0.15], rtol=1e-6)


# --- FedFOR: (alpha/eta) sum U(d (w - w_t)), d = w_{t-1} - w_t -------------------


def _fed_for_broadcast(current, previous, has_previous=True):
  return ground.TwoModels(
      model_weights=tff.learning.models.ModelWeights(current, []),
      previous_model_weights=tff.learning.models.ModelWeights(previous, []),
      has_previous=tf.constant(has_previous))


def test_fed_for_constants_are_the_old_per_step_expressions():
  current, previous = _arrays(), _arrays()
  anchor, direction, scale = fed_for.first_order_positive_constants(
      _fed_for_broadcast(current, previous), learning_rate=0.4, alpha=2.0)
  for got, c in zip(anchor, current):
    np.testing.assert_array_equal(got, c)
  for got, c, p in zip(direction, current, previous):
    np.testing.assert_array_equal(got, p - c)
  assert float(scale) == pytest.approx(5.0)
  _, _, scale = fed_for.first_order_positive_constants(
      _fed_for_broadcast(current, previous, False), learning_rate=0.4,
      alpha=2.0)
  assert float(scale) == 0.0


def test_fed_for_hook_value_and_gradient_match_numpy():
  current, previous, start = _arrays(), _arrays(), _arrays()
  weights = [tf.Variable(a) for a in start]
  broadcast = _fed_for_broadcast(current, previous)
  hook = fed_for.first_order_positive_hook(3.0)
  with tf.GradientTape() as tape:
    value = hook(weights, broadcast, learning_rate=0.5)
  grads = tape.gradient(value, weights)
  scale = 3.0 / 0.5
  want = sum(
      scale * np.maximum((p - c) * (w - c), 0.0).sum()
      for w, c, p in zip(start, current, previous))
  assert float(value) == pytest.approx(want, rel=1e-6)
  for g, w, c, p in zip(grads, start, current, previous):
    np.testing.assert_allclose(
        g, np.where((p - c) * (w - c) > 0, scale * (p - c), 0.0), rtol=1e-6)


def test_fed_for_penalty_value_and_gradient_closed_form():
  current = [np.float32([1.0, 1.0, 1.0, 1.0])]
  previous = [np.float32([2.0, 0.0, 2.0, 1.0])]  # d = [1, -1, 1, 0]
  weights = [tf.Variable([1.5, 1.5, 0.5, 3.0])]  # w - w_t = [.5, .5, -.5, 2]
  broadcast = ground.TwoModels(
      model_weights=tff.learning.models.ModelWeights(current, []),
      previous_model_weights=tff.learning.models.ModelWeights(previous, []),
      has_previous=tf.constant(True))
  with tf.GradientTape() as tape:
    value = fed_for.first_order_positive_hook(2.0)(weights, broadcast,
                                                     learning_rate=0.5)
  # Only coordinate 0 has d_i (w_i - w_t,i) > 0: 0.5 * 1 * (2 / 0.5) = 2.
  assert float(value) == pytest.approx(2.0)
  np.testing.assert_allclose(tape.gradient(value, weights)[0],
                             [4.0, 0.0, 0.0, 0.0])
  broadcast = broadcast._replace(has_previous=tf.constant(False))
  assert float(fed_for.first_order_positive_hook(2.0)(
      weights, broadcast, learning_rate=0.5)) == 0.0


@pytest.mark.parametrize('grad_at_zero', [0, 1])
def test_positive_part_is_max_with_the_chosen_derivative_at_zero(
    grad_at_zero):
  x = tf.Variable([-1.5, 0.0, 2.0])
  with tf.GradientTape() as tape:
    value = fed_for.positive_part(x, grad_at_zero)
  # U(x) = max(x, 0); U' is 0 below 0, 1 above, `grad_at_zero` at 0.
  np.testing.assert_array_equal(value, [0.0, 0.0, 2.0])
  np.testing.assert_array_equal(tape.gradient(value, x),
                                [0.0, float(grad_at_zero), 1.0])


# --- FedCurv: lam (w^T diag(u) w - 2 w^T v) + const ------------------------------


def _fed_curv_broadcast(u, v):
  return fed_curv.FisherSums(
      model_weights=None,  # Not read by the penalty.
      fisher_sum=[tf.constant(a) for a in u],
      fisher_weight_sum=[tf.constant(b) for b in v])


def test_fed_curv_hook_gradient_and_value_match_numpy():
  # u with an exact 0 (where v is 0 too) and a rounding residue below 0, as
  # u - F_own of the cross-silo variant can give.
  u = [np.abs(a) for a in _arrays()]
  v = [a * b for a, b in zip(u, _arrays())]
  u[0][0, 0], v[0][0, 0] = 0.0, 0.0
  u[0][1, 1], v[0][1, 1] = -1e-9, 1e-12
  start = _arrays()
  weights = [tf.Variable(a) for a in start]
  adjusted = []
  hook = fed_curv.elastic_hook(0.3, adjust=lambda b: adjusted.append(1) or b)
  with tf.GradientTape() as tape:
    value = hook(weights, _fed_curv_broadcast(u, v), learning_rate=0.1)
  grads = tape.gradient(value, weights)
  assert adjusted == [1]
  for g, w, a, b in zip(grads, start, u, v):  # Nothing where u <= 0.
    np.testing.assert_allclose(
        g, np.where(a > 0, 2 * 0.3 * (a * w - b), 0.0), rtol=1e-5, atol=1e-6)
  # lam (w^T diag(u) w - 2 w^T v) plus lam sum v^2 / u over u > 0.
  clamped = [np.maximum(a, 0) for a in u]
  expected = 0.3 * sum(
      np.sum(a * w * w - 2 * b * w) +
      np.sum(np.divide(b * b, a, out=np.zeros_like(a), where=a > 0))
      for w, a, b in zip(start, clamped, v))
  assert float(value) == pytest.approx(expected, rel=1e-5)


# --- SCAFFOLD: <w, c - c_i> -----------------------------------------------------


def _scaffold_broadcast(c, c_own, initialized):
  return ground.ClientInput(
      broadcast=scaffold.ControlVariate(
          model_weights=None,  # Not read by the penalty.
          control_variate=[tf.constant(a) for a in c]),
      client_state={
          ground.INITIALIZED_KEY: tf.constant(initialized),
          scaffold.CONTROL_VARIATE_KEY: [tf.constant(a) for a in c_own],
      })


def test_linear_correction_value_and_gradient_are_c_minus_c_i():
  c, c_own, start = _arrays(), _arrays(), _arrays()
  weights = [tf.Variable(a) for a in start]
  with tf.GradientTape() as tape:
    value = scaffold.linear_correction(
        weights, _scaffold_broadcast(c, c_own, True), learning_rate=0.1)
  grads = tape.gradient(value, weights)
  want = sum(np.sum(w * (a - b)) for w, a, b in zip(start, c, c_own))
  assert float(value) == pytest.approx(want, rel=1e-5)
  for g, a, b in zip(grads, c, c_own):
    np.testing.assert_allclose(g, a - b, rtol=1e-6)


def test_linear_correction_of_a_new_client_uses_the_server_c():
  # A client never seen has no c_i of its own: c_i = c, no correction.
  c, c_own, start = _arrays(), _arrays(), _arrays()
  weights = [tf.Variable(a) for a in start]
  broadcast = _scaffold_broadcast(c, c_own, False)
  with tf.GradientTape() as tape:
    value = scaffold.linear_correction(weights, broadcast,
                                        learning_rate=0.1)
  assert float(value) == 0.0
  for g in tape.gradient(value, weights):
    np.testing.assert_array_equal(g, np.zeros_like(g))
  for got, a in zip(scaffold.effective_client_control_variate(broadcast), c):
    np.testing.assert_array_equal(got, a)


# --- FedDyn: -<g_k, w> + (alpha/2) ||w - w_t||^2 ------------------------------


def test_dynamic_value_and_gradient_match_numpy():
  anchor, g_k, start = _arrays(), _arrays(), _arrays()
  weights = [tf.Variable(a) for a in start]
  broadcast = ground.ClientInput(  # FedDyn broadcasts the model alone.
      broadcast=tff.learning.models.ModelWeights(anchor, []),
      client_state={
          fed_dyn.LOCAL_GRADIENT_KEY: [tf.constant(a) for a in g_k]})
  with tf.GradientTape() as tape:
    value = fed_dyn.dynamic(weights, broadcast, learning_rate=0.1,
                              alpha=0.4)
  grads = tape.gradient(value, weights)
  want = sum(np.sum(0.2 * np.square(w - a) - g * w)
             for w, a, g in zip(start, anchor, g_k))
  assert float(value) == pytest.approx(want, rel=1e-5)
  for got, w, a, g in zip(grads, start, anchor, g_k):
    np.testing.assert_allclose(got, -g + 0.4 * (w - a), rtol=1e-5, atol=1e-6)
