"""The training binary end to end on `digits`: files, resume, errors."""

import csv
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

import tasks
from binaries import train
from tasks import sqlite_data
from tests import binary
from tff_opt.program import evaluation
from tff_opt.program import output_dir as output_dir_lib
from tff_opt.program import output_lock

FAST = ['--task=digits', '--clients_per_round=5', '--client_epochs=1',
        '--eval_every=1', '--checkpoint_every=2', '--seed=3']
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


_run = binary.run_train


def _rows(output_dir):
  with open(os.path.join(output_dir, 'metrics.csv')) as f:
    return list(csv.DictReader(f))


def _checkpoint_variables(output_dir, round_num):
  arrays = list(binary.checkpoint(output_dir, round_num).values())
  # The model weights and optimizer state are in there.
  assert sum(a.size for a in arrays) > 1000
  return arrays


@pytest.fixture(scope='module')
def straight_run(tmp_path_factory):
  output_dir = str(tmp_path_factory.mktemp('straight') / 'run')
  assert _run(*FAST, '--rounds=3', f'--output_dir={output_dir}') == 0
  return output_dir


def test_writes_metrics_hparams_tensorboard_checkpoints(straight_run):
  rows = _rows(straight_run)
  assert [r['round'] for r in rows] == ['1', '2', '3']
  assert list(rows[0])[:6] == ['round', 'train_loss', 'train_accuracy',
                               'eval_loss', 'eval_accuracy', 'round_seconds']
  for row in rows:
    assert 0.0 <= float(row['eval_accuracy']) <= 1.0
    assert float(row['round_seconds']) > 0
    assert float(row['update_non_finite']) == 0
  with open(os.path.join(straight_run, 'hparams.json')) as f:
    hparams = json.load(f)
  assert hparams['server_opt'] == 'yogi'  # the digits default
  assert hparams['clients_per_round'] == 5
  assert hparams['rounds'] == 3
  assert hparams['num_train_clients'] == 100
  assert hparams['partition']['train']['num_clients'] == 100
  # Every flag of the binary's own groups is recorded.
  for name in ('server_lr', 'server_tau', 'client_lr', 'client_lr_decay',
               'client_weighting', 'client_batch_size', 'seed',
               'checkpoint_every'):
    assert name in hparams
  assert os.listdir(os.path.join(straight_run, 'tensorboard'))
  assert sorted(os.listdir(os.path.join(straight_run, 'checkpoints'))) == [
      'program_state_2', 'program_state_3']


def test_resume_after_interruption_gives_same_weights_and_rows(
    straight_run, tmp_path):
  output_dir = str(tmp_path / 'resumed')
  assert _run(*FAST, '--rounds=2', f'--output_dir={output_dir}') == 0
  # Round 3 logged, then a crash before its checkpoint was written.
  assert _run(*FAST, '--rounds=3', f'--output_dir={output_dir}') == 0
  shutil.rmtree(os.path.join(output_dir, 'checkpoints', 'program_state_3'))
  assert _run(*FAST, '--rounds=3', f'--output_dir={output_dir}') == 0

  # Bit for bit: the state, and every logged value but the timings.
  rows, expected_rows = _rows(output_dir), _rows(straight_run)
  assert [r['round'] for r in rows] == ['1', '2', '3']
  for got, want in zip(rows, expected_rows):
    for column in ('train_loss', 'train_accuracy', 'eval_loss',
                   'eval_accuracy'):
      assert got[column] == want[column], (got['round'], column)
  for got, want in zip(_checkpoint_variables(output_dir, 3),
                       _checkpoint_variables(straight_run, 3)):
    np.testing.assert_array_equal(got, want)


def test_refuses_output_dir_of_a_run_with_other_settings(
    straight_run, capsys):
  assert _run(*FAST, '--rounds=3', '--client_lr=0.5',
              f'--output_dir={straight_run}') == 2
  assert capsys.readouterr().err == (
      f'train: error: --output_dir={straight_run} holds a run with other '
      "settings: --client_lr=0.5 (saved run: 0.1). Use another --output_dir, "
      'or the same settings to resume.\n')


def test_refuses_non_empty_dir_without_hparams(tmp_path, capsys):
  (tmp_path / 'notes.txt').write_text('mine')
  assert _run(*FAST, '--rounds=1', f'--output_dir={tmp_path}') == 2
  assert capsys.readouterr().err == (
      f'train: error: --output_dir={tmp_path} is not empty and has no '
      'hparams.json (found notes.txt); refusing to write into it. Use an '
      'empty or new directory.\n')
  assert (tmp_path / 'notes.txt').read_text() == 'mine'


def test_refuses_output_dir_another_trainer_is_writing(tmp_path, capsys):
  """A second trainer on one directory is refused before touching it."""
  output_dir = str(tmp_path / 'run')
  os.makedirs(output_dir)
  held = output_dir_lib.lock(output_dir)  # As a running trainer holds it.
  try:
    assert _run(*FAST, '--rounds=1', f'--output_dir={output_dir}') == 2
    assert capsys.readouterr().err == (
        f'train: error: --output_dir={output_dir} is being written by another '
        f'binaries.train (pid {os.getpid()}); wait for it to end, or use '
        'another --output_dir.\n')
    assert os.listdir(output_dir) == [output_lock.LOCK_FILE]
  finally:
    held.close()
    output_lock.release_all()
  # Released (as when its holder exits): the directory is usable again.
  output_dir_lib.lock(output_dir)
  output_lock.release_all()


def test_a_refused_new_dir_is_removed_lock_and_all(tmp_path, capsys):
  """A refusal after the lock was taken still leaves no directory."""
  output_dir = str(tmp_path / 'run')
  assert _run('--task=digits', '--clients_per_round=101', '--rounds=1',
              f'--output_dir={output_dir}') == 2
  assert 'larger than the 100 training clients' in capsys.readouterr().err
  assert not os.path.exists(output_dir)


def test_unwritable_output_dir(tmp_path, capsys):
  blocker = tmp_path / 'a_file'
  blocker.write_text('')
  output_dir = str(blocker / 'run')
  assert _run(*FAST, '--rounds=1', f'--output_dir={output_dir}') == 2
  assert capsys.readouterr().err == (
      f'train: error: --output_dir={output_dir} is not a writable directory: '
      'Not a directory.\n')


def test_write_probe_leaves_other_processes_files_alone(tmp_path):
  """The writability probe is unique to its process.

  Two claims chains once validated the same run directory at once; each
  created and removed the same `.write_test`, so one removed the other's
  and failed with "No such file or directory". A file of that name (here
  standing for the other process's probe) must survive, and the probe
  leaves nothing behind.
  """
  output_dir = tmp_path / 'run'
  output_dir.mkdir()
  (output_dir / '.write_test').write_text('another process')
  assert output_dir_lib.prepare({'output_dir': str(output_dir)},
                                train.RESUMABLE_CHANGES) is False
  assert os.listdir(output_dir) == ['.write_test']
  assert (output_dir / '.write_test').read_text() == 'another process'


def test_clients_per_round_larger_than_population(tmp_path, capsys):
  output_dir = str(tmp_path / 'run')
  assert _run('--task=digits', '--clients_per_round=101', '--rounds=1',
              f'--output_dir={output_dir}') == 2
  assert capsys.readouterr().err == (
      'train: error: --clients_per_round=101 is larger than the 100 training '
      'clients of task digits.\n')


def test_clients_per_round_zero_is_every_training_client(tmp_path, capfd):
  """--clients_per_round=0: full participation over the task's clients.

  A per-class Dirichlet partition of 10 digits clients at alpha 0.04 leaves
  a client empty under seed 1 (the task leaves it out); 0 then samples the
  9 others every round, where --clients_per_round=10 is refused.
  """
  flags = ('--task=digits', '--task_option=partition=dirichlet_class',
           '--task_option=alpha=0.04', '--task_option=num_clients=10',
           '--seed=1', '--rounds=1', '--eval_every=1', '--client_epochs=1')
  # capfd: the TFF worker started here needs real file descriptors.
  output_dir = str(tmp_path / 'all')
  assert _run(*flags, '--clients_per_round=0',
              f'--output_dir={output_dir}') == 0
  out = capfd.readouterr().out
  assert ' clients_per_round=9 ' in out
  with open(os.path.join(output_dir, 'hparams.json')) as f:
    assert json.load(f)['clients_per_round'] == 0
  rows = _rows(output_dir)
  assert len(rows) == 1
  assert _run(*flags, '--clients_per_round=10',
              f'--output_dir={tmp_path / "ten"}') == 2
  assert capfd.readouterr().err == (
      'train: error: --clients_per_round=10 is larger than the 9 training '
      'clients of task digits.\n')


def test_bad_optimizer_hparam_is_one_line_error(tmp_path, capsys):
  output_dir = str(tmp_path / 'run')
  assert _run(*FAST, '--rounds=1', '--server_beta_1=1.5',
              f'--output_dir={output_dir}') == 2
  assert capsys.readouterr().err == (
      'train: error: --server_beta_1=1.5: beta_1 must be in [0, 1), got '
      '1.5.\n')


def test_bad_schedule_flag_names_the_flag(tmp_path, capsys):
  output_dir = str(tmp_path / 'run')
  assert _run(*FAST, '--rounds=1', '--client_lr_decay=staircase',
              '--client_lr_decay_factor=2', f'--output_dir={output_dir}') == 2
  assert capsys.readouterr().err == (
      'train: error: --client_lr_decay_factor=2.0: decay_factor must be in '
      '(0, 1], got 2.0.\n')


def test_task_options_reach_the_task_and_hparams(tmp_path):
  output_dir = str(tmp_path / 'run')
  assert _run(*FAST, '--rounds=1', '--task_option=alpha=1000',
              '--task_option=num_clients=40', f'--output_dir={output_dir}') == 0
  with open(os.path.join(output_dir, 'hparams.json')) as f:
    hparams = json.load(f)
  assert hparams['task_options'] == {'alpha': 1000, 'num_clients': 40}
  assert hparams['num_train_clients'] == 40
  # alpha = 1000 is close to IID: label entropy near log(10) = 2.30.
  assert hparams['partition']['train']['mean_label_entropy'] > 1.7


@pytest.mark.parametrize('option, message', [
    ('nope=1', "--task=digits: Unknown option 'nope' for task 'digits'; "
     'known options: alpha, beta, classes_per_client, concept_shift, '
     'distinct_classes, empty_clients, imbalance_ratio, long_tail_fraction, '
     'model, num_clients, num_domains, num_test_clients, partition, '
     'test_fraction'),
    ('alpha', '--task_option=alpha: expected NAME=VALUE.'),
])
def test_bad_task_option_is_one_line_error(option, message, tmp_path, capsys):
  output_dir = str(tmp_path / 'run')
  assert _run(*FAST, '--rounds=1', f'--task_option={option}',
              f'--output_dir={output_dir}') == 2
  assert capsys.readouterr().err == f'train: error: {message}\n'


def test_command_line_error_has_no_traceback_and_leaves_no_worker():
  result = subprocess.run(
      [sys.executable, '-m', 'binaries.train', '--task=nope'],
      cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
  assert result.returncode == 2
  assert result.stderr.splitlines()[-1] == (
      'train: error: --task=nope: expected one of ' +
      ', '.join(tasks.TASK_NAMES) + '.')
  assert 'Traceback' not in result.stderr
  assert 'FATAL' not in result.stderr


def _files(output_dir):
  """{relative path: bytes} of every file under `output_dir` but `.lock`."""
  found = {}
  for root, _, names in os.walk(output_dir):
    for name in names:
      path = os.path.join(root, name)
      if name != output_lock.LOCK_FILE:
        with open(path, 'rb') as f:
          found[os.path.relpath(path, output_dir)] = f.read()
  return found


def test_fewer_rounds_on_a_finished_run_changes_no_file(straight_run, capfd):
  """A refused run leaves hparams.json, 'rounds' included, as it was."""
  before = _files(straight_run)
  assert _run(*FAST, '--rounds=2', f'--output_dir={straight_run}') == 2
  assert capfd.readouterr().err.splitlines()[-1] == (
      f'train: error: --rounds=2: {straight_run} is checkpointed at round 3, '
      'past rounds=2: ask for at least 3 rounds to continue it, or give '
      'another output directory (nothing was changed).')
  assert _files(straight_run) == before


def test_metrics_gap_with_no_checkpoint_to_fill_it_is_one_line_error(
    straight_run, tmp_path, capfd):
  """metrics.csv put back from round 1 over a run checkpointed at 2 and 3."""
  output_dir = str(tmp_path / 'run')
  shutil.copytree(straight_run, output_dir)
  path = os.path.join(output_dir, 'metrics.csv')
  with open(path, newline='') as f:
    lines = f.read().splitlines(keepends=True)
  with open(path, 'w', newline='') as f:
    f.writelines(lines[:2])
  before = _files(output_dir)
  assert _run(*FAST, '--rounds=3', f'--output_dir={output_dir}') == 2
  assert capfd.readouterr().err.splitlines()[-1] == (
      f'train: error: {output_dir} is checkpointed after round 3, but its '
      'metrics.csv logs round 1 only, and no checkpoint of round 1 or earlier '
      'can be read to recompute rounds 2-3 from: restore metrics.csv (was it '
      'replaced by an older copy?), or move the checkpoints directory aside to '
      'start the run again from round 1 (nothing was changed).')
  assert _files(output_dir) == before


def test_ignored_flags_are_noted_recorded_and_resume_older_runs(
    straight_run, tmp_path, capfd):
  """Flags of other algorithms are named, never silently lost.

  A run made without `ignored_flags` (as every earlier one) resumes with
  some, and the record is the latest invocation's.
  """
  output_dir = str(tmp_path / 'run')
  shutil.copytree(straight_run, output_dir)

  def saved():
    with open(os.path.join(output_dir, 'hparams.json')) as f:
      return json.load(f)
  assert 'ignored_flags' not in saved()
  assert _run(*FAST, '--rounds=4', '--mu=0.5', '--lam=2',
              f'--output_dir={output_dir}') == 0
  assert [line for line in capfd.readouterr().err.splitlines()
          if line.startswith('train: note:')] == [
              'train: note: --fedcurv_lam, --mu do not apply to '
              '--algorithm=fedopt; ignored (recorded as ignored_flags in '
              'hparams.json).']
  # --lam is recorded under its flag's name; --mu feeds two flags.
  assert saved()['ignored_flags'] == {'fedcurv_lam': 2.0, 'mu': 0.5}
  assert not {'mu', 'lam', 'fedcurv_lam'} & set(saved())  # Not settings.
  assert saved()['rounds'] == 4
  assert [r['round'] for r in _rows(output_dir)] == ['1', '2', '3', '4']
  assert _run(*FAST, '--rounds=4', f'--output_dir={output_dir}') == 0
  assert 'note' not in capfd.readouterr().err
  assert 'ignored_flags' not in saved()
  assert saved()['partition']['train']['num_clients'] == 100


def test_stop_at_ends_the_run_at_its_target_and_records_it(
    straight_run, tmp_path, capsys):
  output_dir = str(tmp_path / 'run')
  # Any accuracy reaches 0: the run stops after round 1, checkpointed.
  assert _run(*FAST, '--rounds=3', '--stop_at=eval_accuracy:0',
              f'--output_dir={output_dir}') == 0
  assert 'Stopping after round 1 of 3: eval_accuracy >= 0 (stop_at).' in (
      capsys.readouterr().out)
  assert [r['round'] for r in _rows(output_dir)] == ['1']
  with open(os.path.join(output_dir, 'hparams.json')) as f:
    assert json.load(f)['stop_at'] == 'eval_accuracy:0.0'
  assert os.listdir(os.path.join(output_dir, 'checkpoints')) == [
      'program_state_1']
  # Round 1 as the run that did not stop, bit for bit: the trained model
  # (its training loss and accuracy) and its evaluation, whose held-out
  # clients are pooled in one order (`sqlite_data.pooled_examples`; TFF's
  # pooling shuffled them, and the loss's last bit varied from run to run).
  stopped, straight = _rows(output_dir)[0], _rows(straight_run)[0]
  for key in ('train_loss', 'train_accuracy', 'eval_loss', 'eval_accuracy'):
    assert stopped[key] == straight[key], key


def test_evaluation_pools_the_held_out_clients_in_sorted_order(monkeypatch):
  # TFF's pooling shuffled the clients afresh in every run, so the
  # evaluation summed its loss in another order, another last bit.
  task = tasks.create_task('digits', seed=3, train_client_spec=(
      tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=10)))
  seen = []
  monkeypatch.setattr(evaluation, 'build_evaluator',
                      lambda model_fn, data: seen.append(data))
  train._build_evaluate({'task': 'digits', 'data_dir': None,
                         'eval_examples': 0, 'seed': 3}, task, None)
  values = lambda data: np.concatenate([
      np.ravel(t) for batch in data for t in tf.nest.flatten(batch)])
  in_sorted_order = task.datasets.eval_preprocess_fn(
      sqlite_data.pooled_examples(task.datasets.test_data))
  np.testing.assert_array_equal(values(seen[0]), values(in_sorted_order))


@pytest.mark.parametrize('value, message', [
    ('eval_accuracy', "--stop_at: expected METRIC:VALUE, e.g. "
     "eval_accuracy:0.9, got 'eval_accuracy'."),
    ('eval_acc:0.5', '--stop_at=eval_acc:0.5: round 1 logged no eval_acc '
     '(its eval_ columns: eval_accuracy, eval_loss, eval_num_batches, '
     'eval_num_examples).'),
])
def test_bad_stop_at_is_one_line_error(value, message, tmp_path, capsys):
  output_dir = str(tmp_path / 'run')
  assert _run(*FAST, '--rounds=2', f'--stop_at={value}',
              f'--output_dir={output_dir}') == 2
  assert capsys.readouterr().err == f'train: error: {message}\n'
