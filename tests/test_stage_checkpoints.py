"""Tests for tools/stage_checkpoints.py, on fabricated runs in a new git
repository whose .gitignore ignores checkpoints as this repository's does."""

import csv
import json
import os
import subprocess

import pytest

from tools import stage_checkpoints

ROOT = 'results/claims'


def _git(repo, *args):
  return subprocess.run(('git', '-C', repo, *args), check=True,
                        capture_output=True, text=True).stdout


def _staged(repo, run_dir):
  return sorted(_git(repo, 'ls-files', '--', run_dir).split())


def _run(repo, name, *, rounds, logged, saved, size=10):
  """A run that will run `rounds`, logs rounds `logged` and saved `saved`
  (a round, or (round, folder suffix, with state file))."""
  run_dir = os.path.join(ROOT, 'claim', 'runs', name)
  path = os.path.join(repo, run_dir)
  os.makedirs(os.path.join(path, 'checkpoints'))
  with open(os.path.join(path, 'hparams.json'), 'w') as f:
    json.dump({'rounds': rounds}, f)
  if logged is not None:
    with open(os.path.join(path, 'metrics.csv'), 'w', newline='') as f:
      writer = csv.writer(f)
      writer.writerow(['round', 'train_loss'])
      writer.writerows([r, 1.0 / r] for r in logged)
  for entry in saved:
    round_num, suffix, complete = (
        entry if isinstance(entry, tuple) else (entry, '', True))
    folder = os.path.join(path, 'checkpoints',
                          f'program_state_{round_num}{suffix}')
    os.makedirs(folder)
    if complete:
      with open(os.path.join(folder, 'state.npz'), 'wb') as f:
        f.write(b'x' * size)
  return run_dir


def _state(run_dir, round_num):
  return f'{run_dir}/checkpoints/program_state_{round_num}/state.npz'


@pytest.fixture
def repo(tmp_path):
  repo = str(tmp_path)
  _git(repo, 'init', '-q')
  _git(repo, 'config', 'user.email', 'test@example.com')
  _git(repo, 'config', 'user.name', 'test')
  with open(os.path.join(repo, '.gitignore'), 'w') as f:
    f.write('results/claims/**/checkpoints/\n')
  return repo


def _commit_checkpoint(repo, run_dir, round_num):
  _git(repo, 'add', '-f', _state(run_dir, round_num))
  _git(repo, 'commit', '-qm', 'checkpoint')


def test_unfinished_run_stages_newest_logged_checkpoint_only(repo):
  # Rounds 1-7 and 9 logged (8 missing), checkpoints 2, 6 and 8 complete,
  # 5 without its state file, 4 an interrupted save.
  run = _run(repo, 'a', rounds=10, logged=[1, 2, 3, 4, 5, 6, 7, 9],
             saved=[2, (4, '_temp1', True), (5, '', False), 6, 8])
  _commit_checkpoint(repo, run, 2)
  plans = stage_checkpoints.stage(repo, ROOT, max_bytes=100)
  assert plans == [stage_checkpoints.Plan(
      run, _state(run, 6), (_state(run, 2),),
      'logged through round 7 of 10')]
  assert _staged(repo, run) == sorted([
      _state(run, 6), f'{run}/hparams.json', f'{run}/metrics.csv'])
  # Unstaged, not deleted.
  assert os.path.isfile(os.path.join(repo, _state(run, 2)))


def test_finished_run_unstages_every_checkpoint(repo):
  run = _run(repo, 'b', rounds=3, logged=[1, 2, 3], saved=[2, 3])
  _commit_checkpoint(repo, run, 3)
  plans = stage_checkpoints.stage(repo, ROOT, max_bytes=100)
  assert plans == [stage_checkpoints.Plan(run, None, (_state(run, 3),),
                                          'finished')]
  assert _staged(repo, run) == sorted([f'{run}/hparams.json',
                                       f'{run}/metrics.csv'])
  assert stage_checkpoints._describe(plans[0]) == (
      f'{run}: unstages 1 older checkpoint file(s) (finished)')


def test_checkpoint_over_the_limit_is_left_unstaged(repo):
  run = _run(repo, 'c', rounds=10, logged=[1, 2, 3, 4], saved=[2, 4],
             size=2_000)
  _commit_checkpoint(repo, run, 2)
  plans = stage_checkpoints.stage(repo, ROOT, max_bytes=1_000)
  note = ('checkpoint 4 is 0.002 MB, over --max_mb=0.001: not staged; it '
          'resumes only on this machine')
  assert plans == [stage_checkpoints.Plan(run, None, (), note)]
  # The committed checkpoint stays: the tool only adds what it can.
  assert _state(run, 2) in _staged(repo, run)
  assert stage_checkpoints._describe(plans[0]) == (
      f'{run}: nothing staged ({note})')


def test_run_without_metrics_has_no_usable_checkpoint(repo):
  run = _run(repo, 'd', rounds=10, logged=None, saved=[2])
  plans = stage_checkpoints.stage(repo, ROOT, max_bytes=100, dry_run=True)
  assert plans == [stage_checkpoints.Plan(
      run, None, (), 'no checkpoint at or before round 0, the last logged '
      'without a gap')]


def test_dry_run_changes_nothing(repo):
  run = _run(repo, 'e', rounds=10, logged=[1, 2], saved=[2])
  plans = stage_checkpoints.stage(repo, ROOT, max_bytes=100, dry_run=True)
  assert plans[0].add == _state(run, 2)
  assert _staged(repo, ROOT) == []


def test_root_without_runs_is_refused(repo):
  os.makedirs(os.path.join(repo, ROOT))
  with pytest.raises(FileNotFoundError) as raised:
    stage_checkpoints.stage(repo, ROOT, max_bytes=100)
  assert str(raised.value) == (
      f'--root={ROOT}: no run (a folder with hparams.json and checkpoints/) '
      f'under {os.path.join(repo, ROOT)}')


def test_state_file_is_the_checkpoints_one():
  from tff_opt.program import checkpoints  # pylint: disable=g-import-not-at-top
  assert stage_checkpoints.STATE_FILE == checkpoints.STATE_FILE
