"""Checks and small pieces shared by the algorithm builders."""

from typing import Any

import tensorflow_federated as tff


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
