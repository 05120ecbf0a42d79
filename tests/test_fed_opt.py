"""FedOpt: the shared client work + server optimizer, against TFF and NumPy.

On a BN model the clients' moving statistics are averaged into the global
model (`recipe.with_shared_non_trainables`; against NumPy in
`test_recipe.py`); here, on the `digits` task's `cnn_bn`.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny
from tff_opt import algorithms
from tff_opt.round import schedules

CLIENT_LR = 0.1
LOCAL_STEPS = 3
ROUNDS = 3


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


@pytest.fixture(scope='module')
def fed_avg():
  return algorithms.build_fed_opt(
      tiny.model_fn,
      client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(1.0))


def _run(process, clients, rounds=ROUNDS, local_steps=LOCAL_STEPS):
  return tiny.run_rounds(process, clients, rounds=rounds,
                         local_steps=local_steps)


def _numpy_fed_avg(clients, *, rounds=ROUNDS, lr=CLIENT_LR, uniform=False,
                   lr_of_round=None):
  w = [t.astype(np.float64) for t in tiny.initial_weights()]
  for r in range(rounds):
    round_lr = lr if lr_of_round is None else lr_of_round(r)
    finals = [tiny.local_sgd(w, x, y, round_lr, LOCAL_STEPS) for x, y in clients]
    sizes = [1.0 if uniform else len(y) * LOCAL_STEPS for _, y in clients]
    w = tiny.weighted_mean(finals, sizes)
  return w


def test_next_type_signature(fed_avg):
  parameter = fed_avg.next.type_signature.parameter
  data_type = parameter[1]
  assert data_type.placement is tff.CLIENTS
  assert isinstance(data_type.member, tff.SequenceType)
  state_type = fed_avg.initialize.type_signature.result
  assert state_type.placement is tff.SERVER
  assert tff.structure.name_list(
      fed_avg.next.type_signature.result.metrics.member) == [
      'distributor', 'client_work', 'aggregator', 'finalizer',
      'communication']


def test_fed_avg_matches_numpy_example_weighted(fed_avg):
  clients = tiny.make_clients()
  state, _ = _run(fed_avg, clients)
  expected = _numpy_fed_avg(clients)
  for got, want in zip(tiny.trainable(fed_avg, state), expected):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_reports_bytes_of_one_model_each_way(fed_avg):
  clients = tiny.make_clients()
  state = fed_avg.initialize()
  output = fed_avg.next(state, tiny.full_batch_datasets(clients))
  model_bytes = 4 * (tiny.NUM_FEATURES * tiny.NUM_CLASSES + tiny.NUM_CLASSES)
  assert output.metrics['communication'] == {
      'bytes_server_to_client': model_bytes,
      'bytes_client_to_server': model_bytes}


def test_fed_avg_equals_tff_build_weighted_fed_avg(fed_avg):
  clients = tiny.make_clients(num_clients=4, seed=3, sizes=(5, 9, 2, 7))
  tff_process = tff.learning.algorithms.build_weighted_fed_avg(
      tiny.model_fn,
      client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(1.0))
  ours, our_outputs = _run(fed_avg, clients)
  theirs, their_outputs = _run(tff_process, clients)
  for got, want in zip(tiny.trainable(fed_avg, ours),
                       tiny.trainable(tff_process, theirs)):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
  ours_train = our_outputs[-1].metrics['client_work']['train']
  theirs_train = their_outputs[-1].metrics['client_work']['train']
  assert ours_train['loss'] == pytest.approx(theirs_train['loss'], rel=1e-6)
  assert ours_train['accuracy'] == pytest.approx(theirs_train['accuracy'])
  assert ours_train['num_examples'] == theirs_train['num_examples'] == (
      (5 + 9 + 2 + 7) * LOCAL_STEPS)


def test_uniform_weighting_matches_numpy():
  process = algorithms.build_fed_opt(
      tiny.model_fn,
      client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(1.0),
      client_weighting=tff.learning.ClientWeighting.UNIFORM)
  clients = tiny.make_clients()
  state, _ = _run(process, clients)
  expected = _numpy_fed_avg(clients, uniform=True)
  for got, want in zip(tiny.trainable(process, state), expected):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  # Uniform and example weighting differ on clients of unequal size.
  weighted = _numpy_fed_avg(clients)
  assert not np.allclose(expected[0], weighted[0], atol=1e-4)


def test_client_lr_schedule_decays_and_is_reported():
  schedule = schedules.staircase_decay(0.5, decay_factor=0.1, decay_every=2)
  process = algorithms.build_fed_opt(
      tiny.model_fn,
      client_optimizer_fn=_sgd(0.5),
      server_optimizer_fn=_sgd(1.0),
      client_lr_schedule=schedule)
  clients = tiny.make_clients()
  state, outputs = _run(process, clients, rounds=3)
  rates = [o.metrics['client_work']['client_learning_rate'] for o in outputs]
  np.testing.assert_allclose(rates, [0.5, 0.5, 0.05], rtol=1e-6)
  expected = _numpy_fed_avg(
      clients, rounds=3, lr_of_round=lambda r: 0.5 * 0.1**(r // 2))
  for got, want in zip(tiny.trainable(process, state), expected):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_non_finite_round_is_rejected_and_reported(fed_avg):
  clients = tiny.make_clients()
  state = tiny.set_weights(fed_avg, fed_avg.initialize(),
                           tiny.initial_weights())
  bad = [(np.full_like(x, np.nan), y) for x, y in clients]
  output = fed_avg.next(state, tiny.full_batch_datasets(bad))
  assert output.metrics['finalizer']['update_non_finite'] == 1
  assert output.metrics['client_work']['non_finite_clients'] == len(bad)
  for got, want in zip(tiny.trainable(fed_avg, output.state),
                       tiny.initial_weights()):
    np.testing.assert_array_equal(got, want)
  # One bad client among good ones drops out of the mean; the round goes on.
  mixed = [bad[0]] + clients[1:]
  output = fed_avg.next(state, tiny.full_batch_datasets(mixed, LOCAL_STEPS))
  assert output.metrics['finalizer']['update_non_finite'] == 0
  assert output.metrics['client_work']['non_finite_clients'] == 1
  expected = _numpy_fed_avg(clients[1:], rounds=1)
  for got, want in zip(tiny.trainable(fed_avg, output.state), expected):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_rejects_non_tff_optimizer():
  with pytest.raises(TypeError, match='client_optimizer_fn must be a '
                     'tff.learning.optimizers.Optimizer, got SGD'):
    algorithms.build_fed_opt(
        tiny.model_fn,
        client_optimizer_fn=tf.keras.optimizers.SGD(0.1),
        server_optimizer_fn=_sgd(1.0))


@pytest.mark.filterwarnings('ignore:Batch Normalization contains non-trainable')
def test_fed_avg_on_digits_cnn_bn_moves_the_global_bn_statistics():
  """TFF's own finalizer would leave them at their initial 0 and 1."""
  import tasks  # pylint: disable=g-import-not-at-top
  task = tasks.create_task(
      'digits', train_client_spec=tff.simulation.baselines.ClientSpec(
          num_epochs=1, batch_size=16), model='cnn_bn', num_clients=6)
  process = algorithms.build_fed_opt(
      task.model_fn, client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(1.0))
  data = task.datasets.train_data
  datasets = [task.datasets.train_preprocess_fn(
      data.create_tf_dataset_for_client(cid)) for cid in data.client_ids[:2]]
  state = process.initialize()
  initial = process.get_model_weights(state).non_trainable
  assert len(initial) == 4  # Two BN layers' moving mean and variance.
  output = process.next(state, datasets)
  assert output.metrics['finalizer']['update_non_finite'] == 0
  for before, after in zip(
      initial, process.get_model_weights(output.state).non_trainable):
    assert np.all(np.isfinite(after))
    assert np.abs(after - before).max() > 1e-3
