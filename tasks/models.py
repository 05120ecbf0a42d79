"""Keras models for the tff-opt benchmark tasks.

Every function returns a new, uncompiled `tf.keras.Model` whose output is
logits (no softmax): tasks pair it with
`SparseCategoricalCrossentropy(from_logits=True)`. Weights come from Keras's
seeded initializers, so `tf.keras.utils.set_random_seed(s)` before a call makes
the initial weights reproducible.
"""

import tensorflow as tf

DIGITS_IMAGE_SHAPE = (8, 8, 1)


def create_digits_cnn(num_classes: int = 10, *,
                      batch_norm: bool = False) -> tf.keras.Model:
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

  With `batch_norm` (FedBN's setting, `--task_option=model=cnn_bn`), each
  conv is followed by a `BatchNormalization` before its relu
  (conv -> BN -> relu): 2 x (2 + 2) x channels more variables, 192 of them
  trainable (gamma, beta) and 192 non-trainable (moving mean, variance).

  Args:
    num_classes: Number of output logits.
    batch_norm: Add a BatchNormalization layer after each conv.

  Returns:
    An uncompiled `tf.keras.Model` mapping [batch, 8, 8, 1] float32 images to
    [batch, num_classes] logits.

  Raises:
    ValueError: If `num_classes < 2`.
  """
  if num_classes < 2:
    raise ValueError(f'num_classes must be at least 2, got {num_classes!r}.')
  if batch_norm:
    convs = [
        tf.keras.layers.Conv2D(32, 3, padding='same'),
        tf.keras.layers.BatchNormalization(),
        tf.keras.layers.ReLU(),
        tf.keras.layers.Conv2D(64, 3, padding='valid'),
        tf.keras.layers.BatchNormalization(),
        tf.keras.layers.ReLU(),
    ]
  else:
    convs = [
        tf.keras.layers.Conv2D(32, 3, padding='same', activation='relu'),
        tf.keras.layers.Conv2D(64, 3, padding='valid', activation='relu'),
    ]
  return tf.keras.Sequential([
      tf.keras.Input(shape=DIGITS_IMAGE_SHAPE),
      *convs,
      tf.keras.layers.MaxPooling2D(pool_size=2),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(128, activation='relu'),
      tf.keras.layers.Dense(num_classes),
  ], name='digits_cnn_bn' if batch_norm else 'digits_cnn')


def create_mtt_convnet(input_shape=(32, 32, 3), num_classes: int = 10, *,
                       width: int = 128, depth: int = 3) -> tf.keras.Model:
  """The ConvNet of MTT (Cazenavette et al.) that FedPTR trains.

  `depth` blocks of conv3x3 `width` 'same' -> instance norm (a
  `GroupNormalization` with one group per channel, affine) -> ReLU ->
  avg-pool 2x2, then flatten -> dense `num_classes` (logits). It has no
  batch normalisation, so
  `tff_opt.algorithms.fed_ptr_mtt.forward_from_model_fn` can differentiate
  through it.

  Args:
    input_shape: (height, width, channels) of the images; each spatial size
      must stay >= 1 after `depth` 2x2 poolings.
    num_classes: Number of output logits, >= 2.
    width: Channels of every conv layer, >= 1.
    depth: Number of conv blocks, >= 1.

  Returns:
    An uncompiled `tf.keras.Model` mapping images to logits.

  Raises:
    ValueError: If an argument is out of range.
  """
  if num_classes < 2:
    raise ValueError(f'num_classes must be at least 2, got {num_classes!r}.')
  if width < 1 or depth < 1:
    raise ValueError(f'width and depth must be >= 1, got {width!r}, '
                     f'{depth!r}.')
  if min(input_shape[:2]) < 2**depth:
    raise ValueError(f'input_shape {tuple(input_shape)!r} is too small for '
                     f'{depth} 2x2 poolings.')
  layers = [tf.keras.Input(shape=tuple(input_shape))]
  for _ in range(depth):
    layers += [
        tf.keras.layers.Conv2D(width, 3, padding='same'),
        tf.keras.layers.GroupNormalization(groups=width),
        tf.keras.layers.ReLU(),
        tf.keras.layers.AveragePooling2D(pool_size=2),
    ]
  layers += [tf.keras.layers.Flatten(), tf.keras.layers.Dense(num_classes)]
  return tf.keras.Sequential(layers, name='mtt_convnet')
