"""SCAFFOLD, option II (Karimireddy et al.), as Reddi et al.'s Algorithm 6.

The server keeps the model x and a control variate c; client i keeps its
own control variate c_i. Round t broadcasts (x_t, c); client i, starting
from x_t, takes its K local steps (its local epochs over its batches)

    x <- x - eta (g(x) - c_i + c)

(the correction c - c_i is constant within the round, so it is the linear
penalty <x, c - c_i> of `linear_correction`), then

    c_i+ = c_i - c + (x_t - x_K) / (K eta),   Delta c_i = c_i+ - c_i,

reports its delta x_t - x_K and Delta c_i, and keeps c_i+. The server
averages the deltas by example count (Reddi et al.'s weighted averaging;
uniform is an option) and applies its server optimizer (SGD with learning
rate 1 is the paper's x <- x + Delta), and

    c <- c + (1/N) sum_{i in S} Delta c_i.

Choices written down (and tested):
- A client sampled for the first time starts with c_i = c (Reddi et al.),
  so with every client sampled at most once SCAFFOLD equals FedAvg exactly.
  The client state is `{'initialized': bool, 'control_variate': c_i}`, the
  initial one uninitialized; c starts at zero.
- N is `num_clients` (Karimireddy et al.'s population size) when given,
  else the number of clients that took part in the round (the
  full-participation form, c <- c + mean Delta c_i); the training binary
  uses the latter.
- eta is the round's client learning rate; the rule assumes a plain SGD
  client optimizer, as the paper's does. A client with no batch (K = 0)
  keeps c_i (Delta c_i = 0).
- Communication doubles FedAvg's both ways: (x, c) down, (Delta x, Delta c)
  up. The client state lives with the training loop (keyed by client id,
  checkpointed with the server state).
"""

import collections
from collections.abc import Callable
from typing import Any, NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import tff_types
from tff_opt.algorithms import _common
from tff_opt.algorithms import hparams
from tff_opt.algorithms import recipe as recipe_lib
from tff_opt.round import aggregators
from tff_opt.round import client_states
from tff_opt.round import client_work as client_work_lib
from tff_opt.round import distributors
from tff_opt.round import finalizers
from tff_opt.round import ground

# The finalizer-state and client-state key of c and c_i.
CONTROL_VARIATE_KEY = 'control_variate'
CONTROL_DELTA_KEY = 'control_delta'


SPEC = hparams.Spec(
    summary=('SCAFFOLD option II (Reddi et al. Algorithm 6): client and '
             'server control variates, client state kept by the training '
             'loop, c <- c + (1/N) sum_S Delta c_i with N the task\'s '
             'training clients; server optimizer from --server_opt'),
    client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
    task_facts=('num_clients',))


class ControlVariate(NamedTuple):
  """SCAFFOLD's broadcast (`algorithms/scaffold.py`)."""
  model_weights: Any
  control_variate: Any  # The server's c, shaped like the trainables.


def _sum(tensors) -> tf.Tensor:
  return tf.add_n([tf.reduce_sum(t) for t in tensors])


def linear_correction(weights, broadcast, *, learning_rate) -> tf.Tensor:
  """SCAFFOLD's drift correction as a penalty: <w, c - c_i>.

  Its gradient c - c_i is constant within a round, so a local SGD step
  w <- w - eta (g + c - c_i) is Karimireddy et al.'s corrected step. c is
  the broadcast's `control_variate`; c_i is the client's own control variate
  (`client_state['control_variate']`), or c when the client has none yet
  (`client_state['initialized']` false).

  Args:
    weights: The trainable variables, in model order.
    broadcast: A `ground.ClientInput` of a `ControlVariate` and the
      client's state.
    learning_rate: Unused.

  Returns:
    A scalar tensor.
  """
  del learning_rate
  c = broadcast.broadcast.control_variate
  c_i = effective_client_control_variate(broadcast)
  return _sum([w * (a - b) for w, a, b in zip(weights, c, c_i)])


def effective_client_control_variate(broadcast):
  """c_i, or the server's c for a client seen for the first time (of a
  `ground.ClientInput` of a `ControlVariate`)."""
  state = broadcast.client_state
  c = broadcast.broadcast.control_variate
  return [
      tf.where(state[ground.INITIALIZED_KEY], own, server)
      for own, server in zip(state[CONTROL_VARIATE_KEY], c)
  ]


def _control_delta(model, dataset, broadcast, *, delta, num_steps,
                   learning_rate, num_examples):
  """Delta c_i = (x_t - x_K) / (K eta) - c  (0 when K = 0)."""
  del model, dataset, num_examples
  k_eta = tf.cast(num_steps, tf.float32) * tf.cast(learning_rate, tf.float32)
  took_steps = num_steps > 0
  return collections.OrderedDict([(CONTROL_DELTA_KEY, [
      tf.where(took_steps, tf.math.divide_no_nan(d, k_eta) - c,
               tf.zeros_like(d))
      for d, c in zip(delta, broadcast.broadcast.control_variate)
  ])])


def _client_state_update(client_input, update):
  c_i = effective_client_control_variate(client_input)
  return collections.OrderedDict([
      (ground.INITIALIZED_KEY, tf.constant(True)),
      (CONTROL_VARIATE_KEY,
       [a + b for a, b in zip(c_i, update[CONTROL_DELTA_KEY])]),
  ])


def build_scaffold(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting = SPEC.client_weighting,
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    num_clients: Optional[int] = None,
) -> client_states.ClientStatefulProcess:
  """Builds a SCAFFOLD (option II) process with per-client state.

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel` on each call.
    client_optimizer_fn: The client's optimizer (SGD in the paper); its
      learning rate is the eta of the control-variate update.
    server_optimizer_fn: The server's optimizer for the averaged delta.
    client_weighting: `NUM_EXAMPLES` (default) or `UNIFORM`, for the deltas.
    client_lr_schedule: Optional round number -> client learning rate.
    num_clients: The population size N of c's update; `None` uses the
      number of clients of the round.

  Returns:
    A `client_states.ClientStatefulProcess`: `next(state, datasets,
    client_states) -> (output, new_client_states)`.

  Raises:
    ValueError: If `num_clients` is given and not a positive integer.
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
  """
  recipe_fn = scaffold_recipe(server_optimizer_fn=server_optimizer_fn,
                              num_clients=num_clients)
  return recipe_lib.assemble(model_fn, recipe_fn, client_optimizer_fn,
                             client_weighting, client_lr_schedule)


def scaffold_recipe(
    *,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    num_clients: Optional[int] = None,
) -> recipe_lib.RecipeFn:
  """SCAFFOLD's recipe (see the module docstring), for `recipe.assemble`.

  The finalizer applies the server optimizer to the mean delta and keeps c
  beside it (`finalizers.apply_optimizer_with_extras`); the distributor
  broadcasts (x, c); the clients take the corrected steps
  (`linear_correction`), report Delta c_i with their delta
  (`_control_delta`, summed by `aggregators.mean_delta_sum_rest`) and keep
  c_i+.

  Raises:
    ValueError: If `num_clients` is given and not a positive integer.
  """
  if num_clients is not None and (isinstance(num_clients, bool) or
                                  not isinstance(num_clients, int) or
                                  num_clients < 1):
    raise ValueError('num_clients must be a positive integer or None, got '
                     f'{num_clients!r}.')

  def recipe_fn(weights_type):
    _common.check_server_optimizer(server_optimizer_fn)
    zeros = tff_types.zeros_of(weights_type.trainable)
    vector_type = tff_types.type_of(zeros)
    broadcast_type = tff_types.named_tuple_type(ControlVariate,
                                                weights_type, vector_type)
    initial_client_state = collections.OrderedDict([
        (ground.INITIALIZED_KEY, np.bool_(False)),
        (CONTROL_VARIATE_KEY, tff_types.zeros_of(vector_type)),
    ])

    def update_extras(extras, aggregate):
      if num_clients is None:
        n = tf.cast(aggregate[aggregators.NUM_CLIENTS_KEY], tf.float32)
      else:
        n = tf.constant(float(num_clients))
      total = aggregate[aggregators.SUMS_KEY][CONTROL_DELTA_KEY]
      return collections.OrderedDict([(CONTROL_VARIATE_KEY, [
          c + tf.math.divide_no_nan(s, n)
          for c, s in zip(extras[CONTROL_VARIATE_KEY], total)
      ])])

    def finalizer_fn(aggregate_type):
      return finalizers.apply_optimizer_with_extras(
          server_optimizer_fn,
          weights_type,
          aggregate_type,
          initial_extras=collections.OrderedDict([
              (CONTROL_VARIATE_KEY, zeros)]),
          update_extras=update_extras)

    def distributor_fn(finalizer_state_type):
      return distributors.with_finalizer_state(
          weights_type, finalizer_state_type,
          lambda weights, state: ControlVariate(
              weights,
              state[finalizers.EXTRAS_KEY][CONTROL_VARIATE_KEY]))

    return recipe_lib.Recipe(
        work_broadcast_type=client_states.client_broadcast_type(
            broadcast_type, tff_types.type_of(initial_client_state)),
        distributor_fn=distributor_fn,
        aggregator_fn=aggregators.mean_delta_sum_rest,
        finalizer_fn=finalizer_fn,
        objective=client_work_lib.LocalObjective(
            penalty=linear_correction),
        passes=client_work_lib.ClientPasses(report_fn=_control_delta),
        initial_client_state=initial_client_state,
        client_state_update=_client_state_update)

  return recipe_fn
