"""Distributors: what the server broadcasts to the clients each round.

FedOpt broadcasts the model alone (`tff.learning.templates.
build_broadcast_process`). Algorithms that broadcast more send a mapping

    {'model_weights': w_t, <extra name>: <extra value>, ...}

which the shared client work unpacks with `ground.model_weights_of`;
penalties read their extras from it by name.

`with_previous_model` broadcasts the current and the previous global model
(FedFOR's two-model broadcast; FedPTR reuses it): its own state is the model
it broadcast last round.

`with_finalizer_state` broadcasts extras computed from the finalizer's state
(FedADC's global momentum, FedCurv's Fisher sums): the composer hands such a
distributor `ground.ServerState(model_weights, finalizer_state)`.
"""

import collections
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow_federated as tff

from tff_opt import tff_types
from tff_opt.round import ground


def with_finalizer_state(
    model_weights_type: tff.Type,
    finalizer_state_type: tff.Type,
    extras_fn: Callable[[Any], Mapping[str, Any]],
) -> tff.learning.templates.DistributionProcess:
  """Broadcasts the model and extras read from the finalizer's state.

  Args:
    model_weights_type: The unplaced `ModelWeights` type of the model.
    finalizer_state_type: The unplaced type of the finalizer's state (the
      member of `finalizer.initialize.type_signature.result`).
    extras_fn: A TF function finalizer state -> `{name: tensor structure}`,
      run at the server before the broadcast.

  Returns:
    A stateless `DistributionProcess` whose value argument is a
    `ground.ServerState` and whose result, at the clients, is
    `{'model_weights': ..., **extras_fn(finalizer_state)}`.

  Raises:
    ValueError: If `extras_fn` returns the reserved name 'model_weights'.
  """
  server_type = tff.StructWithPythonType(
      list(zip(ground.ServerState._fields,
               (model_weights_type, finalizer_state_type))),
      ground.ServerState)

  @tff.tensorflow.computation(server_type)
  def broadcast_value(server_state):
    extras = extras_fn(server_state.finalizer_state)
    if ground.MODEL_WEIGHTS_KEY in extras:
      raise ValueError("extras_fn must not return the reserved key "
                       f"'{ground.MODEL_WEIGHTS_KEY}'.")
    return collections.OrderedDict(
        [(ground.MODEL_WEIGHTS_KEY, server_state.model_weights)] +
        list(extras.items()))

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

  Round t sends `{'model_weights': w_t, 'previous_model_weights': w_{t-1},
  'has_previous': True}`; the first round, with no previous model, sends
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
    return collections.OrderedDict([
        (ground.MODEL_WEIGHTS_KEY, weights),
        (ground.PREVIOUS_MODEL_KEY, state[ground.PREVIOUS_MODEL_KEY]),
        (ground.HAS_PREVIOUS_KEY, state[ground.HAS_PREVIOUS_KEY]),
    ])

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
