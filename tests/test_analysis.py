"""Reading runs back (`tff_opt/program/analysis.py`) on fabricated metrics.

The paper's selection rule's numbers (the mean over the last 100 rounds, a
shorter run's mean, +inf for a diverged or rejected round in the window,
the tie-breaks between grid points) and the report's (final value, rounds
to a target in the metric's direction), on `metrics.csv` files and rows
written by the test. The binaries that use them are tested in
tests/test_sweep.py and tests/test_report.py.
"""

import json
import math
import os

import numpy as np
import pytest

from tests import test_sweep
from tff_opt.program import analysis

# The sweep tests' fabricated runs: `metrics.csv` as the training loop
# writes it, evaluated every 10 rounds.
ROUNDS = test_sweep.ROUNDS
write_run = test_sweep.write_run


# --- The selection rule -----------------------------------------------------


def test_window_mean_is_over_the_last_100_rounds(tmp_path):
  write_run(str(tmp_path), [float(r) for r in range(1, ROUNDS + 1)])
  rows = analysis.read_metrics(str(tmp_path))
  # Rounds 51..150.
  assert analysis.window_mean(rows, 'train_loss') == pytest.approx(100.5)
  # eval_accuracy only on rounds 60, 70, ..., 150 inside the window.
  assert analysis.window_mean(rows, 'eval_accuracy') == pytest.approx(
      np.mean(np.arange(60, 151, 10)) / 1000)
  assert analysis.window_mean(rows, 'train_loss', window=1) == 150.0
  with pytest.raises(ValueError, match=r'^window must be a positive '
                     r'integer, got 0\.$'):
    analysis.window_mean(rows, 'train_loss', window=0)


def test_shorter_run_averages_all_its_rounds(tmp_path):
  write_run(str(tmp_path), [float(r) for r in range(1, 31)])
  rows = analysis.read_metrics(str(tmp_path))
  assert analysis.selection_score(rows) == pytest.approx(15.5)


def test_non_finite_loss_in_window_scores_infinity(tmp_path):
  losses = [1.0] * ROUNDS
  losses[120] = math.nan
  write_run(str(tmp_path), losses)
  assert analysis.selection_score(analysis.read_metrics(str(tmp_path))) == (
      math.inf)


def test_ties_go_to_smaller_client_lr_then_server_lr_then_larger_tau():
  c = analysis.Candidate
  assert analysis.select_best([
      c(0.1, 0.01, 1e-3, 0.5), c(0.03, 0.1, 1e-3, 0.5),
      c(0.03, 0.01, 1e-4, 0.5), c(0.03, 0.01, 1e-2, 0.5),
      c(1.0, 1.0, 1e-1, 0.7)
  ]) == c(0.03, 0.01, 1e-2, 0.5)
  # A lower score wins over every tie-break.
  assert analysis.select_best([c(0.03, 0.01, 1e-2, 0.5),
                               c(1.0, 1.0, 1e-5, 0.4999)]) == c(
                                   1.0, 1.0, 1e-5, 0.4999)
  # No tau (SGD servers) counts as the largest tau.
  assert analysis.select_best([c(0.1, 1.0, 1e-1, 0.5),
                               c(0.1, 1.0, None, 0.5)]).server_tau is None
  with pytest.raises(ValueError, match='^candidates must not be empty'):
    analysis.select_best([])


def test_rejected_round_in_window_scores_infinity_even_with_a_zero_loss():
  """A run may log a rejected round with train_loss 0.0: it still scores inf."""
  rows = [{'round': r, 'train_loss': 0.5, 'update_non_finite': 0.0}
          for r in range(1, 151)]
  assert analysis.selection_score(rows) == pytest.approx(0.5)
  rows[140] = {'round': 141, 'train_loss': 0.0, 'update_non_finite': 1.0}
  assert analysis.selection_score(rows) == math.inf
  # Outside the window (round 41 of 150, window 100) it does not count.
  rows[140] = {'round': 141, 'train_loss': 0.5, 'update_non_finite': 0.0}
  rows[40] = {'round': 41, 'train_loss': 0.0, 'update_non_finite': 1.0}
  assert analysis.selection_score(rows) == pytest.approx(0.5)


# --- The report's numbers -----------------------------------------------------


def test_read_metrics_types_its_cells(tmp_path):
  with open(os.path.join(tmp_path, 'metrics.csv'), 'w') as f:
    f.write('round,train_loss,eval_accuracy,note\n'
            '1,0.5,,x\n'
            ',9.0,9.0,\n'          # No round: not a row.
            '2,nan,0.25,\n')
  rows = analysis.read_metrics(str(tmp_path))
  assert [r['round'] for r in rows] == [1, 2]
  assert isinstance(rows[0]['round'], int)
  assert rows[0] == {'round': 1, 'train_loss': 0.5, 'eval_accuracy': None,
                     'note': None}
  assert math.isnan(rows[1]['train_loss'])
  assert rows[1]['eval_accuracy'] == 0.25
  with pytest.raises(FileNotFoundError):
    analysis.read_metrics(str(tmp_path / 'missing'))


def test_read_metrics_if_any_is_empty_only_without_the_file(tmp_path):
  assert analysis.read_metrics_if_any(str(tmp_path / 'missing')) == []
  with open(os.path.join(tmp_path, 'metrics.csv'), 'w') as f:
    f.write('round,eval_accuracy\n2,0.5\n')
  assert analysis.read_metrics_if_any(str(tmp_path)) == [
      {'round': 2, 'eval_accuracy': 0.5}]
  # A file that is there but unreadable is an error, not "no rounds".
  with open(os.path.join(tmp_path, 'metrics.csv'), 'wb') as f:
    f.write(b'round\n\xff\n')
  with pytest.raises(UnicodeDecodeError):
    analysis.read_metrics_if_any(str(tmp_path))


ROWS = [
    {'round': 3, 'eval_accuracy': 0.7, 'eval_error': 0.2},
    {'round': 1, 'eval_accuracy': 0.2, 'eval_error': 0.6},
    {'round': 2, 'eval_accuracy': math.nan, 'eval_error': None},
    {'round': 4, 'eval_accuracy': None, 'eval_error': 0.1},
]


@pytest.mark.parametrize('metric, target, want', [
    ('eval_accuracy', 0.5, 3),   # Higher is better: the first >= 0.5.
    ('eval_accuracy', 0.2, 1),   # Reached at once (rows out of order).
    ('eval_accuracy', 0.9, None),
    ('eval_error', 0.3, 3),      # Lower is better: the first <= 0.3.
    ('eval_error', 0.05, None),
])
def test_rounds_to_target_goes_the_metrics_way(metric, target, want):
  assert analysis.rounds_to_target(ROWS, metric, target) == want


# As metrics.csv logs float32 metrics: 900/1,000 right is float32's 0.9,
# which as a Python float is just below 0.9 (the FedCurv tuning run that
# logged it at round 32 was counted as reaching 90 % only at round 33).
F32_ROWS = [
    {'round': 1, 'eval_accuracy': 0.8989999890327454,  # 899 / 1,000.
     'eval_loss': 0.30000004172325134},  # The next float32 above 0.3.
    {'round': 2, 'eval_accuracy': 0.8999999761581421,  # 900 / 1,000.
     'eval_loss': 0.30000001192092896},  # float32's 0.3.
]


@pytest.mark.parametrize('metric, target, want', [
    ('eval_accuracy', 0.9, 2),
    ('eval_accuracy', 0.899, 1),
    ('eval_accuracy', 0.9000001, None),  # Above float32's 0.9: not reached.
    ('eval_loss', 0.3, 2),
    ('eval_loss', 0.300000005, 2),  # float32 rounds it to 0.3 too.
    ('eval_loss', 0.2999999, None),
])
def test_rounds_to_target_compares_at_float32_precision(metric, target, want):
  assert analysis.rounds_to_target(F32_ROWS, metric, target) == want
  assert analysis.Target(metric, target).reached_at(F32_ROWS) == want


def test_rounds_to_target_takes_values_beyond_float32s_range():
  rows = [{'round': 1, 'eval_loss': 1e300}, {'round': 2, 'eval_loss': 1.0}]
  assert analysis.rounds_to_target(rows, 'eval_loss', 1e299) == 2
  assert analysis.rounds_to_target(rows, 'eval_loss', 1e301) == 1


def test_which_metrics_are_lower_is_better():
  assert [analysis.lower_is_better(m) for m in (
      'train_loss', 'eval_error', 'Eval_MSE', 'perplexity',
      'eval_accuracy', 'round_seconds')] == [True] * 4 + [False] * 2


def test_final_value_and_last_round_skip_unmeasured_rows():
  # Evaluated on rounds 1 and 2, not on round 3.
  rows = [{'round': 1, 'eval_accuracy': 0.2, 'train_loss': None},
          {'round': 2, 'eval_accuracy': 0.6, 'train_loss': None},
          {'round': 3, 'eval_accuracy': None, 'train_loss': None}]
  assert analysis.final_value(rows, 'eval_accuracy') == 0.6
  assert analysis.final_value(rows, 'train_loss') is None
  assert analysis.last_round(rows) == 3
  assert analysis.last_round([]) == 0


# --- Stopping at a target -------------------------------------------------------


def test_target_parses_metric_colon_value_and_prints_back():
  target = analysis.Target.parse('eval_accuracy:0.9')
  assert target == analysis.Target('eval_accuracy', 0.9)
  assert str(target) == 'eval_accuracy:0.9'
  assert target.describe() == 'eval_accuracy >= 0.9'
  assert analysis.Target.parse('eval_loss:1e-1').describe() == (
      'eval_loss <= 0.1')


@pytest.mark.parametrize('text', ['eval_accuracy', '0.9', ':0.9',
                                  'eval_accuracy:', 'eval_accuracy:high',
                                  'eval_accuracy:nan', 'a:b:0.9'])
def test_target_refuses_anything_else_in_one_line(text):
  with pytest.raises(ValueError) as e:
    analysis.Target.parse(text)
  assert str(e.value) == ('expected METRIC:VALUE, e.g. eval_accuracy:0.9, '
                          f'got {text!r}.')


def _write_hparams(run_dir, **hparams):
  with open(os.path.join(run_dir, analysis.HPARAMS_FILE), 'w') as f:
    json.dump(hparams, f)


def test_a_run_stopped_at_its_target_is_finished_there(tmp_path):
  run = str(tmp_path)
  # Evaluated every 10 rounds: accuracy r / 100 first reaches 0.3 at 30.
  write_run(run, [1.0] * 35, accuracy=lambda r: r / 100)
  assert not analysis.is_finished(run, 40)  # No stop_at: 40 rounds.
  _write_hparams(run, rounds=40, stop_at='eval_accuracy:0.3')
  assert analysis.read_stop_at(run) == analysis.Target('eval_accuracy', 0.3)
  assert analysis.is_finished(run, 40)
  _write_hparams(run, rounds=40, stop_at='eval_accuracy:0.5')
  assert not analysis.is_finished(run, 40)  # Not reached in 35 rounds.
  _write_hparams(run, rounds=40)
  assert analysis.read_stop_at(run) is None


def test_rows_up_to_the_target_must_all_be_there(tmp_path):
  run = str(tmp_path)
  write_run(run, [1.0] * 30, accuracy=lambda r: r / 100)
  _write_hparams(run, stop_at='eval_accuracy:0.2')
  rows = analysis.read_metrics(run)
  with open(os.path.join(run, analysis.METRICS_FILE), 'w') as f:
    f.write('round,eval_accuracy\n')
    f.writelines(f'{r["round"]},{r["eval_accuracy"] or ""}\n'
                 for r in rows if r['round'] != 7)
  assert not analysis.is_finished(run, 40)


@pytest.mark.parametrize('rounds, through', [
    ([], 0), ([2, 3], 0), ([1, 2, 4, 5], 2), ([3, 1, 2], 3), ([1, 1, 2], 2)])
def test_logged_through_is_the_last_round_of_the_unbroken_start(rounds,
                                                                 through):
  assert analysis.logged_through([{'round': r} for r in rounds]) == through


@pytest.mark.parametrize('rounds, text', [
    ([7], '7'), ([3, 4, 5, 9], '3-5, 9'), ([1, 3, 5], '1, 3, 5'),
    ([536, 537, 538, 539, 540], '536-540')])
def test_describe_rounds_joins_runs_of_rounds(rounds, text):
  assert analysis.describe_rounds(rounds) == text


def test_unlogged_rounds_lists_the_holes_and_the_tail(tmp_path):
  run = str(tmp_path / 'run')
  assert analysis.unlogged_rounds(run, 3) == [1, 2, 3]  # No metrics.csv.
  write_run(run, [1.0] * 6)
  test_sweep.drop_rounds(run, (2, 3))
  assert analysis.unlogged_rounds(run, 8) == [2, 3, 7, 8]
  assert not analysis.is_finished(run, 6)


def test_rows_read_already_stand_for_the_file(tmp_path):
  # The caller's rows are what is checked, not metrics.csv (absent here).
  run = str(tmp_path / 'run')
  rows = [{'round': r} for r in (1, 2, 4)]
  assert analysis.unlogged_rounds(run, 5, rows=rows) == [3, 5]
  assert analysis.is_finished(run, 4, rows=rows + [{'round': 3}])
  assert not analysis.is_finished(run, 4)


# --- Where a run stands -------------------------------------------------------


def _write_round_seconds(run_dir, seconds):
  """A `metrics.csv` whose round r took `seconds[r - 1]` ('' for none)."""
  os.makedirs(run_dir, exist_ok=True)
  with open(os.path.join(run_dir, analysis.METRICS_FILE), 'w') as f:
    f.write('round,eval_accuracy,round_seconds\n')
    f.writelines(f'{r},,{s}\n' for r, s in enumerate(seconds, start=1))


def test_progress_times_the_rounds_left_by_the_last_rounds(tmp_path):
  run = str(tmp_path / 'run')
  assert analysis.progress(run, 10) == analysis.Progress(
      logged=0, left=10, stops_early=False, seconds_left=None)
  # 10 slow rounds (a start), then 50 taking 2 s and 4 s in turn.
  _write_round_seconds(run, [100.0] * 10 + [2.0, 4.0] * 25)
  assert analysis.RECENT_ROUNDS == 50
  assert analysis.progress(run, 100) == analysis.Progress(
      logged=60, left=40, stops_early=False, seconds_left=40 * 3.0)
  assert analysis.progress(run, 100, recent=60).seconds_left == (
      40 * (10 * 100.0 + 25 * 6.0) / 60)
  assert analysis.progress(run, 60) == analysis.Progress(
      logged=60, left=0, stops_early=False, seconds_left=0.0)
  # Rounds past the run's own count are not its.
  assert analysis.progress(run, 50).logged == 50


def test_progress_skips_untimed_rounds_and_counts_holes(tmp_path):
  run = str(tmp_path / 'run')
  _write_round_seconds(run, ['', 'nan', 6.0, '', 3.0])
  test_sweep.drop_rounds(run, (4,))
  assert analysis.progress(run, 6) == analysis.Progress(
      logged=4, left=2, stops_early=False, seconds_left=2 * 4.5)
  _write_round_seconds(run, ['', ''])
  assert analysis.progress(run, 5).seconds_left is None


def test_progress_of_a_run_that_stops_at_a_target(tmp_path):
  run = str(tmp_path / 'run')
  write_run(run, [1.0] * 20, accuracy=lambda r: r / 100)  # 0.1 s a round.
  _write_hparams(run, stop_at='eval_accuracy:0.5')
  progress = analysis.progress(run, 40)
  assert (progress.logged, progress.left, progress.stops_early) == (20, 20,
                                                                    True)
  assert progress.seconds_left == pytest.approx(2.0)
  _write_hparams(run, stop_at='eval_accuracy:0.2')  # Reached at round 20.
  assert analysis.progress(run, 40) == analysis.Progress(
      logged=20, left=0, stops_early=False, seconds_left=0.0)
