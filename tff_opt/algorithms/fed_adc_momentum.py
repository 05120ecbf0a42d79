"""FedADC's momentum pieces: embedded global momentum, server rule, local EMA.

FedADC (Ozfatura et al., "FedADC: Accelerated Federated Learning with Drift
Control", Algorithms 3 and 4) broadcasts the model w_t and the global
momentum m_t (m_0 = 0). On a client with H local steps this round:

    m_bar = beta_local * m_t / H
    heavy ball  (Alg. 3, blue):  w <- w - eta * (g(w) + m_bar)
    Nesterov    (Alg. 3, red):   w_half = w - eta * m_bar
                                 w <- w_half - eta * g(w_half)
    double momentum (Alg. 4):    m_i <- g at the first step,
                                 m_i <- phi * m_i + (1 - phi) * g after,
                                 w <- w - eta * (m_bar + m_i)

and the server, from the client deltas Delta_k = w_t - w_k,

    Delta_bar = mean_k(Delta_k) / eta_t
    m_{t+1}   = Delta_bar + (beta_global - beta_local) * m_t
    w_{t+1}   = w_t - alpha * eta_t * m_{t+1}.

How the pieces map onto the shared client work:

- `embedded_momentum_hook`: the heavy-ball step adds the constant m_bar to
  every gradient, which is exactly the gradient of the linear penalty
  <w, m_bar>; the client work differentiates it.
- `nesterov_look_ahead_hook`: the Nesterov step is the same penalty plus
  the look-ahead offset -eta * m_bar (the gradient is taken at w - eta *
  m_bar, the step from w: w - eta * (g(w - eta * m_bar) + m_bar) = w_half -
  eta * g(w_half)).
- m_bar and -eta * m_bar are constant within a client's round, so both are
  `ground.PrecomputedHook`s, computed once per client
  (`embedded_momentum`, `look_ahead_offsets`) rather than at every step.
- `LocalEmaMomentum`: Algorithm 4's local momentum. m_bar is constant within
  a round, so an EMA of (g + m_bar) started at its first value equals
  m_bar + EMA(g): the double-momentum step is this optimizer applied to the
  gradient of loss + <w, m_bar>.
- `build_fedadc_finalizer`: the server rule, with the momentum in its state;
  `distributors.with_finalizer_state` broadcasts it.

Choices written down here:
- H is the client's number of batches this round (its dataset already holds
  its epochs), counted before its loop; it may differ between clients.
- eta_t at the server is the client learning rate of the round: the
  finalizer keeps its own round number (advanced every round, as the client
  work's is) and evaluates the same schedule, or uses the constant rate.
  Changing the client work's learning rate with `set_hparams` does not
  reach the server rule; use a schedule.
- The mean over clients is the aggregator's (uniform by default in
  `build_fed_adc`, as in the paper; example weighting is an option).
- A round whose aggregate is not finite is rejected: model and momentum stay
  as they were and `update_non_finite` is 1 (as for FedOpt).
"""

import collections
import functools
from collections.abc import Callable
from typing import Any, NamedTuple, Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import checks
from tff_opt.round import ground

MOMENTUM_KEY = 'momentum'
# `LocalEmaMomentum`'s hyper-parameter phi, under the name TFF's SGDM gives
# its momentum hyper-parameter (an optimizer's, not the finalizer's state).
LOCAL_MOMENTUM_KEY = 'momentum'
STEP_KEY = 'step'
ACCUMULATOR_KEY = 'accumulator'


class Broadcast(NamedTuple):
  """FedADC's (and SlowMo's) broadcast: w_t and the global momentum m_t."""
  model_weights: Any
  momentum: Any  # m_t, in the order of the trainable weights.


def _momentum_scale(beta_local: float, num_steps: tf.Tensor) -> tf.Tensor:
  """beta_local / H, with H >= 1 (a client without batches takes no step)."""
  steps = tf.maximum(tf.cast(num_steps, tf.float32), 1.0)
  return tf.constant(beta_local, tf.float32) / steps


def embedded_momentum(broadcast, *, learning_rate, num_steps,
                      beta_local: float) -> list[tf.Tensor]:
  """m_bar = beta_local * m_t / H, the per-client constant of both hooks.

  Args:
    broadcast: A `Broadcast` (w_t, m_t).
    learning_rate: Unused (the step's eta is the optimizer's).
    num_steps: H, the client's number of local steps this round.
    beta_local: beta_local of Algorithm 3.

  Returns:
    m_bar, a list in the order of the trainable weights.
  """
  del learning_rate
  scale = _momentum_scale(beta_local, num_steps)
  return [scale * m for m in broadcast.momentum]


def linear_step(weights, m_bar) -> tf.Tensor:
  """<w, m_bar>, whose gradient is m_bar (m_bar is a constant)."""
  return tf.add_n([
      tf.reduce_sum(w * tf.stop_gradient(m)) for w, m in zip(weights, m_bar)
  ])


def embedded_momentum_hook(beta_local: float
                           ) -> ground.PrecomputedHook:
  """The heavy-ball penalty <w, m_bar>, m_bar = beta_local * m_t / H.

  Its gradient is m_bar. m_bar is computed once per client
  (`embedded_momentum`), the product at every step (`linear_step`); called
  as `hook(weights, broadcast, *, learning_rate, num_steps)` (a
  `Broadcast`) it returns the penalty's value.
  """
  return ground.PrecomputedHook(
      functools.partial(embedded_momentum, beta_local=beta_local),
      linear_step)


def look_ahead_offsets(broadcast, *, learning_rate, num_steps,
                       beta_local: float) -> list[tf.Tensor]:
  """-eta * m_bar, the Nesterov look-ahead offsets (constant in a round)."""
  scale = tf.cast(learning_rate, tf.float32) * _momentum_scale(
      beta_local, num_steps)
  return [-scale * m for m in broadcast.momentum]


def nesterov_look_ahead_hook(beta_local: float
                             ) -> ground.PrecomputedHook:
  """The Nesterov variant's look-ahead offsets -eta * m_bar.

  Computed once per client (`look_ahead_offsets`); called as
  `hook(weights, broadcast, *, learning_rate, num_steps)` it returns them.
  """
  return ground.PrecomputedHook(
      functools.partial(look_ahead_offsets, beta_local=beta_local),
      lambda weights, offsets: offsets)


class LocalEmaMomentum(tff.learning.optimizers.Optimizer):
  """Algorithm 4's local momentum: an EMA started at the first gradient.

      m <- g                         (first step)
      m <- phi * m + (1 - phi) * g   (later steps)
      w <- w - learning_rate * m

  State keys: `learning_rate`, `momentum` (phi), `step`, `accumulator`;
  hyper-parameters: `learning_rate`, `momentum`.
  """

  def __init__(self, learning_rate: float, momentum: float):
    """Args: learning_rate: eta, positive. momentum: phi, in [0, 1).

    Raises:
      ValueError: If an argument is out of range; the message names it.
    """
    checks.check_positive('learning_rate', learning_rate)
    checks.check_unit_interval('momentum', momentum)
    self._learning_rate = learning_rate
    self._momentum = momentum

  def initialize(self, specs: Any) -> collections.OrderedDict:
    return collections.OrderedDict([
        (ground.LEARNING_RATE_KEY, float(self._learning_rate)),
        (LOCAL_MOMENTUM_KEY, float(self._momentum)),
        (STEP_KEY, tf.constant(0, tf.int32)),
        (ACCUMULATOR_KEY,
         tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), specs)),
    ])

  def next(self, state, weights, gradients):
    phi = state[LOCAL_MOMENTUM_KEY]
    first = tf.equal(state[STEP_KEY], 0)
    accumulator = tf.nest.map_structure(
        lambda m, g: tf.where(first, g, phi * m + (1.0 - phi) * g),
        state[ACCUMULATOR_KEY], gradients)
    updated = tf.nest.map_structure(
        lambda w, m: w - state[ground.LEARNING_RATE_KEY] * m, weights,
        accumulator)
    new_state = collections.OrderedDict(state)
    new_state[STEP_KEY] = state[STEP_KEY] + 1
    new_state[ACCUMULATOR_KEY] = accumulator
    return new_state, updated

  def get_hparams(self, state):
    return collections.OrderedDict([
        (ground.LEARNING_RATE_KEY, state[ground.LEARNING_RATE_KEY]),
        (LOCAL_MOMENTUM_KEY, state[LOCAL_MOMENTUM_KEY]),
    ])

  def set_hparams(self, state, hparams):
    new_state = collections.OrderedDict(state)
    for key in (ground.LEARNING_RATE_KEY, LOCAL_MOMENTUM_KEY):
      if key in hparams:
        new_state[key] = hparams[key]
    return new_state


def build_fedadc_finalizer(
    weights_type: tff.Type,
    *,
    client_learning_rate: float,
    beta_global: float,
    beta_local: float,
    alpha: float,
    learning_rate_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
) -> tff.learning.templates.FinalizerProcess:
  """Builds FedADC's server rule (see the module docstring).

  Args:
    weights_type: The unplaced `ModelWeights` type of the model.
    client_learning_rate: eta when there is no schedule.
    beta_global: beta_global of Algorithm 3.
    beta_local: beta_local of Algorithm 3 (the share of m_t the clients
      already applied).
    alpha: The server learning rate alpha.
    learning_rate_schedule: Optional round number -> eta_t (the client
      work's schedule).

  Returns:
    A `FinalizerProcess` whose state is `{'round_num', 'momentum'}` (momentum
    shaped like the trainable weights, zero at first), whose `next` takes the
    aggregated gradient-form delta mean_k(w_t - w_k) and whose measurements
    are `{'update_non_finite'}`.
  """
  # Over 80 lines with its docstring: the finalizer's computations share the
  # types read here and are read in one place, as TFF's
  # build_apply_optimizer_finalizer is.
  trainable_specs = tff.types.type_to_tf_tensor_specs(weights_type.trainable)
  correction = float(beta_global) - float(beta_local)

  def round_learning_rate(round_num):
    if learning_rate_schedule is None:
      return tf.constant(client_learning_rate, tf.float32)
    return tf.cast(learning_rate_schedule(round_num), tf.float32)

  @tff.tensorflow.computation
  def initial_state():
    return collections.OrderedDict([
        (ground.ROUND_NUM_KEY, tf.constant(0, tf.int32)),
        (MOMENTUM_KEY,
         tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype),
                               trainable_specs)),
    ])

  state_type = initial_state.type_signature.result
  update_type = weights_type.trainable

  @tff.tensorflow.computation(state_type, weights_type, update_type)
  def apply_rule(state, weights, update):
    eta = round_learning_rate(state[ground.ROUND_NUM_KEY])
    momentum = [
        u / eta + correction * m
        for u, m in zip(tf.nest.flatten(update),
                        tf.nest.flatten(state[MOMENTUM_KEY]))
    ]
    trainable = [
        w - alpha * eta * m
        for w, m in zip(tf.nest.flatten(weights.trainable), momentum)
    ]
    finite = checks.all_finite(momentum + trainable)
    old_momentum = tf.nest.flatten(state[MOMENTUM_KEY])
    old_trainable = tf.nest.flatten(weights.trainable)
    momentum = [tf.where(finite, a, b) for a, b in zip(momentum, old_momentum)]
    trainable = [
        tf.where(finite, a, b) for a, b in zip(trainable, old_trainable)
    ]
    new_state = collections.OrderedDict([
        (ground.ROUND_NUM_KEY, state[ground.ROUND_NUM_KEY] + 1),
        (MOMENTUM_KEY,
         tf.nest.pack_sequence_as(state[MOMENTUM_KEY], momentum)),
    ])
    new_weights = tff.learning.models.ModelWeights(
        trainable=tf.nest.pack_sequence_as(weights.trainable, trainable),
        non_trainable=weights.non_trainable)
    return new_state, new_weights, tf.cast(tf.logical_not(finite), tf.int32)

  @tff.federated_computation
  def init_fn():
    return tff.federated_eval(initial_state, tff.SERVER)

  @tff.federated_computation(
      init_fn.type_signature.result,
      tff.FederatedType(weights_type, tff.SERVER),
      tff.FederatedType(update_type, tff.SERVER))
  def next_fn(state, weights, update):
    new_state, new_weights, non_finite = tff.federated_map(
        apply_rule, (state, weights, update))
    measurements = tff.federated_zip(
        collections.OrderedDict([(ground.UPDATE_NON_FINITE_KEY,
                                  non_finite)]))
    return tff.templates.MeasuredProcessOutput(new_state, new_weights,
                                               measurements)

  return tff.learning.templates.FinalizerProcess(init_fn, next_fn)


def momentum_broadcast(model_weights, finalizer_state) -> Broadcast:
  """`broadcast_fn` for `distributors.with_finalizer_state`: w_t and m_t."""
  return Broadcast(model_weights, finalizer_state[MOMENTUM_KEY])
