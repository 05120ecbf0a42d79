"""FedCurv's one-pass Fisher diagonal (`tff_opt/algorithms/fed_curv_fisher.py`)
is exact.

The fast path must give the numbers of one gradient pass per example
(`fed_curv._per_example_fisher`, the fallback) on the models it supports,
and every other model must take the fallback.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tasks import emnist
from tff_opt import layers
from tff_opt.algorithms import fed_curv
from tff_opt.algorithms import fed_curv_fisher

CE = tf.keras.losses.SparseCategoricalCrossentropy


def _wrap(keras_model, input_shape, loss=None):
  return tff.learning.models.from_keras_model(
      keras_model, loss=loss or CE(from_logits=True),
      input_spec=(tf.TensorSpec([None, *input_shape], tf.float32),
                  tf.TensorSpec([None], tf.int32)),
      metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])


def _dataset(input_shape, num_classes, n, seed, batch=4):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, *input_shape)).astype(np.float32)
  y = rng.integers(0, num_classes, size=n).astype(np.int32)
  return x, y, tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def _assert_close(got, want, rtol=1e-5):
  assert len(got) == len(want)
  for g, w in zip(got, want):
    g, w = np.asarray(g), np.asarray(w)
    assert g.shape == w.shape
    assert np.abs(w).max() > 0
    np.testing.assert_allclose(g, w, rtol=rtol,
                               atol=rtol * float(np.abs(w).max()))


def _fast_equals_loop(model, dataset, batch_size=3):
  assert fed_curv_fisher.is_supported(model)
  fast = fed_curv.empirical_fisher_diagonal(model, dataset,
                                            batch_size=batch_size)
  _assert_close(fast, fed_curv._per_example_fisher(model, dataset))  # pylint: disable=protected-access
  return fast


def test_emnist_cr_cnn_matches_per_example_loop():
  tf.keras.utils.set_random_seed(3)
  model = _wrap(emnist.create_cr_model(), (28, 28, 1), loss=CE())
  # 7 examples in batches of 4, re-batched by 3 (3 + 3 + 1).
  _, _, dataset = _dataset((28, 28, 1), 62, 7, seed=4)
  _fast_equals_loop(model, dataset)


def _conv_model(use_bias):
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(7, 8, 2)),
      tf.keras.layers.Conv2D(3, 3, strides=2, padding='same',
                             activation='tanh', use_bias=use_bias),
      tf.keras.layers.Conv2D(4, (2, 3), padding='valid', use_bias=use_bias),
      tf.keras.layers.ReLU(),
      tf.keras.layers.Conv2D(2, 3, dilation_rate=2, padding='same',
                             activation='sigmoid', use_bias=use_bias),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(5, use_bias=use_bias),
  ])


@pytest.mark.parametrize('use_bias', [True, False])
def test_strided_same_dilated_conv_matches_per_example_loop(use_bias):
  tf.keras.utils.set_random_seed(5)
  model = _wrap(_conv_model(use_bias), (7, 8, 2))
  _, _, dataset = _dataset((7, 8, 2), 5, 7, seed=6)
  fast = _fast_equals_loop(model, dataset)
  assert len(fast) == (8 if use_bias else 4)


def test_functional_chain_with_dense_on_sequences_matches_loop():
  inputs = tf.keras.Input((3, 4))
  h = tf.keras.layers.Dense(6, activation='relu')(inputs)  # Rank-3 input.
  h = tf.keras.layers.Flatten()(h)
  outputs = tf.keras.layers.Dense(3, activation='softmax')(h)
  tf.keras.utils.set_random_seed(7)
  model = _wrap(tf.keras.Model(inputs, outputs), (3, 4),
                loss=CE(reduction=tf.keras.losses.Reduction.SUM))
  _, _, dataset = _dataset((3, 4), 3, 6, seed=8)
  _fast_equals_loop(model, dataset)


def _numpy_per_example_fisher(w1, b1, w2, b2, x, y):
  """Mean of squared per-example gradients of CE(softmax(tanh(x w1 + b1) w2
  + b2)), by hand in float64."""
  sums = [np.zeros_like(t, np.float64) for t in (w1, b1, w2, b2)]
  for xi, yi in zip(x.reshape(len(x), -1).astype(np.float64), y):
    hidden = np.tanh(xi @ w1 + b1)
    logits = hidden @ w2 + b2
    p = np.exp(logits - logits.max())
    p /= p.sum()
    d_logits = p - np.eye(len(p))[yi]
    d_hidden = (w2 @ d_logits) * (1 - hidden**2)
    grads = (np.outer(xi, d_hidden), d_hidden, np.outer(hidden, d_logits),
             d_logits)
    sums = [s + g**2 for s, g in zip(sums, grads)]
  return [s / len(y) for s in sums]


@pytest.mark.parametrize('dropout', [tf.keras.layers.Dropout,
                                     layers.StatelessDropout])
def test_dense_model_matches_numpy_per_example_gradients(dropout):
  tf.keras.utils.set_random_seed(9)
  model = _wrap(tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(2, 3)),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(5, activation='tanh'),
      dropout(0.5),
      tf.keras.layers.Dense(4),
  ]), (2, 3))
  x, y, dataset = _dataset((2, 3), 4, 9, seed=10)
  assert fed_curv_fisher.is_supported(model)
  got = fed_curv.empirical_fisher_diagonal(model, dataset.repeat(2),
                                           batch_size=4)
  weights = [v.numpy().astype(np.float64) for v in model.trainable_variables]
  _assert_close(got, _numpy_per_example_fisher(*weights, x, y))
  # The fast path leaves the metric variables alone.
  assert all(not np.any(v.numpy()) for v in model.local_variables)


def test_chunked_in_tf_function_matches_loop(monkeypatch):
  tf.keras.utils.set_random_seed(11)
  model = _wrap(_conv_model(True), (7, 8, 2))
  _, _, dataset = _dataset((7, 8, 2), 5, 10, seed=12)
  want = fed_curv._per_example_fisher(model, dataset)  # pylint: disable=protected-access
  # A budget of 200 elements: chunks of at most 2 examples (tf.while_loop).
  monkeypatch.setattr(fed_curv_fisher, 'ELEMENT_BUDGET', 200)
  got = tf.function(lambda: fed_curv.empirical_fisher_diagonal(
      model, dataset, batch_size=8))()
  _assert_close(got, want)


def _batch_norm_model():
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(4,)),
      tf.keras.layers.Dense(5),
      tf.keras.layers.BatchNormalization(),
      tf.keras.layers.Dense(3),
  ])


def _branching_model():
  inputs = tf.keras.Input((4,))
  h = tf.keras.layers.Dense(4)(inputs)
  outputs = tf.keras.layers.Dense(3)(tf.keras.layers.Add()([inputs, h]))
  return tf.keras.Model(inputs, outputs)


def _skip_model():  # A plain list of layers, but not called as a chain.
  inputs = tf.keras.Input((4,))
  first = tf.keras.layers.Dense(4)
  outputs = tf.keras.layers.Dense(3)(first(first(inputs)))
  return tf.keras.Model(inputs, outputs)


def _regularized_model():
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(4,)),
      tf.keras.layers.Dense(3, kernel_regularizer='l2'),
  ])


def _nested_model():
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(4,)),
      tf.keras.Sequential([tf.keras.layers.Dense(3)]),
  ])


@pytest.mark.parametrize('make_model', [
    _batch_norm_model, _branching_model, _skip_model, _regularized_model,
    _nested_model])
def test_unsupported_models_fall_back(make_model):
  model = _wrap(make_model(), (4,))
  assert not fed_curv_fisher.is_supported(model)
  assert fed_curv_fisher.keras_chain(model) is None


def _numpy_batch_norm_fisher(keras_model, x, y):
  """Dense -> BatchNormalization (inference: moving statistics) -> Dense:
  the mean squared per-example cross-entropy gradient, by hand."""
  w1, b1, gamma, beta, w2, b2 = [
      v.numpy().astype(np.float64) for v in keras_model.trainable_variables]
  bn = keras_model.layers[1]
  scale = np.sqrt(bn.moving_variance.numpy().astype(np.float64) + bn.epsilon)
  mean = bn.moving_mean.numpy().astype(np.float64)
  sums = None
  for xi, yi in zip(x.astype(np.float64), y):
    normed = (xi @ w1 + b1 - mean) / scale
    hidden = gamma * normed + beta
    logits = hidden @ w2 + b2
    g = np.exp(logits - logits.max())
    g /= g.sum()
    g[yi] -= 1.0
    g_hidden = w2 @ g
    g_pre = g_hidden * gamma / scale
    grads = [np.outer(xi, g_pre), g_pre, g_hidden * normed, g_hidden,
             np.outer(hidden, g), g]
    squares = [t**2 for t in grads]
    sums = squares if sums is None else [a + b for a, b in zip(sums, squares)]
  return [t / len(y) for t in sums]


def test_batch_norm_model_takes_the_loop_and_equals_it():
  tf.keras.utils.set_random_seed(13)
  keras_model = _batch_norm_model()
  bn = keras_model.layers[1]
  rng = np.random.default_rng(15)
  # Moving statistics away from (0, 1), so using them shows in the numbers.
  bn.moving_mean.assign(rng.normal(size=5).astype(np.float32))
  bn.moving_variance.assign(rng.uniform(0.5, 2.0, size=5).astype(np.float32))
  model = _wrap(keras_model, (4,))
  x, y, dataset = _dataset((4,), 3, 5, seed=14)
  assert not fed_curv_fisher.is_supported(model)
  got = fed_curv.empirical_fisher_diagonal(model, dataset)
  _assert_close(got, _numpy_batch_norm_fisher(keras_model, x, y), rtol=1e-5)
  # The loop ran one forward pass per example: it counted each once.
  assert model.report_local_unfinalized_metrics()['num_examples'] == [5]


def test_variable_model_without_keras_falls_back():

  class Wrapped(type(_wrap(_regularized_model(), (4,)))):
    pass

  keras_model = tf.keras.Sequential([tf.keras.layers.InputLayer((4,)),
                                     tf.keras.layers.Dense(3)])
  supported = _wrap(keras_model, (4,))
  assert fed_curv_fisher.is_supported(supported)
  subclass = Wrapped(keras_model, supported.input_spec, [CE()], [1.0], [])
  assert not fed_curv_fisher.is_supported(subclass)


def test_batch_size_must_be_positive():
  model = _wrap(_regularized_model(), (4,))
  _, _, dataset = _dataset((4,), 3, 2, seed=0)
  with pytest.raises(ValueError, match=r'^batch_size must be a positive '
                     r'integer, got 0\.$'):
    fed_curv.empirical_fisher_diagonal(model, dataset, batch_size=0)
