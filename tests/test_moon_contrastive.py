"""MOON's model-contrastive loss, its model contract and its loss hook."""

from typing import Any, NamedTuple

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tasks import models_zoo
from tests import tiny
from tff_opt.algorithms import moon_contrastive

PROJECTION_DIM = 5


def numpy_cosine(u, v):
  u = np.asarray(u, np.float64)
  v = np.asarray(v, np.float64)
  return (u * v).sum(-1) / (np.linalg.norm(u, axis=-1) *
                            np.linalg.norm(v, axis=-1))


def numpy_contrastive(z, z_glob, z_prev, temperature):
  """MOON's l_con as the paper prints it, averaged over the batch."""
  positive = np.exp(numpy_cosine(z, z_glob) / temperature)
  negative = np.exp(numpy_cosine(z, z_prev) / temperature)
  return float(np.mean(-np.log(positive / (positive + negative))))


def numpy_contrastive_grad(z, z_glob, z_prev, temperature):
  """d l_con / d z by hand: sigma((s_p - s_g)/tau)/tau (ds_p - ds_g) / n,
  with d cos(z, c) / dz = (c/|c| - cos * z/|z|) / |z|."""
  z = np.asarray(z, np.float64)

  def d_cos(c):
    c = np.asarray(c, np.float64)
    z_norm = np.linalg.norm(z, axis=-1, keepdims=True)
    c_hat = c / np.linalg.norm(c, axis=-1, keepdims=True)
    s = numpy_cosine(z, c)[:, None]
    return (c_hat - s * z / z_norm) / z_norm

  s_g, s_p = numpy_cosine(z, z_glob), numpy_cosine(z, z_prev)
  weight = 1.0 / (1.0 + np.exp(-(s_p - s_g) / temperature)) / temperature
  return weight[:, None] * (d_cos(z_prev) - d_cos(z_glob)) / len(z)


Z = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, -4.0]], np.float32)
Z_GLOB = np.array([[1.0, 1.0], [0.5, 2.0], [-3.0, 4.0]], np.float32)
Z_PREV = np.array([[-1.0, 0.0], [1.0, 1.0], [3.0, -3.0]], np.float32)


def test_a_hand_computed_row():
  # sim(z, z_glob) = 1/sqrt(2), sim(z, z_prev) = -1, tau = 0.5:
  # l = log(1 + e^{(-1 - 1/sqrt(2)) / 0.5}) = log(1 + e^{-3.41421}).
  got = moon_contrastive.model_contrastive_loss(Z[:1], Z_GLOB[:1], Z_PREV[:1],
                                           0.5)
  np.testing.assert_allclose(float(got), np.log1p(np.exp(-3.4142136)),
                             rtol=1e-6)
  np.testing.assert_allclose(float(got), 0.0323726, rtol=1e-5)


@pytest.mark.parametrize('temperature', [0.5, 1.0, 0.07])
def test_matches_numpy_and_its_gradient(temperature):
  z = tf.constant(Z)
  with tf.GradientTape() as tape:
    tape.watch(z)
    loss = moon_contrastive.model_contrastive_loss(
        z, Z_GLOB, Z_PREV, temperature)
  np.testing.assert_allclose(
      float(loss), numpy_contrastive(Z, Z_GLOB, Z_PREV, temperature),
      rtol=1e-5)
  np.testing.assert_allclose(
      tape.gradient(loss, z).numpy(),
      numpy_contrastive_grad(Z, Z_GLOB, Z_PREV, temperature),
      rtol=1e-4, atol=1e-6)


def test_positive_and_negative_are_not_interchangeable():
  loss = float(moon_contrastive.model_contrastive_loss(Z[:1], Z_GLOB[:1],
                                                  Z_PREV[:1], 0.5))
  swapped = float(moon_contrastive.model_contrastive_loss(Z[:1], Z_PREV[:1],
                                                     Z_GLOB[:1], 0.5))
  # log(1 + e^{+3.41421}) against log(1 + e^{-3.41421}).
  np.testing.assert_allclose(swapped - loss, 2 + np.sqrt(2), rtol=1e-5)
  # Close to the global model and far from the previous one: small loss.
  assert loss < np.log(2) < swapped


def test_is_log_two_with_zero_gradient_when_previous_is_global():
  z = tf.constant(Z)
  with tf.GradientTape() as tape:
    tape.watch(z)
    loss = moon_contrastive.model_contrastive_loss(z, Z_GLOB, Z_GLOB, 0.5)
  np.testing.assert_allclose(float(loss), np.log(2.0), rtol=1e-6)
  np.testing.assert_array_equal(tape.gradient(loss, z).numpy(), 0.0)


def test_only_directions_count_and_rank_four_is_flattened():
  base = moon_contrastive.model_contrastive_loss(Z, Z_GLOB, Z_PREV, 0.5)
  scaled = moon_contrastive.model_contrastive_loss(
      3.0 * Z, 0.25 * Z_GLOB, 7.0 * Z_PREV, 0.5)
  np.testing.assert_allclose(float(scaled), float(base), rtol=1e-6)
  shaped = [np.reshape(np.tile(a, (1, 2)), (3, 2, 1, 2))
            for a in (Z, Z_GLOB, Z_PREV)]
  np.testing.assert_allclose(
      float(moon_contrastive.model_contrastive_loss(*shaped, 0.5)), float(base),
      rtol=1e-6)


def test_a_zero_representation_has_a_finite_loss_and_gradient():
  z = tf.zeros([2, 3])
  with tf.GradientTape() as tape:
    tape.watch(z)
    loss = moon_contrastive.model_contrastive_loss(z, tf.ones([2, 3]),
                                              -tf.ones([2, 3]), 0.5)
  np.testing.assert_allclose(float(loss), np.log(2.0), rtol=1e-6)
  assert np.all(np.isfinite(tape.gradient(loss, z).numpy()))


# --- The model contract and the loss hook -----------------------------------


def keras_projection_model(batch_norm=False):
  layers = [tf.keras.Input(shape=(tiny.NUM_FEATURES,))]
  if batch_norm:
    layers.append(tf.keras.layers.BatchNormalization())
  layers += [tf.keras.layers.Dense(PROJECTION_DIM, name='projection'),
             tf.keras.layers.Dense(tiny.NUM_CLASSES)]
  return tf.keras.Sequential(layers)


def projection_model_fn(batch_norm=False):
  return tff.learning.models.from_keras_model(
      keras_projection_model(batch_norm),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=tiny.INPUT_SPEC)


def _weights(seed, batch_norm=False):
  rng = np.random.default_rng(seed)
  shapes = [(tiny.NUM_FEATURES, PROJECTION_DIM), (PROJECTION_DIM,),
            (PROJECTION_DIM, tiny.NUM_CLASSES), (tiny.NUM_CLASSES,)]
  if batch_norm:
    shapes = [(tiny.NUM_FEATURES,), (tiny.NUM_FEATURES,)] + shapes
  return [rng.normal(scale=0.5, size=s).astype(np.float32) for s in shapes]


def test_the_projection_sub_model_shares_the_model_variables():
  model = projection_model_fn()
  sub = moon_contrastive.projection_model(model)
  kernel, bias = _weights(0)[:2]
  model.trainable_variables[0].assign(kernel)
  model.trainable_variables[1].assign(bias)
  x = tiny.make_clients(1, seed=3)[0][0]
  np.testing.assert_allclose(sub(x).numpy(), x @ kernel + bias, rtol=1e-5,
                             atol=1e-6)
  assert {v.ref() for v in sub.trainable_variables} == {
      v.ref() for v in model.trainable_variables[:2]}


def test_a_second_training_pass_draws_the_forward_passs_dropout_masks():
  # fedcurv_cnn_proj has two StatelessDropout layers before 'projection':
  # the sub-model's training-mode z is the forward pass's, bit for bit.
  tf.keras.utils.set_random_seed(6)
  keras_model = models_zoo.create_model('fedcurv_cnn_proj', (12, 12, 1), 10)
  model = tff.learning.models.from_keras_model(
      keras_model, loss=tf.keras.losses.SparseCategoricalCrossentropy(True),
      input_spec=(tf.TensorSpec([None, 12, 12, 1]),
                  tf.TensorSpec([None], tf.int32)))
  sub = moon_contrastive.projection_model(model)
  head = tf.keras.Model(keras_model.inputs,
                        keras_model.get_layer('projection').output)
  x = tf.random.stateless_uniform([8, 12, 12, 1], (1, 2))
  z = sub(x, training=True)
  np.testing.assert_array_equal(z, head(x, training=True))
  # Dropout is on: inference gives another z.
  assert not np.array_equal(z, sub(x, training=False))


def test_a_model_without_projection_layer_is_refused_by_name():
  with pytest.raises(ValueError, match=(
      r"^MOON needs the model to have a Keras layer named 'projection' "
      r'whose output is the representation z .*has none \(its layers: ')):
    moon_contrastive.check_projection_layer(tiny.model_fn)


def test_a_model_without_keras_model_is_refused():

  class NotKeras:  # Only its type name is read.
    pass

  with pytest.raises(ValueError, match=(
      r'from_keras_model; got a NotKeras without a Keras model\.$')):
    moon_contrastive.projection_model(NotKeras())


def test_a_projection_layer_called_twice_is_refused():
  inputs = tf.keras.Input(shape=(tiny.NUM_FEATURES,))
  shared = tf.keras.layers.Dense(tiny.NUM_FEATURES, name='projection')
  outputs = tf.keras.layers.Dense(tiny.NUM_CLASSES)(shared(shared(inputs)))
  model = tff.learning.models.from_keras_model(
      tf.keras.Model(inputs, outputs),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=tiny.INPUT_SPEC)
  with pytest.raises(ValueError, match='must be called exactly once'):
    moon_contrastive.projection_model(model)


class _WithPrevious(NamedTuple):
  """A broadcast as MOON's hook receives one: w_t and the previous model."""
  model_weights: Any
  previous: Any


@pytest.mark.filterwarnings(
    'ignore:Batch Normalization contains non-trainable')
@pytest.mark.parametrize('batch_norm', [False, True], ids=['plain', 'bn'])
def test_the_loss_hook_adds_mu_times_the_numpy_loss(batch_norm):
  mu, temperature = 2.0, 0.5
  model_fn = lambda: projection_model_fn(batch_norm)
  loss_fn = moon_contrastive.moon_loss(
      mu, temperature, lambda broadcast: broadcast.previous)(model_fn)
  model = model_fn()
  local, global_, previous = (_weights(s, batch_norm) for s in (1, 2, 3))
  for variable, value in zip(model.trainable_variables, local):
    variable.assign(value)
  x, y = tiny.make_clients(1, seed=4, sizes=(7,))[0]
  non_trainable = [np.full(v.shape, 0.3, np.float32)
                   for v in model.non_trainable_variables]
  broadcast = _WithPrevious(
      model_weights=tff.learning.models.ModelWeights(
          trainable=global_, non_trainable=non_trainable),
      previous=previous)
  output = model.forward_pass((x, y), training=True)
  after_forward = [v.numpy() for v in model.non_trainable_variables]
  got = loss_fn(model, (x, y), output, broadcast, {})
  # The hook's second pass left the BN statistics as the forward pass did.
  for value, variable in zip(after_forward, model.non_trainable_variables):
    np.testing.assert_array_equal(variable.numpy(), value)

  def z_of(weights, training):
    h = x.astype(np.float64)
    if batch_norm:
      gamma, beta = weights[0], weights[1]
      if training:  # Batch statistics.
        mean, var = h.mean(0), h.var(0)
      else:  # The broadcast's moving statistics.
        mean, var = non_trainable[0], non_trainable[1]
      h = gamma * (h - mean) / np.sqrt(var + 1e-3) + beta
      weights = weights[2:]
    return h @ weights[0] + weights[1]

  want = float(output.loss) + mu * numpy_contrastive(
      z_of(local, True), z_of(global_, False), z_of(previous, False),
      temperature)
  np.testing.assert_allclose(float(got), want, rtol=1e-5)
  assert abs(float(got) - float(output.loss)) > 1e-3
