"""Algorithms with vectorized clients equal them with one client at a time.

Five clients of 9, 5, 0, 4 and 6 snippets (batch 4) of a small Shakespeare
LSTM (the task's model with one layer of 16 units: the vectorized model
equals the task's with 1 and 2 layers in tests/test_shakespeare_vectorized.py,
and vectorized training on 2 layers in tests/test_vectorized_training.py),
in groups of at most 2 (2, 2, 1:
the empty client shares a group), from one random initial model, for 2
rounds: the vectorized process (`build_vectorized_fed_opt`) and the
per-client one (`build_fed_opt`) must reach the same server state (model
weights to 1e-5 of the change the rounds made) and report the same
metrics, for each server optimizer the paper uses (sgd, sgdm, adagrad,
adam, yogi); and with uniform weighting, client momentum and a client
learning-rate schedule. States are interchangeable: the vectorized
process continues from the per-client process's state.

The same for the other algorithms with a vectorized path
(`vectorized.vectorize` of their per-client processes, the binary's entry
point) against those processes: FedProx, FedFOR (3 rounds: its penalty
starts in round 2), FedCurv's stateless variant (its Fisher over one of 2 epochs),
FedADC heavy ball and Nesterov, SlowMo; besides the model, the rest of the
server state (FedCurv's u and v, FedADC's momentum, the server optimizer's)
to 1e-5 of its largest entry. Each penalty is strong enough to move the
model well beyond that tolerance (checked: FedAvg's rounds with the same
weighting, which are the algorithm's with its coefficient 0, differ by more
than 1e-3 of the change). The algorithms
without a path are refused with one line saying what they lack.

`binaries.train --client_vectorization=K` on a small Shakespeare file
(shuffled client datasets, as the task preprocesses them), with FedProx: a
run with the flag, and one resumed with it after one round without it,
have the rows and state of a run without it; an algorithm without a
vectorized path is refused.
"""

import csv
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tasks import shakespeare_vectorized
from tasks import sqlite_data
from tests import binary
from tests import test_shakespeare_vectorized as shakespeare_test
from tests import test_vectorized_training
from tests import tiny
from tff_opt import algorithms
from tff_opt.algorithms import vectorized
from tff_opt.round import optimizers
from tff_opt.round import schedules

SIZES = (9, 5, 0, 4, 6)
GROUP_SIZE = 2
ROUNDS = 2
CLIENT_LR = 0.5
# (server learning rate, tau): the paper's Shakespeare settings
# (`tasks.task_paper_settings`). The adaptive optimizers divide by
# sqrt(v) + tau, which magnifies float32 round-off in tiny delta entries
# by up to 1/tau. Measured after 3 rounds, as max |difference| over the
# largest change: vectorized vs per-client 1.2e-7 (sgd), 1.0e-7 (sgdm),
# 1.9e-7 (adagrad), 6.1e-6 (adam), 3.1e-6 (yogi); the per-client process
# against itself with its clients in reverse order: 0.5e-7 to 1.9e-7, and
# 1.5e-6 (adam) and 3.1e-6 (yogi), i.e. float32 round-off of one size.
SERVER = {'sgd': (1.0, 0.0), 'sgdm': (0.316, 0.0), 'adagrad': (0.316, 0.1),
          'adam': (0.01, 1e-3), 'yogi': (0.01, 1e-3)}


def model_fn():
  return shakespeare_test.tff_model_fn(1)


def vectorized_model():
  return shakespeare_vectorized.vectorized_model_for(model_fn)


def initial_weights():
  model = model_fn()
  rng = np.random.default_rng(5)
  return tff.learning.models.ModelWeights(
      trainable=shakespeare_test.random_weights(model, rng), non_trainable=[])


def run(process, state, datasets, rounds=ROUNDS):
  metrics = []
  for _ in range(rounds):
    output = process.next(state, datasets)
    state = output.state
    metrics.append(output.metrics['client_work'])
  return state, metrics


def assert_same_rounds(process_a, process_b, datasets, start, rounds=ROUNDS,
                       whole_state=False):
  """Runs both processes from `start`; asserts the same weights and metrics.

  With `whole_state`, every other float entry of the states must agree to
  1e-5 of its largest magnitude, and the others exactly. Returns the final
  states and the model's change (max over the per-client process's).
  """
  state_a, metrics_a = run(
      process_a, process_a.set_model_weights(process_a.initialize(), start),
      datasets, rounds)
  state_b, metrics_b = run(
      process_b, process_b.set_model_weights(process_b.initialize(), start),
      datasets, rounds)
  weights_a = process_a.get_model_weights(state_a).trainable
  weights_b = process_b.get_model_weights(state_b).trainable
  change = max(np.abs(np.asarray(b) - s).max()
               for b, s in zip(weights_b, start.trainable))
  diff = max(np.abs(np.asarray(a) - np.asarray(b)).max()
             for a, b in zip(weights_a, weights_b))
  assert change > 0
  assert diff <= 1e-5 * change, (diff, change)
  for round_a, round_b in zip(metrics_a, metrics_b):
    flat_a = tf.nest.flatten(round_a)
    flat_b = tf.nest.flatten(round_b)
    assert len(flat_a) == len(flat_b)
    np.testing.assert_allclose(np.array(flat_a, np.float64),
                               np.array(flat_b, np.float64), rtol=1e-5)
  if whole_state:
    flat_a = [np.asarray(x) for x in tf.nest.flatten(state_a)]
    flat_b = [np.asarray(x) for x in tf.nest.flatten(state_b)]
    assert len(flat_a) == len(flat_b)
    for a, b in zip(flat_a, flat_b):
      if np.issubdtype(b.dtype, np.floating):
        scale = float(np.abs(b).max()) if b.size else 0.0
        assert float(np.abs(a - b).max(initial=0.0)) <= 1e-5 * scale
      else:
        np.testing.assert_array_equal(a, b)
  return state_a, state_b


@pytest.fixture(scope='module')
def datasets():
  return test_vectorized_training.client_datasets(SIZES)


@pytest.fixture(scope='module')
def start():
  return initial_weights()


def _fed_opt_pair(server):
  """(per-client, vectorized) FedOpt with `server`'s settings."""
  common = dict(
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(CLIENT_LR),
      server_optimizer_fn=optimizers.build_server_optimizer(
          server, learning_rate=SERVER[server][0], tau=SERVER[server][1]))
  return (algorithms.build_fed_opt(model_fn, **common),
          vectorized.build_vectorized_fed_opt(
              model_fn, vectorized_model(), group_size=GROUP_SIZE, **common))


@pytest.fixture(scope='module')
def fed_opt_sgd():
  """FedAvg's pair, shared by the sgd case and the vectorize(FedOpt) test."""
  return _fed_opt_pair('sgd')


@pytest.mark.parametrize('server', list(SERVER))
def test_vectorized_rounds_equal_per_client_rounds(server, datasets, start,
                                                   request):
  per_client, vectorized_process = (
      request.getfixturevalue('fed_opt_sgd') if server == 'sgd' else
      _fed_opt_pair(server))
  assert isinstance(vectorized_process,
                    tff.learning.templates.LearningProcess)
  assert vectorized_process.initialize.type_signature.is_equivalent_to(
      per_client.initialize.type_signature)
  assert_same_rounds(vectorized_process, per_client, datasets, start)


def test_uniform_weighting_momentum_and_schedule(datasets, start):
  common = dict(
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          CLIENT_LR, momentum=0.5),
      server_optimizer_fn=optimizers.build_server_optimizer(
          'sgd', learning_rate=1.0),
      client_weighting=tff.learning.ClientWeighting.UNIFORM,
      client_lr_schedule=schedules.staircase_decay(
          CLIENT_LR, decay_factor=0.5, decay_every=1))
  per_client = algorithms.build_fed_opt(model_fn, **common)
  vectorized_process = vectorized.build_vectorized_fed_opt(
      model_fn, vectorized_model(), group_size=3, **common)
  state_vectorized, state_per_client = assert_same_rounds(
      vectorized_process, per_client, datasets, start)
  # The states are of one type: each process goes on from the other's.
  vectorized_process.next(state_per_client, datasets)
  per_client.next(state_vectorized, datasets)


# --- The other algorithms -----------------------------------------------------

SGD = tff.learning.optimizers.build_sgdm(CLIENT_LR)
SERVER_SGD = optimizers.build_server_optimizer('sgd', learning_rate=1.0)
UNIFORM = tff.learning.ClientWeighting.UNIFORM
BETA = 0.9
EPOCHS = 2  # FedCurv's Fisher over the first half of each client's examples.

# name: (per-client process, rounds), each algorithm's own part strong
# enough to matter (see `WITHOUT`). `vectorized.vectorize` rebuilds each
# from the process itself.
ALGORITHMS = {
    'fedprox': (lambda: algorithms.build_fed_prox(
        model_fn, mu=1.0, client_optimizer_fn=SGD,
        server_optimizer_fn=SERVER_SGD), 2),
    'fedfor': (lambda: algorithms.build_fed_for(
        model_fn, alpha=0.5, client_optimizer_fn=SGD,
        server_optimizer_fn=SERVER_SGD, client_weighting=UNIFORM), 3),
    'fedcurv': (lambda: algorithms.build_fed_curv(
        model_fn, lam=10.0, client_optimizer_fn=SGD,
        server_optimizer_fn=SERVER_SGD, client_weighting=UNIFORM,
        client_epochs=EPOCHS), 2),
    'fedadc_heavy_ball': (lambda: algorithms.build_fed_adc(
        model_fn, client_learning_rate=CLIENT_LR, beta=BETA), 2),
    'fedadc_nesterov': (lambda: algorithms.build_fed_adc(
        model_fn, client_learning_rate=CLIENT_LR, beta=BETA,
        variant='nesterov'), 2),
    'slowmo': (lambda: algorithms.build_slowmo(
        model_fn, client_learning_rate=CLIENT_LR, beta=BETA), 2),
}
# Each penalised algorithm with its coefficient 0 is FedAvg (client
# SGD(0.5), server SGD(1.0)) with the algorithm's weighting: the check that
# its own part matters compares its rounds with FedAvg's.
WITHOUT = {'fedprox': tff.learning.ClientWeighting.NUM_EXAMPLES,
           'fedfor': UNIFORM, 'fedcurv': UNIFORM}


@pytest.fixture(scope='module')
def fed_avg_uniform():
  return algorithms.build_fed_opt(
      model_fn, client_optimizer_fn=SGD, server_optimizer_fn=SERVER_SGD,
      client_weighting=UNIFORM)


def _fed_avg(weighting, request):
  """The per-client FedAvg process weighting its clients by `weighting`."""
  if weighting == UNIFORM:
    return request.getfixturevalue('fed_avg_uniform')
  return request.getfixturevalue('fed_opt_sgd')[0]


@pytest.mark.parametrize('name', list(ALGORITHMS))
def test_algorithm_rounds_equal_per_client_rounds(name, datasets, start,
                                                  request):
  per_client_fn, rounds = ALGORITHMS[name]
  per_client = per_client_fn()
  # FedADC heavy ball groups its clients by their numbers of batches.
  vectorized_process = vectorized.vectorize(
      per_client, vectorized_model(), group_size=GROUP_SIZE,
      by_steps=name == 'fedadc_heavy_ball')
  assert vectorized_process.initialize.type_signature.is_equivalent_to(
      per_client.initialize.type_signature)
  state, _ = assert_same_rounds(vectorized_process, per_client, datasets,
                                start, rounds, whole_state=True)
  if name in WITHOUT:  # The algorithm's own part moved the model.
    without = _fed_avg(WITHOUT[name], request)
    other, _ = run(without, without.set_model_weights(without.initialize(),
                                                      start), datasets,
                   rounds)
    weights = vectorized_process.get_model_weights(state).trainable
    change = max(np.abs(np.asarray(w) - s).max()
                 for w, s in zip(weights, start.trainable))
    apart = max(np.abs(np.asarray(a) - np.asarray(b)).max() for a, b in zip(
        weights, without.get_model_weights(other).trainable))
    assert apart > 1e-3 * change, (apart, change)


def test_vectorize_of_fed_opt_is_build_vectorized_fed_opt(
    datasets, start, fed_opt_sgd):
  per_client, built = fed_opt_sgd  # Client SGD(0.5), server SGD(1.0).
  assert_same_rounds(
      vectorized.vectorize(per_client, vectorized_model(),
                           group_size=GROUP_SIZE),
      built, datasets, start, rounds=1, whole_state=True)


def _refusal(process):
  with pytest.raises(ValueError) as error:
    vectorized.vectorize(process, vectorized_model(), group_size=2)
  return str(error.value)


def test_algorithms_without_a_vectorized_form_are_refused():
  # The refusals read the algorithm's recipe and optimizer, not its model:
  # the per-client processes are built on the tiny model (this test took
  # 18.7 s with the LSTM's, 8.3 s with it).
  # FedCurv's Eq. 3: each client keeps its last Fisher terms.
  assert _refusal(algorithms.build_fed_curv(
      tiny.model_fn, lam=1.0, client_optimizer_fn=SGD,
      server_optimizer_fn=SERVER_SGD, cross_silo=True)) == (
          'vectorized client training cannot run this algorithm: it has client '
          'state.')
  # FedADC+'s distillation runs a teacher VariableModel.
  assert _refusal(algorithms.build_fed_adc(
      tiny.model_fn, client_learning_rate=CLIENT_LR, beta=BETA,
      distillation=True)) == (
          'vectorized client training cannot run this algorithm: it has a loss '
          'hook (loss_fn_builder, client_stats_fn).')
  # FedADC's Algorithm 4: its local optimizer counts its steps.
  assert 'not one tensor per weight' in _refusal(algorithms.build_fed_adc(
      tiny.model_fn, client_learning_rate=CLIENT_LR, beta=BETA,
      local_momentum=0.9))
  assert _refusal(object()) == (
      'vectorize needs a process built by recipe.assemble (any builder of '
      'tff_opt.algorithms); got object without an assembly.')


def test_refusals():
  with pytest.raises(ValueError, match='not one tensor per weight'):
    vectorized.build_vectorized_fed_opt(
        model_fn, vectorized_model(), group_size=2,
        client_optimizer_fn=tff.learning.optimizers.build_adam(0.1),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))
  with pytest.raises(ValueError, match='group_size'):
    vectorized.build_vectorized_fed_opt(
        model_fn, vectorized_model(), group_size=0,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))


# --- binaries.train --client_vectorization -----------------------------------

SNIPPETS = ('To be, or not to be: that is the question.',
            'Speak, speak.', 'ROMEO! where art thou?',
            'Now is the winter of our discontent made glorious summer.',
            'A horse! a horse! my kingdom for a horse!')
# Roles with 7, 3, 1 and 6 snippets (batch 4: 2, 1, 1, 2 steps).
ROLE_SIZES = (7, 3, 1, 6)
BINARY_FLAGS = ('--task=shakespeare', '--task_option=lstm_units=16',
                '--task_option=lstm_layers=1', '--clients_per_round=4',
                '--client_batch_size=4', '--client_epochs=1', '--seed=2',
                '--eval_every=1', '--checkpoint_every=1')


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  path = tmp_path_factory.mktemp('shakespeare_data')
  sqlite_data.write_sqlite(str(path / 'shakespeare.sqlite'), {
      'train': {f'R{i}': [{'snippets': SNIPPETS[j % len(SNIPPETS)]}
                          for j in range(n)]
                for i, n in enumerate(ROLE_SIZES)},
      'test': {f'R{i}': [{'snippets': SNIPPETS[i]}] for i in range(2)}})
  return str(path)


def _rows(output_dir):
  with open(os.path.join(output_dir, 'metrics.csv')) as f:
    return list(csv.DictReader(f))


def test_binary_vectorizes_fed_prox_and_resumes_across_the_flag(data_dir,
                                                               tmp_path):
  """FedProx (the algorithm and mu the other flags chose), 2 rounds one
  client at a time; the same in groups of 3 from the start; and round 1 one
  client at a time, round 2 (resumed) in groups of 2: the same rows and
  state each time (the clients' shuffled datasets are read in this process
  by the vectorized path, on TFF's worker by the other). One straight run
  serves both comparisons."""
  flags = (*BINARY_FLAGS, f'--data_dir={data_dir}', '--algorithm=fedprox',
           '--mu=0.5')
  straight, switched, grouped = (str(tmp_path / 'straight'),
                                 str(tmp_path / 'switched'),
                                 str(tmp_path / 'grouped'))
  assert binary.run_train(*flags, '--rounds=2',
                          f'--output_dir={straight}') == 0
  assert binary.run_train(*flags, '--rounds=2', '--client_vectorization=3',
                          f'--output_dir={grouped}') == 0
  assert binary.run_train(*flags, '--rounds=1',
                          f'--output_dir={switched}') == 0
  assert binary.run_train(*flags, '--rounds=2', '--client_vectorization=2',
                          f'--output_dir={switched}') == 0
  with open(f'{switched}/hparams.json') as f:
    assert json.load(f)['client_vectorization'] == 2
  expected = _rows(straight)
  for output_dir in (switched, grouped):
    rows = _rows(output_dir)
    assert [r['round'] for r in rows] == ['1', '2']
    for got, want in zip(rows, expected):
      for column in ('train_loss', 'train_accuracy', 'train_num_examples',
                     'eval_loss', 'eval_accuracy'):
        assert float(got[column]) == pytest.approx(float(want[column]),
                                                   rel=1e-5), column
    for got, want in zip(binary.checkpoint(output_dir, 2).values(),
                         binary.checkpoint(straight, 2).values()):
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('algorithm_flags, line', [
    (('--algorithm=scaffold',),
     '--client_vectorization=2: --algorithm=scaffold: vectorized client '
     'training cannot run this algorithm: it has client state, a report '
     'pass without a vectorized form (vectorized_report_fn).'),
    (('--algorithm=fedcurv', '--lam=1'),  # auto: Eq. 3 fits here.
     '--client_vectorization=2: --algorithm=fedcurv: vectorized client '
     'training cannot run this algorithm: it has client state (FedCurv\'s '
     'Eq. 3 keeps each client\'s last Fisher terms; --fedcurv_exact=off runs '
     'its stateless variant).'),
])
def test_binary_refuses_the_flag_without_a_vectorized_path(
    data_dir, tmp_path, capsys, algorithm_flags, line):
  assert binary.run_train(
      *BINARY_FLAGS, f'--data_dir={data_dir}', '--rounds=1',
      *algorithm_flags, '--client_vectorization=2',
      f'--output_dir={tmp_path / "run"}') == 2
  assert f'train: error: {line}\n' in capsys.readouterr().err
  assert not os.path.exists(tmp_path / 'run')


def test_binary_refuses_the_flag_for_a_task_without_a_vectorized_model(
    tmp_path, capsys):
  assert binary.run_train(
      '--task=digits', '--rounds=1', '--client_vectorization=2',
      f'--output_dir={tmp_path / "run"}') == 2
  assert ('train: error: --client_vectorization=2: --task=digits has no '
          'vectorized model (only --task=shakespeare has one); drop the flag '
          '(or set it to 0).\n') in capsys.readouterr().err
