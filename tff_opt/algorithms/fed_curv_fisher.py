"""Sums of per-example squared gradients in one backward pass (exact).

For a model that is a chain of layers whose only trainable weights belong
to `Dense` and `Conv2D` layers, the sum over a batch of every example's
squared gradient has a closed form per layer. With a_i the layer's input
for example i, z_i = a_i W + b its pre-activation output and
g_i = dl_i / dz_i (l_i: example i's loss):

- Dense on a rank-2 input: example i's kernel gradient is outer(a_i, g_i),
  so  sum_i (grad_i)^2 = (a^2)^T (g^2)  (one matmul); bias: sum_i g_i^2.
- Conv2D (and Dense on a rank > 2 input): example i's kernel gradient is
  P_i^T G_i, with P_i its input patches at every output position (the
  layer's strides, 'same'/'valid' padding and dilation; KH * KW strided
  slices concatenated, or `tf.image.extract_patches` when the spatial
  sizes are not static) and G_i the output gradient at every position;
  the per-example gradients of a batch are one batched matmul, squared
  and summed over the batch (in chunks of examples when they would exceed
  `ELEMENT_BUDGET` elements); bias: sum_i (sum over positions of G_i)^2.

g_i for every example comes from ONE backward pass of sum_i l_i: each
example's loss reaches only its own z_i (every layer of the chain acts on
each example on its own, in inference mode). The numbers are those of one
gradient pass per example, up to float rounding; nothing is approximated.

What is supported (`is_supported`), everything else falls back to the
caller's per-example loop:
- the `VariableModel` is TFF's `from_keras_model` wrapper itself (not a
  subclass); its Keras model (`_keras_model`, the attribute FedBN also
  reads) and its single loss (`_loss_fns`, a `tf.keras.losses.Loss` whose
  `__call__` is Keras' own) are read from its private attributes;
- the Keras model is a `tf.keras.Sequential`, or a functional model whose
  layers form a plain chain (one input, one output, each layer called once
  on the previous one's output, with no call arguments);
- `Dense` and `Conv2D` (exactly these classes; channels_last, groups 1,
  with or without bias, any activation, no regularizers) own all the
  trainable weights; every other layer is one of `PARAMETER_FREE_LAYERS`
  (exact classes, without weights or activity regularizer); no layer or
  model loss (`keras_model.losses` empty), no mixed precision;
- the model's input `x` is one dense tensor (`tf.TensorSpec`).

Example i's loss is the Keras loss of a batch of one, i.e. its unreduced
values (`loss.call`) averaged over their non-batch elements for the
`SUM_OVER_BATCH_SIZE` (and `AUTO`) reductions, summed for `SUM` and `NONE`
(a gradient of a non-scalar loss is that of its sum).
"""

import dataclasses
from typing import Any, Optional

import tensorflow as tf

from tff_opt import layers
from tff_opt.round import ground

try:  # TFF's Keras wrapper: the only `VariableModel` the fast path reads.
  from tensorflow_federated.python.learning.models import keras_utils as _tff_keras  # pylint: disable=g-import-not-at-top
  _KERAS_MODEL_TYPE = _tff_keras._KerasModel  # pylint: disable=protected-access
except (ImportError, AttributeError):  # Another TFF: always fall back.
  _KERAS_MODEL_TYPE = None

# Layers without weights that act on each example on its own and are the
# identity or a fixed function with `training=False` (exact classes only:
# a subclass may do anything).
PARAMETER_FREE_LAYERS = tuple(
    getattr(tf.keras.layers, name) for name in (
        'InputLayer', 'Flatten', 'Reshape', 'Permute', 'Activation', 'ReLU',
        'LeakyReLU', 'ELU', 'Softmax', 'Dropout', 'SpatialDropout1D',
        'SpatialDropout2D', 'GaussianDropout', 'GaussianNoise',
        'AlphaDropout', 'MaxPooling1D', 'MaxPooling2D', 'AveragePooling1D',
        'AveragePooling2D', 'GlobalMaxPooling1D', 'GlobalMaxPooling2D',
        'GlobalAveragePooling1D', 'GlobalAveragePooling2D', 'ZeroPadding2D',
        'Cropping2D', 'UpSampling2D')) + (layers.StatelessDropout,)

# Per-example tensors materialised at once (input patches, per-example
# kernel gradients) are split into chunks of examples under this many
# elements.
ELEMENT_BUDGET = 2**23

_MEAN_REDUCTIONS = (tf.keras.losses.Reduction.AUTO,
                    tf.keras.losses.Reduction.SUM_OVER_BATCH_SIZE)
_SUM_REDUCTIONS = (tf.keras.losses.Reduction.SUM,
                   tf.keras.losses.Reduction.NONE)


@dataclasses.dataclass(frozen=True)
class KerasChain:
  """A supported model: its Keras layers in order and its Keras loss."""
  layers: tuple[Any, ...]
  loss: tf.keras.losses.Loss


def _is_weight_layer(layer) -> bool:
  kind = type(layer)
  if kind is tf.keras.layers.Conv2D:
    if layer.data_format != 'channels_last' or layer.groups != 1:
      return False
  elif kind is not tf.keras.layers.Dense:
    return False
  policy = layer.dtype_policy
  return (policy.compute_dtype == policy.variable_dtype and
          layer.kernel_regularizer is None and
          layer.bias_regularizer is None and
          layer.activity_regularizer is None)


def _is_parameter_free_layer(layer) -> bool:
  return (type(layer) in PARAMETER_FREE_LAYERS and not layer.weights and
          getattr(layer, 'activity_regularizer', None) is None)


def _is_plain_functional_chain(keras_model) -> bool:
  """Whether a functional model's graph is layers[0] -> ... -> layers[-1]."""
  try:
    config = keras_model.get_config()
  except Exception:  # pylint: disable=broad-except
    return False
  entries = config.get('layers') or []
  if not entries or ([e.get('name') for e in entries] !=
                     [layer.name for layer in keras_model.layers]):
    return False
  if (config.get('input_layers') != [[entries[0]['name'], 0, 0]] or
      config.get('output_layers') != [[entries[-1]['name'], 0, 0]] or
      entries[0].get('inbound_nodes')):
    return False
  return all(
      entry.get('inbound_nodes') == [[[previous['name'], 0, 0, {}]]]
      for previous, entry in zip(entries, entries[1:]))


def keras_chain(model) -> Optional[KerasChain]:
  """The model's Keras chain if the fast path supports it, else None.

  Args:
    model: A `tff.learning.models.VariableModel`.

  Returns:
    A `KerasChain`, or None when the model is not supported (see the module
    docstring); the caller then takes one gradient pass per example.
  """
  if _KERAS_MODEL_TYPE is None or type(model) is not _KERAS_MODEL_TYPE:  # pylint: disable=unidiomatic-typecheck
    return None
  keras_model = getattr(model, '_keras_model', None)
  loss_fns = getattr(model, '_loss_fns', None)
  if not isinstance(keras_model, tf.keras.Model) or not loss_fns:
    return None
  if len(loss_fns) != 1:
    return None
  loss = loss_fns[0]
  if (not isinstance(loss, tf.keras.losses.Loss) or
      type(loss).__call__ is not tf.keras.losses.Loss.__call__ or
      loss.reduction not in _MEAN_REDUCTIONS + _SUM_REDUCTIONS):
    return None
  x_spec, _ = ground.features_and_labels(model.input_spec)
  if type(x_spec) is not tf.TensorSpec:  # pylint: disable=unidiomatic-typecheck
    return None
  if type(keras_model) is tf.keras.Sequential:  # pylint: disable=unidiomatic-typecheck
    pass
  elif not (type(keras_model).__name__ == 'Functional' and  # Exactly.
            getattr(keras_model, '_is_graph_network', False) and
            _is_plain_functional_chain(keras_model)):
    return None
  layers = tuple(keras_model.layers)
  if not all(_is_weight_layer(l) or _is_parameter_free_layer(l)
             for l in layers):
    return None
  if keras_model.losses or getattr(keras_model, 'activity_regularizer',
                                   None) is not None:
    return None
  owned = {v.ref() for l in layers if _is_weight_layer(l)
           for v in l.trainable_variables}
  trainable = [v.ref() for v in model.trainable_variables]
  if not trainable or not set(trainable) <= owned:
    return None
  return KerasChain(layers=layers, loss=loss)


def is_supported(model) -> bool:
  """Whether `squared_gradient_sums` handles `model` (else: fall back)."""
  return keras_chain(model) is not None


def _per_example_losses(loss, y_true, y_pred):
  """Example i's loss as the Keras loss of a batch of one, for every i."""
  values = tf.convert_to_tensor(loss.call(y_true, y_pred))
  if values.shape.rank == 1:
    return values
  axes = list(range(1, values.shape.rank))
  if loss.reduction in _MEAN_REDUCTIONS:
    return tf.reduce_mean(values, axis=axes)
  return tf.reduce_sum(values, axis=axes)


def _sum_over_chunks(fn, num_examples, chunk, shapes):
  """sum over [start, start + chunk) chunks of `fn(start, end)`."""

  def body(start, sums):
    end = tf.minimum(start + chunk, num_examples)
    return start + chunk, [s + t for s, t in zip(sums, fn(start, end))]

  _, sums = tf.while_loop(
      lambda start, _: start < num_examples, body,
      (tf.constant(0), [tf.zeros(s) for s in shapes]))
  return sums


def _squared_sums_per_position(patches, grads, width, use_bias,
                               max_examples):
  """Kernel (and bias) sums of squared per-example gradients.

  Args:
    patches: `patches(start, end)` returns [end - start, P, K], example b's
      input vector (the kernel's K rows) at each of the P output positions,
      for the examples start <= b < end.
    grads: [B, P, C]: dl_b / dz at those positions.
    width: K.
    use_bias: Whether to return the bias's sum too.
    max_examples: B's upper bound if known (a Python int), else None.

  Returns:
    [sum_b (sum_p outer(patches_bp, grads_bp))^2 of shape [K, C]] and, with
    `use_bias`, sum_b (sum_p grads_bp)^2 of shape [C].
  """
  num_examples = tf.shape(grads)[0]
  positions, channels = grads.shape[1], grads.shape[2]
  sums = []
  if positions == 1:  # No per-example gradient is materialised.
    inputs = patches(0, num_examples)[:, 0]
    sums.append(tf.matmul(tf.square(inputs), tf.square(grads[:, 0]),
                          transpose_a=True))
  else:
    per_example = width * max(channels, positions or 0)  # max(K C, P K)
    chunk = max(1, ELEMENT_BUDGET // per_example)

    def kernel_sums(start, end):
      per_example_grads = tf.matmul(patches(start, end), grads[start:end],
                                    transpose_a=True)
      return [tf.reduce_sum(tf.square(per_example_grads), axis=0)]

    if max_examples is not None and max_examples <= chunk:
      sums += kernel_sums(0, num_examples)  # No loop: faster in a loop.
    else:
      sums += _sum_over_chunks(kernel_sums, num_examples, chunk,
                               [[width, channels]])
  if use_bias:
    sums.append(tf.reduce_sum(tf.square(tf.reduce_sum(grads, axis=1)),
                              axis=0))
  return sums


def _static_positions(z) -> int:
  """Output positions per example (z's dimensions between batch and last)."""
  positions = 1
  for size in z.shape[1:-1]:
    if size is None:
      return -1
    positions *= size
  return positions


def _same_padding(size, kernel, stride, dilation):
  """(output size, padding before, padding after) of TF's 'SAME'."""
  out = -(-size // stride)
  total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
  return out, total // 2, total - total // 2


def _image_patches(layer, images):
  """[N, OH, OW, KH * KW * C_in]: the Conv2D's input patches, kernel order.

  With static spatial sizes, zero-padding and KH * KW strided slices
  concatenated along channels (several times faster on CPU than
  `tf.image.extract_patches`, which computes the same tensor and is used
  when the sizes are not static).
  """
  (kernel_h, kernel_w), strides = layer.kernel_size, layer.strides
  dilations, padding = layer.dilation_rate, layer.padding.upper()
  height, width = images.shape[1], images.shape[2]
  if height is None or width is None:
    return tf.image.extract_patches(
        images, sizes=[1, kernel_h, kernel_w, 1], strides=[1, *strides, 1],
        rates=[1, *dilations, 1], padding=padding)
  sizes = []
  pads = [[0, 0]]
  for size, kernel, stride, dilation in zip(
      (height, width), (kernel_h, kernel_w), strides, dilations):
    if padding == 'VALID':
      sizes.append((size - (kernel - 1) * dilation - 1) // stride + 1)
      pads.append([0, 0])
    else:
      out, before, after = _same_padding(size, kernel, stride, dilation)
      sizes.append(out)
      pads.append([before, after])
  if any(p != [0, 0] for p in pads):
    images = tf.pad(images, pads + [[0, 0]])
  (out_h, out_w), (stride_h, stride_w) = sizes, strides
  parts = []
  for i in range(kernel_h):
    for j in range(kernel_w):
      top, left = i * dilations[0], j * dilations[1]
      parts.append(images[:, top:top + (out_h - 1) * stride_h + 1:stride_h,
                          left:left + (out_w - 1) * stride_w + 1:stride_w, :])
  return tf.concat(parts, axis=-1)


def _pre_activation(layer, inputs):
  """The layer's output z before its activation, and a patches maker.

  Args:
    layer: A `Dense` or `Conv2D` layer.
    inputs: Its input, cast to its compute dtype.

  Returns:
    `(z, patches)`: `patches(start, end)` returns [end - start, P, K],
    example b's input vector (the kernel's K rows) at each of z's P output
    positions, for start <= b < end.
  """
  kernel = layer.kernel
  rank = inputs.shape.rank
  if type(layer) is tf.keras.layers.Dense:  # pylint: disable=unidiomatic-typecheck
    if rank == 2:
      z = tf.matmul(inputs, kernel)
    else:
      z = tf.tensordot(inputs, kernel, [[rank - 1], [0]])
    if layer.use_bias:
      z = tf.nn.bias_add(z, layer.bias)
    return z, lambda start, end: tf.reshape(
        inputs[start:end], [end - start, -1, inputs.shape[-1]])
  # Conv2D, channels_last; extra leading batch dimensions folded in.
  images = inputs
  if rank > 4:
    images = tf.reshape(inputs, [-1] + inputs.shape[-3:].as_list())
  z = layer.convolution_op(images, kernel)
  if layer.use_bias:
    z = tf.nn.bias_add(z, layer.bias)
  if rank > 4:
    z = tf.reshape(z, tf.concat([tf.shape(inputs)[:-3], tf.shape(z)[1:]], 0))

  def patches(start, end):
    fold = tf.shape(images)[0] // tf.shape(inputs)[0]  # 1 for rank 4.
    p = _image_patches(layer, images[start * fold:end * fold])
    return tf.reshape(p, [end - start, -1, p.shape[-1]])

  return z, patches


def squared_gradient_sums(chain: KerasChain, model, batch, *,
                          max_examples: Optional[int] = None):
  """Sums over a batch of every example's squared gradient, exactly.

  Args:
    chain: `keras_chain(model)`.
    model: The `VariableModel` the chain came from.
    batch: One batch, `(x, y)` or a mapping with keys 'x' and 'y'.
    max_examples: An upper bound of the batch's size, if known. Per-example
      tensors beyond `ELEMENT_BUDGET` elements are computed in chunks of
      examples (a `tf.while_loop`), which this bound can rule out.

  Returns:
    `(sums, num_examples)`: a list shaped like `model.trainable_variables`
    of sum_i (d l_i / d w)^2, and the batch's number of examples (float32).
  """
  x, y = ground.features_and_labels(batch)
  trainable = {v.ref() for v in model.trainable_variables}
  watched = []  # (layer, z, patches maker)
  with tf.GradientTape(watch_accessed_variables=False) as tape:
    h = x
    for layer in chain.layers:
      if not _is_weight_layer(layer):
        h = layer(h, training=False)
        continue
      if h.dtype.is_floating and h.dtype != layer.compute_dtype:
        h = tf.cast(h, layer.compute_dtype)
      z, patches = _pre_activation(layer, h)
      if layer.kernel.ref() in trainable:
        tape.watch(z)
        watched.append((layer, z, patches))
      h = layer.activation(z)
    total = tf.reduce_sum(_per_example_losses(chain.loss, y, h))
  grads = tape.gradient(total, [z for _, z, _ in watched],
                        unconnected_gradients=tf.UnconnectedGradients.ZERO)
  sums = {}
  for (layer, z, patches), g in zip(watched, grads):
    positions = _static_positions(z)
    if positions > 0:
      g = tf.reshape(g, [-1, positions, g.shape[-1]])
    else:
      g = tf.reshape(g, [tf.shape(g)[0], -1, g.shape[-1]])
    layer_sums = _squared_sums_per_position(
        patches, g, layer.kernel.shape[:-1].num_elements(), layer.use_bias,
        max_examples)
    sums[layer.kernel.ref()] = tf.reshape(layer_sums[0], layer.kernel.shape)
    if layer.use_bias:
      sums[layer.bias.ref()] = layer_sums[1]
  count = tf.cast(tf.shape(tf.nest.flatten(x)[0])[0], tf.float32)
  return [sums[v.ref()] for v in model.trainable_variables], count
