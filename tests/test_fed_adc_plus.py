"""FedADC+: the self-confidence target (Eq. 8-9) and the distilled process."""

import numpy as np
import pytest
import tensorflow as tf

from tests import tiny
from tff_opt import algorithms
from tff_opt.round import losses

LAM = 0.35
TAU = 2.0
BETA = 0.5
LR = 0.3
STEPS = (2, 3, 2)


def test_target_on_a_hand_made_example():
  teacher = np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3]], np.float32)
  labels = np.array([0, 2])
  rho = np.array([1.0, 0.5, 0.0], np.float32)
  got = losses.self_confidence_target(teacher, labels, rho).numpy()
  # Row 0 (y = 0): class 1 -> 0.5 * 0.3, class 2 -> 1.0 * 0.2.
  # Row 1 (y = 2): class 0 -> 0 * 0.1, class 1 -> 0.5 * 0.6.
  want = np.array([[1 - 0.15 - 0.2, 0.15, 0.2], [0.0, 0.3, 0.7]])
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(got.sum(axis=1), [1.0, 1.0], rtol=1e-6)


def test_target_is_teacher_when_rho_is_zero_and_label_when_rho_is_one():
  rng = np.random.default_rng(0)
  teacher = rng.dirichlet(np.ones(4), size=5).astype(np.float32)
  labels = np.array([0, 3, 1, 1, 2])
  np.testing.assert_allclose(
      losses.self_confidence_target(teacher, labels, np.zeros(4)).numpy(),
      teacher, rtol=1e-6, atol=1e-7)
  np.testing.assert_array_equal(
      losses.self_confidence_target(teacher, labels, np.ones(4)).numpy(),
      np.eye(4, dtype=np.float32)[labels])


def test_label_proportions_and_confidences():
  labels = np.array([2, 2, 0, 2, 0, 2], np.int32)
  dataset = tf.data.Dataset.from_tensor_slices(
      (np.zeros((6, 1), np.float32), labels)).batch(4)
  gamma = losses.label_proportions(dataset, num_classes=4).numpy()
  np.testing.assert_allclose(gamma, [2 / 6, 0.0, 4 / 6, 0.0], rtol=1e-6)
  np.testing.assert_allclose(losses.confidences(gamma).numpy(),
                             [0.5, 0.0, 1.0, 0.0], rtol=1e-6)


def _softmax(z):
  z = z - z.max(axis=1, keepdims=True)
  e = np.exp(z)
  return e / e.sum(axis=1, keepdims=True)


def _numpy_fed_adc_plus(clients, lam=LAM, rounds=3):
  """FedADC+ (heavy ball) in NumPy: the loss's logit gradient in closed form."""
  w = [t.astype(np.float64) for t in tiny.initial_weights()]
  m = [np.zeros_like(t) for t in w]
  for _ in range(rounds):
    deltas = []
    for (x, y), h in zip(clients, STEPS):
      x = x.astype(np.float64)
      gamma = np.bincount(y, minlength=tiny.NUM_CLASSES) / len(y)
      rho = gamma / gamma.max()
      p_teacher = _softmax((x @ w[0] + w[1]) / TAU)
      onehot = np.eye(tiny.NUM_CLASSES)[y]
      off = (1 - onehot) * (1 - rho) * p_teacher
      target = off + onehot * (1 - off.sum(axis=1, keepdims=True))
      m_bar = [BETA * a / h for a in m]
      wk = [a.copy() for a in w]
      for _ in range(h):
        z = x @ wk[0] + wk[1]
        dz = ((1 - lam) * (_softmax(z) - onehot) +
              lam * TAU * (_softmax(z / TAU) - target)) / len(y)
        g = [x.T @ dz, dz.sum(axis=0)]
        wk = [a - LR * (b + c) for a, b, c in zip(wk, g, m_bar)]
      deltas.append([a - b for a, b in zip(w, wk)])
    mean = tiny.weighted_mean(deltas, [1.0] * len(clients))
    m = [d / LR for d in mean]
    w = [a - LR * b for a, b in zip(w, m)]
  return w


def test_fed_adc_plus_matches_numpy():
  rng = np.random.default_rng(4)
  # Client 0 never sees class 2 (rho = 0 there), client 2 is one class.
  label_sets = [np.array([0, 1, 1, 0, 1]), np.array([0, 1, 2, 2, 2, 1, 0]),
                np.array([1, 1, 1])]
  clients = [(rng.normal(size=(len(y), tiny.NUM_FEATURES)).astype(np.float32),
              y.astype(np.int32)) for y in label_sets]
  process = algorithms.build_fed_adc(
      tiny.model_fn, client_learning_rate=LR, beta=BETA, distillation=True,
      distill_lambda=LAM, distill_temperature=TAU)
  state = tiny.set_weights(process, process.initialize(),
                           tiny.initial_weights())
  for _ in range(3):
    datasets = [tf.data.Dataset.from_tensors(c).repeat(h)
                for c, h in zip(clients, STEPS)]
    state = process.next(state, datasets).state
  want = _numpy_fed_adc_plus(clients)
  for got, w in zip(tiny.trainable(process, state), want):
    np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
  # The distillation term acts: lambda = 0 (plain FedADC) differs.
  plain = _numpy_fed_adc_plus(clients, lam=0.0)
  assert not np.allclose(plain[0], want[0], atol=1e-4)
