"""Trajectory matching (tff_opt/algorithms/fed_ptr_mtt.py): descent and exact
unrolled gradients."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny
from tff_opt.algorithms import fed_ptr_mtt

INNER_STEPS = 3


def _linear_forward(weights, x):
  kernel, bias = weights
  return tf.matmul(x, kernel) + bias


def _trajectory(seed=0):
  """(w_{t-1}, w_t): 5 real SGD steps of the tiny model on one client."""
  start = tiny.initial_weights()
  x, y = tiny.make_clients(seed=seed)[1]
  target = tiny.local_sgd(start, x, y, lr=0.5, steps=5)
  return start, target


def _run_distill(outer_steps):
  start, target = _trajectory()
  rng = np.random.default_rng(0)
  x0 = rng.normal(size=(2 * tiny.NUM_CLASSES, tiny.NUM_FEATURES))
  with tf.Graph().as_default():
    forward = fed_ptr_mtt.forward_from_model_fn(tiny.model_fn)
    y = fed_ptr_mtt.synthetic_labels(tiny.NUM_CLASSES, 2)
    result = fed_ptr_mtt.distill(
        forward, [tf.constant(w, tf.float32) for w in start],
        [tf.constant(w, tf.float32) for w in target],
        tf.constant(x0, tf.float32), y, 0.1, outer_steps=outer_steps,
        inner_steps=INNER_STEPS, image_lr=1.0, lr_lr=0.01)
    final_loss = fed_ptr_mtt.matching_loss(
        forward, [tf.constant(w, tf.float32) for w in start],
        [tf.constant(w, tf.float32) for w in target], result[0], y, result[1],
        INNER_STEPS)
    with tf.compat.v1.Session() as session:
      return session.run((result, final_loss))


def test_distill_drives_matching_loss_below_half():
  (x, lr, first, last), final = _run_distill(outer_steps=60)
  assert x.shape == (2 * tiny.NUM_CLASSES, tiny.NUM_FEATURES)
  assert first > 0.2  # Random images do not match the trajectory.
  assert final < 0.5 * first, (first, last, final)
  assert lr != 0.1  # The step size was learned too.


def test_unrolled_gradient_matches_finite_differences():
  start, target = _trajectory(seed=3)
  rng = np.random.default_rng(5)
  x = rng.normal(size=(2 * tiny.NUM_CLASSES, tiny.NUM_FEATURES))
  y = fed_ptr_mtt.synthetic_labels(tiny.NUM_CLASSES, 2)
  start = [tf.constant(w, tf.float64) for w in start]
  target = [tf.constant(w, tf.float64) for w in target]
  lr = 0.3

  def loss_at(x_value, lr_value):
    return float(fed_ptr_mtt.matching_loss(_linear_forward, start, target,
                                   tf.constant(x_value), y,
                                   tf.constant(lr_value, tf.float64),
                                   INNER_STEPS))

  loss, grad_x, grad_lr = fed_ptr_mtt.matching_gradients(
      _linear_forward, start, target, tf.constant(x), y, lr, INNER_STEPS)
  assert float(loss) == loss_at(x, lr)
  eps = 1e-6
  numeric_x = np.zeros_like(x)
  for index in np.ndindex(*x.shape):
    plus, minus = x.copy(), x.copy()
    plus[index] += eps
    minus[index] -= eps
    numeric_x[index] = (loss_at(plus, lr) - loss_at(minus, lr)) / (2 * eps)
  numeric_lr = (loss_at(x, lr + eps) - loss_at(x, lr - eps)) / (2 * eps)
  np.testing.assert_allclose(grad_x.numpy(), numeric_x, rtol=1e-5, atol=1e-8)
  np.testing.assert_allclose(float(grad_lr), numeric_lr, rtol=1e-5)
  assert np.abs(numeric_x).max() > 1e-3  # Not a vacuous comparison.


def test_mtt_convnet_parameters_and_differentiable_forward():
  from tasks import models  # pylint: disable=g-import-not-at-top
  with tf.Graph().as_default():
    keras_model = models.create_mtt_convnet((8, 8, 1), 10, width=4, depth=2)
    # conv 3*3*1*4+4, norm 2*4, conv 3*3*4*4+4, norm 2*4, dense 2*2*4*10+10.
    assert keras_model.count_params() == 40 + 8 + 148 + 8 + 170
    model_fn = lambda: tff.learning.models.from_keras_model(  # noqa: E731
        models.create_mtt_convnet((8, 8, 1), 10, width=4, depth=2),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=(tf.TensorSpec([None, 8, 8, 1]),
                    tf.TensorSpec([None], tf.int32)))
    weights = [tf.constant(v) for v in keras_model.get_weights()]
    x = tf.random.stateless_normal([3, 8, 8, 1], seed=[1, 2])
    forward = fed_ptr_mtt.forward_from_model_fn(model_fn)
    with tf.GradientTape() as tape:
      tape.watch(weights)
      logits = forward(weights, x)
    grads = tape.gradient(logits, weights)
    expected = keras_model(x)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      got, want, grad_values = session.run((logits, expected, grads))
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  assert all(np.abs(g).max() > 0 for g in grad_values)


def _distill_float64(outer_steps, momentum, x0, lr0, image_lr, lr_lr):
  start, target = _trajectory(seed=2)
  y = fed_ptr_mtt.synthetic_labels(tiny.NUM_CLASSES, 2)
  return fed_ptr_mtt.distill(
      _linear_forward, [tf.constant(w, tf.float64) for w in start],
      [tf.constant(w, tf.float64) for w in target], tf.constant(x0), y,
      tf.constant(lr0, tf.float64), outer_steps=outer_steps,
      inner_steps=INNER_STEPS, image_lr=image_lr, lr_lr=lr_lr,
      momentum=momentum), start, target, y


def test_outer_steps_follow_numpy_momentum_update():
  """Two outer steps against v <- m v + g, value <- value - rate * v."""
  momentum, image_lr, lr_lr, lr0 = 0.5, 2.0, 0.05, 0.3
  x0 = np.random.default_rng(8).normal(
      size=(2 * tiny.NUM_CLASSES, tiny.NUM_FEATURES))
  (x, lr, first, last), start, target, y = _distill_float64(
      2, momentum, x0, lr0, image_lr, lr_lr)

  def gradients(x_value, lr_value):
    # The unrolled gradients (checked against finite differences above).
    loss, g_x, g_lr = fed_ptr_mtt.matching_gradients(
        _linear_forward, [tf.constant(w, tf.float64) for w in start],
        [tf.constant(w, tf.float64) for w in target], tf.constant(x_value),
        y, tf.constant(lr_value, tf.float64), INNER_STEPS)
    return float(loss), g_x.numpy(), float(g_lr)

  # NumPy: PyTorch's SGD with momentum (MTT's outer optimizer), velocities
  # starting at zero.
  loss_1, g_x1, g_lr1 = gradients(x0, lr0)
  v_x, v_lr = g_x1, g_lr1
  x1, lr1 = x0 - image_lr * v_x, lr0 - lr_lr * v_lr
  loss_2, g_x2, g_lr2 = gradients(x1, lr1)
  v_x, v_lr = momentum * v_x + g_x2, momentum * v_lr + g_lr2
  x2, lr2 = x1 - image_lr * v_x, lr1 - lr_lr * v_lr
  np.testing.assert_allclose(x.numpy(), x2, rtol=1e-8, atol=1e-9)
  assert float(lr) == pytest.approx(lr2, rel=1e-8)
  assert (float(first), float(last)) == pytest.approx((loss_1, loss_2),
                                                      rel=1e-8)
  # Momentum mattered: plain gradient descent ends elsewhere.
  (x_gd, _, _, _), *_ = _distill_float64(2, 0.0, x0, lr0, image_lr, lr_lr)
  np.testing.assert_allclose(x_gd.numpy(), x1 - image_lr * g_x2, rtol=1e-8,
                             atol=1e-9)
  assert np.abs(x_gd.numpy() - x2).max() > 1e-3


@pytest.mark.parametrize('momentum', [-0.1, 1.0, 1.5, True, '0.5'])
def test_distill_rejects_bad_momentum(momentum):
  with pytest.raises(ValueError, match=r'^momentum must be in '
                     r'\[0, 1\), got '):
    _distill_float64(1, momentum, np.zeros((6, 4)), 0.1, 1.0, 0.1)
