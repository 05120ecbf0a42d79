"""Server optimizers of Reddi et al., "Adaptive Federated Optimization".

FedAdagrad, FedAdam and FedYogi exactly as Algorithm 2 of the paper, as
`tff.learning.optimizers.Optimizer`s, plus a small by-name registry of server
and client optimizers for the training binary.

The paper's server update for round t (Delta_t is the example-weighted mean
of the clients' `final - initial` models, eta the server learning rate, tau
the adaptivity, all operations elementwise):

```
m_t     = beta_1 * m_{t-1} + (1 - beta_1) * Delta_t,         m_{-1} = 0
v_t     = v_{t-1} + Delta_t**2                                (FedAdagrad)
v_t     = beta_2 * v_{t-1} + (1 - beta_2) * Delta_t**2        (FedAdam)
v_t     = v_{t-1}
          - (1 - beta_2) * Delta_t**2 * sign(v_{t-1} - Delta_t**2)  (FedYogi)
x_{t+1} = x_t + eta * m_t / (sqrt(v_t) + tau),                v_{-1} = tau**2
```

Sign convention. A TFF server optimizer does not receive Delta_t: TFF's client
work reports the model delta in *gradient form*, `initial - final`, and
`tff.learning.templates.build_apply_optimizer_finalizer` passes its weighted
mean to `Optimizer.next` as `gradients`. So `next` receives g = -Delta_t and
the code reads

```
m = beta_1 * m + (1 - beta_1) * g
v = v + g**2                                                  (adagrad)
v = beta_2 * v + (1 - beta_2) * g**2                          (adam)
v = v - (1 - beta_2) * g**2 * sign(v - g**2)                  (yogi)
w = w - learning_rate * m / (sqrt(v) + tau)
```

which is the paper's update term for term: m flips sign with Delta, while
Delta**2 = g**2 and hence v (and Yogi's sign) are unchanged.

Choices made here (the paper leaves them open or they differ from TFF):

- No bias correction and no step counter, as in Algorithm 2. TFF's own
  `build_adam`/`build_yogi` apply Adam's bias correction and start their second
  moment at 0 (Adam) or 1e-6 (Yogi); they stay available in the registry as
  'tff_adam'/'tff_yogi' (and 'tff_adagrad'), but they are not the paper's.
- v_{-1} = tau**2, fixed when `initialize` is called. The hyper-parameters
  `learning_rate`, `beta_1`, `beta_2` (not for Adagrad) and `tau` are kept in
  the optimizer state, so `get_hparams`/`set_hparams` can read and change
  them (a sweep or a learning-rate schedule sets `learning_rate`). Changing
  `tau` through `set_hparams` changes the tau in the denominator only; the
  moments already accumulated are kept.
- tau = 0 is allowed (v_{-1} = 0). A coordinate that has only ever received
  zero updates then has m = v = 0, and its step m / (sqrt(v) + tau) = 0 / 0 is
  taken to be 0 (`tf.math.divide_no_nan`): it does not move, instead of
  becoming NaN. For tau > 0 the denominator is never 0 and this changes
  nothing.
- FedAdagrad keeps a first moment too (beta_1 = 0 by default, the paper's
  Appendix D choice), so its momentum can be turned on.
- Hyper-parameters given as Python numbers are validated up front and by
  `set_hparams`; symbolic tensors (inside a TFF computation) are not.
"""

import collections
from collections.abc import Mapping
import numbers
from typing import Any, Optional, Union

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import checks
from tff_opt.round import ground

_optimizer_lib = tff.learning.optimizers

Float = Union[float, tf.Tensor]

BETA_1_KEY = 'beta_1'
BETA_2_KEY = 'beta_2'
TAU_KEY = 'tau'
FIRST_MOMENT_KEY = 'first_moment'
SECOND_MOMENT_KEY = 'second_moment'

_ADAGRAD = 'adagrad'
_ADAM = 'adam'
_YOGI = 'yogi'

SERVER_OPTIMIZERS = ('sgd', 'sgdm', 'adagrad', 'adam', 'yogi', 'tff_adagrad',
                     'tff_adam', 'tff_yogi')
CLIENT_OPTIMIZERS = ('sgd', 'sgdm', 'adam')

# The keyword arguments of `build_server_optimizer` each one reads (the
# others are ignored by it).
_ADAPTIVE_ARGS = ('learning_rate', 'tau', 'beta_1', 'beta_2')
SERVER_OPTIMIZER_ARGS = {
    'sgd': ('learning_rate',),
    'sgdm': ('learning_rate', 'momentum'),
    **{name: _ADAPTIVE_ARGS[:3] for name in (_ADAGRAD, 'tff_adagrad')},
    **{name: _ADAPTIVE_ARGS for name in (_ADAM, _YOGI, 'tff_adam',
                                         'tff_yogi')},
}

# Paper defaults for beta_1 (Appendix D): 0 for FedAdagrad, 0.9 otherwise.
_DEFAULT_BETA_1 = {_ADAGRAD: 0.0, _ADAM: 0.9, _YOGI: 0.9}


def _adagrad_second_moment(v, g2, beta_2):
  del beta_2  # Adagrad sums; it has no decay.
  return v + g2


def _adam_second_moment(v, g2, beta_2):
  return beta_2 * v + (1.0 - beta_2) * g2


def _yogi_second_moment(v, g2, beta_2):
  return v - (1.0 - beta_2) * g2 * tf.math.sign(v - g2)


_SECOND_MOMENT_RULES = {
    _ADAGRAD: _adagrad_second_moment,
    _ADAM: _adam_second_moment,
    _YOGI: _yogi_second_moment,
}


class _FedAdaptive(_optimizer_lib.Optimizer):
  """FedAdagrad, FedAdam or FedYogi; see the module docstring."""

  def __init__(self, variant: str, learning_rate, *, tau, beta_1,
               beta_2=None):
    if variant not in _SECOND_MOMENT_RULES:
      raise ValueError(f'Unknown variant {variant!r}; expected one of '
                       f'{sorted(_SECOND_MOMENT_RULES)}.')
    self._variant = variant
    self._hparams_keys = [ground.LEARNING_RATE_KEY, BETA_1_KEY, TAU_KEY]
    if variant != _ADAGRAD:
      self._hparams_keys.insert(2, BETA_2_KEY)
    hparams = collections.OrderedDict(
        learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2, tau=tau)
    # Python numbers become floats, so that an int learning rate still gives a
    # float32 state that `set_hparams` can later fill with any float.
    self._hparams = collections.OrderedDict(
        (k, float(hparams[k]) if isinstance(hparams[k], numbers.Real)
         else hparams[k]) for k in self._hparams_keys)
    self._validate(self._hparams)

  def _validate(self, hparams: Mapping[str, Any]) -> None:
    for key, value in hparams.items():
      if key in (ground.LEARNING_RATE_KEY, TAU_KEY):
        checks.check_non_negative(key, value)
      elif key in (BETA_1_KEY, BETA_2_KEY):
        checks.check_unit_interval(key, value)

  def initialize(self, specs: Any) -> collections.OrderedDict[str, Any]:
    tau = self._hparams[TAU_KEY]
    first_moment = tf.nest.map_structure(
        lambda s: tf.zeros(s.shape, s.dtype), specs)
    second_moment = tf.nest.map_structure(
        lambda s: tf.fill(s.shape, tf.square(tf.cast(tau, s.dtype))), specs)
    state = collections.OrderedDict(self._hparams)
    state[FIRST_MOMENT_KEY] = first_moment
    state[SECOND_MOMENT_KEY] = second_moment
    return state

  def next(self, state, weights, gradients):
    gradients = _optimizer_lib.handle_indexed_slices_gradients(gradients)
    _optimizer_lib.check_weights_gradients_match(weights, gradients)
    first_moment = state[FIRST_MOMENT_KEY]
    second_moment = state[SECOND_MOMENT_KEY]
    _check_state_matches_weights(FIRST_MOMENT_KEY, first_moment, weights)
    _check_state_matches_weights(SECOND_MOMENT_KEY, second_moment, weights)
    second_moment_rule = _SECOND_MOMENT_RULES[self._variant]
    lr = state[ground.LEARNING_RATE_KEY]
    beta_1 = state[BETA_1_KEY]
    # Adagrad has no beta_2; its second-moment rule ignores the value.
    beta_2 = state[BETA_2_KEY] if BETA_2_KEY in self._hparams_keys else 0.0
    tau = state[TAU_KEY]

    def _update(w, m, v, g):
      if g is None:
        return w, m, v
      dtype = g.dtype
      b1 = tf.cast(beta_1, dtype)
      m = b1 * m + (1.0 - b1) * g
      v = second_moment_rule(v, tf.square(g), tf.cast(beta_2, dtype))
      step = tf.math.divide_no_nan(m, tf.sqrt(v) + tf.cast(tau, dtype))
      return w - tf.cast(lr, dtype) * step, m, v

    new_weights, new_first_moment, new_second_moment = _map_at_leaves(
        _update, weights, first_moment, second_moment, gradients)
    new_state = collections.OrderedDict(
        (k, state[k]) for k in self._hparams_keys)
    new_state[FIRST_MOMENT_KEY] = new_first_moment
    new_state[SECOND_MOMENT_KEY] = new_second_moment
    return new_state, new_weights

  def get_hparams(self, state):
    return collections.OrderedDict((k, state[k]) for k in self._hparams_keys)

  def set_hparams(self, state, hparams):
    unknown = set(hparams) - set(self._hparams_keys)
    if unknown:
      raise KeyError(f'Unknown hyper-parameters {sorted(unknown)}; this '
                     f'optimizer has {self._hparams_keys}.')
    self._validate(hparams)
    return tff.structure.update_struct(state, **hparams)


def _check_state_matches_weights(name: str, state_part: Any,
                                 weights: Any) -> None:
  """Raises if a moment in the state does not match the weights' structure."""
  try:
    tf.nest.assert_same_structure(weights, state_part, check_types=True)
    mismatched = [
        (w.shape, w.dtype, s.shape, s.dtype)
        for w, s in zip(tf.nest.flatten(weights), tf.nest.flatten(state_part))
        if not w.shape.is_compatible_with(s.shape) or w.dtype != s.dtype
    ]
  except (TypeError, ValueError) as e:
    raise ValueError(
        f'The optimizer state\'s {name} does not match the weights: '
        f'{state_part} vs {weights}. Was `initialize` called with specs of '
        'other weights?') from e
  if mismatched:
    raise ValueError(
        f'The optimizer state\'s {name} does not match the weights '
        f'(weight shape, dtype, {name} shape, dtype): {mismatched}. Was '
        '`initialize` called with specs of other weights?')


def _map_at_leaves(fn, weights, *others):
  """Applies `fn` leaf-wise; returns three structures shaped like `weights`."""
  flat = [tf.nest.flatten(x) for x in (weights, *others)]
  results = [fn(*leaves) for leaves in zip(*flat)]
  return tuple(
      tf.nest.pack_sequence_as(weights, [r[i] for r in results])
      for i in range(3))


def build_fed_adagrad(
    learning_rate: Float,
    *,
    tau: Float = 1e-3,
    beta_1: Float = 0.0,
) -> tff.learning.optimizers.Optimizer:
  """Returns the paper-exact FedAdagrad server optimizer (Algorithm 2).

  With `g` the aggregated update in gradient form (`initial - final`):

  ```
  m = beta_1 * m + (1 - beta_1) * g          m starts at 0
  v = v + g**2                               v starts at tau**2
  w = w - learning_rate * m / (sqrt(v) + tau)
  ```

  Args:
    learning_rate: The server learning rate eta, non-negative.
    tau: The adaptivity tau, non-negative; also sets v_{-1} = tau**2.
    beta_1: The first-moment decay, in [0, 1); the paper uses 0.

  Returns:
    A `tff.learning.optimizers.Optimizer`.

  Raises:
    ValueError: If `learning_rate` or `tau` is negative, or `beta_1` is not in
      [0, 1).
  """
  return _FedAdaptive(_ADAGRAD, learning_rate, tau=tau, beta_1=beta_1)


def build_fed_adam(
    learning_rate: Float,
    *,
    tau: Float = 1e-3,
    beta_1: Float = 0.9,
    beta_2: Float = 0.99,
) -> tff.learning.optimizers.Optimizer:
  """Returns the paper-exact FedAdam server optimizer (Algorithm 2).

  With `g` the aggregated update in gradient form (`initial - final`), and no
  bias correction:

  ```
  m = beta_1 * m + (1 - beta_1) * g          m starts at 0
  v = beta_2 * v + (1 - beta_2) * g**2       v starts at tau**2
  w = w - learning_rate * m / (sqrt(v) + tau)
  ```

  Args:
    learning_rate: The server learning rate eta, non-negative.
    tau: The adaptivity tau, non-negative; also sets v_{-1} = tau**2.
    beta_1: The first-moment decay, in [0, 1).
    beta_2: The second-moment decay, in [0, 1).

  Returns:
    A `tff.learning.optimizers.Optimizer`.

  Raises:
    ValueError: If `learning_rate` or `tau` is negative, or `beta_1` or
      `beta_2` is not in [0, 1).
  """
  return _FedAdaptive(_ADAM, learning_rate, tau=tau, beta_1=beta_1,
                      beta_2=beta_2)


def build_fed_yogi(
    learning_rate: Float,
    *,
    tau: Float = 1e-3,
    beta_1: Float = 0.9,
    beta_2: Float = 0.99,
) -> tff.learning.optimizers.Optimizer:
  """Returns the paper-exact FedYogi server optimizer (Algorithm 2).

  With `g` the aggregated update in gradient form (`initial - final`), and no
  bias correction:

  ```
  m = beta_1 * m + (1 - beta_1) * g                   m starts at 0
  v = v - (1 - beta_2) * g**2 * sign(v - g**2)        v starts at tau**2
  w = w - learning_rate * m / (sqrt(v) + tau)
  ```

  Unlike FedAdam's exponential average, v moves by at most (1 - beta_2) g**2
  per round, toward g**2, so a single large update cannot erase it.

  Args:
    learning_rate: The server learning rate eta, non-negative.
    tau: The adaptivity tau, non-negative; v starts at tau**2 and tau is
      added to sqrt(v) in the step; smaller is more adaptive.
    beta_1: The first-moment decay, in [0, 1).
    beta_2: Sets the size (1 - beta_2) of v's additive sign update, in
      [0, 1).

  Returns:
    A `tff.learning.optimizers.Optimizer` whose state holds m and v.

  Raises:
    ValueError: If `learning_rate` or `tau` is negative, or either beta is
      outside [0, 1).
  """
  return _FedAdaptive(_YOGI, learning_rate, tau=tau, beta_1=beta_1,
                      beta_2=beta_2)


def build_server_optimizer(
    name: str,
    *,
    learning_rate: Float,
    tau: Float = 1e-3,
    beta_1: Optional[Float] = None,
    beta_2: Float = 0.99,
    momentum: Float = 0.9,
) -> tff.learning.optimizers.Optimizer:
  """Builds a server optimizer by name.

  Names (`SERVER_OPTIMIZERS`):
    'sgd': `tff.learning.optimizers.build_sgdm(learning_rate)`, no momentum
      (FedAvg when `learning_rate` is 1).
    'sgdm': SGD with momentum `momentum` (FedAvgM).
    'adagrad', 'adam', 'yogi': the paper-exact `build_fed_adagrad`,
      `build_fed_adam`, `build_fed_yogi`.
    'tff_adagrad', 'tff_adam', 'tff_yogi': TFF's own (bias-corrected)
      `build_adagrad`, `build_adam`, `build_yogi`, with `epsilon = tau` and,
      for Adagrad, `initial_preconditioner_value = tau**2`. TFF's Yogi keeps
      its own initial preconditioner (1e-6, which is tau**2 at tau = 1e-3).
      These are not the paper's algorithms (TFF's Adagrad also puts epsilon
      inside the square root); they are here for comparison.

  Args:
    name: One of `SERVER_OPTIMIZERS`.
    learning_rate: The server learning rate, positive.
    tau: The adaptivity (epsilon for the 'tff_*' optimizers), non-negative.
      Ignored by 'sgd' and 'sgdm'.
    beta_1: The first-moment decay; `None` means the paper's default: 0 for
      'adagrad', 0.9 for 'adam', 'yogi', 'tff_adam', 'tff_yogi'. Ignored by
      'sgd' and 'sgdm'; 'tff_adagrad' has no momentum, so a non-zero value is
      an error there.
    beta_2: The second-moment decay for the Adam and Yogi variants.
    momentum: The momentum of 'sgdm', in [0, 1).

  Returns:
    A `tff.learning.optimizers.Optimizer`.

  Raises:
    ValueError: If `name` is unknown, or a hyper-parameter is out of range.
  """
  if name not in SERVER_OPTIMIZERS:
    raise ValueError(f'Unknown server optimizer {name!r}; expected one of '
                     f'{", ".join(SERVER_OPTIMIZERS)}.')
  # A server learning rate of 0 would never move the model: refused, as a
  # client learning rate of 0 is.
  checks.check_positive(ground.LEARNING_RATE_KEY, learning_rate)
  if name == 'sgd':
    return _optimizer_lib.build_sgdm(learning_rate)
  if name == 'sgdm':
    checks.check_unit_interval('momentum', momentum)
    return _optimizer_lib.build_sgdm(learning_rate, momentum=momentum)

  variant = name[len('tff_'):] if name.startswith('tff_') else name
  if beta_1 is None:
    beta_1 = _DEFAULT_BETA_1[variant]
  checks.check_non_negative(TAU_KEY, tau)
  checks.check_unit_interval(BETA_1_KEY, beta_1)
  if variant != _ADAGRAD:
    checks.check_unit_interval(BETA_2_KEY, beta_2)

  if name == 'adagrad':
    return build_fed_adagrad(learning_rate, tau=tau, beta_1=beta_1)
  if name == 'adam':
    return build_fed_adam(learning_rate, tau=tau, beta_1=beta_1, beta_2=beta_2)
  if name == 'yogi':
    return build_fed_yogi(learning_rate, tau=tau, beta_1=beta_1, beta_2=beta_2)
  if name == 'tff_adagrad':
    if not tf.is_symbolic_tensor(beta_1) and float(beta_1) != 0.0:
      raise ValueError("beta_1 is not supported by 'tff_adagrad' (TFF's "
                       f"Adagrad has no momentum), got {beta_1}; use "
                       "'adagrad' for FedAdagrad with momentum.")
    return _optimizer_lib.build_adagrad(
        learning_rate, initial_preconditioner_value=tau**2, epsilon=tau)
  if name == 'tff_adam':
    return _optimizer_lib.build_adam(
        learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=tau)
  return _optimizer_lib.build_yogi(
      learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=tau)


def build_client_optimizer(
    name: str,
    *,
    learning_rate: Float,
    momentum: Float = 0.9,
) -> tff.learning.optimizers.Optimizer:
  """Builds a client optimizer by name.

  Names (`CLIENT_OPTIMIZERS`): 'sgd' (TFF's `build_sgdm` without momentum),
  'sgdm' (`build_sgdm` with `momentum`), 'adam' (TFF's `build_adam`).

  Args:
    name: One of `CLIENT_OPTIMIZERS`.
    learning_rate: The client learning rate, positive.
    momentum: The momentum of 'sgdm', in [0, 1).

  Returns:
    A `tff.learning.optimizers.Optimizer`.

  Raises:
    ValueError: If `name` is unknown, `learning_rate` is not positive or
      `momentum` is out of range.
  """
  if name not in CLIENT_OPTIMIZERS:
    raise ValueError(f'Unknown client optimizer {name!r}; expected one of '
                     f'{", ".join(CLIENT_OPTIMIZERS)}.')
  checks.check_positive(ground.LEARNING_RATE_KEY, learning_rate)
  if name == 'sgd':
    return _optimizer_lib.build_sgdm(learning_rate, momentum=None)
  if name == 'sgdm':
    checks.check_unit_interval('momentum', momentum)
    return _optimizer_lib.build_sgdm(learning_rate, momentum=momentum)
  return _optimizer_lib.build_adam(learning_rate)
