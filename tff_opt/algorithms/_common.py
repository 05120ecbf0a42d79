"""Checks and small pieces shared by the algorithm builders."""

import tensorflow_federated as tff


def check_optimizers(client_optimizer_fn, server_optimizer_fn) -> None:
  """Raises TypeError unless both are `tff.learning.optimizers.Optimizer`s."""
  for name, value in (('client_optimizer_fn', client_optimizer_fn),
                      ('server_optimizer_fn', server_optimizer_fn)):
    if not isinstance(value, tff.learning.optimizers.Optimizer):
      raise TypeError(f'{name} must be a tff.learning.optimizers.Optimizer, '
                      f'got {type(value).__name__}.')


def initial_model_weights_fn(model_fn) -> tff.Computation:
  """A no-arg TF computation returning the model's initial `ModelWeights`."""

  @tff.tensorflow.computation
  def initial_weights():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  return initial_weights
