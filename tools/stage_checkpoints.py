"""Stages what the claims' unfinished runs need to resume, for a commit.

A run's checkpoints are ignored by git (`results/claims/**/checkpoints/`):
only its metrics, settings and log are committed as it goes. A session may
end on a machine that the next session does not get, and then a run in
progress resumes only from a checkpoint that was committed. This tool
stages, under `--root`:

- for every unfinished run (its `metrics.csv` lacks a round that its
  `hparams.json` will run, `analysis.unlogged_rounds`), its newest
  checkpoint's `state.npz` (`git add -f`), and unstages the run's older
  committed checkpoints (`git rm --cached`: the files stay on disk);
- for every finished run, unstages every committed checkpoint;
- then every file under `--root` that git does not ignore (metrics, logs,
  settings, reports), as `git add` does.

Choices:
- The checkpoint staged is the newest one at or before the last round that
  `metrics.csv` logs without a gap (`analysis.logged_through`), read before
  the metrics are staged. A checkpoint saved past the logged rows would
  make the resumed run refuse to start on a machine that has no older
  checkpoint (`training_loop.MetricsGapError`); the metrics staged
  afterwards can only hold more rows, which a resume recomputes.
- A checkpoint over `--max_mb` is not staged, and the run's committed
  checkpoints are left as they are; the tool names it. FedCurv's Eq. 3
  keeps every device's last Fisher diagonal and Fisher * w (~0.9 GB for its
  claim's 96 devices), which does not belong in git: such a run resumes
  only on the machine that holds its checkpoints.
- Nothing is committed: the caller reviews `git status` and commits.

Usage, from the repository root, while runs may still be writing:

    .venv/bin/python -m tools.stage_checkpoints            # stage
    .venv/bin/python -m tools.stage_checkpoints --dry_run  # only print

It prints one line per run whose staging changes, and exits with status 1
if `--root` holds no run.
"""

import dataclasses
import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from typing import Optional

from absl import app
from absl import flags

from tff_opt.program import analysis

_CHECKPOINT_DIR = 'checkpoints'
# `checkpoints.STATE_FILE`, named here so that this tool does not import
# TensorFlow Federated (seconds) to read a file name.
STATE_FILE = 'state.npz'
_VERSION = re.compile(r'^program_state_(\d+)$')

FLAGS = flags.FLAGS
flags.DEFINE_string('root', 'results/claims', 'The folder whose runs (each '
                    'a folder with hparams.json and checkpoints/) are '
                    'staged.')
flags.DEFINE_float('max_mb', 50.0, 'Checkpoints larger than this many MB '
                   '(10^6 bytes) are not staged.', lower_bound=0.0)
flags.DEFINE_boolean('dry_run', False, 'Print what would be staged; change '
                     'nothing.')


@dataclasses.dataclass(frozen=True)
class Plan:
  """What one run's staging does.

  Attributes:
    run_dir: The run's folder, relative to the repository root.
    add: The checkpoint file to `git add -f`, or None.
    remove: Committed checkpoint files to unstage.
    note: Why, in a few words (printed).
  """
  run_dir: str
  add: Optional[str]
  remove: tuple[str, ...]
  note: str


def _git(repo: str, *args: str) -> str:
  return subprocess.run(('git', '-C', repo, *args), check=True,
                        capture_output=True, text=True).stdout


def find_runs(repo: str, root: str) -> list[str]:
  """Folders under `root` (relative to `repo`) that hold a run's
  `hparams.json` and a `checkpoints/` folder, sorted."""
  runs = []
  for folder, subfolders, files in os.walk(os.path.join(repo, root)):
    if analysis.HPARAMS_FILE in files and _CHECKPOINT_DIR in subfolders:
      runs.append(os.path.relpath(folder, repo))
      subfolders.clear()
  return sorted(runs)


def saved_rounds(run_path: str) -> list[int]:
  """Rounds whose checkpoint on disk is complete (has its state file).

  A save interrupted by a kill (`program_state_<N>_temp<K>/`) is not one,
  and a run with no `checkpoints/` folder (one cloned from this repository
  after it finished: git keeps no empty folder) has none.
  """
  folder = os.path.join(run_path, _CHECKPOINT_DIR)
  if not os.path.isdir(folder):
    return []
  rounds = []
  for name in os.listdir(folder):
    match = _VERSION.match(name)
    if match and os.path.isfile(
        os.path.join(folder, name, STATE_FILE)):
      rounds.append(int(match.group(1)))
  return sorted(rounds)


def state_file(run_dir: str, round_num: int) -> str:
  """The state file of `run_dir`'s checkpoint after `round_num`."""
  return os.path.join(run_dir, _CHECKPOINT_DIR, f'program_state_{round_num}',
                      STATE_FILE)


def plan_run(repo: str, run_dir: str, max_bytes: float) -> Plan:
  """Decides what to stage for the run in `repo`/`run_dir`."""
  run_path = os.path.join(repo, run_dir)
  committed = tuple(sorted(_git(
      repo, 'ls-files', '--', os.path.join(run_dir, _CHECKPOINT_DIR))
                           .split()))
  with open(os.path.join(run_path, analysis.HPARAMS_FILE),
            encoding='utf-8') as f:
    rounds = int(json.load(f)['rounds'])
  if analysis.is_finished(run_path, rounds):
    return Plan(run_dir, None, committed, 'finished')
  logged = analysis.logged_through(analysis.read_metrics_if_any(run_path))
  usable = [r for r in saved_rounds(run_path) if r <= logged]
  if not usable:
    return Plan(run_dir, None, (), f'no checkpoint at or before round '
                f'{logged}, the last logged without a gap')
  newest = usable[-1]
  state = state_file(run_dir, newest)
  size = os.path.getsize(os.path.join(repo, state))
  if size > max_bytes:
    return Plan(run_dir, None, (), f'checkpoint {newest} is {size / 1e6:.3g} '
                f'MB, over --max_mb={max_bytes / 1e6:g}: not staged; it '
                'resumes only on this machine')
  return Plan(run_dir, state, tuple(p for p in committed if p != state),
              f'logged through round {logged} of {rounds}')


def stage(repo: str, root: str, max_bytes: float,
          dry_run: bool = False) -> list[Plan]:
  """Plans every run under `root` and, unless `dry_run`, stages the plans.

  Args:
    repo: The repository's root.
    root: The folder of the runs, relative to `repo`.
    max_bytes: The largest checkpoint file staged.
    dry_run: Whether to only plan.

  Returns:
    The plans, one per run found.

  Raises:
    FileNotFoundError: If `root` holds no run.
  """
  runs = find_runs(repo, root)
  if not runs:
    raise FileNotFoundError(f'--root={root}: no run (a folder with '
                            f'{analysis.HPARAMS_FILE} and {_CHECKPOINT_DIR}/) '
                            f'under {os.path.join(repo, root)}')
  plans = [plan_run(repo, run, max_bytes) for run in runs]
  if dry_run:
    return plans
  for plan in plans:
    if plan.remove:
      _git(repo, 'rm', '--cached', '--quiet', '--', *plan.remove)
    if plan.add:
      _git(repo, 'add', '-f', '--', plan.add)
  _git(repo, 'add', '--', root)
  return plans


def _describe(plan: Plan) -> Optional[str]:
  """The line printed for `plan`, or None when it changes nothing staged."""
  parts = []
  if plan.add:
    parts.append(f'stages {plan.add}')
  if plan.remove:
    parts.append(f'unstages {len(plan.remove)} older checkpoint file(s)')
  if not parts and plan.note == 'finished':
    return None
  return f'{plan.run_dir}: {", ".join(parts) or "nothing staged"} ({plan.note})'


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {" ".join(argv[1:])}')
  repo = _git('.', 'rev-parse', '--show-toplevel').strip()
  try:
    plans = stage(repo, FLAGS.root, FLAGS.max_mb * 1e6, FLAGS.dry_run)
  except FileNotFoundError as e:
    print(f'stage_checkpoints: {e}', file=sys.stderr)
    sys.exit(1)
  for plan in plans:
    line = _describe(plan)
    if line:
      print(line)
  print(f'stage_checkpoints: {len(plans)} run(s) under {FLAGS.root}'
        f'{" (dry run: nothing staged)" if FLAGS.dry_run else ""}')


if __name__ == '__main__':
  app.run(main)
