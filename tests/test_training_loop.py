"""The simulation loop: sampling, metrics files, checkpoints and resume."""

import csv
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny
from tff_opt import algorithms
from tff_opt.program import analysis
from tff_opt.program import training_loop

CLIENTS = {f'client_{k}': c for k, c in enumerate(
    tiny.make_clients(num_clients=6, seed=5, sizes=(8, 12, 5, 9, 3, 7)))}


def _dataset(client_id):
  x, y = CLIENTS[client_id]
  return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(16).batch(4)


@pytest.fixture(scope='module')
def process():
  return algorithms.build_fed_opt(
      tiny.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.2),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0, momentum=0.5))


def _train(process, output_dir, rounds, **kwargs):
  initial = tiny.set_weights(process, process.initialize(),
                             tiny.initial_weights())
  return training_loop.run_training(
      process,
      client_ids=sorted(CLIENTS),
      client_dataset_fn=_dataset,
      clients_per_round=3,
      rounds=rounds,
      seed=7,
      output_dir=output_dir,
      initial_state=initial,
      **{'log': None, **kwargs})


def _csv_rows(output_dir):
  with open(os.path.join(output_dir, training_loop.METRICS_FILE)) as f:
    return list(csv.DictReader(f))


def test_sample_clients_is_seeded_per_round_and_distinct():
  ids = [f'c{i}' for i in range(50)]
  a = training_loop.sample_clients(ids, 10, seed=1, round_num=3)
  assert a == training_loop.sample_clients(ids, 10, seed=1, round_num=3)
  assert len(set(a)) == 10
  assert a != training_loop.sample_clients(ids, 10, seed=1, round_num=4)
  assert a != training_loop.sample_clients(ids, 10, seed=2, round_num=3)
  with pytest.raises(ValueError, match=r'clients_per_round must be in '
                     r'\[1, 50\] \(the number of training clients\), got 51'):
    training_loop.sample_clients(ids, 51, seed=1, round_num=1)


def test_flatten_metrics_names():
  flat = training_loop.flatten_metrics({
      'distributor': {},
      'client_work': {'train': {'loss': 1.5, 'accuracy': np.float32(0.25)},
                      'client_learning_rate': 0.1},
      'aggregator': {'mean_value': (), 'norm': 2.0},
      'finalizer': {'update_non_finite': np.int32(0), 'norm': 3.0},
  })
  assert flat == {
      'train_loss': 1.5, 'train_accuracy': 0.25, 'client_learning_rate': 0.1,
      'aggregator_norm': 2.0, 'update_non_finite': 0.0, 'finalizer_norm': 3.0}


def test_metrics_csv_has_one_row_per_round_and_leading_columns(
    process, tmp_path):
  output_dir = str(tmp_path / 'run')
  result = _train(process, output_dir, rounds=3, evaluate_fn=lambda w: {
      'loss': 0.5, 'accuracy': 0.75}, eval_every=2)
  rows = _csv_rows(output_dir)
  assert [r['round'] for r in rows] == ['1', '2', '3']
  assert list(rows[0])[:6] == list(training_loop.LEADING_COLUMNS)
  # Evaluated on round 2 (eval_every) and round 3 (the last) only.
  assert [r['eval_accuracy'] for r in rows] == ['', '0.75', '0.75']
  assert float(rows[0]['train_num_examples']) > 0
  assert len(result.rows) == 3
  assert os.listdir(os.path.join(output_dir, training_loop.TENSORBOARD_DIR))


def test_resume_after_interruption_equals_uninterrupted_run(process, tmp_path):
  straight = str(tmp_path / 'straight')
  interrupted = str(tmp_path / 'interrupted')
  expected = _train(process, straight, rounds=5, checkpoint_every=2)

  _train(process, interrupted, rounds=3, checkpoint_every=2)
  # Simulate a crash after round 3 was logged but before its checkpoint.
  checkpoints = os.path.join(interrupted, training_loop.CHECKPOINT_DIR)
  shutil.rmtree(os.path.join(checkpoints, 'program_state_3'))
  assert [r['round'] for r in _csv_rows(interrupted)] == ['1', '2', '3']

  resumed = _train(process, interrupted, rounds=5, checkpoint_every=2)
  assert resumed.start_round == 2
  rows = _csv_rows(interrupted)
  assert [r['round'] for r in rows] == ['1', '2', '3', '4', '5']
  for got, want in zip(rows, _csv_rows(straight)):
    assert float(got['train_loss']) == pytest.approx(
        float(want['train_loss']), rel=1e-6)
  for got, want in zip(tiny.trainable(process, resumed.state),
                       tiny.trainable(process, expected.state)):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_finished_run_is_not_recomputed(process, tmp_path):
  output_dir = str(tmp_path / 'done')
  first = _train(process, output_dir, rounds=2)
  again = _train(process, output_dir, rounds=2)
  assert again.start_round == 2
  assert [r['round'] for r in _csv_rows(output_dir)] == ['1', '2']
  for got, want in zip(tiny.trainable(process, again.state),
                       tiny.trainable(process, first.state)):
    np.testing.assert_array_equal(got, want)


def test_bad_counts_are_rejected(process):
  with pytest.raises(ValueError, match='rounds must be a positive integer, '
                     'got 0'):
    _train(process, None, rounds=0)


def test_rejected_round_logs_nan_training_metrics_and_says_so(process,
                                                               tmp_path):
  """A diverged round must not read as a perfect 0 loss."""
  poisoned = {'client_0', 'client_1', 'client_2', 'client_3', 'client_4',
              'client_5'}

  def nan_dataset(client_id):
    x, y = CLIENTS[client_id]
    x = np.full_like(x, np.nan) if client_id in poisoned else x
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(4)

  lines = []
  initial = tiny.set_weights(process, process.initialize(),
                             tiny.initial_weights())
  result = training_loop.run_training(
      process, client_ids=sorted(CLIENTS), client_dataset_fn=nan_dataset,
      clients_per_round=3, rounds=2, seed=7, output_dir=str(tmp_path),
      initial_state=initial, log=lines.append)
  rows = _csv_rows(str(tmp_path))
  assert [float(r['update_non_finite']) for r in rows] == [1.0, 1.0]
  assert [r['train_loss'] for r in rows] == ['nan', 'nan']
  assert [r['train_accuracy'] for r in rows] == ['nan', 'nan']
  assert [r['train_num_examples'] for r in rows] != ['nan', 'nan']
  assert 'REJECTED' in lines[0] and 'train_loss nan' in lines[0]
  assert lines[-1].startswith('done: 2 rounds (2 run now, ')
  assert ('; 2 rounds rejected (non-finite update; model kept, their '
          'training metrics logged as nan)') in lines[-1]
  for got, want in zip(tiny.trainable(process, result.state),
                       tiny.initial_weights()):
    np.testing.assert_array_equal(got, want)


def test_fewer_rounds_than_the_checkpoint_is_refused_and_changes_nothing(
    process, tmp_path):
  _train(process, str(tmp_path), rounds=4)
  before = _csv_rows(str(tmp_path))
  with pytest.raises(training_loop.RoundsBehindCheckpointError) as e:
    _train(process, str(tmp_path), rounds=2)
  assert str(e.value) == (
      f'{tmp_path} is checkpointed at round 4, past rounds=2: ask for at '
      'least 4 rounds to continue it, or give another output directory '
      '(nothing was changed).')
  assert _csv_rows(str(tmp_path)) == before


def test_truncated_latest_checkpoint_falls_back_and_is_kept(process,
                                                            tmp_path):
  """Resume from the newest intact checkpoint, delete nothing."""
  out = str(tmp_path)
  _train(process, out, rounds=4, checkpoint_every=2)
  ckpt = os.path.join(out, training_loop.CHECKPOINT_DIR)
  # Truncate every file of the latest checkpoint (round 4), as a kill
  # during a copy or a full disk would; leave a stale save behind too.
  for root, _, files in os.walk(os.path.join(ckpt, 'program_state_4')):
    for name in files:
      with open(os.path.join(root, name), 'r+b') as f:
        f.truncate(3)
  os.makedirs(os.path.join(ckpt, 'program_state_6_temp1234', 'variables'))
  lines = []
  result = _train(process, out, rounds=4, checkpoint_every=2,
                  log=lines.append)
  assert lines[0] == ('Removed 1 unfinished checkpoint save(s) left by an '
                      'interrupted run: program_state_6_temp1234')
  assert lines[1].startswith('Checkpoint of round 4 is unreadable (')
  assert lines[1].endswith('); kept as program_state_4.unreadable, trying '
                           'the one before it.')
  assert lines[2].startswith('Resuming after round 2 from ')
  assert result.start_round == 2
  assert sorted(os.listdir(ckpt)) == ['program_state_2', 'program_state_4',
                                      'program_state_4.unreadable']
  # The same weights as an uninterrupted run.
  fresh = _train(process, str(tmp_path / 'fresh'), rounds=4)
  for got, want in zip(tiny.trainable(process, result.state),
                       tiny.trainable(process, fresh.state)):
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_all_checkpoints_unreadable_is_refused_every_time(process, tmp_path):
  """The second start must not restart over the metrics either."""
  out = str(tmp_path)
  _train(process, out, rounds=4, checkpoint_every=2)
  ckpt = os.path.join(out, training_loop.CHECKPOINT_DIR)
  for name in os.listdir(ckpt):
    with open(os.path.join(ckpt, name, 'state.npz'), 'r+b') as f:
      f.truncate(3)
  with open(os.path.join(out, training_loop.METRICS_FILE), 'rb') as f:
    metrics = f.read()
  message = (
      f'No checkpoint in {ckpt} can be read (kept as '
      'program_state_2.unreadable, program_state_4.unreadable), and starting '
      f'again from round 1 would rewrite the metrics.csv of {out}: move that '
      'directory aside (or use another output directory) to start again. '
      'Its metrics are kept as they are.')
  started = []
  for _ in range(2):  # The first start renames them; the second finds none.
    with pytest.raises(training_loop.UnreadableCheckpointsError) as e:
      _train(process, out, rounds=4, checkpoint_every=2,
             on_start=started.append)
    assert str(e.value) == message
    with open(os.path.join(out, training_loop.METRICS_FILE), 'rb') as f:
      assert f.read() == metrics
    assert sorted(os.listdir(ckpt)) == ['program_state_2.unreadable',
                                        'program_state_4.unreadable']
  assert not started


def _keep_rows_through(output_dir, last):
  """Rewrites metrics.csv with its rows of rounds <= `last` only."""
  path = os.path.join(output_dir, training_loop.METRICS_FILE)
  with open(path, newline='') as f:
    lines = f.read().splitlines(keepends=True)
  with open(path, 'w', newline='') as f:
    f.writelines(lines[:last + 1])  # The header and `last` rows.


def test_metrics_behind_the_checkpoint_are_recomputed_not_skipped(
    process, tmp_path):
  """An older metrics.csv put back over a run must not leave a hole in it.

  The claims' Reddi et al. runs had one: their metrics.csv and log were
  restored from a commit at round 535 while their checkpoints had gone on to
  540, and the run resumed after 540, so rounds 536-540 were never logged.
  """
  straight = str(tmp_path / 'straight')
  _train(process, straight, rounds=6, checkpoint_every=2)
  out = str(tmp_path / 'restored')
  _train(process, out, rounds=6, checkpoint_every=2)
  _keep_rows_through(out, 3)  # Rounds 4-6 lost; checkpoints 2, 4, 6 kept.
  with open(os.path.join(out, training_loop.METRICS_FILE), 'rb') as f:
    restored = f.read()
  lines = []
  result = _train(process, out, rounds=6, checkpoint_every=2,
                  log=lines.append)
  assert result.start_round == 2
  assert lines[0] == (
      'metrics.csv logs rounds 1-3 only, but the run is checkpointed after '
      'round 6 (rounds 4-6 missing from it: was it replaced by an older '
      'copy?): resuming from the checkpoint of round 2 instead, to log them; '
      'kept as they were: program_state_4.unlogged, program_state_6.unlogged, '
      'metrics.csv.unlogged.')
  assert lines[1].startswith('Resuming after round 2 from ')
  assert lines[1].endswith('(recomputing 1 rounds logged after that '
                           'checkpoint)')
  got, want = _csv_rows(out), _csv_rows(straight)
  assert [r['round'] for r in got] == ['1', '2', '3', '4', '5', '6']
  for a, b in zip(got, want):
    assert float(a['train_loss']) == pytest.approx(float(b['train_loss']),
                                                   rel=1e-6)
  assert sorted(os.listdir(os.path.join(out, training_loop.CHECKPOINT_DIR))) == [
      'program_state_2', 'program_state_4', 'program_state_4.unlogged',
      'program_state_6', 'program_state_6.unlogged']
  with open(os.path.join(out, 'metrics.csv.unlogged'), 'rb') as f:
    assert f.read() == restored
  assert analysis.is_finished(out, 6)


def test_metrics_gap_without_an_earlier_checkpoint_is_refused(process,
                                                              tmp_path):
  out = str(tmp_path)
  _train(process, out, rounds=4, checkpoint_every=2)
  _keep_rows_through(out, 1)  # Only round 1 logged; checkpoints 2 and 4.
  ckpt = os.path.join(out, training_loop.CHECKPOINT_DIR)
  with open(os.path.join(out, training_loop.METRICS_FILE), 'rb') as f:
    metrics = f.read()
  started = []
  with pytest.raises(training_loop.MetricsGapError) as e:
    _train(process, out, rounds=4, checkpoint_every=2,
           on_start=started.append)
  assert str(e.value) == (
      f'{out} is checkpointed after round 4, but its metrics.csv logs round '
      '1 only, and no checkpoint of round 1 or earlier can be read to '
      'recompute rounds 2-4 from: restore metrics.csv (was it replaced by an '
      'older copy?), or move the checkpoints directory aside to start the '
      'run again from round 1 (nothing was changed).')
  assert not started
  with open(os.path.join(out, training_loop.METRICS_FILE), 'rb') as f:
    assert f.read() == metrics
  assert sorted(os.listdir(ckpt)) == ['program_state_2', 'program_state_4']
  os.remove(os.path.join(out, training_loop.METRICS_FILE))
  with pytest.raises(training_loop.MetricsGapError,
                     match='its metrics.csv logs no round 1, and no '
                     'checkpoint of round 0 or earlier'):
    _train(process, out, rounds=4, checkpoint_every=2)


def test_on_start_is_told_the_round_and_not_called_when_refused(
    process, tmp_path):
  started = []
  _train(process, str(tmp_path), rounds=2, on_start=started.append)
  _train(process, str(tmp_path), rounds=3, on_start=started.append)
  assert started == [0, 2]
  with pytest.raises(training_loop.RoundsBehindCheckpointError):
    _train(process, str(tmp_path), rounds=1, on_start=started.append)
  assert started == [0, 2]


def test_evaluate_fn_with_round_num_is_told_the_round(process, tmp_path):
  seen = []

  def evaluate(weights, round_num):
    del weights
    seen.append(round_num)
    return {'round_seen': float(round_num)}

  _train(process, str(tmp_path), rounds=4, evaluate_fn=evaluate,
         eval_every=2)
  assert seen == [2, 4]
  assert [r['eval_round_seen'] for r in _csv_rows(str(tmp_path))] == [
      '', '2.0', '', '4.0']


def _accuracy_by_round(weights, round_num):
  del weights
  return {'accuracy': {1: 0.5, 2: 0.8, 3: 0.91, 4: 0.95, 5: 0.97}[round_num]}


def test_stop_at_ends_after_the_first_round_reaching_it_and_checkpoints_it(
    process, tmp_path):
  output_dir = str(tmp_path / 'run')
  target = analysis.Target('eval_accuracy', 0.9)
  result = _train(process, output_dir, rounds=5, stop_at=target,
                  evaluate_fn=_accuracy_by_round, checkpoint_every=10)
  assert [r['round'] for r in _csv_rows(output_dir)] == ['1', '2', '3']
  assert [int(r['round']) for r in result.rows] == [1, 2, 3]
  assert sorted(os.listdir(os.path.join(
      output_dir, training_loop.CHECKPOINT_DIR))) == ['program_state_3']
  straight = _train(process, str(tmp_path / 'straight'), rounds=3,
                    evaluate_fn=_accuracy_by_round)
  for got, want in zip(tiny.trainable(process, result.state),
                       tiny.trainable(process, straight.state)):
    np.testing.assert_array_equal(got, want)


def test_stopped_run_resumes_to_nothing_or_without_the_target_goes_on(
    process, tmp_path):
  output_dir = str(tmp_path / 'run')
  target = analysis.Target('eval_accuracy', 0.9)
  lines = []
  _train(process, output_dir, rounds=5, stop_at=target,
         evaluate_fn=_accuracy_by_round)
  again = training_loop.run_training(
      process, client_ids=sorted(CLIENTS), client_dataset_fn=_dataset,
      clients_per_round=3, rounds=5, seed=7, output_dir=output_dir,
      evaluate_fn=_accuracy_by_round, log=lines.append, stop_at=target)
  assert again.start_round == 3
  assert lines[1] == ('Stopped before at round 3: eval_accuracy >= 0.9 '
                      '(stop_at); nothing to run.')
  assert lines[2].startswith('done: 3 rounds (0 run now, ')
  assert [r['round'] for r in _csv_rows(output_dir)] == ['1', '2', '3']
  _train(process, output_dir, rounds=5, evaluate_fn=_accuracy_by_round)
  assert [r['round'] for r in _csv_rows(output_dir)] == [
      '1', '2', '3', '4', '5']


def test_stop_at_a_loss_stops_at_or_below_it_and_logs_why(process, tmp_path):
  lines = []
  result = training_loop.run_training(
      process, client_ids=sorted(CLIENTS), client_dataset_fn=_dataset,
      clients_per_round=3, rounds=4, seed=7, output_dir=None,
      evaluate_fn=lambda w: {'loss': 0.25}, log=lines.append,
      stop_at=analysis.Target('eval_loss', 0.25))
  assert [r['round'] for r in result.rows] == [1]
  assert lines[1] == 'Stopping after round 1 of 4: eval_loss <= 0.25 (stop_at).'


def test_stop_at_a_metric_the_run_does_not_log_is_refused(process, tmp_path):
  with pytest.raises(training_loop.MissingMetricError) as e:
    _train(process, str(tmp_path), rounds=3, eval_every=2,
           evaluate_fn=lambda w: {'accuracy': 0.5},
           stop_at=analysis.Target('eval_acc', 0.9))
  assert str(e.value) == ('round 2 logged no eval_acc (its eval_ columns: '
                          'eval_accuracy).')
  # Round 1 (not evaluated) was logged; round 2 was not.
  assert [r['round'] for r in _csv_rows(str(tmp_path))] == ['1']
