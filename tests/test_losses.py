"""The FedNTD, FedRS and FedGKD objectives against NumPy and hand-made values.

Besides the values, the logit gradients are pinned to the closed forms the
algorithms' NumPy references (`test_fed_ntd.py`, `test_fed_rs.py`,
`test_fed_gkd.py`) use:

    CE:          (softmax(z) - onehot(y)) / N
    beta L_NTD:  beta * tau * (q~^tau(z) - q~^tau(z_g)) / N  off the true
                 class, 0 on it
    FedRS:       s * (softmax(s * z) - onehot(y)) / N
    FedGKD:      (gamma / 2) * tau * (q^tau(z) - q^tau(z_bar)) / N
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from tff_opt.algorithms import fed_gkd
from tff_opt.algorithms import fed_ntd
from tff_opt.algorithms import fed_rs
from tff_opt.round import losses


def _softmax(z):
  z = z - z.max(axis=-1, keepdims=True)
  e = np.exp(z)
  return e / e.sum(axis=-1, keepdims=True)


def _np_ce(z, y):
  return float(np.mean(-np.log(_softmax(z)[np.arange(len(y)), y])))


def _np_kl(p, q):
  return np.sum(p * (np.log(p) - np.log(q)), axis=-1)


def _np_not_true(z, y):
  return np.stack([np.delete(row, label) for row, label in zip(z, y)])


def _np_ntd(z, z_g, y, tau):
  """tau^2 mean KL over the not-true classes, in NumPy."""
  p = _softmax(_np_not_true(z_g, y) / tau)
  q = _softmax(_np_not_true(z, y) / tau)
  return tau**2 * float(np.mean(_np_kl(p, q)))


def _example(seed=0, n=5, c=4):
  rng = np.random.default_rng(seed)
  z = rng.normal(size=(n, c)) * 2
  z_g = rng.normal(size=(n, c)) * 2
  y = rng.integers(0, c, size=n)
  return z.astype(np.float32), z_g.astype(np.float32), y.astype(np.int32)


def _logit_gradient(fn, z):
  z = tf.constant(z)
  with tf.GradientTape() as tape:
    tape.watch(z)
    value = fn(z)
  return tape.gradient(value, z).numpy()


# --- Pieces ------------------------------------------------------------------


def test_not_true_logits_drop_the_true_class_in_order():
  z = np.array([[1., 2., 3.], [4., 5., 6.], [7., 8., 9.]], np.float32)
  got = fed_ntd.not_true_logits(z, np.array([1, 0, 2])).numpy()
  np.testing.assert_array_equal(got, [[1., 3.], [5., 6.], [7., 8.]])


def test_cross_entropy_by_hand():
  # softmax([0, ln 3]) = [1/4, 3/4]: CE of label 1 is ln(4/3), of 0 ln 4.
  z = np.array([[0., math.log(3.)], [0., math.log(3.)]], np.float32)
  got = float(losses.cross_entropy(z, np.array([1, 0])))
  assert got == pytest.approx((math.log(4 / 3) + math.log(4)) / 2, rel=1e-6)


def test_not_true_distillation_by_hand():
  # Row: true class 0 (its logits ignored). Not-true teacher logits equal ->
  # q~_g = [1/2, 1/2]; student's [0, ln 3] -> q~ = [1/4, 3/4] (tau = 1).
  # KL = 1/2 ln 2 + 1/2 ln(2/3) = 1/2 ln(4/3).
  z = np.array([[9., 0., math.log(3.)]], np.float32)
  z_g = np.array([[-5., 1.5, 1.5]], np.float32)
  got = float(fed_ntd.not_true_distillation(z, z_g, np.array([0]), 1.0))
  assert got == pytest.approx(0.5 * math.log(4 / 3), rel=1e-6)
  # tau = 2 doubles the student's logits' spread to get the same q~: the
  # value is tau^2 times the KL.
  z2 = np.array([[9., 0., 2 * math.log(3.)]], np.float32)
  got2 = float(fed_ntd.not_true_distillation(z2, z_g, np.array([0]), 2.0))
  assert got2 == pytest.approx(4 * 0.5 * math.log(4 / 3), rel=1e-6)


def test_not_true_distillation_matches_numpy_and_ignores_the_true_class():
  z, z_g, y = _example()
  for tau in (1.0, 2.5):
    got = float(fed_ntd.not_true_distillation(z, z_g, y, tau))
    assert got == pytest.approx(_np_ntd(z, z_g, y, tau), rel=1e-5)
  # Any true-class logit, student's or teacher's: the same value.
  moved = z.copy(), z_g.copy()
  for a in moved:
    a[np.arange(len(y)), y] += 7.0
  assert float(fed_ntd.not_true_distillation(*moved, y, 2.5)) == pytest.approx(
      float(fed_ntd.not_true_distillation(z, z_g, y, 2.5)), rel=1e-5)


def test_restricted_logits_and_present_classes():
  present = fed_rs.present_classes(np.array([0.5, 0.0, 0.5]))
  np.testing.assert_array_equal(present.numpy(), [True, False, True])
  z = np.array([[1., 2., 3.], [-4., 6., 0.5]], np.float32)
  got = fed_rs.restricted_logits(z, present, 0.25).numpy()
  np.testing.assert_array_equal(got, [[1., 0.5, 3.], [-4., 1.5, 0.5]])


def test_gkd_teacher_weights_are_the_mean():
  current = [np.array([1., 2.], np.float32), np.array(3., np.float32)]
  history_sum = [np.array([3., 6.], np.float32), np.array(-1., np.float32)]
  got = fed_gkd.gkd_teacher_weights(
      [tf.constant(c) for c in current], history_sum, 2.0)
  np.testing.assert_allclose(got[0].numpy(), [4 / 3, 8 / 3], rtol=1e-6)
  np.testing.assert_allclose(got[1].numpy(), 2 / 3, rtol=1e-6)


# --- The objectives ----------------------------------------------------------


def test_fed_ntd_loss_matches_numpy():
  z, z_g, y = _example(seed=1)
  got = float(fed_ntd.fed_ntd_loss(z, z_g, y, beta=0.3, temperature=2.0))
  want = _np_ce(z, y) + 0.3 * _np_ntd(z, z_g, y, 2.0)
  assert got == pytest.approx(want, rel=1e-5)
  # A given cross-entropy (the model's own loss) replaces CE(z, y).
  got = float(fed_ntd.fed_ntd_loss(z, z_g, y, beta=0.3, temperature=2.0,
                                  ce=tf.constant(10.0)))
  assert got == pytest.approx(10.0 + 0.3 * _np_ntd(z, z_g, y, 2.0), rel=1e-5)
  # beta = 0: the cross-entropy alone.
  assert float(fed_ntd.fed_ntd_loss(z, z_g, y, beta=0.0, temperature=2.0)) == (
      pytest.approx(_np_ce(z, y), rel=1e-6))


def test_fed_ntd_logit_gradient_is_the_closed_form():
  z, z_g, y = _example(seed=2)
  beta, tau, n = 0.3, 2.0, len(y)
  got = _logit_gradient(
      lambda v: fed_ntd.fed_ntd_loss(v, z_g, y, beta=beta, temperature=tau), z)
  onehot = np.eye(z.shape[1])[y]
  want = (_softmax(z) - onehot) / n
  q = _softmax(_np_not_true(z, y) / tau)
  q_g = _softmax(_np_not_true(z_g, y) / tau)
  for i, label in enumerate(y):
    off = [c for c in range(z.shape[1]) if c != label]
    want[i, off] += beta * tau * (q[i] - q_g[i]) / n
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_fed_rs_loss_by_hand():
  # Class 1 missing, alpha = 0.5: logits [1, 2, 3] -> [1, 1, 3].
  z = np.array([[1., 2., 3.]], np.float32)
  present = np.array([True, False, True])
  got = float(fed_rs.fed_rs_loss(z, np.array([0]), present, alpha=0.5))
  want = -math.log(math.e / (2 * math.e + math.e**3))
  assert got == pytest.approx(want, rel=1e-6)


def test_fed_rs_loss_is_cross_entropy_with_every_class_or_alpha_one():
  z, _, y = _example(seed=3)
  every = np.ones(z.shape[1], bool)
  assert float(fed_rs.fed_rs_loss(z, y, every, alpha=0.3)) == pytest.approx(
      _np_ce(z, y), rel=1e-6)
  some = np.array([True, False, True, False])
  assert float(fed_rs.fed_rs_loss(z, y, some, alpha=1.0)) == pytest.approx(
      _np_ce(z, y), rel=1e-6)
  # alpha = 0: the missing classes' logits are 0.
  assert float(fed_rs.fed_rs_loss(z, y, some, alpha=0.0)) == pytest.approx(
      _np_ce(z * some, y), rel=1e-6)


def test_fed_rs_logit_gradient_is_the_closed_form():
  z, _, y = _example(seed=4)
  present = np.array([True, False, True, False])
  s = np.where(present, 1.0, 0.5)
  got = _logit_gradient(
      lambda v: fed_rs.fed_rs_loss(v, y, present, alpha=0.5), z)
  want = s * (_softmax(s * z) - np.eye(z.shape[1])[y]) / len(y)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_fed_gkd_loss_by_hand_and_against_numpy():
  # Teacher [0, 0] -> [1/2, 1/2]; student [0, ln 3] -> [1/4, 3/4] at tau = 1:
  # KL = 1/2 ln(4/3); the term is (gamma / 2) * KL.
  z = np.array([[0., math.log(3.)]], np.float32)
  z_bar = np.zeros((1, 2), np.float32)
  got = float(fed_gkd.fed_gkd_loss(z, z_bar, np.array([1]), gamma=0.2,
                                  temperature=1.0))
  assert got == pytest.approx(math.log(4 / 3) + 0.1 * 0.5 * math.log(4 / 3),
                              rel=1e-6)
  z, z_bar, y = _example(seed=5)
  tau = 0.5
  kl = float(np.mean(_np_kl(_softmax(z_bar / tau), _softmax(z / tau))))
  got = float(fed_gkd.fed_gkd_loss(z, z_bar, y, gamma=0.2, temperature=tau))
  assert got == pytest.approx(_np_ce(z, y) + 0.1 * tau**2 * kl, rel=1e-5)


def test_fed_gkd_logit_gradient_is_the_closed_form():
  z, z_bar, y = _example(seed=6)
  gamma, tau, n = 0.4, 0.5, len(y)
  got = _logit_gradient(
      lambda v: fed_gkd.fed_gkd_loss(v, z_bar, y, gamma=gamma,
                                    temperature=tau), z)
  want = ((_softmax(z) - np.eye(z.shape[1])[y]) / n + gamma / 2 * tau *
          (_softmax(z / tau) - _softmax(z_bar / tau)) / n)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_sequence_outputs_count_every_position():
  """[B, T, C] logits and [B, T] labels: the same as the flattened batch."""
  z, z_g, y = _example(seed=7, n=6)
  z3, zg3, y2 = z.reshape(2, 3, 4), z_g.reshape(2, 3, 4), y.reshape(2, 3)
  for fn in (
      lambda a, b, c: fed_ntd.fed_ntd_loss(a, b, c, beta=0.3, temperature=2.),
      lambda a, b, c: fed_gkd.fed_gkd_loss(a, b, c, gamma=0.2, temperature=.5),
      lambda a, b, c: fed_rs.fed_rs_loss(a, c, [True, False, True, True],
                                         alpha=0.5)):
    assert float(fn(z3, zg3, y2)) == pytest.approx(float(fn(z, z_g, y)),
                                                   rel=1e-6)
