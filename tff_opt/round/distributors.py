"""Distributors: what the server broadcasts to the clients each round.

FedOpt broadcasts the model alone (`tff.learning.templates.
build_broadcast_process`). An algorithm that broadcasts more sends a
NamedTuple of its own whose first field is `model_weights` (FedCurv's
`fed_curv.Broadcast(model_weights, fisher_sum, fisher_weight_sum)`, ...):
the shared client work finds the model with `ground.model_weights_of`, and
the algorithm's penalty reads the rest by attribute.

`with_previous_model` broadcasts the current and the previous global model
(`ground.TwoModels`: FedFOR's two-model broadcast; FedPTR reuses it): its
own state is the model it broadcast last round.

`with_finalizer_state` broadcasts what it computes from the model and the
finalizer's state (FedADC's global momentum, FedCurv's Fisher sums): the
composer hands such a distributor `ground.ServerState(model_weights,
finalizer_state)`.
"""

import collections
from collections.abc import Callable
from typing import Any

import tensorflow_federated as tff

from tff_opt import tff_types
from tff_opt.round import ground


def with_finalizer_state(
    model_weights_type: tff.Type,
    finalizer_state_type: tff.Type,
    broadcast_fn: Callable[[Any, Any], tuple[Any, ...]],
) -> tff.learning.templates.DistributionProcess:
  """Broadcasts what `broadcast_fn` makes of the model and finalizer state.

  Args:
    model_weights_type: The unplaced `ModelWeights` type of the model.
    finalizer_state_type: The unplaced type of the finalizer's state (the
      member of `finalizer.initialize.type_signature.result`).
    broadcast_fn: A TF function `(model_weights, finalizer_state) ->` the
      algorithm's broadcast, a NamedTuple whose first field is
      `model_weights` (module docstring), run at the server before the
      broadcast.

  Returns:
    A stateless `DistributionProcess` whose value argument is a
    `ground.ServerState` and whose result, at the clients, is
    `broadcast_fn(model_weights, finalizer_state)`.

  Raises:
    TypeError: If `broadcast_fn`'s result is not a NamedTuple whose first
      field is `model_weights`.
  """
  server_type = tff_types.named_tuple_type(
      ground.ServerState, model_weights_type, finalizer_state_type)

  @tff.tensorflow.computation(server_type)
  def broadcast_value(server_state):
    value = broadcast_fn(server_state.model_weights,
                         server_state.finalizer_state)
    if getattr(value, '_fields', ('',))[0] != ground.MODEL_WEIGHTS_KEY:
      raise TypeError('broadcast_fn must return a NamedTuple whose first '
                      f"field is '{ground.MODEL_WEIGHTS_KEY}', got "
                      f'{type(value).__name__}.')
    return value

  @tff.federated_computation
  def init_fn():
    return tff.federated_value((), tff.SERVER)

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(server_type, tff.SERVER))
  def next_fn(state, server_state):
    value = tff.federated_map(broadcast_value, server_state)
    return tff.templates.MeasuredProcessOutput(
        state=state,
        result=tff.federated_broadcast(value),
        measurements=tff.federated_value((), tff.SERVER))

  return tff.learning.templates.DistributionProcess(init_fn, next_fn)


def with_previous_model(
    model_weights_type: tff.Type) -> tff.learning.templates.DistributionProcess:
  """Broadcasts the current and the previous global model.

  Round t sends `ground.TwoModels(w_t, w_{t-1}, True)`; the first round, with no previous model, sends
  zeros as w_{t-1} and `has_previous` False. The previous model is the one
  this distributor broadcast in the round before (so after a rejected round
  w_{t-1} = w_t).

  Args:
    model_weights_type: The unplaced `ModelWeights` type of the model.

  Returns:
    A `DistributionProcess` whose state is `{'previous_model_weights',
    'has_previous'}` at the server and whose measurements are empty.
  """
  initial_state = collections.OrderedDict([
      (ground.PREVIOUS_MODEL_KEY, tff_types.zeros_of(model_weights_type)),
      (ground.HAS_PREVIOUS_KEY, False)])

  @tff.federated_computation
  def init_fn():
    return tff.federated_value(initial_state, tff.SERVER)

  state_type = init_fn.type_signature.result.member

  @tff.tensorflow.computation(state_type, model_weights_type)
  def broadcast_value(state, weights):
    return ground.TwoModels(weights, state[ground.PREVIOUS_MODEL_KEY],
                            state[ground.HAS_PREVIOUS_KEY])

  @tff.tensorflow.computation(model_weights_type)
  def remember(weights):
    return collections.OrderedDict([(ground.PREVIOUS_MODEL_KEY, weights),
                                    (ground.HAS_PREVIOUS_KEY, True)])

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(model_weights_type, tff.SERVER))
  def next_fn(state, weights):
    value = tff.federated_map(broadcast_value, (state, weights))
    return tff.templates.MeasuredProcessOutput(
        state=tff.federated_map(remember, weights),
        result=tff.federated_broadcast(value),
        measurements=tff.federated_value((), tff.SERVER))

  return tff.learning.templates.DistributionProcess(init_fn, next_fn)
