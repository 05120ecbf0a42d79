"""FedBN: BN variables stay on their clients; the rest is aggregated."""

import csv
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import binary
from tests import tiny
from tff_opt import algorithms
from tff_opt.algorithms import fed_bn
from tff_opt.algorithms import fed_curv
from tff_opt.algorithms import fed_opt
from tff_opt.algorithms import fed_prox
from tff_opt.program import registry
from tff_opt.round import client_states
from tff_opt.round import ground

NUM_EXAMPLES = tff.learning.ClientWeighting.NUM_EXAMPLES

MU = 0.1
CLIENT_LR = 0.1
LOCAL_STEPS = 3
EPSILON = 1e-3  # Keras's BatchNormalization default.
MOMENTUM = 0.99
SIZES = (6, 10, 4, 7)
# Client 0 comes back in round 3 with its own BN from round 1.
SCHEDULE = ([0, 1, 2], [1, 3], [0, 2, 3])
# TFF warns that BN statistics are not updated by *its* training loops;
# tff-opt's client work does update them (checked below against NumPy).
pytestmark = pytest.mark.filterwarnings(
    'ignore:Batch Normalization contains non-trainable')


def bn_keras_model():
  """BN on the 4 input features, then a dense softmax layer."""
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(tiny.NUM_FEATURES,)),
      tf.keras.layers.BatchNormalization(epsilon=EPSILON, momentum=MOMENTUM),
      tf.keras.layers.Dense(tiny.NUM_CLASSES, kernel_initializer='zeros'),
  ])


def bn_model_fn():
  return tff.learning.models.from_keras_model(
      bn_keras_model(),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=tiny.INPUT_SPEC,
      metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')])


def initial_weights():
  """[gamma, beta, kernel, bias], [moving mean, moving variance]."""
  rng = np.random.default_rng(3)
  gamma = 1.0 + rng.normal(scale=0.1, size=tiny.NUM_FEATURES)
  beta = rng.normal(scale=0.1, size=tiny.NUM_FEATURES)
  kernel, bias = tiny.initial_weights()
  trainable = [gamma.astype(np.float32), beta.astype(np.float32), kernel, bias]
  non_trainable = [np.zeros(tiny.NUM_FEATURES, np.float32),
                   np.ones(tiny.NUM_FEATURES, np.float32)]
  return trainable, non_trainable


def numpy_local_training(start, anchor, x, y):
  """FedProx local SGD of the BN model in NumPy (training-mode BN).

  Args:
    start: ([gamma, beta, kernel, bias], [moving mean, moving var]).
    anchor: The proximal anchor, shaped like the trainables.
    x, y: The client's full batch.

  Returns:
    The final (trainables, non-trainables).
  """
  w = [np.array(t, np.float64) for t in start[0]]
  stats = [np.array(t, np.float64) for t in start[1]]
  x = x.astype(np.float64)
  n = len(y)
  mean, var = x.mean(axis=0), x.var(axis=0)
  x_hat = (x - mean) / np.sqrt(var + EPSILON)
  for _ in range(LOCAL_STEPS):
    gamma, beta, kernel, bias = w
    z = gamma * x_hat + beta
    logits = z @ kernel + bias
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(n), y] -= 1.0
    p /= n
    dz = p @ kernel.T
    grads = [(dz * x_hat).sum(axis=0), dz.sum(axis=0), z.T @ p, p.sum(axis=0)]
    w = [t - CLIENT_LR * (g + MU * (t - a))
         for t, g, a in zip(w, grads, anchor)]
    stats = [MOMENTUM * stats[0] + (1 - MOMENTUM) * mean,
             MOMENTUM * stats[1] + (1 - MOMENTUM) * var]
  return w, stats


def numpy_fed_bn_prox(clients, schedule):
  """FedProx + FedBN in NumPy; per round (server weights, {k: own BN})."""
  server = [[np.array(t, np.float64) for t in part]
            for part in initial_weights()]
  own = {}  # k -> ([gamma, beta], [moving mean, moving var])
  history = []
  for sampled in schedule:
    finals = []
    for k in sampled:
      bn_trainable, bn_stats = own.get(k, (server[0][:2], server[1]))
      start = (list(bn_trainable) + server[0][2:], bn_stats)
      final_w, final_stats = numpy_local_training(start, start[0],
                                                  *clients[k])
      own[k] = (final_w[:2], final_stats)
      finals.append(final_w[2:])
    shared = tiny.weighted_mean(finals, [SIZES[k] for k in sampled])
    server = [server[0][:2] + shared, server[1]]
    history.append(([t.copy() for t in server[0]],
                    {k: v for k, v in own.items()}))
  return history


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


@pytest.fixture(scope='module')
def prox_bn():
  return algorithms.build_fed_bn(
      fed_prox.fed_prox_recipe, bn_model_fn, mu=MU,
      client_optimizer_fn=_sgd(CLIENT_LR), server_optimizer_fn=_sgd(1.0),
      client_weighting=NUM_EXAMPLES)


def _start(process):
  trainable, non_trainable = initial_weights()
  return process.set_model_weights(
      process.initialize(),
      tff.learning.models.ModelWeights(trainable, non_trainable))


def test_finds_the_batch_norm_variables():
  variables = fed_bn.find_batch_norm_variables(bn_model_fn)
  assert variables.trainable == (0, 1)
  assert variables.non_trainable == (0, 1)
  assert [n.split('/')[-1] for n in variables.names] == [
      'gamma:0', 'beta:0', 'moving_mean:0', 'moving_variance:0']


def test_fed_prox_with_local_bn_matches_numpy(prox_bn):
  assert client_states.is_client_stateful(prox_bn)
  clients = tiny.make_clients(len(SIZES), sizes=SIZES)
  want = numpy_fed_bn_prox(clients, SCHEDULE)
  state = _start(prox_bn)
  store = {}
  for sampled, (server, own) in zip(SCHEDULE, want):
    output, new_states = prox_bn.next(
        state, tiny.full_batch_datasets([clients[k] for k in sampled],
                                        LOCAL_STEPS),
        [store.get(k, prox_bn.initial_client_state()) for k in sampled])
    store.update(zip(sampled, new_states))
    state = output.state
    weights = prox_bn.get_model_weights(state)
    # Shared (dense) weights: the example-weighted mean of client results.
    for got, expected in zip(weights.trainable[2:], server[2:]):
      np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # The server's BN never moves: never averaged.
    initial_trainable, initial_stats = initial_weights()
    for got, expected in zip(weights.trainable[:2], initial_trainable[:2]):
      np.testing.assert_array_equal(got, expected)
    for got, expected in zip(weights.non_trainable, initial_stats):
      np.testing.assert_array_equal(got, expected)
    # Each client's BN is its own: trained from its own previous values.
    for k, (bn_trainable, bn_stats) in own.items():
      mine = store[k][fed_bn.BATCH_NORM_KEY]
      assert bool(mine[ground.INITIALIZED_KEY])
      for got, expected in zip(mine[fed_bn.TRAINABLE_KEY], bn_trainable):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
      for got, expected in zip(mine[fed_bn.NON_TRAINABLE_KEY], bn_stats):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
  gammas = [store[k][fed_bn.BATCH_NORM_KEY][fed_bn.TRAINABLE_KEY][0]
            for k in range(len(SIZES))]
  # They differ across clients, and the server's is none of them.
  for i in range(len(gammas)):
    for j in range(i + 1, len(gammas)):
      assert np.abs(gammas[i] - gammas[j]).max() > 1e-4
  # Communication: the delta (BN entries sent as zeros), no BN values.
  assert output.metrics['communication']['bytes_client_to_server'] == 4 * (
      2 * tiny.NUM_FEATURES + tiny.NUM_FEATURES * tiny.NUM_CLASSES +
      tiny.NUM_CLASSES)


@pytest.mark.parametrize('base, hparams', [
    ('fedfor', {'alpha': 5.0}),
    ('fedcurv', {'lam': 0.1}),
    ('feddyn', {'alpha': 0.1, 'num_clients': 4}),
])
def test_other_bases_keep_server_bn(base, hparams):
  # Each base with its paper's weighting, as the binary runs it.
  algorithm = registry.ALGORITHMS[base]
  process = fed_bn.build_fed_bn(
      algorithm.fedbn_recipe, bn_model_fn,
      client_optimizer_fn=_sgd(CLIENT_LR), server_optimizer_fn=_sgd(1.0),
      client_weighting=algorithm.spec.client_weighting, **hparams)
  clients = tiny.make_clients(3, sizes=SIZES)
  state = _start(process)
  store = {}
  for _ in range(2):
    output, new_states = process.next(
        state, tiny.full_batch_datasets(clients, LOCAL_STEPS),
        [store.get(k, process.initial_client_state()) for k in range(3)])
    store.update(enumerate(new_states))
    state = output.state
  weights = process.get_model_weights(state)
  initial_trainable, initial_stats = initial_weights()
  for got, expected in zip(weights.trainable[:2], initial_trainable[:2]):
    np.testing.assert_array_equal(got, expected)
  for got, expected in zip(weights.non_trainable, initial_stats):
    np.testing.assert_array_equal(got, expected)
  assert np.abs(weights.trainable[2] - initial_trainable[2]).max() > 1e-3
  assert np.abs(store[0][fed_bn.BATCH_NORM_KEY][fed_bn.TRAINABLE_KEY][0] -
                store[1][fed_bn.BATCH_NORM_KEY][fed_bn.TRAINABLE_KEY][0]
                ).max() > 1e-4
  if base == 'feddyn':  # g_k's BN coordinates stay 0 (nothing was sent).
    g = store[0][fed_bn.BASE_KEY]['local_gradient']
    assert not np.any(g[0]) and not np.any(g[1]) and np.any(g[2])


def test_model_without_batch_norm_is_refused():
  with pytest.raises(ValueError) as e:
    algorithms.build_fed_bn(fed_opt.fed_opt_recipe, tiny.model_fn,
                            client_optimizer_fn=_sgd(0.1),
                            server_optimizer_fn=_sgd(1.0),
                            client_weighting=NUM_EXAMPLES)
  assert str(e.value) == ('FedBN needs a model with a BatchNormalization '
                          "layer; the model 'sequential' has none.")


def test_missing_unexpected_and_out_of_range_hparams():
  kwargs = dict(client_optimizer_fn=_sgd(0.1), server_optimizer_fn=_sgd(1.0),
                client_weighting=NUM_EXAMPLES)
  with pytest.raises(ValueError, match=r'^FedBN over fed_prox_recipe takes '
                     r'the hyper-parameters mu \(optional: model_aggregator\); '
                     r'got \(none\)\.$'):
    algorithms.build_fed_bn(fed_prox.fed_prox_recipe, bn_model_fn, **kwargs)
  with pytest.raises(ValueError, match=r'^FedBN over fed_prox_recipe takes '
                     r'the hyper-parameters mu \(optional: model_aggregator\); '
                     r'got lam, mu\.$'):
    algorithms.build_fed_bn(fed_prox.fed_prox_recipe, bn_model_fn, mu=0.1,
                            lam=0.1, **kwargs)
  # FedCurv's stateless variant: Eq. 3 is refused, naming the argument.
  with pytest.raises(ValueError, match=r"^cross_silo='on': FedBN over "
                     r'FedCurv runs its stateless variant '):
    algorithms.build_fed_bn(fed_curv.stateless_recipe, bn_model_fn,
                            lam=0.1, client_epochs=2, cross_silo='on',
                            **kwargs)
  with pytest.raises(ValueError, match=r'^client_epochs must be a positive '
                     r'integer, got 0\.$'):
    algorithms.build_fed_bn(fed_curv.stateless_recipe, bn_model_fn,
                            lam=0.1, client_epochs=0, **kwargs)


FAST = ['--task=digits', '--clients_per_round=3', '--client_epochs=1',
        '--rounds=2', '--eval_every=2', '--seed=1', '--server_opt=sgd',
        '--server_lr=1.0', '--task_option=num_clients=6',
        '--task_option=num_test_clients=2']


def test_binary_runs_feddyn_with_fedbn(tmp_path):
  output_dir = str(tmp_path / 'run')
  assert binary.run_train(*FAST, '--algorithm=feddyn', '--fedbn',
                          '--task_option=model=cnn_bn',
                          f'--output_dir={output_dir}') == 0
  with open(os.path.join(output_dir, 'metrics.csv')) as f:
    rows = list(csv.DictReader(f))
  assert [r['round'] for r in rows] == ['1', '2']
  assert all(np.isfinite(float(r['train_loss'])) for r in rows)
  assert 0.0 <= float(rows[-1]['eval_accuracy']) <= 1.0
  with open(os.path.join(output_dir, 'hparams.json')) as f:
    hparams = json.load(f)
  assert hparams['fedbn'] is True
  assert hparams['feddyn_alpha'] == 0.01
  assert os.listdir(os.path.join(output_dir, 'checkpoints'))


@pytest.mark.parametrize('args, message', [
    (['--algorithm=feddyn', '--feddyn_alpha=0'],
     'train: error: --feddyn_alpha=0: alpha must be positive, '
     'got 0.0.'),
    (['--algorithm=fedprox', '--mu=0.01', '--fedbn'],
     "train: error: --fedbn: task digits: FedBN needs a model with a "
     "BatchNormalization layer; the model 'digits_cnn' has none."),
    (['--algorithm=scaffold', '--fedbn', '--task_option=model=cnn_bn'],
     "train: error: --fedbn: algorithm 'scaffold' has no FedBN variant; "
     'FedBN runs on fedopt, fedprox, fedfor, fedcurv, feddyn.'),
    (['--algorithm=fedcurv', '--lam=0.1', '--fedcurv_exact=on', '--fedbn',
      '--task_option=model=cnn_bn'],
     "train: error: cross_silo='on': FedBN over FedCurv runs its "
     "stateless variant (each client's own Fisher terms stay in u, v); "
     "Eq. 3 (cross_silo) is not available with FedBN: use 'off' or "
     "'auto'."),
])
def test_binary_errors(args, message, tmp_path, capsys):
  assert binary.run_train(*FAST, *args,
                          f'--output_dir={tmp_path / "run"}') == 2
  assert capsys.readouterr().err.strip() == message


def test_digits_cnn_bn_has_two_bn_layers():
  from tasks import models  # pylint: disable=g-import-not-at-top
  model = models.create_digits_cnn(10, batch_norm=True)
  assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == (
      93_962 + 2 * (32 + 64))
  assert sum(int(np.prod(v.shape)) for v in model.non_trainable_variables) == (
      2 * (32 + 64))
  assert [type(l).__name__ for l in model.layers].count(
      'BatchNormalization') == 2


def test_the_base_flags_reach_fedbn(monkeypatch):
  """`--fedbn` passes the base's optional flags on (it dropped them)."""
  seen = {}
  monkeypatch.setattr(algorithms, 'build_fed_bn',
                      lambda base, model_fn, **kwargs: seen.update(kwargs))
  sgd = tff.learning.optimizers.build_sgdm(0.1)
  registry.build_process(
      'fedfor', bn_model_fn, client_optimizer_fn=sgd, server_optimizer_fn=sgd,
      client_weighting=tff.learning.ClientWeighting.UNIFORM,
      client_lr_schedule=None, fedbn=True, alpha=0.5,
      fedfor_grad_at_zero=1)
  assert (seen['alpha'], seen['grad_at_zero']) == (0.5, 1)
