"""Does a change leave training results unchanged, bit for bit?

A restructuring must not change what any algorithm computes. This tool
trains every configuration in `CONFIGS` (3 rounds of `digits` each: every
registered algorithm, plus FedCurv's Eq. 3, FedAdam, FedBN on `cnn_bn`,
layer-adaptive FedPTR) twice, with the code of `--base` (a git revision,
checked out in a temporary worktree) and with this working tree, and
compares each pair of runs:

- the last checkpoint: every array, bit for bit;
- `metrics.csv`: every column but the timings, as the largest relative
  difference. Bit-for-bit equality is not asked of the metrics: before
  the evaluation pooled its clients in sorted order
  (`tasks.sqlite_data.pooled_examples`), `eval_loss` differed in its last
  float32 bit from run to run of the same code (its summation order), so
  a base revision older than that differs there.

Only models without dropout are used. The two models with dropout
(`fedcurv_cnn`, EMNIST-CR's CNN) repeat since their dropout became
`tff_opt.layers.StatelessDropout`, but that change moved their results, so a
base revision before it cannot match them.

Usage:

    .venv/bin/python -m tools.same_results --base=HEAD
    .venv/bin/python -m tools.same_results --base=82852ec --only=fedcurv,moon

It prints one line per configuration and exits with status 1 if any
checkpoint differs. Each run takes 15-60 s here (19 runs per side).
"""

import csv
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Optional

from absl import app
from absl import flags
import numpy as np

ROUNDS = 3
COMMON_FLAGS = ('--task=digits', f'--rounds={ROUNDS}', '--clients_per_round=4',
                '--eval_every=1', f'--checkpoint_every={ROUNDS}', '--seed=3')
# The cheapest MTT that still runs every part of FedPTR.
_SMALL_MTT = ('--mtt_outer_steps=3', '--mtt_inner_steps=2',
              '--projection_steps=2')

CONFIGS = {
    'fedopt': ('--algorithm=fedopt',),
    'fedadam': ('--algorithm=fedopt', '--server_opt=adam', '--server_lr=0.01'),
    'fedadc': ('--algorithm=fedadc',),
    'fedadc_plus': ('--algorithm=fedadc_plus',),
    'slowmo': ('--algorithm=slowmo',),
    'fedprox': ('--algorithm=fedprox', '--mu=0.1'),
    'fedfor': ('--algorithm=fedfor', '--alpha=0.1'),
    'fedcurv': ('--algorithm=fedcurv', '--lam=1.0', '--fedcurv_exact=off'),
    'fedcurv_eq3': ('--algorithm=fedcurv', '--lam=1.0', '--fedcurv_exact=on'),
    'feddyn': ('--algorithm=feddyn',),
    'fedntd': ('--algorithm=fedntd',),
    'fedrs': ('--algorithm=fedrs',),
    'fedgkd': ('--algorithm=fedgkd',),
    'moon': ('--algorithm=moon', '--moon_mu=1.0',
             '--task_option=model=cnn_proj'),
    'feddc': ('--algorithm=feddc',),
    'scaffold': ('--algorithm=scaffold',),
    'fedptr_s': ('--algorithm=fedptr_s', '--mu=0.1', *_SMALL_MTT),
    'fedptr': ('--algorithm=fedptr', '--mu=0.1', '--layer_adaptive',
               *_SMALL_MTT),
    'fedbn': ('--algorithm=fedprox', '--mu=0.1', '--task_option=model=cnn_bn',
              '--fedbn'),
}

_TIMING_WORDS = ('second', 'time')

FLAGS = flags.FLAGS
flags.DEFINE_string('base', 'HEAD', 'The git revision to compare with.')
flags.DEFINE_list('only', None, 'Only these configurations (default: all '
                  f'of {", ".join(CONFIGS)}).')
flags.DEFINE_string('work_dir', None, 'Where the runs go (default: a new '
                    'temporary directory, kept and printed).')


@dataclasses.dataclass(frozen=True)
class Comparison:
  """How two runs of one configuration compare.

  Attributes:
    checkpoint: The last checkpoint's name (`program_state_<N>`).
    checkpoint_identical: Every array of it equal bit for bit (and the
      same arrays).
    rows: The metrics rows of each run.
    metric_rel_diff: The largest |a - b| / max(|a|, |b|) over the
      metrics' numeric cells (timings left out); 0 when all are equal.
    metric_columns: The columns where a difference was found.
  """
  checkpoint: str
  checkpoint_identical: bool
  rows: tuple[int, int]
  metric_rel_diff: float
  metric_columns: tuple[str, ...]

  def line(self, name: str) -> str:
    verdict = 'same' if self.checkpoint_identical else 'DIFFERENT'
    columns = (f' in {", ".join(self.metric_columns)}'
               if self.metric_columns else '')
    return (f'{name:12s} checkpoint {self.checkpoint}: {verdict}; metrics '
            f'rows {self.rows[0]}/{self.rows[1]}, largest relative '
            f'difference {self.metric_rel_diff:.1e}{columns}')


def _last_checkpoint(run_dir: str) -> str:
  checkpoints = os.path.join(run_dir, 'checkpoints')
  names = [n for n in os.listdir(checkpoints)
           if n.startswith('program_state_')]
  if not names:
    raise ValueError(f'{checkpoints} holds no checkpoint.')
  return max(names, key=lambda n: int(n.rsplit('_', 1)[1]))


def _metrics_text(run_dir: str) -> list[dict[str, str]]:
  # The cells as written (not `analysis.read_metrics`' floats), so that a
  # changed text cell is a difference too.
  with open(os.path.join(run_dir, 'metrics.csv'), newline='') as f:
    return list(csv.DictReader(f))


def _rel_diff(a: str, b: str) -> float:
  if a == b:
    return 0.0
  try:
    x, y = float(a), float(b)
  except ValueError:
    return float('inf')  # A text cell that changed.
  if np.isnan(x) and np.isnan(y):
    return 0.0
  scale = max(abs(x), abs(y))
  return float('inf') if scale == 0 or not np.isfinite(scale) else (
      abs(x - y) / scale)


def compare_runs(run_a: str, run_b: str) -> Comparison:
  """Compares two run directories of `binaries.train` (module docstring).

  Raises:
    ValueError: If a run has no checkpoint, or their last checkpoints are
      of different rounds.
  """
  checkpoint, checkpoint_b = _last_checkpoint(run_a), _last_checkpoint(run_b)
  if checkpoint_b != checkpoint:
    raise ValueError(f'{run_a} ends at {checkpoint}, {run_b} at '
                     f'{checkpoint_b}.')
  with np.load(os.path.join(run_a, 'checkpoints', checkpoint,
                            'state.npz')) as a, \
      np.load(os.path.join(run_b, 'checkpoints', checkpoint,
                           'state.npz')) as b:
    identical = sorted(a.files) == sorted(b.files) and all(
        a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k])
        for k in a.files)
  rows_a, rows_b = (_metrics_text(run) for run in (run_a, run_b))
  worst, columns = 0.0, []
  for row_a, row_b in zip(rows_a, rows_b):
    for column, value in row_a.items():
      if any(word in column for word in _TIMING_WORDS):
        continue
      diff = _rel_diff(value, row_b.get(column, ''))
      if diff > 0 and column not in columns:
        columns.append(column)
      worst = max(worst, diff)
  return Comparison(checkpoint, identical, (len(rows_a), len(rows_b)), worst,
                    tuple(columns))


def train_all(checkout: str, out_dir: str, names: Sequence[str]) -> None:
  """Runs `binaries.train` from `checkout` for each configuration."""
  os.makedirs(out_dir, exist_ok=True)
  for name in names:
    run_dir = os.path.join(out_dir, name)
    shutil.rmtree(run_dir, ignore_errors=True)
    command = [sys.executable, '-m', 'binaries.train', *COMMON_FLAGS,
               *CONFIGS[name], f'--output_dir={run_dir}']
    with open(run_dir + '.log', 'w') as log:
      result = subprocess.run(command, cwd=checkout, stdout=log,
                              stderr=subprocess.STDOUT, check=False)
    if result.returncode:
      raise RuntimeError(f'{name} failed in {checkout}; see {run_dir}.log')


def main(argv: Sequence[str]) -> Optional[int]:
  del argv
  names = FLAGS.only or list(CONFIGS)
  unknown = sorted(set(names) - set(CONFIGS))
  if unknown:
    raise app.UsageError(f'--only: unknown configurations {unknown}; known: '
                         f'{", ".join(CONFIGS)}.')
  here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  work_dir = FLAGS.work_dir or tempfile.mkdtemp(prefix='same_results_')
  base_checkout = os.path.join(work_dir, 'base_checkout')
  subprocess.run(['git', 'worktree', 'add', '--detach', base_checkout,
                  FLAGS.base], cwd=here, check=True, capture_output=True)
  try:
    data = os.path.join(here, 'data')
    if os.path.isdir(data):
      os.symlink(data, os.path.join(base_checkout, 'data'))
    print(f'same_results: {len(names)} configurations, {FLAGS.base} against '
          f'the working tree; runs in {work_dir}', flush=True)
    train_all(base_checkout, os.path.join(work_dir, 'base'), names)
    train_all(here, os.path.join(work_dir, 'new'), names)
  finally:
    subprocess.run(['git', 'worktree', 'remove', '--force', base_checkout],
                   cwd=here, check=False, capture_output=True)
  different = 0
  for name in names:
    comparison = compare_runs(os.path.join(work_dir, 'base', name),
                              os.path.join(work_dir, 'new', name))
    different += not comparison.checkpoint_identical
    print(comparison.line(name), flush=True)
  return 1 if different else 0


if __name__ == '__main__':
  app.run(main)
