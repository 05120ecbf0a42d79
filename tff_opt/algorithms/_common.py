"""Checks and small pieces shared by the algorithm builders."""

from collections.abc import Callable
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.round import ground


def check_optimizer(name: str, value: Any) -> None:
  """Raises TypeError unless `value` is a `tff.learning.optimizers.Optimizer`.

  `recipe.assemble` checks the client's optimizer; a recipe whose finalizer
  applies a server optimizer checks that one when it is made for a model
  (after the client's, so a builder reports the client's first).
  """
  if not isinstance(value, tff.learning.optimizers.Optimizer):
    raise TypeError(f'{name} must be a tff.learning.optimizers.Optimizer, '
                    f'got {type(value).__name__}.')


def check_server_optimizer(server_optimizer_fn: Any) -> None:
  """`check_optimizer` for the argument named `server_optimizer_fn`."""
  check_optimizer('server_optimizer_fn', server_optimizer_fn)


def initial_model_weights_fn(model_fn) -> tff.Computation:
  """A no-arg TF computation returning the model's initial `ModelWeights`."""

  @tff.tensorflow.computation
  def initial_weights():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  return initial_weights


def num_classes_of(
    model_fn: Callable[[], tff.learning.models.VariableModel]) -> int:
  """The size of the model's last prediction axis (its number of classes).

  Read from one forward pass of a new model on a batch of zeros, in a graph
  of its own (FedADC+, FedRS and personalization need it).
  """
  with tf.Graph().as_default():
    model = model_fn()
    x_spec, _ = ground.features_and_labels(model.input_spec)
    shape = [1 if d is None else d for d in x_spec.shape.as_list()]
    predictions = model.predict_on_batch(tf.zeros(shape, x_spec.dtype),
                                         training=False)
    return int(predictions.shape[-1])
