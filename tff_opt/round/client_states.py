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
`composers.compose_learning_process`) is paired per client with that
client's state (`ground.ClientInput(broadcast, client_state)`); the client
work trains on that; the
new client state is `client_state_update(client_input, update)`, at the
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

Positions, so that a round gives each client its own new state whatever
order its results come back in. `compose`'s computation takes, besides the
data and the states, each client's position in the round (an int32
CLIENTS-placed value, `0..n-1`) and returns, per client,
`{'position': p, 'state': new state}`; `ClientStatefulProcess.next` puts
each state back at the position it names, and raises if a position is
missing, repeated or out of range. Locally TFF returns the clients in their
order and this changes nothing (the states are the same tensors, put back
in the same order). Over TFF 0.87's multi-worker context
(`runtime.set_remote_execution_context`) the arguments are split into
contiguous slices, one per worker, in the clients' order (the data, the
states and the positions alike, so inputs stay matched), but the slices'
CLIENTS-placed results are concatenated in the order the workers finish:
the positions undo that. The stored state (`pack`/`unpack`, the
checkpoints) is unchanged: only what travels through the computation
carries the position. The server's results do not depend on that order
except through the order of float additions when partial aggregates are
merged.

Cost over workers: TFF's mergeable form (`mergeable_comp_compiler`) runs a
round as `up_to_merge` (clients up to the aggregate) and `after_merge`
(from the merged aggregate on); nothing but the aggregate passes between
the two, so `after_merge` runs each client's local training again to
compute its new state. A client-stateful round on workers therefore trains
every client twice, and the two runs must agree: they do for every
algorithm here (tests/test_workers_stateful.py compares the states with a
local run's), FedCurv's Eq. 3 included, whose Fisher pass reads the
client's reshuffling dataset a second time: the training loop seeds
TensorFlow per round, so both runs see the same example orders.
"""

import collections
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import tff_types
from tff_opt.round import composers
from tff_opt.round import ground

# What each client returns from a round of `compose`'s computation: its
# position in the round (as given) and its new state.
POSITION_KEY = 'position'
STATE_KEY = 'state'


class ClientStatefulProcess:
  """A learning process with per-client state (see the module docstring).

  Attributes:
    initialize: `tff.Computation` () -> server state, as a LearningProcess.
    next_computation: `tff.Computation` (state, data@CLIENTS,
      client_states@CLIENTS) -> (LearningProcessOutput, client_states@CLIENTS);
      with `positions=True`, (state, data@CLIENTS, client_states@CLIENTS,
      positions@CLIENTS) -> (LearningProcessOutput,
      {'position', 'state'}@CLIENTS) (see the module docstring).
    get_model_weights, set_model_weights, get_hparams, set_hparams: as for a
      `tff.learning.templates.LearningProcess`.
    client_state_type: The unplaced type of one client's state.
    positions: Whether `next_computation` takes each client's position and
      returns it with the client's new state (`compose`'s processes); `next`
      then files each state under its position.
  """

  def __init__(self, *, initialize, next_computation, get_model_weights,
               set_model_weights, get_hparams, set_hparams,
               initial_client_state, client_state_type,
               positions: bool = False):
    self.initialize = initialize
    self.next_computation = next_computation
    self.get_model_weights = get_model_weights
    self.set_model_weights = set_model_weights
    self.get_hparams = get_hparams
    self.set_hparams = set_hparams
    self._initial_client_state = initial_client_state
    self.client_state_type = client_state_type
    self.positions = positions

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
      ValueError: If the two lists differ in length, or (with positions)
        the computation returns a position that is missing, repeated or out
        of range.
    """
    if len(client_data) != len(client_states):
      raise ValueError(f'Got {len(client_data)} client datasets but '
                       f'{len(client_states)} client states.')
    if not self.positions:
      output, new_states = self.next_computation(state, list(client_data),
                                                 list(client_states))
      return output, list(new_states)
    positions = [np.int32(i) for i in range(len(client_data))]
    output, tagged = self.next_computation(state, list(client_data),
                                           list(client_states), positions)
    return output, in_position_order(tagged, len(client_data))


def in_position_order(tagged: Sequence[Any], num_clients: int) -> list:
  """The states of `tagged` (`{'position', 'state'}`s), by position.

  Args:
    tagged: What a round returned for its clients, in any order.
    num_clients: How many clients the round had.

  Returns:
    The states, the one tagged with position i at index i.

  Raises:
    ValueError: If the positions are not exactly `0..num_clients-1`, each
      once.
  """
  states = [None] * num_clients
  seen = [False] * num_clients
  positions = [int(np.asarray(item[POSITION_KEY])) for item in tagged]
  for position, item in zip(positions, tagged):
    if not 0 <= position < num_clients or seen[position]:
      break
    seen[position] = True
    states[position] = item[STATE_KEY]
  if len(tagged) != num_clients or not all(seen):
    raise ValueError(
        f'A round of {num_clients} clients returned client states for '
        f'positions {sorted(positions)}; expected each of 0..'
        f'{num_clients - 1} once (a client\'s new state would be filed under '
        'another client).')
  return states


def is_client_stateful(process) -> bool:
  """Whether `process` needs client states (a `ClientStatefulProcess`)."""
  return isinstance(process, ClientStatefulProcess)


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
    distributor: Its result is the model weights or a broadcast NamedTuple
      (`ground`); it may take a `ground.ServerState` to read the
      finalizer's state.
    client_work: Built with `broadcast_type=client_broadcast_type(broadcast
      type, client state type)`: it receives a `ground.ClientInput`.
    aggregator: A weighted aggregation process for the client updates.
    finalizer: Applies the aggregate to the global model.
    initial_client_state: NumPy structure: a new client's state.
    client_state_update: TF function `(client input, update) -> new
      client state` run at each client after its local training.
    client_input_fn: Optional TF function `(broadcast, client_state) ->
      what the client work receives` (of the client work's broadcast type),
      replacing the default `ground.ClientInput(broadcast, client_state)`.
    to_server: Optional TF function `update -> what the client sends`, run
      at each client before the aggregator, which must then be built for
      its result type.

  Returns:
    A `ClientStatefulProcess`.
  """
  # Over 80 lines with its docstring: the round's computations share the
  # types read here and are read in one place, as TFF's own composers are.
  client_state_type = tff_types.type_of(initial_client_state)
  broadcast_type = distributor.next.type_signature.result.result.member
  input_type = client_work.next.type_signature.parameter[1].member
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
    return ground.ClientInput(broadcast, client_state)

  @tff.tensorflow.computation(input_type, update_type)
  def new_client_state(client_input, update):
    return client_state_update(client_input, update)

  parts = (distributor, client_work, aggregator, finalizer)
  init_fn = composers.initialize_fn(initial_model_weights_fn, *parts)
  state_type = init_fn.type_signature.result

  @tff.tensorflow.computation(np.int32, client_state_type)
  def with_position(position, client_state):
    return collections.OrderedDict([(POSITION_KEY, position),
                                    (STATE_KEY, client_state)])

  @tff.federated_computation(
      state_type, data_type,
      tff.FederatedType(client_state_type, tff.CLIENTS),
      tff.FederatedType(np.int32, tff.CLIENTS))
  def next_fn(state, client_data, client_states, client_positions):
    new_state, metrics, client_input, client_output = composers.run_round(
        state, client_data, *parts,
        to_clients=lambda broadcast: tff.federated_map(
            merge, (broadcast, client_states)))
    updated_states = tff.federated_map(
        new_client_state, (client_input, client_output.result.update))
    updated_states = tff.federated_map(
        with_position, (client_positions, updated_states))
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
      client_state_type=client_state_type,
      positions=True)


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
  """The type a stateful client work receives: a `ground.ClientInput`."""
  return tff_types.named_tuple_type(ground.ClientInput, broadcast_type,
                                    client_state_type)


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
