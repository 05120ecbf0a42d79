"""Tests for tff_opt.round.optimizers: Reddi et al. Algorithm 2, and the registry.

The reference implementation below is written in the paper's notation, with
Delta_t = final - initial; the optimizers receive TFF's gradient-form update
g = -Delta_t.
"""

import collections
import re

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.round import optimizers

_BUILDERS = {
    'adagrad': optimizers.build_fed_adagrad,
    'adam': optimizers.build_fed_adam,
    'yogi': optimizers.build_fed_yogi,
}
_VARIANTS = tuple(_BUILDERS)
_SHAPES = collections.OrderedDict(kernel=(3, 2), bias=(4,))
_NUM_STEPS = 5
_RTOL = 1e-5
_ATOL = 1e-6


def _exact(message):
  return '^' + re.escape(message) + '$'


# ---------------------------------------------------------------- reference


def _paper_hparams(variant, **overrides):
  """The hyper-parameters a builder uses, with its defaults."""
  hparams = dict(learning_rate=0.1, tau=1e-3,
                 beta_1=0.0 if variant == 'adagrad' else 0.9, beta_2=0.99)
  hparams.update(overrides)
  return hparams


def _reference_run(variant, x0, deltas, *, learning_rates, tau, beta_1,
                   beta_2):
  """Algorithm 2 in NumPy (float64), in the paper's Delta notation.

  Args:
    variant: 'adagrad', 'adam' or 'yogi'.
    x0: Dict of initial weights.
    deltas: List (one per round) of dicts of Delta_t = final - initial.
    learning_rates: One eta per round.
    tau: Adaptivity.
    beta_1: First-moment decay.
    beta_2: Second-moment decay (unused by adagrad).

  Returns:
    (x, m, v, yogi_signs): final weights and moments (dicts), and for each
    round and leaf the array sign(v_{t-1} - Delta_t**2).
  """
  x = {k: np.asarray(a, np.float64) for k, a in x0.items()}
  m = {k: np.zeros_like(a) for k, a in x.items()}
  v = {k: np.full_like(a, tau**2) for k, a in x.items()}
  signs = []
  for eta, delta in zip(learning_rates, deltas):
    round_signs = {}
    for k in x:
      d = np.asarray(delta[k], np.float64)
      m[k] = beta_1 * m[k] + (1.0 - beta_1) * d
      if variant == 'adagrad':
        v[k] = v[k] + d**2
      elif variant == 'adam':
        v[k] = beta_2 * v[k] + (1.0 - beta_2) * d**2
      else:
        round_signs[k] = np.sign(v[k] - d**2)
        # Margin, so float32 and float64 agree on the sign.
        assert np.all(np.abs(v[k] - d**2) > 1e-4 * np.maximum(v[k], d**2))
        v[k] = v[k] - (1.0 - beta_2) * d**2 * np.sign(v[k] - d**2)
      x[k] = x[k] + eta * m[k] / (np.sqrt(v[k]) + tau)
    signs.append(round_signs)
  return x, m, v, signs


def _random_problem(seed=0, num_steps=_NUM_STEPS):
  """Initial weights and a sequence of Deltas mixing small and large entries."""
  rng = np.random.default_rng(seed)
  x0 = {k: rng.normal(size=s).astype(np.float32) for k, s in _SHAPES.items()}
  deltas = []
  for _ in range(num_steps):
    deltas.append({
        k: (rng.normal(size=s) * rng.choice([0.01, 2.0], size=s)).astype(
            np.float32) for k, s in _SHAPES.items()
    })
  return x0, deltas


def _specs():
  return collections.OrderedDict(
      (k, tf.TensorSpec(s, tf.float32)) for k, s in _SHAPES.items())


def _to_tf(d):
  return collections.OrderedDict(
      (k, tf.constant(d[k], tf.float32)) for k in _SHAPES)


def _gradient_form(delta):
  """TFF's update is initial - final = -Delta."""
  return collections.OrderedDict(
      (k, tf.constant(-delta[k], tf.float32)) for k in _SHAPES)


def _run_optimizer(opt, x0, deltas, *, learning_rates=None):
  """Runs `opt.next` eagerly; optionally sets learning_rate before each step."""
  state = opt.initialize(_specs())
  weights = _to_tf(x0)
  for t, delta in enumerate(deltas):
    if learning_rates is not None:
      hparams = opt.get_hparams(state)
      hparams['learning_rate'] = learning_rates[t]
      state = opt.set_hparams(state, hparams)
    state, weights = opt.next(state, weights, _gradient_form(delta))
  return state, weights


def _assert_close(actual, expected):
  for k in _SHAPES:
    np.testing.assert_allclose(
        np.asarray(actual[k]), expected[k], rtol=_RTOL, atol=_ATOL,
        err_msg=f'leaf {k}')


# ------------------------------------------------------------- the algorithm


@pytest.mark.parametrize('variant', _VARIANTS)
def test_five_steps_match_numpy_paper_algorithm(variant):
  x0, deltas = _random_problem()
  hp = _paper_hparams(variant)
  opt = _BUILDERS[variant](hp['learning_rate'])
  state, weights = _run_optimizer(opt, x0, deltas)
  x, m, v, _ = _reference_run(
      variant, x0, deltas, learning_rates=[hp['learning_rate']] * _NUM_STEPS,
      tau=hp['tau'], beta_1=hp['beta_1'], beta_2=hp['beta_2'])
  _assert_close(weights, x)
  # m is kept in gradient form: m_code = -m_paper; v is sign-free.
  _assert_close(state[optimizers.FIRST_MOMENT_KEY],
                {k: -a for k, a in m.items()})
  _assert_close(state[optimizers.SECOND_MOMENT_KEY], v)


def test_yogi_sequence_takes_both_sign_branches():
  x0, deltas = _random_problem()
  hp = _paper_hparams('yogi')
  *_, signs = _reference_run(
      'yogi', x0, deltas, learning_rates=[0.1] * _NUM_STEPS, tau=hp['tau'],
      beta_1=hp['beta_1'], beta_2=hp['beta_2'])
  all_signs = np.concatenate(
      [s[k].ravel() for s in signs for k in _SHAPES])
  # v_{t-1} > Delta^2 (v shrinks) and v_{t-1} < Delta^2 (v grows) both occur,
  # so the 5-step comparison above checks both branches of sign().
  assert np.sum(all_signs > 0) >= 5
  assert np.sum(all_signs < 0) >= 5
  assert not np.any(all_signs == 0)


@pytest.mark.parametrize('variant', _VARIANTS)
def test_first_step_closed_form_with_v_init_tau_squared(variant):
  # tau = 0.1 makes v_{-1} = tau^2 = 0.01 visible in the first step.
  eta, tau, beta_1, beta_2 = 0.3, 0.1, 0.5, 0.9
  x0, deltas = _random_problem(seed=1, num_steps=1)
  kwargs = dict(tau=tau, beta_1=beta_1)
  if variant != 'adagrad':
    kwargs['beta_2'] = beta_2
  opt = _BUILDERS[variant](eta, **kwargs)
  state, weights = _run_optimizer(opt, x0, deltas)
  for k in _SHAPES:
    d = deltas[0][k].astype(np.float64)
    if variant == 'adagrad':
      v0 = tau**2 + d**2
    elif variant == 'adam':
      v0 = beta_2 * tau**2 + (1 - beta_2) * d**2
    else:
      v0 = tau**2 - (1 - beta_2) * d**2 * np.sign(tau**2 - d**2)
    x1 = x0[k] + eta * (1 - beta_1) * d / (np.sqrt(v0) + tau)
    np.testing.assert_allclose(weights[k].numpy(), x1, rtol=_RTOL, atol=_ATOL)
    np.testing.assert_allclose(
        state[optimizers.SECOND_MOMENT_KEY][k].numpy(), v0, rtol=_RTOL)
    # The paper's update moves the weights along Delta (= -gradient).
    assert np.all(np.sign(weights[k].numpy() - x0[k]) == np.sign(d))


@pytest.mark.parametrize('variant', _VARIANTS)
def test_non_default_hparams_change_result_as_numpy_says(variant):
  x0, deltas = _random_problem(seed=2)
  custom = dict(tau=0.1, beta_1=0.5, beta_2=0.9)
  kwargs = dict(custom)
  if variant == 'adagrad':
    del kwargs['beta_2']
  opt = _BUILDERS[variant](0.2, **kwargs)
  _, weights = _run_optimizer(opt, x0, deltas)
  x_custom, *_ = _reference_run(
      variant, x0, deltas, learning_rates=[0.2] * _NUM_STEPS, **custom)
  x_default, *_ = _reference_run(
      variant, x0, deltas, learning_rates=[0.2] * _NUM_STEPS,
      **{k: v for k, v in _paper_hparams(variant).items()
         if k != 'learning_rate'})
  _assert_close(weights, x_custom)
  for k in _SHAPES:
    assert np.max(np.abs(x_custom[k] - x_default[k])) > 1e-2


def test_tau_zero_leaves_never_updated_coordinates_unchanged():
  opt = optimizers.build_fed_adam(0.1, tau=0.0)
  state = opt.initialize(_specs())
  np.testing.assert_array_equal(
      state[optimizers.SECOND_MOMENT_KEY]['bias'].numpy(), np.zeros(4))
  x0 = {'kernel': np.ones((3, 2), np.float32), 'bias': np.ones(4, np.float32)}
  delta = {'kernel': np.full((3, 2), 0.5, np.float32),
           'bias': np.array([0.0, 2.0, 0.0, -4.0], np.float32)}
  state, weights = opt.next(state, _to_tf(x0), _gradient_form(delta))
  # m = 0.1 * Delta, v = 0.01 * Delta^2: step = 0.1 * sign(Delta); 0/0 -> 0.
  np.testing.assert_allclose(weights['bias'].numpy(), [1.0, 1.1, 1.0, 0.9],
                             rtol=1e-6)
  np.testing.assert_allclose(weights['kernel'].numpy(), np.full((3, 2), 1.1),
                             rtol=1e-6)


# --------------------------------------------------------- hyper-parameters


@pytest.mark.parametrize('variant', _VARIANTS)
def test_get_hparams_keys_and_round_trip(variant):
  opt = _BUILDERS[variant](0.25, tau=0.05)
  state = opt.initialize(_specs())
  hparams = opt.get_hparams(state)
  expected = collections.OrderedDict(learning_rate=0.25,
                                     beta_1=_paper_hparams(variant)['beta_1'])
  if variant != 'adagrad':
    expected['beta_2'] = 0.99
  expected['tau'] = 0.05
  assert hparams == expected
  round_trip = opt.set_hparams(state, hparams)
  assert opt.get_hparams(round_trip) == expected
  tf.nest.map_structure(np.testing.assert_array_equal, round_trip, state)
  changed = opt.set_hparams(state, dict(hparams, beta_1=0.3, tau=0.2))
  assert opt.get_hparams(changed)['beta_1'] == 0.3
  assert opt.get_hparams(changed)['tau'] == 0.2


@pytest.mark.parametrize('variant', _VARIANTS)
def test_set_learning_rate_changes_next_steps(variant):
  x0, deltas = _random_problem(seed=3, num_steps=4)
  schedule = [0.1, 0.1, 0.0, 0.4]
  opt = _BUILDERS[variant](0.1)
  state, weights = _run_optimizer(opt, x0, deltas, learning_rates=schedule)
  hp = _paper_hparams(variant)
  x, _, v, _ = _reference_run(
      variant, x0, deltas, learning_rates=schedule, tau=hp['tau'],
      beta_1=hp['beta_1'], beta_2=hp['beta_2'])
  _assert_close(weights, x)
  # The moments kept advancing through the lr = 0 round.
  _assert_close(state[optimizers.SECOND_MOMENT_KEY], v)
  # And the schedule mattered: a constant 0.1 ends elsewhere.
  x_constant, *_ = _reference_run(
      variant, x0, deltas, learning_rates=[0.1] * 4, tau=hp['tau'],
      beta_1=hp['beta_1'], beta_2=hp['beta_2'])
  assert np.max(np.abs(x['bias'] - x_constant['bias'])) > 1e-2


def test_set_hparams_validates_values_and_keys():
  opt = optimizers.build_fed_yogi(0.1)
  state = opt.initialize(_specs())
  with pytest.raises(ValueError,
                     match=_exact('learning_rate must be a non-negative number, '
                                  'got -0.5.')):
    opt.set_hparams(state, {'learning_rate': -0.5})
  adagrad = optimizers.build_fed_adagrad(0.1)
  with pytest.raises(KeyError, match='beta_2'):
    adagrad.set_hparams(adagrad.initialize(_specs()), {'beta_2': 0.9})


# ------------------------------------------------------------ inside TFF


_MODEL_WEIGHTS_TYPE = tff.types.tensorflow_to_type(
    tff.learning.models.ModelWeights(
        trainable=[tf.TensorSpec(s, tf.float32) for s in _SHAPES.values()],
        non_trainable=[tf.TensorSpec((2,), tf.float32)]))


@pytest.fixture(scope='module')
def finalizers():
  cache = {}

  def get(variant):
    if variant not in cache:
      cache[variant] = tff.learning.templates.build_apply_optimizer_finalizer(
          _BUILDERS[variant](0.1), _MODEL_WEIGHTS_TYPE)
    return cache[variant]

  return get


@pytest.mark.parametrize('variant', _VARIANTS)
def test_apply_optimizer_finalizer_step_matches_numpy(finalizers, variant):
  finalizer = finalizers(variant)
  x0, deltas = _random_problem(seed=4, num_steps=2)
  keys = list(_SHAPES)
  non_trainable = [np.array([7.0, -7.0], np.float32)]
  weights = tff.learning.models.ModelWeights(
      trainable=[x0[k] for k in keys], non_trainable=non_trainable)
  state = finalizer.initialize()
  output = finalizer.next(state, weights,
                          [-deltas[0][k] for k in keys])
  hp = _paper_hparams(variant)
  x1, *_ = _reference_run(
      variant, x0, deltas[:1], learning_rates=[0.1], tau=hp['tau'],
      beta_1=hp['beta_1'], beta_2=hp['beta_2'])
  _assert_close(dict(zip(keys, output.result.trainable)), x1)
  np.testing.assert_array_equal(output.result.non_trainable[0],
                                non_trainable[0])

  # get/set_hparams as TFF computations: a schedule setting learning_rate.
  hparams = finalizer.get_hparams(output.state)
  assert list(hparams) == list(_BUILDERS[variant](0.1).get_hparams(
      _BUILDERS[variant](0.1).initialize(_specs())))
  hparams['learning_rate'] = 0.5
  state = finalizer.set_hparams(output.state, hparams)
  output = finalizer.next(state, output.result,
                          [-deltas[1][k] for k in keys])
  x2, *_ = _reference_run(
      variant, x0, deltas, learning_rates=[0.1, 0.5], tau=hp['tau'],
      beta_1=hp['beta_1'], beta_2=hp['beta_2'])
  _assert_close(dict(zip(keys, output.result.trainable)), x2)


# ------------------------------------------------------------- validation


@pytest.mark.parametrize('build, message', [
    (lambda: optimizers.build_fed_adam(-1.0),
     'learning_rate must be a non-negative number, got -1.0.'),
    (lambda: optimizers.build_fed_adagrad(0.1, tau=-1.0),
     'tau must be a non-negative number, got -1.0.'),
    (lambda: optimizers.build_fed_yogi(0.1, beta_1=1.0),
     'beta_1 must be in [0, 1), got 1.0.'),
    (lambda: optimizers.build_fed_adam(0.1, beta_2=-0.1),
     'beta_2 must be in [0, 1), got -0.1.'),
    (lambda: optimizers.build_server_optimizer('yogi', learning_rate=-2.0),
     'learning_rate must be positive, got -2.0.'),
    (lambda: optimizers.build_server_optimizer('sgd', learning_rate=0.0),
     'learning_rate must be positive, got 0.0.'),
    (lambda: optimizers.build_server_optimizer('tff_adam', learning_rate=0.1,
                                               beta_2=1.0),
     'beta_2 must be in [0, 1), got 1.0.'),
    (lambda: optimizers.build_server_optimizer('fedfancy', learning_rate=1.0),
     "Unknown server optimizer 'fedfancy'; expected one of sgd, sgdm, "
     'adagrad, adam, yogi, tff_adagrad, tff_adam, tff_yogi.'),
    (lambda: optimizers.build_client_optimizer('lamb', learning_rate=0.1),
     "Unknown client optimizer 'lamb'; expected one of sgd, sgdm, adam."),
    (lambda: optimizers.build_client_optimizer('sgd', learning_rate=0.0),
     'learning_rate must be positive, got 0.0.'),
    (lambda: optimizers.build_client_optimizer('sgd', learning_rate=-0.1),
     'learning_rate must be positive, got -0.1.'),
])
def test_invalid_arguments_raise_value_error_naming_them(build, message):
  with pytest.raises(ValueError, match=_exact(message)):
    build()


def test_tff_adagrad_rejects_momentum():
  with pytest.raises(ValueError, match="beta_1 is not supported by "
                     "'tff_adagrad'"):
    optimizers.build_server_optimizer('tff_adagrad', learning_rate=0.1,
                                      beta_1=0.9)


def test_zero_learning_rate_and_tau_are_allowed():
  for variant, build in _BUILDERS.items():
    opt = build(0.0, tau=0.0)
    assert opt.get_hparams(opt.initialize(_specs()))['tau'] == 0.0, variant


# --------------------------------------------------------------- registry


def test_registry_names():
  assert optimizers.SERVER_OPTIMIZERS == (
      'sgd', 'sgdm', 'adagrad', 'adam', 'yogi', 'tff_adagrad', 'tff_adam',
      'tff_yogi')
  assert optimizers.CLIENT_OPTIMIZERS == ('sgd', 'sgdm', 'adam')
  for name in optimizers.SERVER_OPTIMIZERS:
    opt = optimizers.build_server_optimizer(name, learning_rate=0.1)
    assert isinstance(opt, tff.learning.optimizers.Optimizer), name
  for name in optimizers.CLIENT_OPTIMIZERS:
    opt = optimizers.build_client_optimizer(name, learning_rate=0.1)
    assert isinstance(opt, tff.learning.optimizers.Optimizer), name


@pytest.mark.parametrize('variant', _VARIANTS)
def test_registry_paper_optimizers_use_paper_defaults(variant):
  opt = optimizers.build_server_optimizer(variant, learning_rate=0.1)
  hparams = opt.get_hparams(opt.initialize(_specs()))
  assert hparams['beta_1'] == (0.0 if variant == 'adagrad' else 0.9)
  assert hparams['tau'] == 1e-3
  x0, deltas = _random_problem(seed=5, num_steps=3)
  _, weights = _run_optimizer(opt, x0, deltas)
  _, expected = _run_optimizer(_BUILDERS[variant](0.1), x0, deltas)
  for k in _SHAPES:
    np.testing.assert_array_equal(weights[k].numpy(), expected[k].numpy())


def test_tff_adam_is_bias_corrected_and_differs_from_paper_adam():
  eta, tau, beta_1, beta_2 = 0.1, 1e-3, 0.9, 0.9
  x0, deltas = _random_problem(seed=6, num_steps=1)
  results = {}
  for name in ('adam', 'tff_adam'):
    opt = optimizers.build_server_optimizer(name, learning_rate=eta, tau=tau,
                                            beta_2=beta_2)
    _, results[name] = _run_optimizer(opt, x0, deltas)
  for k in _SHAPES:
    g = -deltas[0][k].astype(np.float64)
    paper = x0[k] - eta * (1 - beta_1) * g / (
        np.sqrt(beta_2 * tau**2 + (1 - beta_2) * g**2) + tau)
    # TFF's Adam: v starts at 0, lr * sqrt(1 - beta_2^t) / (1 - beta_1^t).
    corrected_lr = eta * np.sqrt(1 - beta_2) / (1 - beta_1)
    tff_adam = x0[k] - corrected_lr * (1 - beta_1) * g / (
        np.sqrt((1 - beta_2) * g**2) + tau)
    np.testing.assert_allclose(results['adam'][k].numpy(), paper, rtol=_RTOL,
                               atol=_ATOL)
    np.testing.assert_allclose(results['tff_adam'][k].numpy(), tff_adam,
                               rtol=_RTOL, atol=_ATOL)
    step_paper = results['adam'][k].numpy() - x0[k]
    step_tff = results['tff_adam'][k].numpy() - x0[k]
    # Bias correction makes TFF's first step about 1 / sqrt(1 - beta_2) ~ 3.2
    # times larger here.
    assert np.all(np.abs(step_tff) > 2.5 * np.abs(step_paper))


def test_tff_adagrad_and_yogi_get_tau_mapping():
  adagrad = optimizers.build_server_optimizer('tff_adagrad',
                                              learning_rate=0.1, tau=0.05)
  state = adagrad.initialize(_specs())
  assert state['epsilon'] == 0.05
  np.testing.assert_allclose(state['preconditioner']['bias'].numpy(),
                             np.full(4, 0.0025), rtol=1e-6)
  yogi = optimizers.build_server_optimizer('tff_yogi', learning_rate=0.1,
                                           tau=0.05, beta_1=0.5, beta_2=0.9)
  assert yogi.get_hparams(yogi.initialize(_specs())) == collections.OrderedDict(
      learning_rate=0.1, beta_1=0.5, beta_2=0.9, epsilon=0.05)


def test_registry_sgd_with_unit_learning_rate_is_fedavg():
  opt = optimizers.build_server_optimizer('sgd', learning_rate=1.0)
  x0, deltas = _random_problem(seed=7, num_steps=1)
  state = opt.initialize(_specs())
  assert opt.get_hparams(state) == collections.OrderedDict(learning_rate=1.0)
  _, weights = opt.next(state, _to_tf(x0), _gradient_form(deltas[0]))
  for k in _SHAPES:
    np.testing.assert_array_equal(weights[k].numpy(),
                                  x0[k] - (-deltas[0][k]))


def test_registry_sgdm_accumulates_momentum():
  opt = optimizers.build_server_optimizer('sgdm', learning_rate=0.5)
  x0, deltas = _random_problem(seed=8, num_steps=2)
  state = opt.initialize(_specs())
  assert opt.get_hparams(state)['momentum'] == 0.9
  weights = _to_tf(x0)
  for delta in deltas:
    state, weights = opt.next(state, weights, _gradient_form(delta))
  for k in _SHAPES:
    g1, g2 = -deltas[0][k], -deltas[1][k]
    expected = x0[k] - 0.5 * g1 - 0.5 * (0.9 * g1 + g2)
    np.testing.assert_allclose(weights[k].numpy(), expected, rtol=1e-6,
                               atol=1e-6)


def test_registry_client_optimizers():
  sgd = optimizers.build_client_optimizer('sgd', learning_rate=0.02)
  assert sgd.get_hparams(sgd.initialize(_specs())) == collections.OrderedDict(
      learning_rate=0.02)
  sgdm = optimizers.build_client_optimizer('sgdm', learning_rate=0.02,
                                           momentum=0.5)
  assert sgdm.get_hparams(sgdm.initialize(_specs()))['momentum'] == 0.5
  adam = optimizers.build_client_optimizer('adam', learning_rate=0.02)
  assert set(adam.get_hparams(adam.initialize(_specs()))) == {
      'learning_rate', 'beta_1', 'beta_2', 'epsilon'}


def test_integer_hparams_are_stored_as_floats():
  opt = optimizers.build_fed_adam(1, tau=0, beta_1=0)
  hparams = opt.get_hparams(opt.initialize(_specs()))
  assert all(type(v) is float for v in hparams.values()), hparams
