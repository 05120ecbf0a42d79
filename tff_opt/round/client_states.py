"""Learning processes whose clients keep state from round to round.

TFF's `LearningProcess.next(state, data)` carries only server state. An
algorithm with per-client state (SCAFFOLD's control variates c_i; FedCurv's
cross-silo variant; FedDyn's g_k; FedBN's local batch norm) is a
`ClientStatefulProcess`:

    process.initial_client_state()         -> the state of a client never seen
    output, new_states = process.next(state, datasets, client_states)

where `client_states` holds, for each sampled client in the order of
`datasets`, its state (the initial one for a client seen for the first
time), and `new_states` its state after the round. The training loop
(`training_loop.run_training`) keeps `{client_id: state}` for the clients
seen so far and checkpoints it with the server state (`pack`/`unpack`).

The initial client state is a constant; an algorithm that wants a client
seen for the first time to start from a server value (SCAFFOLD: c_i = c)
marks it with an `initialized` flag and reads the server value instead.

`compose` builds such a process from the usual four parts: the distributor's
broadcast (which may read the finalizer's state, as in
`composers.compose_learning_process`) is merged per client with that
client's state under `'client_state'`; the client work trains on that; the
new client state is `client_state_update(merged_broadcast, update)`, at the
client; the aggregator and finalizer then run as usual. The per-client
communication (`communication/bytes_server_to_client`, the broadcast
without the client's own state, and `bytes_client_to_server`, the update)
is reported in the metrics.

Two optional hooks of `compose` let a client keep part of the model to
itself (FedBN's local batch norm, `algorithms/fed_bn.py`):
`client_input_fn(broadcast, client_state)` replaces the merge above (what
the client work receives), and `to_server(update)` maps, at the client,
the client's update to what it sends to the aggregator (the new client
state still sees the whole update; `bytes_client_to_server` counts what is
sent).
"""

import collections
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import tff_types
from tff_opt.round import composers

CLIENT_STATE_KEY = 'client_state'
# The flag of a client state that is a client's own once it took part (the
# initial state's is False; SCAFFOLD's c_i, FedBN's batch norm).
INITIALIZED_KEY = 'initialized'


class ClientStatefulProcess:
  """A learning process with per-client state (see the module docstring).

  Attributes:
    initialize: `tff.Computation` () -> server state, as a LearningProcess.
    next_computation: `tff.Computation` (state, data@CLIENTS,
      client_states@CLIENTS) -> (LearningProcessOutput, client_states@CLIENTS).
    get_model_weights, set_model_weights, get_hparams, set_hparams: as for a
      `tff.learning.templates.LearningProcess`.
    client_state_type: The unplaced type of one client's state.
  """

  def __init__(self, *, initialize, next_computation, get_model_weights,
               set_model_weights, get_hparams, set_hparams,
               initial_client_state, client_state_type):
    self.initialize = initialize
    self.next_computation = next_computation
    self.get_model_weights = get_model_weights
    self.set_model_weights = set_model_weights
    self.get_hparams = get_hparams
    self.set_hparams = set_hparams
    self._initial_client_state = initial_client_state
    self.client_state_type = client_state_type

  def initial_client_state(self):
    """The state (NumPy structure) of a client seen for the first time."""
    return tf.nest.map_structure(np.copy, self._initial_client_state)

  def next(self, state, client_data: Sequence[Any],
           client_states: Sequence[Any]):
    """Runs one round.

    Args:
      state: The server state.
      client_data: One dataset per sampled client.
      client_states: One state per sampled client, in the same order.

    Returns:
      `(tff.learning.templates.LearningProcessOutput, new client states)`,
      the latter a list in the order of `client_data`.

    Raises:
      ValueError: If the two lists differ in length.
    """
    if len(client_data) != len(client_states):
      raise ValueError(f'Got {len(client_data)} client datasets but '
                       f'{len(client_states)} client states.')
    output, new_states = self.next_computation(state, list(client_data),
                                               list(client_states))
    return output, list(new_states)


def is_client_stateful(process) -> bool:
  """Whether `process` needs client states (a `ClientStatefulProcess`)."""
  return isinstance(process, ClientStatefulProcess)


def _items(value):
  if isinstance(value, Mapping):
    return list(value.items())
  return list(tff.structure.iter_elements(tff.structure.from_container(value)))


def compose(
    initial_model_weights_fn: tff.Computation,
    distributor: tff.learning.templates.DistributionProcess,
    client_work: tff.learning.templates.ClientWorkProcess,
    aggregator: tff.templates.AggregationProcess,
    finalizer: tff.learning.templates.FinalizerProcess,
    *,
    initial_client_state: Any,
    client_state_update: Callable[[Any, Any], Any],
    client_input_fn: Optional[Callable[[Any, Any], Any]] = None,
    to_server: Optional[Callable[[Any], Any]] = None,
) -> ClientStatefulProcess:
  """Composes a `ClientStatefulProcess` (see the module docstring).

  Args:
    initial_model_weights_fn: A no-arg `tff.Computation` returning the
      initial `ModelWeights`.
    distributor: Its result must be a mapping `{'model_weights', ...}`; it
      may take a `composers.ServerState` to read the finalizer's state.
    client_work: Built with `broadcast_type=client_broadcast_type(...)`, the
      distributor's broadcast plus `'client_state'`.
    aggregator: A weighted aggregation process for the client updates.
    finalizer: Applies the aggregate to the global model.
    initial_client_state: NumPy structure: a new client's state.
    client_state_update: TF function `(merged_broadcast, update) -> new
      client state` run at each client after its local training.
    client_input_fn: Optional TF function `(broadcast, client_state) ->
      what the client work receives` (of the client work's broadcast type),
      replacing the default merge (broadcast plus `'client_state'`).
    to_server: Optional TF function `update -> what the client sends`, run
      at each client before the aggregator, which must then be built for
      its result type.

  Returns:
    A `ClientStatefulProcess`.
  """
  client_state_type = tff_types.type_of(initial_client_state)
  broadcast_type = distributor.next.type_signature.result.result.member
  merged_type = client_work.next.type_signature.parameter[1].member
  data_type = client_work.next.type_signature.parameter[2]
  update_type = client_work.next.type_signature.result.result.member.update
  sent_type = update_type
  if to_server is not None:
    aggregator, sent_type = _after_client_map(to_server, update_type,
                                              aggregator)
  bytes_metrics = collections.OrderedDict(
      bytes_server_to_client=np.int64(tff_types.num_bytes(broadcast_type)),
      bytes_client_to_server=np.int64(tff_types.num_bytes(sent_type)))

  @tff.tensorflow.computation(broadcast_type, client_state_type)
  def merge(broadcast, client_state):
    if client_input_fn is not None:
      return client_input_fn(broadcast, client_state)
    return collections.OrderedDict(
        _items(broadcast) + [(CLIENT_STATE_KEY, client_state)])

  @tff.tensorflow.computation(merged_type, update_type)
  def new_client_state(merged, update):
    return client_state_update(merged, update)

  parts = (distributor, client_work, aggregator, finalizer)
  init_fn = composers.initialize_fn(initial_model_weights_fn, *parts)
  state_type = init_fn.type_signature.result

  @tff.federated_computation(
      state_type, data_type,
      tff.FederatedType(client_state_type, tff.CLIENTS))
  def next_fn(state, client_data, client_states):
    new_state, metrics, merged, client_output = composers.run_round(
        state, client_data, *parts,
        to_clients=lambda broadcast: tff.federated_map(
            merge, (broadcast, client_states)))
    updated_states = tff.federated_map(
        new_client_state, (merged, client_output.result.update))
    metrics['communication'] = tff.federated_value(bytes_metrics, tff.SERVER)
    return (tff.learning.templates.LearningProcessOutput(
        new_state, tff.federated_zip(metrics)), updated_states)

  accessors = composers.state_accessors(state_type.member, client_work,
                                        finalizer)
  return ClientStatefulProcess(
      initialize=init_fn,
      next_computation=next_fn,
      get_model_weights=accessors['get_model_weights'],
      set_model_weights=accessors['set_model_weights'],
      get_hparams=accessors['get_hparams_fn'],
      set_hparams=accessors['set_hparams_fn'],
      initial_client_state=initial_client_state,
      client_state_type=client_state_type)


def _after_client_map(to_server, update_type, aggregator):
  """`aggregator` fed with `to_server(update)` mapped at the clients."""

  @tff.tensorflow.computation(update_type)
  def sent(update):
    return to_server(update)

  sent_type = sent.type_signature.result
  expected = aggregator.next.type_signature.parameter[1].member
  if not expected.is_equivalent_to(sent_type):
    raise TypeError(f'The aggregator takes {expected}, but to_server sends '
                    f'{sent_type}.')

  @tff.federated_computation(
      aggregator.initialize.type_signature.result,
      tff.FederatedType(update_type, tff.CLIENTS),
      aggregator.next.type_signature.parameter[2])
  def next_fn(state, update, weight):
    return aggregator.next(state, tff.federated_map(sent, update), weight)

  return tff.templates.AggregationProcess(aggregator.initialize,
                                          next_fn), sent_type


def client_broadcast_type(broadcast_type: tff.Type,
                          client_state_type: tff.Type) -> tff.Type:
  """The type a stateful client work receives: broadcast + 'client_state'."""
  return tff.StructWithPythonType(
      list(tff.structure.iter_elements(broadcast_type)) +
      [(CLIENT_STATE_KEY, client_state_type)], collections.OrderedDict)


# --- Checkpointing the training loop's {client_id: state} --------------------


def pack(client_ids: Sequence[str], states: Mapping[str, Any],
         initial_state: Any) -> dict:
  """Packs `{client_id: state}` into fixed-shape arrays for a checkpoint.

  The layout depends only on the population: `seen` (bool, one per client
  of `client_ids`) and `states`, every leaf of the state stacked over the
  population (clients not seen hold the initial state). A checkpoint
  therefore has the same structure whatever the round, which
  `tff.program.FileProgramStateManager` needs to load it. Memory and disk:
  population x state size.

  Args:
    client_ids: The population, in a fixed order.
    states: The states of the clients seen so far.
    initial_state: A new client's state.

  Returns:
    `{'seen': bool array, 'states': stacked state}`.
  """
  leaves = [
      tf.nest.flatten(states.get(cid, initial_state)) for cid in client_ids
  ]
  stacked = [np.stack([np.asarray(l[i]) for l in leaves])
             for i in range(len(leaves[0]))]
  return {
      'seen': np.array([cid in states for cid in client_ids], np.bool_),
      'states': tf.nest.pack_sequence_as(initial_state, stacked),
  }


def unpack(client_ids: Sequence[str], packed: Mapping[str, Any],
           initial_state: Any) -> dict:
  """Inverse of `pack`: `{client_id: state}` of the clients seen."""
  stacked = tf.nest.flatten(packed['states'])
  out = {}
  for i, cid in enumerate(client_ids):
    if bool(np.asarray(packed['seen'])[i]):
      out[cid] = tf.nest.pack_sequence_as(
          initial_state, [np.asarray(leaf)[i] for leaf in stacked])
  return out
