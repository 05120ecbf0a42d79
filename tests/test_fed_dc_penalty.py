"""FedDC's penalty (`fed_dc.local_drift_hook`): value and gradient."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.algorithms import fed_dc
from tff_opt.algorithms import fed_prox
from tff_opt.round import ground

ALPHA = 0.3
ETA = 0.5
K = 4

# theta, w, h_i, g_i, g: a (2, 3) kernel and a (3,) bias, made by hand.
THETA = [np.array([[0.5, -1.0, 2.0], [0.0, 1.5, -0.5]], np.float32),
         np.array([0.25, -0.75, 1.0], np.float32)]
W = [np.array([[1.0, 0.5, -1.0], [2.0, -2.0, 0.5]], np.float32),
     np.array([-0.5, 0.0, 0.5], np.float32)]
H = [np.array([[0.1, -0.2, 0.3], [-0.4, 0.5, -0.6]], np.float32),
     np.array([0.7, -0.8, 0.9], np.float32)]
G_OWN = [np.array([[1.0, 2.0, -3.0], [0.5, -0.5, 4.0]], np.float32),
         np.array([-1.0, 0.0, 2.0], np.float32)]
G_SERVER = [np.array([[0.5, -1.0, 1.0], [1.5, 2.5, -2.0]], np.float32),
            np.array([3.0, -2.0, 0.5], np.float32)]


def _broadcast():
  return ground.ClientInput(
      broadcast=fed_dc.GlobalUpdate(
          model_weights=tff.learning.models.ModelWeights(
              trainable=[tf.constant(t) for t in W], non_trainable=[]),
          global_update=[tf.constant(t) for t in G_SERVER]),
      client_state=collections.OrderedDict([
          (fed_dc.DRIFT_KEY, [tf.constant(t) for t in H]),
          (fed_dc.LOCAL_UPDATE_KEY, [tf.constant(t) for t in G_OWN]),
      ]))


def _numpy(num_steps):
  """The paper's R + G and its gradient, in NumPy (float64)."""
  scale = 0.0 if num_steps == 0 else 1.0 / (ETA * num_steps)
  value = sum(0.5 * ALPHA * np.sum((t + h - w) ** 2) +
              scale * np.sum(t * (a - b))
              for t, w, h, a, b in zip(THETA, W, H, G_OWN, G_SERVER))
  grad = [ALPHA * (t + h - w) + scale * (a - b)
          for t, w, h, a, b in zip(THETA, W, H, G_OWN, G_SERVER)]
  return value, grad


@pytest.mark.parametrize('num_steps', [K, 1, 0])
def test_value_and_gradient_match_numpy(num_steps):
  hook = fed_dc.local_drift_hook(ALPHA)
  assert isinstance(hook, ground.PrecomputedHook)
  weights = [tf.Variable(t) for t in THETA]
  with tf.GradientTape() as tape:
    value = hook(weights, _broadcast(), learning_rate=tf.constant(ETA),
                 num_steps=tf.constant(num_steps, tf.int32))
  grads = tape.gradient(value, weights)
  want_value, want_grad = _numpy(num_steps)
  np.testing.assert_allclose(value.numpy(), want_value, rtol=1e-6)
  for got, want in zip(grads, want_grad):
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)
  # Both terms count: the correction (when K > 0) and the drift penalty.
  if num_steps:
    assert abs(want_value - _numpy(0)[0]) > 1.0
  assert _numpy(0)[0] > 1.0


def test_constants_once_per_client():
  target, correction, alpha = fed_dc.local_drift_constants(
      _broadcast(), learning_rate=ETA, num_steps=K, alpha=ALPHA)
  assert alpha == ALPHA
  for got, w, h in zip(target, W, H):
    np.testing.assert_allclose(got.numpy(), w - h, rtol=1e-6)
  for got, a, b in zip(correction, G_OWN, G_SERVER):
    np.testing.assert_allclose(got.numpy(), (a - b) / (ETA * K), rtol=1e-6)


def test_zero_drift_and_equal_updates_is_the_proximal_term():
  broadcast = _broadcast()
  state = broadcast.client_state
  state[fed_dc.DRIFT_KEY] = [tf.zeros_like(t) for t in H]
  state[fed_dc.LOCAL_UPDATE_KEY] = broadcast.broadcast.global_update
  weights = [tf.constant(t) for t in THETA]
  got = fed_dc.local_drift_hook(ALPHA)(
      weights, broadcast, learning_rate=ETA, num_steps=K)
  want = fed_prox.proximal(weights, broadcast, learning_rate=ETA, mu=ALPHA)
  np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
