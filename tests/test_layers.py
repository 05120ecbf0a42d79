"""StatelessDropout: Keras' dropout with masks seeded by the layer's input.

The mask and seed are recomputed here from the module docstring's formula
(the fingerprint's bytes read as two little-endian int32s in NumPy), and a
model with dropout trained twice, and once resumed, ends bit for bit equal.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from tasks import emnist
from tasks import mnist5k
from tests import binary
from tests import test_mnist5k
from tff_opt import layers


def _input(seed=0, shape=(64, 300)):
  return tf.constant(np.random.default_rng(seed).normal(size=shape),
                     tf.float32)


def _numpy_seed(x, salt):
  fingerprint = tf.fingerprint(tf.reshape(x, [1, -1])).numpy().tobytes()
  return np.frombuffer(fingerprint, '<i4') ^ np.array([salt, 0], np.int32)


@pytest.mark.parametrize('training', [False, None, tf.constant(False)])
def test_inference_is_the_identity(training):
  x = _input()
  layer = layers.StatelessDropout(0.5)
  np.testing.assert_array_equal(layer(x, training=training), x)


def test_training_mask_is_the_documented_formula():
  x = _input(1)
  layer = layers.StatelessDropout(0.3, salt=7)
  seed = _numpy_seed(x, 7)
  np.testing.assert_array_equal(layer.seed(x), seed)
  uniform = tf.random.stateless_uniform(x.shape, seed).numpy()
  want = np.where(uniform >= 0.3, x.numpy() * np.float32(1 / 0.7), 0.0)
  np.testing.assert_array_equal(layer(x, training=True), want)
  # The same from a tensor `training` (the graph branch).
  got = tf.function(lambda t: layer(x, training=t))(tf.constant(True))
  np.testing.assert_array_equal(got, want)


def test_drops_the_rate_and_scales_the_rest():
  x = tf.ones([200, 500])
  out = layers.StatelessDropout(0.25)(x, training=True).numpy()
  assert set(np.unique(out)) == {0.0, np.float32(1 / 0.75)}
  # 100,000 units: the dropped share within 4 standard errors of 0.25.
  assert abs(np.mean(out == 0) - 0.25) < 4 * np.sqrt(0.25 * 0.75 / out.size)


def test_mask_depends_on_the_input_and_the_salt_only():
  x = _input(2)
  a = layers.StatelessDropout(0.5, salt=1)(x, training=True)
  again = layers.StatelessDropout(0.5, salt=1)(x, training=True)
  np.testing.assert_array_equal(a, again)
  other_salt = layers.StatelessDropout(0.5, salt=2)(x, training=True)
  moved = x + tf.one_hot([[0]], 300)[0] * 1e-3  # One unit moved.
  other_input = layers.StatelessDropout(0.5, salt=1)(moved, training=True)
  zeros = lambda y: y.numpy() == 0
  # About half of the 19,200 masks' units differ; far from none.
  assert np.mean(zeros(a) != zeros(other_salt)) > 0.4
  assert np.mean(zeros(a) != zeros(other_input)) > 0.4


def test_gradient_is_the_scaled_mask():
  x = _input(3)
  layer = layers.StatelessDropout(0.4, salt=5)
  with tf.GradientTape() as tape:
    tape.watch(x)
    out = layer(x, training=True)
    total = tf.reduce_sum(out)
  kept = (out.numpy() != 0).astype(np.float32)
  np.testing.assert_allclose(tape.gradient(total, x), kept / 0.6, rtol=1e-6)


@pytest.mark.parametrize('kwargs,message', [
    (dict(rate=1.0), 'StatelessDropout: rate must be in [0, 1), got 1.0.'),
    (dict(rate=-0.1), 'StatelessDropout: rate must be in [0, 1), got -0.1.'),
    (dict(rate=0.5, salt=-1),
     'StatelessDropout: salt must be an int in [0, 2**31), got -1.'),
    (dict(rate=0.5, salt=1.5),
     'StatelessDropout: salt must be an int in [0, 2**31), got 1.5.'),
])
def test_bad_arguments_are_refused(kwargs, message):
  with pytest.raises(ValueError) as e:
    layers.StatelessDropout(**kwargs)
  assert str(e.value) == message


def test_with_stateless_dropout_replaces_dropout_in_order_keeping_weights():
  tf.keras.utils.set_random_seed(4)
  model = tf.keras.Sequential([
      tf.keras.Input(shape=(6,)),
      tf.keras.layers.Dense(8, activation='relu'),
      tf.keras.layers.Dropout(0.3, name='first'),
      tf.keras.layers.Dense(8),
      tf.keras.layers.Dropout(0.6, name='second'),
      tf.keras.layers.Dense(3),
  ])
  copy = layers.with_stateless_dropout(model)
  drops = [l for l in copy.layers if isinstance(l, layers.StatelessDropout)]
  assert [(l.name, l.rate, l.salt) for l in drops] == [('first', 0.3, 0),
                                                       ('second', 0.6, 1)]
  assert [type(l).__name__ for l in model.layers].count('Dropout') == 2
  for a, b in zip(model.get_weights(), copy.get_weights()):
    np.testing.assert_array_equal(a, b)
  x = _input(5, (4, 6))
  np.testing.assert_array_equal(copy(x, training=False),
                                model(x, training=False))


def test_with_stateless_dropout_refuses_a_noise_shape():
  model = tf.keras.Sequential([tf.keras.Input(shape=(4, 6)),
                               tf.keras.layers.Dropout(0.5, (None, 1, 6),
                                                       name='shared')])
  with pytest.raises(ValueError) as e:
    layers.with_stateless_dropout(model)
  assert str(e.value) == ("with_stateless_dropout: layer 'shared' has "
                          'noise_shape (None, 1, 6); only a dropout of '
                          'independent units can be replaced.')


def test_emnist_cr_model_keeps_its_size_with_two_stateless_dropouts():
  model = emnist.create_cr_model()
  assert model.count_params() == 1_206_590
  assert [(l.rate, l.salt) for l in model.layers
          if isinstance(l, layers.StatelessDropout)] == [(0.25, 0), (0.5, 1)]
  assert not any(type(l) is tf.keras.layers.Dropout for l in model.layers)  # pylint: disable=unidiomatic-typecheck


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp('mnist5k')
  test_mnist5k._write_csv(os.path.join(root, mnist5k.FILENAME))  # pylint: disable=protected-access
  return str(root)


def _train(data_dir, output_dir, rounds):
  assert binary.run_train(
      '--task=mnist5k', f'--data_dir={data_dir}',
      '--task_option=model=fedcurv_cnn', '--task_option=num_clients=5',
      '--task_option=partition=sort', f'--rounds={rounds}',
      '--clients_per_round=3', '--client_batch_size=5', '--client_epochs=2',
      '--checkpoint_every=1', '--seed=3', f'--output_dir={output_dir}') == 0
  return binary.checkpoint(output_dir, rounds)


def test_a_dropout_model_repeats_and_resumes_bit_for_bit(data_dir, tmp_path):
  # fedcurv_cnn has two dropout layers: before StatelessDropout two equal
  # runs differed from round 1. Run c's first round repeats run a's (both
  # from scratch), and c's second, resumed, continues it bit for bit.
  straight = str(tmp_path / 'a')
  _train(data_dir, straight, 2)
  again = _train(data_dir, str(tmp_path / 'c'), 1)
  resumed = _train(data_dir, str(tmp_path / 'c'), 2)
  for got, want in ((again, binary.checkpoint(straight, 1)),
                    (resumed, binary.checkpoint(straight, 2))):
    assert got.keys() == want.keys()
    for key, value in want.items():
      np.testing.assert_array_equal(got[key], value, err_msg=key)
