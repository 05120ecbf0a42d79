"""SCAFFOLD option II: control variates, FedAvg equivalence, client state."""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny
from tff_opt import algorithms
from tff_opt.program import training_loop

CLIENT_LR = 0.1
LOCAL_STEPS = 3
MODEL_BYTES = (tiny.NUM_FEATURES * tiny.NUM_CLASSES + tiny.NUM_CLASSES) * 4


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


@pytest.fixture(scope='module')
def scaffold():
  return algorithms.build_scaffold(
      tiny.model_fn, client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(1.0))


def numpy_scaffold(clients, schedule, num_clients=None):
  """Reddi et al. Algorithm 6 in NumPy; `schedule` lists each round's ids."""
  w = [t.astype(np.float64) for t in tiny.initial_weights()]
  c = [np.zeros_like(t) for t in w]
  c_own = {}
  for sampled in schedule:
    finals, control_deltas = [], []
    for k in sampled:
      x, y = clients[k]
      c_k = c_own.get(k, c)  # first time: c_k = c
      final = tiny.local_sgd(
          w, x, y, CLIENT_LR, LOCAL_STEPS,
          extra_grad=lambda _, c=c, c_k=c_k: [a - b for a, b in zip(c, c_k)])
      c_plus = [a - b + (wt - f) / (LOCAL_STEPS * CLIENT_LR)
                for a, b, wt, f in zip(c_k, c, w, final)]
      control_deltas.append([p - a for p, a in zip(c_plus, c_k)])
      c_own[k] = c_plus
      finals.append(final)
    n = num_clients or len(sampled)
    c = [a + sum(d[j] for d in control_deltas) / n for j, a in enumerate(c)]
    w = tiny.weighted_mean(finals, [len(clients[k][1]) for k in sampled])
  return w, c, c_own


def _run(process, clients, schedule):
  state = tiny.set_weights(process, process.initialize(),
                           tiny.initial_weights())
  store = {}
  for sampled in schedule:
    output, new_states = process.next(
        state, tiny.full_batch_datasets([clients[k] for k in sampled],
                                        LOCAL_STEPS),
        [store.get(k, process.initial_client_state()) for k in sampled])
    store.update(zip(sampled, new_states))
    state = output.state
  return state, store, output


def _numpy_fed_avg(clients, schedule):
  w = [t.astype(np.float64) for t in tiny.initial_weights()]
  for sampled in schedule:
    finals = [tiny.local_sgd(w, *clients[k], CLIENT_LR, LOCAL_STEPS)
              for k in sampled]
    w = tiny.weighted_mean(finals, [len(clients[k][1]) for k in sampled])
  return w


def test_matches_numpy_scaffold_with_returning_clients(scaffold):
  clients = tiny.make_clients(num_clients=4, seed=9, sizes=(6, 10, 4, 8))
  schedule = [[0, 1, 2], [1, 2, 3], [3, 0, 2]]
  state, store, output = _run(scaffold, clients, schedule)
  w, c, c_own = numpy_scaffold(clients, schedule)
  for got, want in zip(tiny.trainable(scaffold, state), w):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  for got, want in zip(state.finalizer['extras']['control_variate'], c):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
  for k in range(4):
    assert bool(store[k]['initialized'])
    for got, want in zip(store[k]['control_variate'], c_own[k]):
      np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
  # Returning clients were corrected: the result is not FedAvg's.
  assert np.abs(w[0] - _numpy_fed_avg(clients, schedule)[0]).max() > 1e-4
  # The model and c down, the delta and Delta c up: twice FedAvg's.
  assert output.metrics['communication'] == {
      'bytes_server_to_client': 2 * MODEL_BYTES,
      'bytes_client_to_server': 2 * MODEL_BYTES}


def test_equals_fed_avg_when_every_client_is_new(scaffold):
  clients = tiny.make_clients(num_clients=9, seed=10, sizes=(6, 10, 4, 8, 5))
  schedule = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
  state, _, _ = _run(scaffold, clients, schedule)
  _, c, _ = numpy_scaffold(clients, schedule)
  assert np.abs(c[0]).max() > 1e-3  # c is not zero, yet c_i = c cancels it
  for got, want in zip(tiny.trainable(scaffold, state),
                       _numpy_fed_avg(clients, schedule)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_population_size_scales_the_server_control_variate():
  # Built as binaries.train builds it: N is the task's training clients.
  from tff_opt.program import registry  # pylint: disable=g-import-not-at-top
  process = registry.build_process(
      'scaffold', tiny.model_fn, client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(1.0),
      client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
      client_lr_schedule=None, num_clients=8)
  clients = tiny.make_clients(num_clients=4, seed=9, sizes=(6, 10, 4, 8))
  schedule = [[0, 1], [1, 2], [0, 3]]
  state, _, _ = _run(process, clients, schedule)
  w, c, _ = numpy_scaffold(clients, schedule, num_clients=8)
  for got, want in zip(tiny.trainable(process, state), w):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  for got, want in zip(state.finalizer['extras']['control_variate'], c):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


CLIENTS = {f'client_{k}': c for k, c in enumerate(
    tiny.make_clients(num_clients=6, seed=5, sizes=(8, 12, 5, 9, 3, 7)))}


def _dataset(client_id):
  x, y = CLIENTS[client_id]
  return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(16).batch(4)


def _train(process, output_dir, rounds):
  return training_loop.run_training(
      process,
      client_ids=sorted(CLIENTS),
      client_dataset_fn=_dataset,
      clients_per_round=3,
      rounds=rounds,
      seed=7,
      output_dir=output_dir,
      checkpoint_every=2,
      initial_state=tiny.set_weights(process, process.initialize(),
                                     tiny.initial_weights()),
      log=None)


def test_client_states_survive_checkpoint_and_resume(scaffold, tmp_path):
  straight = _train(scaffold, str(tmp_path / 'straight'), rounds=5)
  interrupted = str(tmp_path / 'interrupted')
  _train(scaffold, interrupted, rounds=3)
  shutil.rmtree(os.path.join(interrupted, training_loop.CHECKPOINT_DIR,
                             'program_state_3'))
  resumed = _train(scaffold, interrupted, rounds=5)
  assert resumed.start_round == 2
  # Some clients came back (their c_i mattered) and some never came.
  assert 3 <= len(straight.client_states) <= 6
  assert sorted(resumed.client_states) == sorted(straight.client_states)
  for cid, want in straight.client_states.items():
    got = resumed.client_states[cid]
    assert bool(got['initialized'])
    for a, b in zip(got['control_variate'], want['control_variate']):
      np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  for got, want in zip(tiny.trainable(scaffold, resumed.state),
                       tiny.trainable(scaffold, straight.state)):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
  # A client trained before the checkpoint came back after it, so its
  # restored c_i was used in the resumed rounds.
  sampled = [training_loop.sample_clients(sorted(CLIENTS), 3, seed=7,
                                          round_num=r) for r in range(1, 6)]
  before = set(sampled[0]) | set(sampled[1])
  assert before & (set(sampled[2]) | set(sampled[3]) | set(sampled[4]))


def test_rejects_bad_num_clients():
  with pytest.raises(ValueError, match=r'^num_clients must be a positive '
                     r'integer or None, got 0\.$'):
    algorithms.build_scaffold(
        tiny.model_fn, client_optimizer_fn=_sgd(0.1),
        server_optimizer_fn=_sgd(1.0), num_clients=0)
