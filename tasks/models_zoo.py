"""The models of the heterogeneity benchmarks (FedFOR, FedBN, FedCurv, FedADC).

Every builder takes `(input_shape, num_classes)` and returns a new, uncompiled
`tf.keras.Model` mapping float32 images to logits; `MODELS` maps a name to its
builder and `create_model(name, input_shape, num_classes)` builds one by name
(the `model` option of the image tasks).

| name          | paper (setting)                 | normalisation        |
|---------------|---------------------------------|----------------------|
| `resnet20`    | FedFOR (imbalanced CIFAR-10)     | batch norm (or group)|
| `resnet18_gn` | Reddi et al., FedADC (CIFAR-100) | group norm, 2 groups |
| `fedbn_cnn`   | FedBN / FedFOR (Digits)          | batch norm           |
| `alexnet_bn`  | FedBN / FedFOR (DomainNet)       | batch norm           |
| `mtt_convnet` | FedPTR                           | instance norm        |
| `fedcurv_cnn` | FedCurv (MNIST)                  | none (dropout)       |
| `fedadc_cnn`  | FedADC (CIFAR-10)                | none                 |
| `small_cnn`   | reduced-scale claims (MNIST-5k)  | none                 |
| `mnist_2nn`   | McMahan et al.'s 2NN (MNIST)     | none                 |
| `<cnn>_proj`  | MOON (FedADC's comparison)       | as `<cnn>`           |

Choices the papers leave open, made here:

* **ResNet-20** (FedFOR, App. D: "the proper ResNet implementation for
  CIFAR10 (He et al. 2016)"): He et al.'s CIFAR network, 6n + 2 layers with
  n = 3: conv3x3 16 -> three stages of three basic blocks with 16, 32, 64
  filters (stride 2 at the first block of stages 2 and 3) -> global average
  pooling -> dense. Shortcuts are He et al.'s option A (identity; strided
  subsampling and zero-padded channels where the shape changes, no
  parameters), as in the "proper ResNet" CIFAR implementation FedFOR cites:
  0.27M parameters. Normalisation: **batch norm** (He et al.; FedFOR does not
  replace it), or `norm='group'` for GroupNorm(2) as Reddi et al.'s
  ResNet-18. The blocks are `models_resnet`'s (convolutions without bias,
  He-normal kernels).
* **FedBN's six-layer CNN** (FedBN's code for Digits, which FedFOR reuses):
  conv5x5 64 -> BN -> relu -> maxpool 2, conv5x5 64 -> BN -> relu -> maxpool 2,
  conv5x5 128 -> BN -> relu, flatten, dense 2048 -> BN -> relu,
  dense 512 -> BN -> relu, dense `num_classes`. Input 28x28x3 (FedBN resizes
  every digit domain to 28x28 and repeats grey channels): 6272 features into
  the first dense layer.
* **AlexNet with BN** (FedBN's code for DomainNet and Office-Caltech):
  conv11x11/4 64 (padding 2) -> BN -> relu -> maxpool 3/2, conv5x5 192 -> BN ->
  relu -> maxpool 3/2, conv3x3 384, 256, 256 each -> BN -> relu, maxpool 3/2,
  adaptive average pooling to 6x6, dense 4096 -> BN -> relu, dense 4096 ->
  BN -> relu, dense `num_classes`. **Input 256x256x3** (FedBN resizes
  DomainNet images to 256x256); the adaptive pooling (PyTorch's bins:
  rows floor(i*H/6) .. ceil((i+1)*H/6)) turns the 7x7 map into 6x6, and any
  input of at least 63x63 gives the same parameter count (57.0M for ten
  classes).
* **FedCurv's CNN** ("the CNN architecture from the MNIST PyTorch example"):
  conv3x3 32 relu -> conv3x3 64 relu -> maxpool 2 -> dropout 0.25 -> flatten
  -> dense 128 relu -> dropout 0.5 -> dense 10 (valid convolutions; 9216
  features for 28x28 inputs; 1,199,882 parameters). Its dropout is
  `tff_opt.layers.StatelessDropout` (masks seeded by the layer's input), so
  its runs repeat bit for bit.
* **FedADC's CNN** (Sec. IV-B: "4 convolutional layers and 4 fully connected
  layers with no batch normalization ... Maxpooling is also utilized"): the
  widths are not given; we use conv3x3 'same' relu with 32, 32, 64, 64
  filters, a 2x2 max-pool after the second and the fourth, then dense 512,
  256, 128 (relu) and dense `num_classes` (arguments `conv_filters`,
  `dense_units` change them).
* **small_cnn** (ours, for the reduced-scale claims of
  `binaries.claims`, where the papers' CNNs cost too much on two CPU
  cores): McMahan et al.'s MNIST CNN at a quarter of its widths --
  conv5x5 16 'same' relu -> maxpool 2 -> conv5x5 32 'same' relu -> maxpool 2
  -> flatten -> dense 64 relu -> dense `num_classes`: 114,314 parameters for
  28x28x1 and ten classes (~6 MFLOPs per forward pass against
  `fedcurv_cnn`'s ~22). Plain Dense/Conv2D chain, so FedCurv's one-pass
  Fisher (`tff_opt/algorithms/fed_curv_fisher.py`) and FedPTR's functional
  forward apply.
* **mnist_2nn** (McMahan et al. 2017, "2NN"): flatten -> dense 200 relu ->
  dense 200 relu -> dense `num_classes`: 199,210 parameters for 28x28x1.
* **`<cnn>_proj`** (`fedadc_cnn_proj`, `fedcurv_cnn_proj`, `small_cnn_proj`,
  `mnist_2nn_proj`): the model with MOON's projection head
  (`with_projection_head`, `PROJECTION_DIM` = 256 outputs), for
  `tff_opt.algorithms.moon`. MOON's `ModelFedCon` (Li et al.'s code): the
  base encoder is the network without its classifier (features h of width
  d), then l1 = dense d relu, l2 = dense 256 (no activation) = the
  representation z, then l3 = dense `num_classes` on z: the classifier takes
  the projected representation. Here the encoder is the model's layers up
  to its last dense layer (kept as they are, dropout included); l2 is the
  layer named 'projection' that MOON's loss reads
  (`tff_opt.algorithms.moon_contrastive`). The FedADC paper (Sec. IV-A2) adds "a
  projection layer of 2 layer MLP with output dimension of 256" to its CNNs
  after removing "last two linear layers" and adding an average pooling;
  it gives no widths and its pooling has no place after dense layers, so
  we follow MOON's construction. The models without `_proj` are unchanged.
* Batch norm everywhere uses PyTorch's defaults (the papers' code is
  PyTorch): momentum 0.1 for the running statistics (Keras `momentum=0.9`)
  and epsilon 1e-5. Other initialisers are Keras's defaults.
"""

from collections.abc import Callable, Sequence

import tensorflow as tf

from tasks import models
from tasks import models_resnet
from tff_opt import layers

NORMS = ('batch', 'group')
# models_resnet's building blocks, shared with its ResNet-18.
_resnet_conv = models_resnet._conv  # pylint: disable=protected-access
_resnet_block = models_resnet._basic_block  # pylint: disable=protected-access
_group_norm = models_resnet._norm  # pylint: disable=protected-access
BN_MOMENTUM = 0.9  # Keras convention; PyTorch's momentum=0.1.
BN_EPSILON = 1e-5


def _check_classes(num_classes: int) -> None:
  if num_classes < 2:
    raise ValueError(f'num_classes must be at least 2, got {num_classes!r}.')


def _check_shape(name: str, input_shape, min_size: int) -> tuple[int, ...]:
  shape = tuple(int(d) for d in input_shape)
  if len(shape) != 3 or min(shape[:2]) < min_size or shape[2] < 1:
    raise ValueError(
        f'input_shape must be (height, width, channels) with height and '
        f'width >= {min_size} for {name}, got {tuple(input_shape)!r}.')
  return shape


def batch_norm() -> tf.keras.layers.Layer:
  """A batch-norm layer with PyTorch's defaults (see the module docstring)."""
  return tf.keras.layers.BatchNormalization(momentum=BN_MOMENTUM,
                                            epsilon=BN_EPSILON)


class AdaptiveAveragePooling2D(tf.keras.layers.Layer):
  """PyTorch's `AdaptiveAvgPool2d`: average over bins of possibly unequal size.

  Output cell (i, j) averages input rows floor(i*H/h) .. ceil((i+1)*H/h) - 1
  and columns likewise, for an (h, w) `output_size`. Spatial sizes must be
  static.
  """

  def __init__(self, output_size: tuple[int, int], **kwargs):
    super().__init__(**kwargs)
    self.output_size = tuple(output_size)

  def call(self, inputs):
    in_h, in_w = inputs.shape[1], inputs.shape[2]
    out_h, out_w = self.output_size
    if (in_h, in_w) == (out_h, out_w):
      return inputs
    rows = []
    for i in range(out_h):
      r0, r1 = (i * in_h) // out_h, -(-(i + 1) * in_h // out_h)
      cells = []
      for j in range(out_w):
        c0, c1 = (j * in_w) // out_w, -(-(j + 1) * in_w // out_w)
        cells.append(tf.reduce_mean(inputs[:, r0:r1, c0:c1, :], axis=[1, 2]))
      rows.append(tf.stack(cells, axis=1))
    return tf.stack(rows, axis=1)

  def get_config(self):
    return {**super().get_config(), 'output_size': self.output_size}


def create_resnet20(input_shape=(32, 32, 3), num_classes: int = 10, *,
                    norm: str = 'batch') -> tf.keras.Model:
  """He et al.'s ResNet-20 for CIFAR (see the module docstring).

  Args:
    input_shape: (height, width, channels), height and width >= 4.
    num_classes: Number of output logits, >= 2.
    norm: 'batch' (He et al.) or 'group' (GroupNorm with 2 groups).

  Returns:
    An uncompiled `tf.keras.Model` mapping images to logits.

  Raises:
    ValueError: If an argument is out of range.
  """
  _check_classes(num_classes)
  shape = _check_shape('resnet20', input_shape, 4)
  if norm not in NORMS:
    raise ValueError(f'norm must be one of {", ".join(NORMS)}, got {norm!r}.')
  make_norm = batch_norm if norm == 'batch' else _group_norm
  inputs = tf.keras.Input(shape=shape)
  x = tf.keras.layers.ReLU()(make_norm()(_resnet_conv(16, 3)(inputs)))
  for stage, filters in enumerate((16, 32, 64)):
    for block in range(3):
      strides = 2 if stage > 0 and block == 0 else 1
      x = _resnet_block(x, filters, strides, norm=make_norm,
                        shortcut='zero_pad')
  x = tf.keras.layers.GlobalAveragePooling2D()(x)
  outputs = tf.keras.layers.Dense(num_classes)(x)
  return tf.keras.Model(inputs, outputs, name=f'resnet20_{norm}')


def create_fedbn_cnn(input_shape=(28, 28, 3),
                     num_classes: int = 10) -> tf.keras.Model:
  """FedBN's six-layer CNN for Digits (see the module docstring).

  Args:
    input_shape: (height, width, channels), height and width >= 4.
    num_classes: Number of output logits, >= 2.

  Returns:
    An uncompiled `tf.keras.Model` mapping images to logits.

  Raises:
    ValueError: If an argument is out of range.
  """
  _check_classes(num_classes)
  shape = _check_shape('fedbn_cnn', input_shape, 4)
  layers = [tf.keras.Input(shape=shape)]
  for filters, pool in ((64, True), (64, True), (128, False)):
    layers += [tf.keras.layers.Conv2D(filters, 5, padding='same'),
               batch_norm(), tf.keras.layers.ReLU()]
    if pool:
      layers.append(tf.keras.layers.MaxPooling2D(2))
  layers.append(tf.keras.layers.Flatten())
  for units in (2048, 512):
    layers += [tf.keras.layers.Dense(units), batch_norm(),
               tf.keras.layers.ReLU()]
  layers.append(tf.keras.layers.Dense(num_classes))
  return tf.keras.Sequential(layers, name='fedbn_cnn')


def create_alexnet_bn(input_shape=(256, 256, 3),
                      num_classes: int = 10) -> tf.keras.Model:
  """AlexNet with batch norm, as FedBN trains on DomainNet (module docstring).

  Args:
    input_shape: (height, width, channels); height and width >= 63 (so every
      3x3 max-pool has at least a 3x3 input). FedBN uses 256x256x3.
    num_classes: Number of output logits, >= 2.

  Returns:
    An uncompiled `tf.keras.Model` mapping images to logits.

  Raises:
    ValueError: If an argument is out of range.
  """
  _check_classes(num_classes)
  shape = _check_shape('alexnet_bn', input_shape, 63)
  def conv_block(filters, kernel, **kwargs):
    return [tf.keras.layers.Conv2D(filters, kernel, **kwargs), batch_norm(),
            tf.keras.layers.ReLU()]
  def pool():
    return tf.keras.layers.MaxPooling2D(pool_size=3, strides=2)
  layers = [tf.keras.Input(shape=shape), tf.keras.layers.ZeroPadding2D(2)]
  layers += conv_block(64, 11, strides=4) + [pool()]
  layers += conv_block(192, 5, padding='same') + [pool()]
  layers += conv_block(384, 3, padding='same')
  layers += conv_block(256, 3, padding='same')
  layers += conv_block(256, 3, padding='same') + [pool()]
  layers += [AdaptiveAveragePooling2D((6, 6)), tf.keras.layers.Flatten()]
  for _ in range(2):
    layers += [tf.keras.layers.Dense(4096), batch_norm(),
               tf.keras.layers.ReLU()]
  layers.append(tf.keras.layers.Dense(num_classes))
  return tf.keras.Sequential(layers, name='alexnet_bn')


def create_fedcurv_cnn(input_shape=(28, 28, 1),
                       num_classes: int = 10) -> tf.keras.Model:
  """FedCurv's MNIST CNN (the PyTorch MNIST example; module docstring).

  Args:
    input_shape: (height, width, channels), height and width >= 6.
    num_classes: Number of output logits, >= 2.

  Returns:
    An uncompiled `tf.keras.Model` mapping images to logits.

  Raises:
    ValueError: If an argument is out of range.
  """
  _check_classes(num_classes)
  shape = _check_shape('fedcurv_cnn', input_shape, 6)
  return tf.keras.Sequential([
      tf.keras.Input(shape=shape),
      tf.keras.layers.Conv2D(32, 3, activation='relu'),
      tf.keras.layers.Conv2D(64, 3, activation='relu'),
      tf.keras.layers.MaxPooling2D(2),
      layers.StatelessDropout(0.25, salt=0),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(128, activation='relu'),
      layers.StatelessDropout(0.5, salt=1),
      tf.keras.layers.Dense(num_classes),
  ], name='fedcurv_cnn')


def create_fedadc_cnn(input_shape=(32, 32, 3), num_classes: int = 10, *,
                      conv_filters: Sequence[int] = (32, 32, 64, 64),
                      dense_units: Sequence[int] = (512, 256, 128)
                      ) -> tf.keras.Model:
  """FedADC's CNN: 4 conv + 4 dense, no normalisation (module docstring).

  Args:
    input_shape: (height, width, channels), height and width >= 4.
    num_classes: Number of output logits, >= 2.
    conv_filters: Filters of the four 3x3 convolutions (a 2x2 max-pool
      follows the second and the fourth).
    dense_units: Units of the three hidden dense layers.

  Returns:
    An uncompiled `tf.keras.Model` mapping images to logits.

  Raises:
    ValueError: If an argument is out of range.
  """
  _check_classes(num_classes)
  shape = _check_shape('fedadc_cnn', input_shape, 4)
  if len(conv_filters) != 4 or min(conv_filters) < 1:
    raise ValueError('conv_filters must be four positive widths, got '
                     f'{tuple(conv_filters)!r}.')
  if len(dense_units) != 3 or min(dense_units) < 1:
    raise ValueError('dense_units must be three positive widths, got '
                     f'{tuple(dense_units)!r}.')
  layers = [tf.keras.Input(shape=shape)]
  for i, filters in enumerate(conv_filters):
    layers.append(tf.keras.layers.Conv2D(filters, 3, padding='same',
                                         activation='relu'))
    if i % 2 == 1:
      layers.append(tf.keras.layers.MaxPooling2D(2))
  layers.append(tf.keras.layers.Flatten())
  layers += [tf.keras.layers.Dense(u, activation='relu') for u in dense_units]
  layers.append(tf.keras.layers.Dense(num_classes))
  return tf.keras.Sequential(layers, name='fedadc_cnn')


def create_small_cnn(input_shape=(28, 28, 1),
                     num_classes: int = 10) -> tf.keras.Model:
  """A quarter-width McMahan et al. MNIST CNN (module docstring).

  Args:
    input_shape: (height, width, channels), height and width >= 4.
    num_classes: Number of output logits, >= 2.

  Returns:
    An uncompiled `tf.keras.Model` mapping images to logits.

  Raises:
    ValueError: If an argument is out of range.
  """
  _check_classes(num_classes)
  shape = _check_shape('small_cnn', input_shape, 4)
  return tf.keras.Sequential([
      tf.keras.Input(shape=shape),
      tf.keras.layers.Conv2D(16, 5, padding='same', activation='relu'),
      tf.keras.layers.MaxPooling2D(2),
      tf.keras.layers.Conv2D(32, 5, padding='same', activation='relu'),
      tf.keras.layers.MaxPooling2D(2),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(64, activation='relu'),
      tf.keras.layers.Dense(num_classes),
  ], name='small_cnn')


def create_mnist_2nn(input_shape=(28, 28, 1),
                     num_classes: int = 10) -> tf.keras.Model:
  """McMahan et al.'s 2NN: two hidden dense layers of 200 (docstring).

  Args:
    input_shape: (height, width, channels).
    num_classes: Number of output logits, >= 2.

  Returns:
    An uncompiled `tf.keras.Model` mapping images to logits.

  Raises:
    ValueError: If an argument is out of range.
  """
  _check_classes(num_classes)
  shape = _check_shape('mnist_2nn', input_shape, 1)
  return tf.keras.Sequential([
      tf.keras.Input(shape=shape),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(200, activation='relu'),
      tf.keras.layers.Dense(200, activation='relu'),
      tf.keras.layers.Dense(num_classes),
  ], name='mnist_2nn')


PROJECTION_DIM = 256  # MOON's out_dim; the FedADC paper's head.
PROJECTION_LAYER = 'projection'  # The name MOON's loss reads z from.
# Zoo models offered with MOON's projection head, as '<name>_proj'.
PROJECTION_BASES = ('fedadc_cnn', 'fedcurv_cnn', 'small_cnn', 'mnist_2nn',
                    'resnet18_gn')
PROJECTION_SUFFIX = '_proj'


def with_projection_head(model: tf.keras.Model,
                         projection_dim: int = PROJECTION_DIM
                         ) -> tf.keras.Model:
  """`model` with MOON's projection head before its classifier (docstring).

  The model's last layer (its classifier, a `Dense` on the features h of
  width d) is replaced by dense d relu ('projection_hidden') -> dense
  `projection_dim` ('projection', no activation: z) -> dense `num_classes`
  ('classifier', on z). Every other layer of `model` is reused as it is
  (the returned model owns them; `model` itself should not be used
  afterwards).

  Args:
    model: A built Keras model (functional or Sequential, from a
      `tf.keras.Input`) whose last layer is a `Dense` classifier on a
      [batch, d] input.
    projection_dim: The width of z, >= 1 (MOON's `out_dim`, 256).

  Returns:
    A new uncompiled `tf.keras.Model` mapping images to logits, named
    `<model name>_proj`.

  Raises:
    ValueError: If `projection_dim` is not a positive integer or the last
      layer is not a `Dense` on a rank-2 input.
  """
  if (isinstance(projection_dim, bool) or
      not isinstance(projection_dim, int) or projection_dim < 1):
    raise ValueError('projection_dim must be a positive integer, got '
                     f'{projection_dim!r}.')
  classifier = model.layers[-1]
  if not isinstance(classifier, tf.keras.layers.Dense):
    raise ValueError(f'The last layer of {model.name!r} must be its Dense '
                     f'classifier, got {type(classifier).__name__}.')
  features = classifier.input
  if features.shape.rank != 2:
    raise ValueError(f'The classifier of {model.name!r} must take [batch, '
                     f'features], got shape {features.shape}.')
  width = int(features.shape[-1])
  hidden = tf.keras.layers.Dense(width, activation='relu',
                                 name='projection_hidden')(features)
  z = tf.keras.layers.Dense(projection_dim, name=PROJECTION_LAYER)(hidden)
  logits = tf.keras.layers.Dense(classifier.units, name='classifier')(z)
  return tf.keras.Model(model.inputs, logits,
                        name=f'{model.name}{PROJECTION_SUFFIX}')


def _with_head(builder: Callable[..., tf.keras.Model]
               ) -> Callable[..., tf.keras.Model]:
  return lambda s, n: with_projection_head(builder(s, n))


MODELS: dict[str, Callable[..., tf.keras.Model]] = {
    'resnet20': create_resnet20,
    'resnet20_gn': lambda s, n: create_resnet20(s, n, norm='group'),
    'resnet18_gn': models_resnet.create_resnet18_gn,
    'fedbn_cnn': create_fedbn_cnn,
    'alexnet_bn': create_alexnet_bn,
    'mtt_convnet': models.create_mtt_convnet,
    'fedcurv_cnn': create_fedcurv_cnn,
    'fedadc_cnn': create_fedadc_cnn,
    'small_cnn': create_small_cnn,
    'mnist_2nn': create_mnist_2nn,
}
MODELS.update({name + PROJECTION_SUFFIX: _with_head(MODELS[name])
               for name in PROJECTION_BASES})
MODEL_NAMES: tuple[str, ...] = tuple(sorted(MODELS))


def create_model(name: str, input_shape: Sequence[int],
                 num_classes: int) -> tf.keras.Model:
  """Builds zoo model `name` for `input_shape` images and `num_classes`.

  Args:
    name: One of `MODEL_NAMES`.
    input_shape: (height, width, channels) of the images.
    num_classes: Number of output logits.

  Returns:
    An uncompiled `tf.keras.Model` mapping images to logits.

  Raises:
    ValueError: If `name` is unknown or the model does not fit the input.
  """
  if name not in MODELS:
    raise ValueError(f'model must be one of {", ".join(MODEL_NAMES)}, got '
                     f'{name!r}.')
  return MODELS[name](tuple(input_shape), num_classes)
