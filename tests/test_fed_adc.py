"""FedADC (Algorithms 3-4) against NumPy and FedOpt.

The NumPy reference below implements the paper's algorithms as written
(look-ahead point, local momentum with first-step initialisation, server
rule), independently of the penalty / optimizer algebra the library uses;
tests/test_slowmo.py checks SlowMo (Algorithm 2, beta_local = 0) with it.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import binary
from tests import replay
from tests import tiny
from tff_opt import algorithms
from tff_opt.algorithms import fed_adc
from tff_opt.program import training_loop
from tff_opt.round import schedules

ROUNDS = 3
# Each client's own number of local steps H (full-batch steps).
STEPS = (2, 3, 2)


def _datasets(clients, steps=STEPS):
  return [
      tf.data.Dataset.from_tensors((x, y)).repeat(h)
      for (x, y), h in zip(clients, steps)
  ]


def _run(process, clients, rounds=ROUNDS, steps=STEPS):
  state = tiny.set_weights(process, process.initialize(),
                           tiny.initial_weights())
  for _ in range(rounds):
    state = process.next(state, _datasets(clients, steps)).state
  return state


def numpy_fed_adc(clients, *, lr_of_round, beta_global, beta_local, alpha,
                  variant='heavy_ball', phi=None, rounds=ROUNDS, steps=STEPS,
                  weights=None):
  """Algorithms 3 and 4 of the paper, in float64 NumPy. Returns (w, m)."""
  w = [t.astype(np.float64) for t in tiny.initial_weights()]
  m = [np.zeros_like(t) for t in w]
  for t in range(rounds):
    eta = lr_of_round(t)
    deltas = []
    for (x, y), h in zip(clients, steps):
      x = x.astype(np.float64)
      m_bar = [beta_local * a / h for a in m]
      wk = [a.copy() for a in w]
      local_m = None
      for tau in range(h):
        if variant == 'nesterov':
          half = [a - eta * b for a, b in zip(wk, m_bar)]
          g = tiny.softmax_ce_grad(half, x, y)
          wk = [a - eta * b for a, b in zip(half, g)]
        elif phi is None:
          g = tiny.softmax_ce_grad(wk, x, y)
          wk = [a - eta * (b + c) for a, b, c in zip(wk, g, m_bar)]
        else:
          g = tiny.softmax_ce_grad(wk, x, y)
          local_m = g if tau == 0 else [
              phi * a + (1 - phi) * b for a, b in zip(local_m, g)]
          wk = [a - eta * (b + c) for a, b, c in zip(wk, m_bar, local_m)]
      deltas.append([a - b for a, b in zip(w, wk)])
    mean = tiny.weighted_mean(deltas, weights or [1.0] * len(clients))
    m = [d / eta + (beta_global - beta_local) * a for d, a in zip(mean, m)]
    w = [a - alpha * eta * b for a, b in zip(w, m)]
  return w, m


def _assert_close(got, want):
  for g, v in zip(got, want):
    np.testing.assert_allclose(g, v, rtol=1e-5, atol=1e-6)


def _momentum(state):
  return [np.asarray(t) for t in state.finalizer['momentum']]


# Heavy ball with beta_local != beta_global, alpha != 1 and a decaying
# client learning rate (the server must use each round's eta).
HEAVY = dict(beta=0.8, beta_local=0.5, alpha=0.9)
HEAVY_SCHEDULE = schedules.staircase_decay(0.2, decay_factor=0.5,
                                           decay_every=2)


@pytest.fixture(scope='module')
def heavy_ball():
  return algorithms.build_fed_adc(
      tiny.model_fn, client_learning_rate=0.2,
      client_lr_schedule=HEAVY_SCHEDULE, **HEAVY)


def test_heavy_ball_matches_numpy_algorithm_3(heavy_ball):
  clients = tiny.make_clients()
  state = _run(heavy_ball, clients)
  w, m = numpy_fed_adc(clients, lr_of_round=lambda t: 0.2 * 0.5**(t // 2),
                       beta_global=0.8, beta_local=0.5, alpha=0.9)
  assert np.abs(m[0]).max() > 1e-2  # the momentum is really there
  _assert_close(tiny.trainable(heavy_ball, state), w)
  _assert_close(_momentum(state), m)
  # beta_local matters: beta_local = beta_global gives other weights.
  w_same, _ = numpy_fed_adc(clients, lr_of_round=lambda t: 0.2 * 0.5**(t // 2),
                            beta_global=0.8, beta_local=0.8, alpha=0.9)
  assert not np.allclose(w_same[0], w[0], atol=1e-4)


def test_nesterov_matches_numpy_algorithm_3():
  process = algorithms.build_fed_adc(
      tiny.model_fn, client_learning_rate=0.3, beta=0.7, variant='nesterov')
  clients = tiny.make_clients()
  state = _run(process, clients)
  w, m = numpy_fed_adc(clients, lr_of_round=lambda t: 0.3, beta_global=0.7,
                       beta_local=0.7, alpha=1.0, variant='nesterov')
  _assert_close(tiny.trainable(process, state), w)
  _assert_close(_momentum(state), m)
  w_heavy, _ = numpy_fed_adc(clients, lr_of_round=lambda t: 0.3,
                             beta_global=0.7, beta_local=0.7, alpha=1.0)
  assert not np.allclose(w_heavy[0], w[0], atol=1e-4)  # variants differ


def test_double_momentum_matches_numpy_algorithm_4():
  process = algorithms.build_fed_adc(
      tiny.model_fn, client_learning_rate=0.3, beta=0.6, local_momentum=0.5,
      client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES)
  clients = tiny.make_clients()
  state = _run(process, clients)
  sizes = [len(y) * h for (_, y), h in zip(clients, STEPS)]
  w, m = numpy_fed_adc(clients, lr_of_round=lambda t: 0.3, beta_global=0.6,
                       beta_local=0.6, alpha=1.0, phi=0.5, weights=sizes)
  _assert_close(tiny.trainable(process, state), w)
  _assert_close(_momentum(state), m)
  w_single, _ = numpy_fed_adc(clients, lr_of_round=lambda t: 0.3,
                              beta_global=0.6, beta_local=0.6, alpha=1.0,
                              weights=sizes)
  assert not np.allclose(w_single[0], w[0], atol=1e-4)


def test_beta_zero_equals_fed_avg_with_server_lr_alpha():
  alpha, lr = 0.7, 0.2
  ours = algorithms.build_fed_adc(tiny.model_fn, client_learning_rate=lr,
                                  beta=0.0, alpha=alpha)
  fed_avg = algorithms.build_fed_opt(
      tiny.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(lr),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(alpha),
      client_weighting=tff.learning.ClientWeighting.UNIFORM)
  clients = tiny.make_clients()
  _assert_close(tiny.trainable(ours, _run(ours, clients)),
                tiny.trainable(fed_avg, _run(fed_avg, clients)))


def test_momentum_survives_checkpoint_and_resume(heavy_ball, tmp_path):
  clients = tiny.make_clients(num_clients=4, seed=5, sizes=(5, 8, 3, 6))
  ids = [f'c{i}' for i in range(len(clients))]

  def dataset_fn(cid):
    x, y = clients[ids.index(cid)]
    return tf.data.Dataset.from_tensors((x, y)).repeat(2)

  initial = tiny.set_weights(heavy_ball, heavy_ball.initialize(),
                             tiny.initial_weights())
  common = dict(client_ids=ids, client_dataset_fn=dataset_fn,
                clients_per_round=2, seed=7, checkpoint_every=1,
                initial_state=initial, log=None)
  straight = training_loop.run_training(
      heavy_ball, rounds=4, output_dir=str(tmp_path / 'a'), **common)
  training_loop.run_training(heavy_ball, rounds=2,
                             output_dir=str(tmp_path / 'b'), **common)
  resumed = training_loop.run_training(
      heavy_ball, rounds=4, output_dir=str(tmp_path / 'b'), **common)
  assert resumed.start_round == 2
  assert np.abs(_momentum(straight.state)[0]).max() > 1e-3
  for got, want in zip(_momentum(resumed.state), _momentum(straight.state)):
    np.testing.assert_array_equal(got, want)
  for got, want in zip(tiny.trainable(heavy_ball, resumed.state),
                       tiny.trainable(heavy_ball, straight.state)):
    np.testing.assert_array_equal(got, want)
  assert int(resumed.state.finalizer['round_num']) == 4


@pytest.mark.parametrize('kwargs, message', [
    (dict(beta=1.0), r'beta must be in \[0, 1\), got 1.0.'),
    (dict(beta=0.5, beta_local=-0.1),
     r'beta_local must be in \[0, 1\), got -0.1.'),
    (dict(beta=0.5, alpha=0.0), 'alpha must be positive, got 0.0.'),
    (dict(beta=0.5, client_learning_rate=-1.0),
     'client_learning_rate must be positive, got -1.0.'),
    (dict(beta=0.5, variant='adam'),
     "variant must be one of heavy_ball, nesterov, got 'adam'."),
    (dict(beta=0.5, variant='nesterov', local_momentum=0.5),
     r'local_momentum \(Algorithm 4, double momentum\) takes '
     r"variant='heavy_ball', got variant='nesterov'."),
    (dict(beta=0.5, local_momentum=1.0),
     r'local_momentum must be in \[0, 1\), got 1.0.'),
    (dict(beta=0.5, distillation=True, distill_lambda=1.5),
     r'distill_lambda must be in \[0, 1\], got 1.5.'),
    (dict(beta=0.5, distillation=True, distill_temperature=0.0),
     'distill_temperature must be positive, got 0.0.'),
])
def test_bad_hyper_parameters_name_the_argument(kwargs, message):
  kwargs = {'client_learning_rate': 0.1, **kwargs}
  with pytest.raises(ValueError, match=f'^{message}$'):
    algorithms.build_fed_adc(tiny.model_fn, **kwargs)


# --- The training binary, two rounds on digits -------------------------------

BINARY_FAST = ['--task=digits', '--clients_per_round=3', '--client_epochs=1',
               '--eval_every=1', '--checkpoint_every=1', '--seed=2',
               '--rounds=2', '--client_opt=sgd']


_run_binary = binary.run_train


_FED_AVG = {}


def _fed_avg(model_fn, lr):
  """FedAvg on digits' model, built once for the module's binary tests."""
  if lr not in _FED_AVG:
    _FED_AVG[lr] = algorithms.build_fed_opt(
        model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(lr),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))
  return _FED_AVG[lr]


def _direct(algorithm, model_fn, lr):
  """The process each binary run must have built, from the builders."""
  if algorithm == 'fedadc':
    return algorithms.build_fed_adc(model_fn, client_learning_rate=lr,
                                    beta=0.8, beta_local=0.5,
                                    variant='nesterov')
  if algorithm == 'fedadc_plus':
    return algorithms.build_fed_adc(model_fn, client_learning_rate=lr,
                                    beta=0.9, local_momentum=0.5,
                                    distillation=True, distill_lambda=0.35,
                                    distill_temperature=2.0)
  return algorithms.build_slowmo(model_fn, client_learning_rate=lr, beta=0.9)


@pytest.mark.parametrize('algorithm, extra, recorded', [
    # Recorded under today's names, whichever spelling was given.
    ('fedadc', ['--fedadc_variant=nesterov', '--beta=0.8', '--beta_local=0.5'],
     dict(fedadc_beta=0.8, fedadc_beta_local=0.5, fedadc_variant='nesterov',
          fedadc_local_momentum=0.0)),
    ('fedadc_plus', ['--fedadc_local_momentum=0.5',
                     '--fedadc_distill_temperature=2'],
     dict(fedadc_beta=0.9, fedadc_beta_local=None, fedadc_local_momentum=0.5,
          fedadc_distill_lambda=0.35, fedadc_distill_temperature=2.0)),
    ('slowmo', [], dict(slowmo_beta=0.9)),
])
def test_binary_trains_two_rounds(algorithm, extra, recorded, tmp_path,
                                  monkeypatch):
  import csv  # pylint: disable=g-import-not-at-top
  import json  # pylint: disable=g-import-not-at-top
  recorder = replay.Recorder(monkeypatch)
  output_dir = str(tmp_path / 'run')
  assert _run_binary(*BINARY_FAST, f'--algorithm={algorithm}', *extra,
                     f'--output_dir={output_dir}') == 0
  with open(f'{output_dir}/metrics.csv') as f:
    rows = list(csv.DictReader(f))
  assert [r['round'] for r in rows] == ['1', '2']
  for row in rows:
    assert np.isfinite(float(row['train_loss']))
    assert 0.0 <= float(row['eval_accuracy']) <= 1.0
    assert float(row['update_non_finite']) == 0
  with open(f'{output_dir}/hparams.json') as f:
    hparams = json.load(f)
  assert hparams['algorithm'] == algorithm
  for name, value in recorded.items():
    assert hparams[name] == value
  # The rounds the binary ran are those of the builder's process with the
  # same arguments, bit for bit, and not FedAvg's.
  lr = float(recorder.hparams['client_lr'])
  direct = _direct(algorithm, recorder.model_fn, lr)
  assert len(recorder.rounds) == 2
  for got, want in zip(recorder.replay(direct), recorder.recorded_states()):
    replay.assert_same_bits(got, want)
  fed_avg = _fed_avg(recorder.model_fn, lr)
  state, (datasets,), want = recorder.rounds[-1]
  start = fed_avg.set_model_weights(fed_avg.initialize(),
                                    direct.get_model_weights(state))
  fed_avg_weights = fed_avg.get_model_weights(
      fed_avg.next(start, datasets).state)
  assert replay.max_difference(fed_avg_weights,
                               direct.get_model_weights(want)) > 1e-4


@pytest.mark.parametrize('extra, message', [
    (['--algorithm=fedadc', '--client_opt=sgdm'],
     '--algorithm=fedadc takes its local steps with plain SGD; use '
     '--client_opt=sgd.'),
    (['--algorithm=slowmo', '--beta=1.0'],
     '--beta=1.0: beta must be in [0, 1), got 1.0.'),
    (['--algorithm=fedadc', '--fedadc_variant=nesterov',
      '--local_momentum=0.5'],
     "local_momentum (Algorithm 4, double momentum) takes variant="
     "'heavy_ball', got variant='nesterov'."),
])
def test_binary_bad_fedadc_settings_are_one_line_errors(extra, message,
                                                        tmp_path, capsys):
  args = [a for a in BINARY_FAST if not a.startswith('--client_opt')]
  assert _run_binary(*args, *extra, f'--output_dir={tmp_path / "run"}') == 2
  assert capsys.readouterr().err == f'train: error: {message}\n'
