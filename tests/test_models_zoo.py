"""The heterogeneity benchmarks' models: parameter counts, shapes, forward.

Expected counts are computed here from the layer tables in
`tasks/models_zoo.py`'s docstring with the textbook formulas (a k x k conv
from c_in to c_out channels has k*k*c_in*c_out weights plus c_out biases; a
dense layer i*o + o; a batch norm 2c trainable and 2c non-trainable), not
read off Keras. Each model is built once.
"""

import numpy as np
import pytest
import tensorflow as tf

from tasks import models_resnet
from tasks import models_zoo

_zero_pad_shortcut = models_resnet._zero_pad_shortcut  # pylint: disable=protected-access


def _conv(k, c_in, c_out, bias=True):
  return k * k * c_in * c_out + (c_out if bias else 0)


def _dense(i, o):
  return i * o + o


def _counts(model):
  trainable = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
  frozen = sum(int(np.prod(v.shape)) for v in model.non_trainable_variables)
  return trainable, frozen


def _resnet20(num_classes):
  """(trainable, BN running statistics) of ResNet-20, option A shortcuts."""
  convs = [_conv(3, 3, 16, bias=False)]
  norms = [16]
  c_in = 16
  for width in (16, 32, 64):
    for _ in range(3):
      convs += [_conv(3, c_in, width, False), _conv(3, width, width, False)]
      norms += [width, width]
      c_in = width
  return sum(convs) + 2 * sum(norms) + _dense(64, num_classes), 2 * sum(norms)


def _fedbn_cnn(num_classes):
  norms = [64, 64, 128, 2048, 512]
  weights = (_conv(5, 3, 64) + _conv(5, 64, 64) + _conv(5, 64, 128)
             + _dense(7 * 7 * 128, 2048) + _dense(2048, 512)
             + _dense(512, num_classes))
  return weights + 2 * sum(norms), 2 * sum(norms)


def _alexnet(num_classes):
  norms = [64, 192, 384, 256, 256, 4096, 4096]
  weights = (_conv(11, 3, 64) + _conv(5, 64, 192) + _conv(3, 192, 384)
             + _conv(3, 384, 256) + _conv(3, 256, 256)
             + _dense(256 * 6 * 6, 4096) + _dense(4096, 4096)
             + _dense(4096, num_classes))
  return weights + 2 * sum(norms), 2 * sum(norms)


def _fedcurv_cnn(num_classes):
  return (_conv(3, 1, 32) + _conv(3, 32, 64) + _dense(12 * 12 * 64, 128)
          + _dense(128, num_classes)), 0


def _fedadc_cnn(num_classes):
  return (_conv(3, 3, 32) + _conv(3, 32, 32) + _conv(3, 32, 64)
          + _conv(3, 64, 64) + _dense(8 * 8 * 64, 512) + _dense(512, 256)
          + _dense(256, 128) + _dense(128, num_classes)), 0


def _mtt_convnet(num_classes):
  convs = _conv(3, 3, 128) + 2 * _conv(3, 128, 128)
  return convs + 3 * 2 * 128 + _dense(4 * 4 * 128, num_classes), 0


def _small_cnn(num_classes):
  return (_conv(5, 1, 16) + _conv(5, 16, 32) + _dense(7 * 7 * 32, 64)
          + _dense(64, num_classes)), 0


def _mnist_2nn(num_classes):
  return (_dense(28 * 28, 200) + _dense(200, 200)
          + _dense(200, num_classes)), 0


def _with_head(counts, features, num_classes, projection=256):
  """MOON's head: the classifier dense(features, classes) replaced by
  dense(features, features) relu -> dense(features, 256) -> dense(256,
  classes)."""
  trainable, frozen = counts
  return (trainable - _dense(features, num_classes) + _dense(features,
                                                             features)
          + _dense(features, projection) + _dense(projection, num_classes),
          frozen)


# name -> (input shape, classes, expected (trainable, frozen), trainable
# count written out as a cross-check of the formulas).
CASES = {
    'resnet20': ((32, 32, 3), 10, _resnet20(10), 269_722),
    'resnet20_gn': ((32, 32, 3), 10, (_resnet20(10)[0], 0), 269_722),
    'fedbn_cnn': ((28, 28, 3), 10, _fedbn_cnn(10), 14_219_210),
    'alexnet_bn': ((256, 256, 3), 10, _alexnet(10), 57_063_498),
    'fedcurv_cnn': ((28, 28, 1), 10, _fedcurv_cnn(10), 1_199_882),
    'fedadc_cnn': ((32, 32, 3), 10, _fedadc_cnn(10), 2_328_746),
    'mtt_convnet': ((32, 32, 3), 10, _mtt_convnet(10), 320_010),
    'small_cnn': ((28, 28, 1), 10, _small_cnn(10), 114_314),
    'mnist_2nn': ((28, 28, 1), 10, _mnist_2nn(10), 199_210),
    'fedadc_cnn_proj': ((32, 32, 3), 10, _with_head(_fedadc_cnn(10), 128, 10),
                        2_379_562),
    'fedcurv_cnn_proj': ((28, 28, 1), 10,
                         _with_head(_fedcurv_cnn(10), 128, 10), 1_250_698),
    'small_cnn_proj': ((28, 28, 1), 10, _with_head(_small_cnn(10), 64, 10),
                       137_034),
    'mnist_2nn_proj': ((28, 28, 1), 10, _with_head(_mnist_2nn(10), 200, 10),
                       291_426),
}


@pytest.fixture(scope='module', params=sorted(CASES))
def built(request):
  name = request.param
  shape, classes, _, _ = CASES[name]
  tf.keras.utils.set_random_seed(0)
  return name, models_zoo.create_model(name, shape, classes)


def test_parameter_counts_match_hand_formulas(built):
  name, model = built
  _, _, expected, literal = CASES[name]
  assert _counts(model) == expected
  assert expected[0] == literal


def test_forward_pass_maps_images_to_finite_logits(built):
  name, model = built
  shape, classes, _, _ = CASES[name]
  x = tf.random.stateless_uniform((2,) + shape, seed=(1, 2))
  for training in (True, False):
    logits = model(x, training=training)
    assert logits.shape == (2, classes)
    assert np.all(np.isfinite(logits.numpy()))


def test_batch_norm_models_have_pytorch_momentum_and_epsilon(built):
  name, model = built
  norms = [l for l in model.submodules
           if isinstance(l, tf.keras.layers.BatchNormalization)]
  expected = {'resnet20': 19, 'fedbn_cnn': 5, 'alexnet_bn': 7}.get(name, 0)
  assert len(norms) == expected
  assert all(l.momentum == 0.9 and l.epsilon == 1e-5 for l in norms)


def _adaptive_pool_reference(x, out_h, out_w):
  """PyTorch's AdaptiveAvgPool2d bins, written out in NumPy."""
  n, h, w, c = x.shape
  out = np.zeros((n, out_h, out_w, c))
  for i in range(out_h):
    r0, r1 = int(np.floor(i * h / out_h)), int(np.ceil((i + 1) * h / out_h))
    for j in range(out_w):
      c0, c1 = int(np.floor(j * w / out_w)), int(np.ceil((j + 1) * w / out_w))
      out[:, i, j] = x[:, r0:r1, c0:c1].mean(axis=(1, 2))
  return out


@pytest.mark.parametrize('in_hw, out_hw', [((7, 7), (6, 6)),
                                           ((5, 9), (3, 4)),
                                           ((6, 6), (6, 6))])
def test_adaptive_average_pooling_matches_pytorch_bins(in_hw, out_hw):
  x = np.random.default_rng(0).normal(size=(2,) + in_hw + (3,))
  got = models_zoo.AdaptiveAveragePooling2D(out_hw)(
      tf.constant(x, tf.float32)).numpy()
  np.testing.assert_allclose(got, _adaptive_pool_reference(x, *out_hw),
                             rtol=1e-5, atol=1e-6)


def test_resnet20_zero_pad_shortcut_keeps_input_in_the_first_channels():
  """Option A: the strided input, zero-padded to twice the channels."""
  x = tf.random.stateless_normal((1, 8, 8, 16), seed=(3, 4))
  inputs = tf.keras.Input((8, 8, 16))
  out = _zero_pad_shortcut(inputs, 32, 2)
  y = tf.keras.Model(inputs, out)(x).numpy()
  assert y.shape == (1, 4, 4, 32)
  np.testing.assert_array_equal(y[..., 8:24], x.numpy()[:, ::2, ::2, :])
  assert not y[..., :8].any() and not y[..., 24:].any()


@pytest.mark.parametrize('call, message', [
    (lambda: models_zoo.create_model('vgg', (32, 32, 3), 10),
     r"^model must be one of alexnet_bn, fedadc_cnn, fedadc_cnn_proj, "
     r"fedbn_cnn, fedcurv_cnn, fedcurv_cnn_proj, mnist_2nn, mnist_2nn_proj, "
     r"mtt_convnet, resnet18_gn, resnet18_gn_proj, resnet20, resnet20_gn, "
     r"small_cnn, "
     r"small_cnn_proj, got 'vgg'\.$"),
    (lambda: models_zoo.create_alexnet_bn((62, 62, 3)),
     r'^input_shape must be \(height, width, channels\) with height and '
     r'width >= 63 for alexnet_bn, got \(62, 62, 3\)\.$'),
    (lambda: models_zoo.create_resnet20(norm='layer'),
     r"^norm must be one of batch, group, got 'layer'\.$"),
    (lambda: models_zoo.create_fedcurv_cnn(num_classes=1),
     r'^num_classes must be at least 2, got 1\.$'),
    (lambda: models_zoo.create_fedadc_cnn(conv_filters=(8, 8)),
     r'^conv_filters must be four positive widths, got \(8, 8\)\.$'),
    (lambda: models_zoo.with_projection_head(
        models_zoo.create_mnist_2nn(), projection_dim=0),
     r'^projection_dim must be a positive integer, got 0\.$'),
    (lambda: models_zoo.with_projection_head(tf.keras.Sequential(
        [tf.keras.Input((4,)), tf.keras.layers.Dense(3),
         tf.keras.layers.Softmax()], name='probs')),
     r"^The last layer of 'probs' must be its Dense classifier, got "
     r'Softmax\.$'),
], ids=['unknown', 'alexnet_small', 'norm', 'classes', 'fedadc_widths',
        'projection_dim', 'no_classifier'])
def test_bad_arguments_raise_naming_them(call, message):
  with pytest.raises(ValueError, match=message):
    call()


def test_projection_models_put_moon_s_head_on_the_unchanged_encoder(built):
  """z = the 'projection' layer (256 wide, linear) after a relu layer as
  wide as the encoder's features; the logits are a dense layer on z; the
  layers before are the base model's, configured as they are."""
  name, model = built
  if not name.endswith(models_zoo.PROJECTION_SUFFIX):
    assert models_zoo.PROJECTION_LAYER not in [l.name for l in model.layers]
    return
  shape, classes, _, _ = CASES[name]
  base = models_zoo.create_model(name[:-len(models_zoo.PROJECTION_SUFFIX)],
                                 shape, classes)
  hidden, projection, classifier = model.layers[-3:]
  assert [l.name for l in model.layers[-3:]] == [
      'projection_hidden', models_zoo.PROJECTION_LAYER, 'classifier']
  assert hidden.units == base.layers[-1].input.shape[-1]
  assert hidden.get_config()['activation'] == 'relu'
  assert projection.units == models_zoo.PROJECTION_DIM == 256
  assert projection.get_config()['activation'] == 'linear'
  assert classifier.input is projection.output
  assert classifier.units == classes
  encoder = [l for l in model.layers
             if not isinstance(l, tf.keras.layers.InputLayer)][:-3]

  def config(layer):
    return {k: v for k, v in layer.get_config().items() if k != 'name'}

  assert [config(l) for l in encoder] == [config(l)
                                          for l in base.layers[:-1]]
