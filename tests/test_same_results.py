"""tools/same_results: how two runs are compared, and what is compared.

The comparison is tested on hand-made run directories (a checkpoint and a
metrics.csv each); the configurations must cover every registered algorithm,
so a new one cannot be left out of a restructuring's check.
"""

import csv
import os

import numpy as np
import pytest

from tff_opt.program import registry
from tools import same_results


def _run(root, name, *, weights, eval_loss, seconds=1.0, rounds=3):
  run_dir = os.path.join(root, name)
  checkpoint = os.path.join(run_dir, 'checkpoints', f'program_state_{rounds}')
  os.makedirs(checkpoint)
  np.savez(os.path.join(checkpoint, 'state.npz'),
           w=np.asarray(weights, np.float32), round=np.int32(rounds))
  # An older checkpoint, which is not the one compared.
  os.makedirs(os.path.join(run_dir, 'checkpoints', 'program_state_1'))
  with open(os.path.join(run_dir, 'metrics.csv'), 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['round', 'eval_loss', 'round_seconds'])
    for r in range(1, rounds + 1):
      writer.writerow([r, eval_loss, seconds * r])
  return run_dir


def test_identical_runs_are_the_same(tmp_path):
  a = _run(tmp_path, 'a', weights=[1.0, 2.0], eval_loss='2.5', seconds=1.0)
  b = _run(tmp_path, 'b', weights=[1.0, 2.0], eval_loss='2.5', seconds=7.0)
  got = same_results.compare_runs(a, b)
  assert got == same_results.Comparison('program_state_3', True, (3, 3), 0.0,
                                        ())
  assert got.line('fedopt') == (
      'fedopt       checkpoint program_state_3: same; metrics rows 3/3, '
      'largest relative difference 0.0e+00')


def test_one_bit_of_a_checkpoint_makes_runs_different(tmp_path):
  w = np.float32(2.0)
  a = _run(tmp_path, 'a', weights=[1.0, w], eval_loss='2.5')
  b = _run(tmp_path, 'b', weights=[1.0, np.nextafter(w, np.float32(3.0))],
           eval_loss='2.5')
  got = same_results.compare_runs(a, b)
  assert not got.checkpoint_identical
  assert 'DIFFERENT' in got.line('x')


def test_a_metric_difference_is_measured_not_failed(tmp_path):
  # eval_loss's last float32 bit varied from run to run before the
  # evaluation's clients were pooled in sorted order.
  a = _run(tmp_path, 'a', weights=[1.0], eval_loss='2.3996505737304688')
  b = _run(tmp_path, 'b', weights=[1.0], eval_loss='2.3996503353118896')
  got = same_results.compare_runs(a, b)
  assert got.checkpoint_identical
  assert got.metric_columns == ('eval_loss',)
  assert got.metric_rel_diff == pytest.approx(
      (2.3996505737304688 - 2.3996503353118896) / 2.3996505737304688)


def test_runs_ending_at_different_rounds_are_refused(tmp_path):
  a = _run(tmp_path, 'a', weights=[1.0], eval_loss='1', rounds=3)
  b = _run(tmp_path, 'b', weights=[1.0], eval_loss='1', rounds=4)
  with pytest.raises(ValueError, match='ends at program_state_3, .* at '
                     'program_state_4'):
    same_results.compare_runs(a, b)


def test_every_registered_algorithm_is_a_configuration():
  algorithms = {flag.split('=', 1)[1] for config in same_results.CONFIGS.values()
                for flag in config if flag.startswith('--algorithm=')}
  assert algorithms == set(registry.ALGORITHMS)
  # No model with dropout: its results moved with StatelessDropout, so a base
  # revision before that cannot match it (tools/same_results.py).
  models = {flag for config in same_results.CONFIGS.values() for flag in config
            if flag.startswith('--task_option=model=')}
  assert models == {'--task_option=model=cnn_proj',
                    '--task_option=model=cnn_bn'}
