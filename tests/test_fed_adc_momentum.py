"""FedADC's momentum pieces (`tff_opt/algorithms/fed_adc_momentum.py`), one
at a time.

The per-client constants of the embedded momentum (m_bar = beta_local m_t /
H and the Nesterov offsets -eta m_bar), Algorithm 4's local EMA momentum
(`LocalEmaMomentum`) and the server rule (`build_fedadc_finalizer`), each
against the paper's formulas computed in NumPy. FedADC and SlowMo end to end
are tests/test_fed_adc.py's and tests/test_slowmo.py's.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.algorithms import fed_adc_momentum
from tff_opt.round import ground
from tff_opt.round import schedules

RNG = np.random.default_rng(7)
SHAPES = ((4, 3), (3,))


def _arrays(scale=1.0):
  return [np.float32(scale * RNG.standard_normal(s)) for s in SHAPES]


def test_fed_adc_constants_match_numpy():
  m = _arrays()
  broadcast = fed_adc_momentum.Broadcast(model_weights=None, momentum=m)
  m_bar = fed_adc_momentum.embedded_momentum(broadcast, learning_rate=0.2,
                                     num_steps=tf.constant(4), beta_local=0.9)
  offsets = fed_adc_momentum.nesterov_look_ahead_hook(0.9)(
      None, broadcast, learning_rate=0.2, num_steps=tf.constant(4))
  for got, a in zip(m_bar, m):
    np.testing.assert_allclose(got, 0.9 * a / 4, rtol=1e-6)
  for got, a in zip(offsets, m):
    np.testing.assert_allclose(got, -0.2 * 0.9 * a / 4, rtol=1e-6)
  weights = [tf.Variable(a) for a in _arrays()]
  with tf.GradientTape() as tape:
    value = fed_adc_momentum.embedded_momentum_hook(0.9)(
        weights, broadcast, learning_rate=0.2, num_steps=tf.constant(4))
  for g, a in zip(tape.gradient(value, weights), m):
    np.testing.assert_allclose(g, 0.9 * a / 4, rtol=1e-6)


def test_momentum_broadcast_is_the_model_and_the_finalizers_momentum():
  weights = tff.learning.models.ModelWeights(_arrays(), [])
  m = _arrays()
  sent = fed_adc_momentum.momentum_broadcast(
      weights, {fed_adc_momentum.MOMENTUM_KEY: m, ground.ROUND_NUM_KEY: 3})
  assert isinstance(sent, fed_adc_momentum.Broadcast)
  assert sent._fields == ('model_weights', 'momentum')
  assert sent.model_weights is weights and sent.momentum is m


# --- Algorithm 4's local momentum ---------------------------------------------


def test_local_ema_momentum_starts_at_the_first_gradient():
  eta, phi = 0.1, 0.6
  optimizer = fed_adc_momentum.LocalEmaMomentum(eta, phi)
  w0 = _arrays()
  gradients = [_arrays() for _ in range(3)]
  specs = tuple(tf.TensorSpec(a.shape, tf.float32) for a in w0)
  state = optimizer.initialize(specs)
  weights = tuple(tf.constant(a) for a in w0)
  for g in gradients:
    state, weights = optimizer.next(state, weights,
                                    tuple(tf.constant(a) for a in g))
  # m_1 = g_1, then m <- phi m + (1 - phi) g; w <- w - eta m.
  w = [a.astype(np.float64) for a in w0]
  m = None
  for g in gradients:
    m = g if m is None else [phi * a + (1 - phi) * b for a, b in zip(m, g)]
    w = [a - eta * b for a, b in zip(w, m)]
  for got, want in zip(weights, w):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  assert int(state[fed_adc_momentum.STEP_KEY]) == 3
  assert {k: float(v) for k, v in optimizer.get_hparams(state).items()} == (
      pytest.approx({'learning_rate': eta, 'momentum': phi}))


def test_local_ema_momentum_set_hparams_changes_the_next_step():
  optimizer = fed_adc_momentum.LocalEmaMomentum(0.1, 0.5)
  state = optimizer.initialize((tf.TensorSpec((2,), tf.float32),))
  state = optimizer.set_hparams(state, {'learning_rate': 0.5})
  assert float(optimizer.get_hparams(state)['momentum']) == 0.5
  _, (w,) = optimizer.next(state, (tf.constant([1.0, 2.0]),),
                           (tf.constant([1.0, -2.0]),))
  np.testing.assert_allclose(w, [1.0 - 0.5 * 1.0, 2.0 + 0.5 * 2.0])


@pytest.mark.parametrize('args, message', [
    ((0.0, 0.5), 'learning_rate must be positive, got 0.0.'),
    ((0.1, 1.0), r'momentum must be in \[0, 1\), got 1.0.'),
])
def test_local_ema_momentum_rejects_bad_hparams(args, message):
  with pytest.raises(ValueError, match=f'^{message}$'):
    fed_adc_momentum.LocalEmaMomentum(*args)


# --- The server rule ------------------------------------------------------------

BETA_GLOBAL, BETA_LOCAL, ALPHA = 0.8, 0.5, 0.9
WEIGHTS_TYPE = tff.types.tensorflow_to_type(
    tff.learning.models.ModelWeights(
        trainable=[tf.TensorSpec(s, tf.float32) for s in SHAPES],
        non_trainable=[tf.TensorSpec((2,), tf.float32)]))


def _eta(round_num):
  return 0.2 * 0.5**(round_num // 2)  # The schedule of the fixture.


@pytest.fixture(scope='module')
def finalizer():
  return fed_adc_momentum.build_fedadc_finalizer(
      WEIGHTS_TYPE, client_learning_rate=0.2, beta_global=BETA_GLOBAL,
      beta_local=BETA_LOCAL, alpha=ALPHA,
      learning_rate_schedule=schedules.staircase_decay(
          0.2, decay_factor=0.5, decay_every=2))


def test_server_rule_matches_numpy_with_each_rounds_eta(finalizer):
  w0 = _arrays()
  non_trainable = [np.float32([7.0, -7.0])]
  updates = [_arrays(0.1) for _ in range(3)]
  state = finalizer.initialize()
  weights = tff.learning.models.ModelWeights(w0, non_trainable)
  for u in updates:
    output = finalizer.next(state, weights, u)
    assert output.measurements['update_non_finite'] == 0
    state, weights = output.state, output.result
  # m_{t+1} = Delta_bar / eta_t + (beta_global - beta_local) m_t,
  # w_{t+1} = w_t - alpha eta_t m_{t+1}, eta_t = 0.2, 0.2, 0.1.
  w = [a.astype(np.float64) for a in w0]
  m = [np.zeros_like(a) for a in w]
  for t, u in enumerate(updates):
    m = [d / _eta(t) + (BETA_GLOBAL - BETA_LOCAL) * a for d, a in zip(u, m)]
    w = [a - ALPHA * _eta(t) * b for a, b in zip(w, m)]
  for got, want in zip(weights.trainable, w):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  for got, want in zip(state[fed_adc_momentum.MOMENTUM_KEY], m):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(weights.non_trainable[0], non_trainable[0])
  assert int(state[ground.ROUND_NUM_KEY]) == 3


def test_non_finite_round_keeps_model_and_momentum(finalizer):
  w0 = _arrays()
  first = finalizer.next(finalizer.initialize(),
                         tff.learning.models.ModelWeights(
                             w0, [np.zeros(2, np.float32)]),
                         _arrays(0.1))
  bad = [np.full(s, np.nan, np.float32) for s in SHAPES]
  output = finalizer.next(first.state, first.result, bad)
  assert output.measurements['update_non_finite'] == 1
  for got, want in zip(output.result.trainable, first.result.trainable):
    np.testing.assert_array_equal(got, want)
  for got, want in zip(output.state[fed_adc_momentum.MOMENTUM_KEY],
                       first.state[fed_adc_momentum.MOMENTUM_KEY]):
    np.testing.assert_array_equal(got, want)
  # The round still counts: eta_t follows the client work's round number.
  assert int(output.state[ground.ROUND_NUM_KEY]) == 2
