"""Checkpoints stay out of git, but for an unfinished run's newest one.

A long run whose machine may go before it ends may have one checkpoint
committed, so that it resumes on another; that file goes once the run has
logged every round. `.gitignore` keeps the others out, and nothing should
force-add them: a clone carries every blob ever committed.
"""

import json
import os
import subprocess

import pytest

from tff_opt.program import analysis

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def checkpoint_problems(root, paths):
  """What is wrong with the tracked checkpoint files `paths` under `root`.

  Args:
    root: The checkout.
    paths: Tracked files inside some run's `checkpoints/`, relative to
      `root`.

  Returns:
    One line per problem, sorted: a run with more than one tracked file, a
    finished run with any, a run without its `hparams.json`.
  """
  runs = {}
  for path in paths:
    runs.setdefault(path.split('/checkpoints/')[0], []).append(path)
  problems = []
  for run, files in sorted(runs.items()):
    run_dir = os.path.join(root, run)
    try:
      with open(os.path.join(run_dir, analysis.HPARAMS_FILE),
                encoding='utf-8') as f:
        rounds = int(json.load(f)['rounds'])
    except (OSError, KeyError, ValueError):
      problems.append(f'{run}: tracked checkpoint files, no readable '
                      f'{analysis.HPARAMS_FILE} with its rounds')
      continue
    if analysis.is_finished(run_dir, rounds):
      problems.append(f'{run}: finished, yet {len(files)} checkpoint '
                      'file(s) tracked')
    elif len(files) > 1:
      problems.append(f'{run}: {len(files)} checkpoint files tracked, at '
                      'most its newest may be')
  return problems


def _tracked_checkpoints(root):
  listing = subprocess.run(
      ['git', '-C', root, 'ls-files', '-z', '--', '*/checkpoints/*'],
      capture_output=True, check=False)
  if listing.returncode != 0:
    pytest.skip('not a git checkout (Bazel runfiles, an archive)')
  return [p for p in listing.stdout.decode().split('\0') if p]


def test_only_an_unfinished_runs_newest_checkpoint_is_tracked():
  assert checkpoint_problems(_ROOT, _tracked_checkpoints(_ROOT)) == []


def _run(root, name, *, rounds, logged):
  run = os.path.join(root, name)
  os.makedirs(run)
  with open(os.path.join(run, analysis.HPARAMS_FILE), 'w') as f:
    json.dump({'rounds': rounds}, f)
  with open(os.path.join(run, 'metrics.csv'), 'w') as f:
    f.write('round,train_loss\n')
    f.writelines(f'{r},0.5\n' for r in range(1, logged + 1))
  return name


def test_problems_name_finished_runs_second_files_and_missing_settings(
    tmp_path):
  root = str(tmp_path)
  going = _run(root, 'going', rounds=10, logged=4)
  done = _run(root, 'done', rounds=10, logged=10)
  twice = _run(root, 'twice', rounds=10, logged=6)
  state = 'checkpoints/program_state_{}/state.npz'
  assert checkpoint_problems(root, [f'{going}/{state.format(4)}']) == []
  assert checkpoint_problems(root, [
      f'{going}/{state.format(4)}',
      f'{done}/{state.format(10)}',
      f'{twice}/{state.format(4)}', f'{twice}/{state.format(6)}',
      f'gone/{state.format(2)}',
  ]) == [
      'done: finished, yet 1 checkpoint file(s) tracked',
      'gone: tracked checkpoint files, no readable hparams.json with its '
      'rounds',
      'twice: 2 checkpoint files tracked, at most its newest may be',
  ]
