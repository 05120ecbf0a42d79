"""Per-client constants of penalties and look-ahead (`PrecomputedHook`).

FedFOR's d = w_{t-1} - w_t, FedCurv's sqrt(u) and v / sqrt(u), and FedADC's
m_bar (and Nesterov offsets) are computed once per client; the values,
gradients and client-loop results must be those of the papers' formulas,
computed independently in NumPy.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny
from tff_opt.round import client_work
from tff_opt.round import momentum
from tff_opt.round import penalties

RNG = np.random.default_rng(7)
SHAPES = ((4, 3), (3,))


def _arrays(scale=1.0):
  return [np.float32(scale * RNG.standard_normal(s)) for s in SHAPES]


def _fed_for_broadcast(current, previous, has_previous=True):
  return {
      'model_weights': tff.learning.models.ModelWeights(current, []),
      penalties.PREVIOUS_MODEL_KEY: tff.learning.models.ModelWeights(
          previous, []),
      penalties.HAS_PREVIOUS_KEY: tf.constant(has_previous),
  }


def test_fed_for_constants_are_the_old_per_step_expressions():
  current, previous = _arrays(), _arrays()
  anchor, direction, scale = penalties.first_order_positive_constants(
      _fed_for_broadcast(current, previous), learning_rate=0.4, alpha=2.0)
  for got, c in zip(anchor, current):
    np.testing.assert_array_equal(got, c)
  for got, c, p in zip(direction, current, previous):
    np.testing.assert_array_equal(got, p - c)
  assert float(scale) == pytest.approx(5.0)
  _, _, scale = penalties.first_order_positive_constants(
      _fed_for_broadcast(current, previous, False), learning_rate=0.4,
      alpha=2.0)
  assert float(scale) == 0.0


def test_fed_for_hook_value_and_gradient_match_numpy():
  current, previous, start = _arrays(), _arrays(), _arrays()
  weights = [tf.Variable(a) for a in start]
  broadcast = _fed_for_broadcast(current, previous)
  hook = penalties.first_order_positive_hook(3.0)
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


def test_proximal_value_and_gradient_match_numpy():
  anchor, start = _arrays(), _arrays()
  weights = [tf.Variable(a) for a in start]
  broadcast = tff.learning.models.ModelWeights(anchor, [])
  with tf.GradientTape() as tape:
    value = penalties.proximal(weights, broadcast, learning_rate=0.1, mu=0.7)
  grads = tape.gradient(value, weights)
  want = sum(0.35 * np.square(w - a).sum() for w, a in zip(start, anchor))
  assert float(value) == pytest.approx(want, rel=1e-6)
  for g, w, a in zip(grads, start, anchor):
    np.testing.assert_allclose(g, 0.7 * (w - a), rtol=1e-6)


def _fed_curv_broadcast(u, v):
  return {penalties.FISHER_SUM_KEY: [tf.constant(a) for a in u],
          penalties.FISHER_WEIGHT_SUM_KEY: [tf.constant(b) for b in v]}


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
  hook = penalties.elastic_hook(0.3, adjust=lambda b: adjusted.append(1) or b)
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


def test_fed_adc_constants_match_numpy():
  m = _arrays()
  broadcast = {'model_weights': None, momentum.MOMENTUM_KEY: m}
  m_bar = momentum.embedded_momentum(broadcast, learning_rate=0.2,
                                     num_steps=tf.constant(4), beta_local=0.9)
  offsets = momentum.nesterov_look_ahead_hook(0.9)(
      None, broadcast, learning_rate=0.2, num_steps=tf.constant(4))
  for got, a in zip(m_bar, m):
    np.testing.assert_allclose(got, 0.9 * a / 4, rtol=1e-6)
  for got, a in zip(offsets, m):
    np.testing.assert_allclose(got, -0.2 * 0.9 * a / 4, rtol=1e-6)
  weights = [tf.Variable(a) for a in _arrays()]
  with tf.GradientTape() as tape:
    value = momentum.embedded_momentum_hook(0.9)(
        weights, broadcast, learning_rate=0.2, num_steps=tf.constant(4))
  for g, a in zip(tape.gradient(value, weights), m):
    np.testing.assert_allclose(g, 0.9 * a / 4, rtol=1e-6)


@pytest.mark.parametrize('dataset, want', [
    (tf.data.Dataset.range(7).batch(3), 3),  # Cardinality known.
    (tf.data.Dataset.range(7).repeat(2).batch(2), 7),
    (tf.data.Dataset.range(9).filter(lambda x: x % 2 == 0), 5),  # Unknown.
])
def test_count_batches_with_and_without_known_cardinality(dataset, want):
  assert int(client_work._count_batches(dataset)) == want  # pylint: disable=protected-access


CLIENT_LR = 0.1
BATCH = 2


def _client_data():
  (x, y), = tiny.make_clients(num_clients=1, seed=3, sizes=(8,))
  return x, y


def _client_delta(penalty, broadcast, *, look_ahead=None, count_steps=False):
  """One client's delta through the shared loop (eagerly built, tiny model)."""
  update = client_work._build_client_update(  # pylint: disable=protected-access
      tiny.model_fn, tff.learning.optimizers.build_sgdm(CLIENT_LR),
      client_work.LocalObjective(penalty=penalty, look_ahead=look_ahead,
                                 count_steps=count_steps),
      tff.learning.ClientWeighting.NUM_EXAMPLES)
  x, y = _client_data()
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
  result, _, _ = update({'learning_rate': tf.constant(CLIENT_LR)}, broadcast,
                        dataset)
  return [t.numpy() for t in result.update]


def _numpy_delta(start, extra_grad, shift=None):
  """The same client in NumPy: SGD over batches of 2, loss + penalty.

  `extra_grad(w)` is the penalty's gradient at w; `shift`, the look-ahead
  offsets, moves the point where both gradients are taken (the step is
  from the unshifted weights).
  """
  x, y = _client_data()
  w = [np.asarray(t, np.float64) for t in start]
  for i in range(0, len(y), BATCH):
    at = w if shift is None else [a + s for a, s in zip(w, shift)]
    g = tiny.softmax_ce_grad(at, x[i:i + BATCH].astype(np.float64),
                             y[i:i + BATCH])
    w = [a - CLIENT_LR * (b + c) for a, b, c in zip(w, g, extra_grad(at))]
  return [s - a for s, a in zip(start, w)]


def _model(arrays):
  return tff.learning.models.ModelWeights([tf.constant(a) for a in arrays],
                                          [])


def test_client_loop_with_fed_for_hook_matches_numpy_eq_7():
  start = tiny.initial_weights()
  previous = [a + np.float32(0.05 * RNG.standard_normal(a.shape))
              for a in start]
  broadcast = {'model_weights': _model(start),
               penalties.PREVIOUS_MODEL_KEY: _model(previous),
               penalties.HAS_PREVIOUS_KEY: tf.constant(True)}
  hooked = _client_delta(penalties.first_order_positive_hook(0.5), broadcast)
  # Eq. 7's gradient: (alpha/eta) d_i where d_i (w_i - w_t,i) > 0, else 0.
  d = [p - c for p, c in zip(previous, start)]
  plain = _numpy_delta(start, lambda w: [
      np.where(e * (a - c) > 0, (0.5 / CLIENT_LR) * e, 0.0)
      for a, c, e in zip(w, start, d)])
  unpenalized = _client_delta(None, broadcast)
  for a, b in zip(hooked, plain):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  assert np.abs(hooked[0] - unpenalized[0]).max() > 1e-4  # The penalty acts.


def test_client_loop_with_fed_adc_hooks_matches_numpy_nesterov():
  start = tiny.initial_weights()
  m = [np.float32(RNG.standard_normal(a.shape)) for a in start]
  broadcast = {'model_weights': _model(start),
               momentum.MOMENTUM_KEY: [tf.constant(a) for a in m]}
  hooked = _client_delta(momentum.embedded_momentum_hook(0.9), broadcast,
                         look_ahead=momentum.nesterov_look_ahead_hook(0.9),
                         count_steps=True)
  # Algorithm 3 (red), H = 4 batches: w <- w - eta (g(w - eta m_bar) + m_bar).
  m_bar = [0.9 * a / 4 for a in m]
  plain = _numpy_delta(start, lambda _: m_bar,
                       shift=[-CLIENT_LR * a for a in m_bar])
  for a, b in zip(hooked, plain):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
