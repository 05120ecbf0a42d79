"""ResNet-18 with group normalization (Reddi et al., Appendix C.1).

The paper trains "a modified ResNet-18, where the batch normalization layers
are replaced by group normalization layers (Wu & He, 2018). We use two groups
in each group normalization layer." It gives no layer table, so the layout is
the standard ResNet-18 of He et al. (2016) for small (CIFAR) images:

    stem:   conv3x3 64, stride 1, no bias -> GN(2) -> relu   (no max pool)
    stage k = 1..4 with 64, 128, 256, 512 filters, two basic blocks each;
      basic block: conv3x3 -> GN(2) -> relu -> conv3x3 -> GN(2), plus the
      shortcut, -> relu; the first block of stages 2-4 has stride 2 and a
      conv1x1 (no bias) -> GN(2) projection shortcut.
    head:   global average pooling -> dense `num_classes` (logits).

Choices the paper leaves open, made here: the CIFAR stem (3x3, stride 1, no
max pool — the 24x24 crops are too small for the ImageNet 7x7/stride-2 stem
plus pooling); post-activation blocks; convolutions without bias (GN follows
each); He-normal convolution kernels; no weight decay. TFF's own
`resnet_models.create_resnet18` is not used because its group norm has 32
groups (Keras's default), not the paper's 2.

Trainable parameters (input 24x24x3): 11,220,132 for 100 classes (CIFAR-100)
and 11,173,962 for 10 classes (CIFAR-10).
"""

import tensorflow as tf

GROUPS = 2
_STAGES = (64, 128, 256, 512)


def _conv(filters, kernel, strides=1):
  return tf.keras.layers.Conv2D(filters, kernel, strides=strides,
                                padding='same', use_bias=False,
                                kernel_initializer='he_normal')


def _norm():
  return tf.keras.layers.GroupNormalization(groups=GROUPS, axis=-1)


def _zero_pad_shortcut(x, filters, strides):
  """He et al.'s option A: subsample by `strides`, zero-pad new channels."""
  extra = filters - x.shape[-1]
  def shortcut(t):
    t = t[:, ::strides, ::strides, :]
    return tf.pad(t, [[0, 0], [0, 0], [0, 0],
                      [extra // 2, extra - extra // 2]])
  return tf.keras.layers.Lambda(shortcut)(x)


def _basic_block(x, filters, strides, norm=_norm, shortcut='projection'):
  """Post-activation basic block; `norm()` makes each normalisation layer.

  `shortcut` when the shape changes: 'projection' (conv1x1 -> norm, He et
  al.'s option B) or 'zero_pad' (option A, no parameters).
  """
  y = _conv(filters, 3, strides)(x)
  y = tf.keras.layers.ReLU()(norm()(y))
  y = norm()(_conv(filters, 3)(y))
  if strides == 1 and x.shape[-1] == filters:
    skip = x
  elif shortcut == 'zero_pad':
    skip = _zero_pad_shortcut(x, filters, strides)
  else:
    skip = norm()(_conv(filters, 1, strides)(x))
  return tf.keras.layers.ReLU()(tf.keras.layers.add([skip, y]))


def create_resnet18_gn(input_shape=(24, 24, 3),
                       num_classes: int = 100) -> tf.keras.Model:
  """ResNet-18 with GroupNorm(2) (see the module docstring).

  Args:
    input_shape: (height, width, channels) of the images.
    num_classes: Number of output logits.

  Returns:
    An uncompiled `tf.keras.Model` mapping images to logits.

  Raises:
    ValueError: If `num_classes < 2`.
  """
  if num_classes < 2:
    raise ValueError(f'num_classes must be at least 2, got {num_classes!r}.')
  inputs = tf.keras.Input(shape=input_shape)
  x = tf.keras.layers.ReLU()(_norm()(_conv(64, 3)(inputs)))
  for stage, filters in enumerate(_STAGES):
    x = _basic_block(x, filters, 1 if stage == 0 else 2)
    x = _basic_block(x, filters, 1)
  x = tf.keras.layers.GlobalAveragePooling2D()(x)
  outputs = tf.keras.layers.Dense(num_classes)(x)
  return tf.keras.Model(inputs, outputs, name='resnet18_gn')
