"""Keras models for the tff-opt benchmark tasks.

Every function returns a new, uncompiled `tf.keras.Model` whose output is
logits (no softmax): tasks pair it with
`SparseCategoricalCrossentropy(from_logits=True)`. Weights come from Keras's
seeded initializers, so `tf.keras.utils.set_random_seed(s)` before a call makes
the initial weights reproducible.
"""

import tensorflow as tf

DIGITS_IMAGE_SHAPE = (8, 8, 1)


def create_digits_cnn(num_classes: int = 10) -> tf.keras.Model:
  """A small CNN for 8x8x1 images (the UCI handwritten digits).

  conv3x3 32 'same' relu -> conv3x3 64 'valid' relu -> maxpool 2x2 ->
  flatten -> dense 128 relu -> dense `num_classes` (logits).

  Trainable parameters for num_classes=10:
    conv 1:  3*3*1*32 + 32   =    320   (output 8x8x32)
    conv 2:  3*3*32*64 + 64  = 18,496   (output 6x6x64)
    pool:                          0    (output 3x3x64 = 576)
    dense 1: 576*128 + 128   = 73,856
    dense 2: 128*10 + 10     =  1,290
    total                    = 93,962

  Args:
    num_classes: Number of output logits.

  Returns:
    An uncompiled `tf.keras.Model` mapping [batch, 8, 8, 1] float32 images to
    [batch, num_classes] logits.

  Raises:
    ValueError: If `num_classes < 2`.
  """
  if num_classes < 2:
    raise ValueError(f'num_classes must be at least 2, got {num_classes!r}.')
  return tf.keras.Sequential([
      tf.keras.Input(shape=DIGITS_IMAGE_SHAPE),
      tf.keras.layers.Conv2D(32, 3, padding='same', activation='relu'),
      tf.keras.layers.Conv2D(64, 3, padding='valid', activation='relu'),
      tf.keras.layers.MaxPooling2D(pool_size=2),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(128, activation='relu'),
      tf.keras.layers.Dense(num_classes),
  ], name='digits_cnn')
