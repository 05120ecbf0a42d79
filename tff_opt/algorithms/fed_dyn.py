"""FedDyn (Acar et al., "Federated Learning Based on Dynamic Regularization").

Algorithm 1 of the paper, with m clients in all, P_t the clients of round t
and theta^{t-1} the broadcast model. Client k in P_t minimises, from
theta^{t-1},

    L_k(theta) - <g_k, theta> + (alpha/2) ||theta - theta^{t-1}||^2,     (1)

g_k = grad L_k(theta_k^{t-1}) its linear term (`dynamic`; autodiff
gives the local gradient g - g_k + alpha (theta - theta^{t-1})), with its
client optimizer over its local epochs, ending at theta_k^t, and keeps

    g_k <- g_k - alpha (theta_k^t - theta^{t-1})                       (2)

(the first-order condition of (1) at its minimiser). The server keeps h
(h^0 = 0) and sets

    h^t     = h^{t-1} - (alpha/m) sum_{k in P_t} (theta_k^t - theta^{t-1})   (3)
    theta^t = mean_{k in P_t} theta_k^t - h^t / alpha.                  (4)

The FedFOR paper (its Eq. 10, FedPD/FedDyn together) prints the linear term
with a + sign; Acar et al.'s minus sign is implemented here, which is what
makes (2) the gradient of L_k at theta_k^t.

How it maps onto tff-opt's round (with Delta_k = theta^{t-1} - theta_k^t,
the gradient-form delta the client work reports):
- client state (`client_states`, kept and checkpointed by the training
  loop): `{'local_gradient': g_k}`, zeros for a client never seen (the
  paper's grad L_k(theta_k^0) = 0, so a client's first round is FedProx's
  with mu = alpha); (2) is g_k <- g_k + alpha Delta_k;
- the server rule lives in the aggregator, whose state is h: it returns the
  pseudo-gradient mean_k Delta_k + h^t / alpha with h^t = h^{t-1} +
  (alpha/m) sum_k Delta_k, and the server optimizer applies it. SGD with
  learning rate 1 (`--server_opt=sgd --server_lr=1`) is exactly (4); any
  other server optimizer takes that pseudo-gradient as FedOpt takes its
  mean delta (an extension, not the paper's).

Choices written down (and tested):
- The mean of (4) is uniform over the round's clients by default
  (`client_weighting=UNIFORM`, the paper's); `NUM_EXAMPLES` weights it by
  example count. The sum of (3) is always a plain sum, divided by m =
  `num_clients` (the population; the training binary passes the task's
  number of training clients).
- A client whose update is not finite reports Delta_k = 0 with weight 0
  (`client_work`): it is left out of the mean, adds nothing to h and keeps
  its g_k. A round whose pseudo-gradient is not finite is rejected by the
  finalizer (model kept); h then gains nothing either.
- alpha must be > 0 (it divides h); the papers' grids: FedADC's
  {0.1, 0.01, 0.001}; the binary's default `--feddyn_alpha=0.01`.
- Communication is FedAvg's: the model down, Delta_k up; g_k never leaves
  the client and h never leaves the server.
"""

import collections
import functools
from collections.abc import Callable, Mapping
from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import tff_types
from tff_opt.algorithms import _common
from tff_opt.algorithms import hparams
from tff_opt.algorithms import recipe as recipe_lib
from tff_opt.round import client_states
from tff_opt.round import client_work as client_work_lib
from tff_opt.round import finalizers
from tff_opt.round import ground

# The client-state key of g_k.
LOCAL_GRADIENT_KEY = 'local_gradient'
H_KEY = 'h'
MEAN_STATE_KEY = 'mean'


ALPHA = hparams.HParam(
    'feddyn_alpha', 0.01, 'FedDyn regularization strength alpha, > 0 '
    '(FedADC\'s grid: 0.1, 0.01, 0.001).', lower=0.0, lower_open=True,
    argument='alpha')
SPEC = hparams.Spec(
    summary=('FedDyn (Acar et al. Algorithm 1): local objective L_k - <g_k, '
             'w> + (alpha/2)||w - w_t||^2 with per-client state g_k kept by '
             'the training loop, server correction h (--feddyn_alpha); the '
             'paper\'s server step is --server_opt=sgd --server_lr=1'),
    hparams=(ALPHA,),
    # Acar et al. Algorithm 1: (1/|P|) sum theta_k.
    client_weighting=tff.learning.ClientWeighting.UNIFORM,
    server_rule='sgd', task_facts=('num_clients',))


def _sum(tensors) -> tf.Tensor:
  return tf.add_n([tf.reduce_sum(t) for t in tensors])


def dynamic(weights, broadcast, *, learning_rate, alpha) -> tf.Tensor:
  """FedDyn's dynamic regularizer (Acar et al., Algorithm 1).

  -<g_k, w> + (alpha/2) ||w - w_t||^2, gradient -g_k + alpha (w - w_t),
  where w_t is the broadcast model and g_k (the client's
  `client_state['local_gradient']`) its gradient of L_k at the end of its
  previous round, 0 before its first.

  Args:
    weights: The trainable variables, in model order.
    broadcast: A `ground.ClientInput` of the model (w_t) and the client's
      state.
    learning_rate: Unused.
    alpha: The regularization strength, > 0.

  Returns:
    A scalar tensor.
  """
  del learning_rate
  anchor = ground.model_weights_of(broadcast).trainable
  g = broadcast.client_state[LOCAL_GRADIENT_KEY]
  return _sum([
      0.5 * alpha * tf.square(w - a) - gk * w
      for w, a, gk in zip(weights, anchor, g)
  ])


def check_num_clients(num_clients) -> None:
  """Raises ValueError unless `num_clients` is an integer >= 1."""
  if (isinstance(num_clients, bool) or not isinstance(num_clients, int) or
      num_clients < 1):
    raise ValueError('num_clients must be a positive integer (the number of '
                     f'clients in the population), got {num_clients!r}.')


def _delta_of(update):
  if isinstance(update, Mapping):
    return update[ground.DELTA_KEY]
  return update


def dynamic_aggregator(update_type: tff.Type, weight_type: tff.Type, *,
                       alpha: float,
                       num_clients: int) -> tff.templates.AggregationProcess:
  """FedDyn's server rule (3)-(4) as a weighted aggregation process.

  Args:
    update_type: The unplaced type of a client's delta (trainable weights).
    weight_type: The unplaced type of a client's weight.
    alpha: The regularization strength, > 0.
    num_clients: The population size m.

  Returns:
    An `AggregationProcess` whose state is `{'mean': MeanFactory state,
    'h': h}` and whose result is mean_k Delta_k + h^t / alpha, with
    h^t = h + (alpha/m) sum_k Delta_k.
  """
  mean_process = tff.aggregators.MeanFactory().create(update_type,
                                                      weight_type)
  initial_h = tff_types.zeros_of(update_type)

  @tff.federated_computation
  def init_fn():
    return tff.federated_zip(collections.OrderedDict([
        (MEAN_STATE_KEY, mean_process.initialize()),
        (H_KEY, tff.federated_value(initial_h, tff.SERVER)),
    ]))

  state_type = init_fn.type_signature.result.member

  @tff.tensorflow.computation(state_type[H_KEY], update_type, update_type)
  def correct(h, mean, total):
    new_h = tf.nest.map_structure(lambda a, s: a + (alpha / num_clients) * s,
                                  h, total)
    pseudo_gradient = tf.nest.map_structure(lambda d, a: d + a / alpha, mean,
                                            new_h)
    return new_h, pseudo_gradient

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(update_type, tff.CLIENTS),
                             tff.FederatedType(weight_type, tff.CLIENTS))
  def next_fn(state, update, weight):
    mean_output = mean_process.next(state[MEAN_STATE_KEY], update, weight)
    new_h, pseudo_gradient = tff.federated_map(
        correct, (state[H_KEY], mean_output.result,
                  tff.federated_sum(update)))
    new_state = tff.federated_zip(collections.OrderedDict([
        (MEAN_STATE_KEY, mean_output.state), (H_KEY, new_h)]))
    return tff.templates.MeasuredProcessOutput(new_state, pseudo_gradient,
                                               mean_output.measurements)

  return tff.templates.AggregationProcess(init_fn, next_fn)


def fed_dyn_recipe(*, alpha: float, num_clients: int,
                   server_optimizer_fn: tff.learning.optimizers.Optimizer
                   ) -> recipe_lib.RecipeFn:
  """FedDyn's recipe (`recipe.Recipe`), for `build_fed_dyn` and FedBN.

  Raises:
    ValueError: If `alpha` is not > 0 or `num_clients` not >= 1.
  """
  ALPHA.check(alpha)
  check_num_clients(num_clients)

  def recipe_fn(weights_type):
    _common.check_server_optimizer(server_optimizer_fn)
    gradient = tff_types.zeros_of(weights_type.trainable)
    initial_client_state = collections.OrderedDict([
        (LOCAL_GRADIENT_KEY, gradient)])

    def client_state_update(client_input, update):
      g = client_input.client_state[LOCAL_GRADIENT_KEY]
      return collections.OrderedDict([(LOCAL_GRADIENT_KEY, [
          a + alpha * d for a, d in zip(g, _delta_of(update))])])

    return recipe_lib.Recipe(
        work_broadcast_type=client_states.client_broadcast_type(
            weights_type, tff_types.type_of(initial_client_state)),
        distributor_fn=lambda _: (
            tff.learning.templates.build_broadcast_process(weights_type)),
        aggregator_fn=functools.partial(dynamic_aggregator, alpha=alpha,
                                        num_clients=num_clients),
        finalizer_fn=lambda _: (
            finalizers.apply_optimizer(server_optimizer_fn, weights_type)),
        objective=client_work_lib.LocalObjective(
            penalty=functools.partial(dynamic, alpha=alpha)),
        initial_client_state=initial_client_state,
        client_state_update=client_state_update)

  return recipe_fn


def build_fed_dyn(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    alpha: float,
    num_clients: int,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting = SPEC.client_weighting,
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
) -> client_states.ClientStatefulProcess:
  """Builds a FedDyn process with per-client state (module docstring).

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel` on each call.
    alpha: The dynamic regularization strength, > 0.
    num_clients: The number m of clients in the population, >= 1.
    client_optimizer_fn: The client's optimizer (SGD in the paper).
    server_optimizer_fn: The server's optimizer for the pseudo-gradient
      mean_k Delta_k + h / alpha; SGD with learning rate 1 is the paper's.
    client_weighting: `UNIFORM` (default, the paper's mean) or
      `NUM_EXAMPLES`.
    client_lr_schedule: Optional round number -> client learning rate.

  Returns:
    A `client_states.ClientStatefulProcess`: `next(state, datasets,
    client_states) -> (output, new_client_states)`; h is
    `state.aggregator['h']`.

  Raises:
    ValueError: If `alpha` is not > 0 or `num_clients` not >= 1.
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
  """
  recipe_fn = fed_dyn_recipe(alpha=alpha, num_clients=num_clients,
                             server_optimizer_fn=server_optimizer_fn)
  return recipe_lib.assemble(model_fn, recipe_fn, client_optimizer_fn,
                             client_weighting, client_lr_schedule)

