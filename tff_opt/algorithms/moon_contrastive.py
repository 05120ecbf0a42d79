"""MOON's model-contrastive loss (Li, He & Song, CVPR 2021).

On client i in round t, for a batch x with labels y, three models map x to
a representation: the local model being trained (z), the broadcast global
model w_t (z_glob) and the client's previous local model w_i^{t-1}, the one
it ended its local training with the last time it took part (z_prev). The
local loss is

    l = CE(f(x; w), y) + mu * l_con,
    l_con = -log( exp(sim(z, z_glob) / tau)
                  / (exp(sim(z, z_glob) / tau) + exp(sim(z, z_prev) / tau)) )
          = softplus( (sim(z, z_prev) - sim(z, z_glob)) / tau ),

averaged over the batch (MOON's code: a cross-entropy with the positive
pair as the "true class", `nn.CrossEntropyLoss`'s batch mean), with sim the
cosine similarity (PyTorch's `CosineSimilarity(dim=-1)`, eps = 1e-8):

    sim(u, v) = u / max(|u|, eps) . v / max(|v|, eps).

z_glob and z_prev are constants of the local step (the global and previous
models are not trained); the gradient reaches the local model through z
only. `model_contrastive_loss` is that equation; `moon_loss` is a
`client_work.LocalObjective.loss_fn_builder` computing it during local
training.

The model contract (`projection_model`). The representation is the output
of a top-level Keras layer named 'projection' (`PROJECTION_LAYER`) of the
Keras model of a `tff.learning.models.from_keras_model` model: MOON's
projection head output (its `ModelFedCon`: base encoder -> l1 (relu) -> l2
= z -> l3 = logits, so the classifier takes the projected representation;
`tasks.models_zoo.with_projection_head` builds that). z is read through a
Keras sub-model from the model's input to that layer's output, built from
the same layers (so it shares the model's variables), on whatever the
layer's output is (flattened to [batch, -1]). A model without such a layer,
a layer used more than once, or a `VariableModel` without a Keras model is
refused with a `ValueError` saying so.

Choices written down here:
- Local z: the loss hook sees the model's forward pass (`output`) but not
  its intermediate tensors, so z comes from a second pass of the local
  model's input-to-'projection' sub-model on the same batch, in training
  mode, inside the same gradient tape. For a model without batch norm
  (every `_proj` model of `tasks.models_zoo`) it is exactly the z of the
  forward pass, dropout included when it is `tff_opt.layers.
  StatelessDropout` (`fedcurv_cnn_proj`'s): the same input draws the same
  mask (a Keras `Dropout` would draw another). With batch norm it
  normalises with the same batch statistics, and the
  moving statistics it would update a second time are restored (the model's
  non-trainable variables keep the values the forward pass left).
- z_glob and z_prev come from two copies of the model (built once per
  client computation, as FedADC+'s teacher) holding w_t and w_i^{t-1},
  assigned before every batch, in inference mode (MOON's code puts the
  global and previous nets in `eval()`). The previous copy takes its
  trainable weights from the algorithm (`previous_trainable_of`) and its
  non-trainable ones from w_t.
- The training metrics stay the model's own (its loss is the CE); l_con
  changes the gradient only.
"""

from collections.abc import Callable
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.round import ground

PROJECTION_LAYER = 'projection'
COSINE_EPSILON = 1e-8  # PyTorch's CosineSimilarity default.


def cosine_similarity(u: tf.Tensor, v: tf.Tensor,
                      epsilon: float = COSINE_EPSILON) -> tf.Tensor:
  """Row-wise cosine similarity of two [batch, d] tensors.

  Args:
    u: [batch, d].
    v: [batch, d].
    epsilon: Norms below it count as `epsilon` (a zero row gives 0, with a
      finite gradient).

  Returns:
    [batch]: u_i / max(|u_i|, eps) . v_i / max(|v_i|, eps).
  """
  # l2_normalize divides by sqrt(max(sum x^2, epsilon)), i.e. max(|x|, eps).
  u_hat = tf.math.l2_normalize(u, axis=-1, epsilon=epsilon**2)
  v_hat = tf.math.l2_normalize(v, axis=-1, epsilon=epsilon**2)
  return tf.reduce_sum(u_hat * v_hat, axis=-1)


def _flat(z: tf.Tensor) -> tf.Tensor:
  z = tf.convert_to_tensor(z)
  if z.shape.rank == 2:
    return z
  return tf.reshape(z, [tf.shape(z)[0], -1])


def model_contrastive_loss(z: tf.Tensor, z_glob: tf.Tensor,
                           z_prev: tf.Tensor,
                           temperature: float) -> tf.Tensor:
  """MOON's l_con, averaged over the batch (see the module docstring).

  Args:
    z: [batch, ...] the local model's representations.
    z_glob: The global model's, same shape (the positive pair).
    z_prev: The previous local model's, same shape (the negative pair).
    temperature: tau > 0.

  Returns:
    A scalar: mean_i -log(e^{s_g,i/tau} / (e^{s_g,i/tau} + e^{s_p,i/tau}))
    with s_g = sim(z, z_glob), s_p = sim(z, z_prev). It is log 2, with zero
    gradient, when z_prev equals z_glob.
  """
  z, z_glob, z_prev = _flat(z), _flat(z_glob), _flat(z_prev)
  positive = cosine_similarity(z, z_glob)
  negative = cosine_similarity(z, z_prev)
  return tf.reduce_mean(tf.math.softplus((negative - positive) / temperature))


def _keras_model_of(model) -> tf.keras.Model:
  keras_model = getattr(model, '_keras_model', None)
  if not isinstance(keras_model, tf.keras.Model):
    raise ValueError(
        'MOON reads the representation z from the Keras layer named '
        f'{PROJECTION_LAYER!r} of a VariableModel made by '
        'tff.learning.models.from_keras_model; got a '
        f'{type(model).__name__} without a Keras model.')
  return keras_model


def projection_model(model: tff.learning.models.VariableModel
                     ) -> tf.keras.Model:
  """The Keras sub-model input -> output of the layer named 'projection'.

  It is built from the model's own layers, so calling it reads (and
  differentiates) the model's variables.

  Args:
    model: A `VariableModel` made by `tff.learning.models.from_keras_model`
      (TFF keeps its Keras model as `_keras_model`, the attribute FedBN
      and FedCurv also read).

  Returns:
    A `tf.keras.Model` mapping the model's input to z.

  Raises:
    ValueError: If the model has no Keras model, no top-level layer named
      'projection', or that layer has no single output (used more than
      once, or never connected to the model's input).
  """
  keras_model = _keras_model_of(model)
  names = [layer.name for layer in keras_model.layers]
  if PROJECTION_LAYER not in names:
    raise ValueError(
        f'MOON needs the model to have a Keras layer named '
        f'{PROJECTION_LAYER!r} whose output is the representation z (the '
        "projection head; tasks.models_zoo's '<model>_proj' models, or "
        'models_zoo.with_projection_head, add one); the model '
        f'{keras_model.name!r} has none (its layers: {", ".join(names)}).')
  layer = keras_model.get_layer(PROJECTION_LAYER)
  # Keras 2 reads `layer.output` off the layer's first call (node) even
  # when it has several.
  nodes = getattr(layer, '_inbound_nodes', None)
  try:
    if nodes is not None and len(nodes) != 1:
      raise ValueError(f'it is called {len(nodes)} times')
    output = layer.output
    inputs = keras_model.inputs
  except (AttributeError, ValueError) as e:
    raise ValueError(
        f'The layer {PROJECTION_LAYER!r} of the model {keras_model.name!r} '
        'must be called exactly once, on a path from the model\'s input '
        f'(a built functional or Sequential model): {e}.') from e
  if not inputs:
    raise ValueError(f'The model {keras_model.name!r} has no symbolic '
                     'inputs; build it with tf.keras.Input.')
  return tf.keras.Model(inputs, output, name=f'{keras_model.name}_to_z')


def check_projection_layer(
    model_fn: Callable[[], tff.learning.models.VariableModel]) -> None:
  """Raises `projection_model`'s ValueError if `model_fn()` has no head."""
  with tf.Graph().as_default():
    projection_model(model_fn())


def _assign(variables, values) -> None:
  for variable, value in zip(variables, values):
    variable.assign(value)


def moon_loss(
    mu: float, temperature: float,
    previous_trainable_of: Callable[[Any], Any],
) -> Callable[..., Callable[..., tf.Tensor]]:
  """A `loss_fn_builder` for the shared client work: CE + mu * l_con.

  The built `loss_fn(model, batch, output, broadcast, context)` returns
  `output.loss + mu * model_contrastive_loss(z, z_glob, z_prev,
  temperature)`, with z from the local model (a second pass through its
  'projection' sub-model, training mode, non-trainables restored), z_glob
  from a copy holding the broadcast model weights and z_prev from a copy
  holding `previous_trainable_of(broadcast)` and the broadcast's
  non-trainable weights (both in inference mode; see the module
  docstring).

  Args:
    mu: The weight of l_con (>= 0; the caller checks it).
    temperature: tau > 0 (the caller checks it).
    previous_trainable_of: TF function broadcast -> the previous local
      model's trainable weights (a list in model order), e.g. read from the
      client's state in the broadcast.

  Returns:
    `model_fn -> loss_fn`.

  Raises:
    ValueError: (when the builder runs) if the model has no layer named
      'projection' (`projection_model`).
  """

  def builder(model_fn):
    # Their weights are assigned before every use.
    global_copy = ground.model_to_overwrite(model_fn)
    previous_copy = ground.model_to_overwrite(model_fn)
    global_weights = tff.learning.models.ModelWeights.from_model(global_copy)
    previous_weights = tff.learning.models.ModelWeights.from_model(
        previous_copy)
    global_z = projection_model(global_copy)
    previous_z = projection_model(previous_copy)
    local_z_models = {}  # id(local model) -> its sub-model, built once.

    @tf.autograph.experimental.do_not_convert
    def loss_fn(model, batch, output, broadcast, context):
      del context
      local_z = local_z_models.get(id(model))
      if local_z is None:
        local_z = local_z_models[id(model)] = projection_model(model)
      weights = ground.model_weights_of(broadcast)
      _assign(global_weights.trainable, weights.trainable)
      _assign(global_weights.non_trainable, weights.non_trainable)
      _assign(previous_weights.trainable, previous_trainable_of(broadcast))
      _assign(previous_weights.non_trainable, weights.non_trainable)
      x, _ = ground.features_and_labels(batch)
      # The forward pass already updated the non-trainables (BN moving
      # statistics) on this batch; the second pass must not do it again.
      kept = [v.read_value() for v in model.non_trainable_variables]
      z = local_z(x, training=True)
      with tf.control_dependencies([z]):
        _assign(model.non_trainable_variables, kept)
      z_glob = tf.stop_gradient(global_z(x, training=False))
      z_prev = tf.stop_gradient(previous_z(x, training=False))
      return output.loss + mu * model_contrastive_loss(
          z, z_glob, z_prev, temperature)

    return loss_fn

  return builder
