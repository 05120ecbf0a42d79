"""Dropout whose masks are a function of the layer's input: runs repeat.

Keras' `Dropout` draws its masks from a random op without a seed. TFF traces
a client's local training into a graph that nothing seeds, so two runs of
the same command draw different masks, and a run resumed from a checkpoint
does not compute the rounds an uninterrupted run would have (with Keras'
dropout, two identical 2-round MNIST-5k `fedcurv_cnn` runs ended round 1
at train_loss 1.7970 and 1.7768).

`StatelessDropout` is Keras' dropout (each unit kept with probability
1 - rate and scaled by 1 / (1 - rate) while training, the identity at
inference) with the mask drawn by `tf.random.stateless_uniform` from a seed
that is a function of what the layer sees:

    seed = bitcast_int32(farmhash64(bytes of the input)) xor (salt, 0)
    keep = stateless_uniform(shape(input), seed) >= rate
    output = input * keep / (1 - rate)

The input of a dropout layer changes at every local step (the weights that
produced it move each step and the batch changes), so each step draws a
fresh mask, as an unseeded layer does, while the same run repeats bit for
bit and a resumed run continues exactly as the uninterrupted one.

Choices (the papers do not say how their masks were drawn; PyTorch draws
them from one generator seeded by the run):

- The seed is the input's fingerprint, not a step counter: a Keras model
  carries no step counter into a TFF client computation, and threading one
  through every client work for the two models with dropout would change
  every algorithm's client state.
- So two calls on bit-equal inputs draw the same mask (e.g. MOON's two
  forward passes of one batch with the same weights, where Keras' masks
  would differ). The gradient treats the mask as a constant, as dropout's
  does: the fingerprint has no gradient.
- `salt` keeps two layers that could see equal inputs apart;
  `with_stateless_dropout` numbers a model's dropout layers 0, 1, 2, ... in
  its layer order.
"""

import itertools
from typing import Any

import tensorflow as tf

from tff_opt import checks


class StatelessDropout(tf.keras.layers.Layer):
  """Dropout seeded by a fingerprint of its input (module docstring).

  Attributes:
    rate: The probability of dropping a unit, in [0, 1).
    salt: An int32 mixed into the seed, so that layers differ.
  """

  def __init__(self, rate: float, salt: int = 0, **kwargs):
    """Builds the layer.

    Args:
      rate: The probability of dropping a unit, in [0, 1).
      salt: An integer in [0, 2**31), mixed into every seed.
      **kwargs: `tf.keras.layers.Layer`'s (name, dtype, ...).

    Raises:
      ValueError: If `rate` or `salt` is out of range.
    """
    super().__init__(**kwargs)
    checks.check_unit_interval('StatelessDropout: rate', rate)
    if isinstance(salt, bool) or not isinstance(salt, int) or not (
        0 <= salt < 2**31):
      raise ValueError(f'StatelessDropout: salt must be an int in [0, 2**31), '
                       f'got {salt!r}.')
    self.rate = float(rate)
    self.salt = salt
    self.supports_masking = True

  def seed(self, inputs: tf.Tensor) -> tf.Tensor:
    """The [2] int32 seed of the mask for `inputs` (module docstring)."""
    flat = tf.reshape(tf.stop_gradient(inputs), [1, -1])
    fingerprint = tf.reshape(tf.fingerprint(flat), [2, 4])  # 8 bytes.
    return tf.bitwise.bitwise_xor(tf.bitcast(fingerprint, tf.int32),
                                  tf.constant([self.salt, 0], tf.int32))

  def _drop(self, inputs: tf.Tensor) -> tf.Tensor:
    uniform = tf.random.stateless_uniform(tf.shape(inputs), self.seed(inputs),
                                          dtype=inputs.dtype)
    keep = tf.cast(uniform >= self.rate, inputs.dtype)
    return inputs * keep * tf.cast(1.0 / (1.0 - self.rate), inputs.dtype)

  def call(self, inputs, training=None):
    if training is None:
      training = tf.keras.backend.learning_phase()
    if self.rate == 0.0:
      return tf.identity(inputs)
    if isinstance(training, (bool, int)):
      return self._drop(inputs) if training else tf.identity(inputs)
    return tf.cond(tf.cast(training, tf.bool), lambda: self._drop(inputs),
                   lambda: tf.identity(inputs))

  def compute_output_shape(self, input_shape):
    return input_shape

  def get_config(self) -> dict[str, Any]:
    return {**super().get_config(), 'rate': self.rate, 'salt': self.salt}


def with_stateless_dropout(model: tf.keras.Model) -> tf.keras.Model:
  """A copy of `model` whose `Dropout` layers are `StatelessDropout`s.

  Every layer of class exactly `tf.keras.layers.Dropout` becomes a
  `StatelessDropout` of the same rate and name, salted 0, 1, 2, ... in the
  model's layer order; every other layer is cloned as it is, and the copy
  starts from `model`'s weights.

  Args:
    model: A `tf.keras.Sequential` or functional model.

  Returns:
    The new model (a fresh object; `model` is unchanged).

  Raises:
    ValueError: If a `Dropout` layer has a `noise_shape` (its mask would be
      shared along axes, which `StatelessDropout` does not do).
  """
  salts = itertools.count()

  def clone(layer):
    if type(layer) is not tf.keras.layers.Dropout:  # pylint: disable=unidiomatic-typecheck
      return layer.__class__.from_config(layer.get_config())
    if layer.noise_shape is not None:
      raise ValueError(f'with_stateless_dropout: layer {layer.name!r} has '
                       f'noise_shape {layer.noise_shape}; only a dropout of '
                       'independent units can be replaced.')
    return StatelessDropout(layer.rate, salt=next(salts), name=layer.name)

  copy = tf.keras.models.clone_model(model, clone_function=clone)
  copy.set_weights(model.get_weights())
  return copy
