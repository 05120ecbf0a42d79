"""Puts distributor, client work, aggregator and finalizer into one process.

This is `tff.learning.templates.compose_learning_process` with one more route:
a distributor may also receive the finalizer's state. FedCurv broadcasts the
Fisher sums u, v and FedADC the global momentum m_t, both of which the
finalizer computes; TFF's composer only hands the distributor the model.

A distributor asks for the route by taking, as its value argument, a
`ground.ServerState(model_weights, finalizer_state)` (see
`distributors.with_finalizer_state`). Any other distributor gets the model
weights alone, exactly as in TFF, so every `tff.learning.templates` part
composes here unchanged.

Every composed process also reports, under `communication`, the bytes one
client receives and sends per round (`communication.bytes_per_client`,
from the broadcast and update types), so that any algorithm's metrics.csv
has the FedFOR paper's Table 1 columns.

The process state is `tff.learning.templates.LearningAlgorithmState`, so
`get_model_weights`, `set_model_weights`, `get_hparams` and `set_hparams`
behave as for TFF's own algorithms; per-part measurements are reported under
`distributor`, `client_work`, `aggregator` and `finalizer`.
"""

import collections
from collections.abc import Callable
from typing import Any, Optional

import tensorflow_federated as tff

from tff_opt.round import communication
from tff_opt.round import ground


def _wants_finalizer_state(distributor) -> bool:
  value_type = distributor.next.type_signature.parameter[1].member
  return (isinstance(value_type, tff.StructWithPythonType) and
          value_type.python_container is ground.ServerState)


def compose_learning_process(
    initial_model_weights_fn: tff.Computation,
    distributor: tff.learning.templates.DistributionProcess,
    client_work: tff.learning.templates.ClientWorkProcess,
    aggregator: tff.templates.AggregationProcess,
    finalizer: tff.learning.templates.FinalizerProcess,
) -> tff.learning.templates.LearningProcess:
  """Composes the four parts into a `tff.learning.templates.LearningProcess`.

  Args:
    initial_model_weights_fn: A no-arg `tff.Computation` returning the
      (unplaced) initial `tff.learning.models.ModelWeights`.
    distributor: Sends the model (and extras) to clients.
    client_work: Trains on clients and reports an update and its weight.
    aggregator: A weighted `tff.templates.AggregationProcess`.
    finalizer: Applies the aggregate to the global model.

  Returns:
    A `LearningProcess` whose `next(state, client_datasets)` runs one round.

  Raises:
    TypeError: If the parts do not fit together.
  """
  if _wants_finalizer_state(distributor):
    process = _compose_with_finalizer_state(initial_model_weights_fn,
                                            distributor, client_work,
                                            aggregator, finalizer)
  else:
    process = tff.learning.templates.compose_learning_process(
        initial_model_weights_fn, distributor, client_work, aggregator,
        finalizer)
  return communication.with_communication_metrics(
      process, communication.bytes_per_client(distributor, client_work))


def _compose_with_finalizer_state(initial_model_weights_fn, distributor,
                                  client_work, aggregator, finalizer):
  """TFF's composition, with the finalizer's state routed to the distributor."""
  if not aggregator.is_weighted:
    raise TypeError('The aggregator must be weighted.')
  parts = (distributor, client_work, aggregator, finalizer)
  init_fn = initialize_fn(initial_model_weights_fn, *parts)
  state_type = init_fn.type_signature.result

  @tff.federated_computation(state_type,
                             client_work.next.type_signature.parameter[2])
  def next_fn(state, client_data):
    new_state, metrics, _, _ = run_round(state, client_data, *parts)
    return tff.learning.templates.LearningProcessOutput(
        new_state, tff.federated_zip(metrics))

  return tff.learning.templates.LearningProcess(
      init_fn, next_fn, **state_accessors(state_type.member, client_work,
                                          finalizer))


# --- Pieces shared with `client_states.compose` ------------------------------


def initialize_fn(initial_model_weights_fn, distributor, client_work,
                  aggregator, finalizer) -> tff.Computation:
  """The `initialize` of a composed process: a `LearningAlgorithmState`."""

  @tff.federated_computation
  def init_fn():
    return tff.federated_zip(
        tff.learning.templates.LearningAlgorithmState(
            tff.federated_eval(initial_model_weights_fn, tff.SERVER),
            distributor.initialize(), client_work.initialize(),
            aggregator.initialize(), finalizer.initialize()))

  return init_fn


def run_round(state, client_data, distributor, client_work, aggregator,
              finalizer, *, to_clients: Optional[Callable[[Any], Any]] = None):
  """One round inside a federated computation, part after part.

  Args:
    state: The `LearningAlgorithmState` at the server.
    client_data: The clients' datasets.
    distributor, client_work, aggregator, finalizer: The parts.
    to_clients: Optional function of the broadcast (at the clients) giving
      what the client work receives (e.g. the broadcast plus each client's
      own state); the broadcast itself when `None`.

  Returns:
    `(new_state, metrics, client_input, client_output)`: the zipped new
    state, the per-part measurements as an (unzipped) `OrderedDict`, what
    the client work received, and its output.
  """
  if _wants_finalizer_state(distributor):
    server_value = tff.federated_zip(
        ground.ServerState(state.global_model_weights, state.finalizer))
  else:
    server_value = state.global_model_weights
  distributor_output = distributor.next(state.distributor, server_value)
  client_input = distributor_output.result
  if to_clients is not None:
    client_input = to_clients(client_input)
  client_output = client_work.next(state.client_work, client_input,
                                   client_data)
  aggregator_output = aggregator.next(state.aggregator,
                                      client_output.result.update,
                                      client_output.result.update_weight)
  finalizer_output = finalizer.next(state.finalizer,
                                    state.global_model_weights,
                                    aggregator_output.result)
  new_state = tff.federated_zip(
      tff.learning.templates.LearningAlgorithmState(
          finalizer_output.result, distributor_output.state,
          client_output.state, aggregator_output.state,
          finalizer_output.state))
  metrics = collections.OrderedDict(
      distributor=distributor_output.measurements,
      client_work=client_output.measurements,
      aggregator=aggregator_output.measurements,
      finalizer=finalizer_output.measurements)
  return new_state, metrics, client_input, client_output


def state_accessors(member_type, client_work, finalizer) -> dict:
  """`get/set_model_weights`, `get/set_hparams_fn` of a composed state.

  Keyword arguments of `tff.learning.templates.LearningProcess`, reading
  and writing a `LearningAlgorithmState` of type `member_type`.
  """

  @tff.tensorflow.computation(member_type)
  def get_model_weights(state):
    return state.global_model_weights

  @tff.tensorflow.computation(member_type, member_type.global_model_weights)
  def set_model_weights(state, model_weights):
    return tff.learning.templates.LearningAlgorithmState(
        model_weights, state.distributor, state.client_work, state.aggregator,
        state.finalizer)

  @tff.tensorflow.computation(member_type)
  def get_hparams(state):
    return collections.OrderedDict(
        client_work=client_work.get_hparams(state.client_work),
        finalizer=finalizer.get_hparams(state.finalizer))

  @tff.tensorflow.computation(member_type, get_hparams.type_signature.result)
  def set_hparams(state, hparams):
    return tff.learning.templates.LearningAlgorithmState(
        state.global_model_weights, state.distributor,
        client_work.set_hparams(state.client_work, hparams['client_work']),
        state.aggregator,
        finalizer.set_hparams(state.finalizer, hparams['finalizer']))

  return dict(
      get_model_weights=get_model_weights,
      set_model_weights=set_model_weights,
      get_hparams_fn=get_hparams,
      set_hparams_fn=set_hparams)
