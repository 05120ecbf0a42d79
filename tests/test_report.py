"""The report binary on fabricated runs: table numbers, plot, errors."""

import csv
import os

import numpy as np
import pytest

from binaries import report
from tff_opt.program import analysis


def write_run(output_dir, rows):
  """Writes `metrics.csv` from `[{column: value}]` (missing = empty)."""
  os.makedirs(output_dir, exist_ok=True)
  columns = ['round', 'train_loss', 'eval_loss', 'eval_accuracy']
  with open(os.path.join(output_dir, 'metrics.csv'), 'w', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=columns, restval='')
    writer.writeheader()
    writer.writerows(rows)
  return output_dir


@pytest.fixture
def runs(tmp_path):
  """Two runs: 'fast' reaches 90% at round 40; 'slow' never does.

  fast: 200 rounds, eval every 10 rounds, accuracy = min(r / 40 * 0.9, 0.95)
        train_loss = 2 / r.
  slow: 50 rounds, eval every round, accuracy = r / 100, eval_loss = 3 - r/25.
  """
  fast = write_run(str(tmp_path / 'fast'), [
      dict(round=r, train_loss=2 / r,
           **({'eval_accuracy': min(r / 40 * 0.9, 0.95), 'eval_loss': 1.0}
              if r % 10 == 0 else {})) for r in range(1, 201)
  ])
  slow = write_run(str(tmp_path / 'slow'), [
      dict(round=r, train_loss=1.0, eval_accuracy=r / 100,
           eval_loss=3 - r / 25) for r in range(1, 51)
  ])
  return fast, slow


def _main(args):
  try:
    report.main(['report', *args])
  except SystemExit as e:
    return e.code
  return 0


def test_table_numbers(runs):
  fast, slow = runs
  table = report.markdown_table(report.load_runs([fast, slow]),
                                'eval_accuracy', target=0.9)
  # fast: final 0.95; rounds 110..200 of the last 100 (101..200) are 0.95.
  fast_mean = 100 * np.mean([min(r / 40 * 0.9, 0.95)
                             for r in range(110, 201, 10)])
  # slow: 50 rounds < 100, so all of them: mean of r/100 = 0.255.
  assert table == (
      '| run | rounds | final eval_accuracy | mean of last 100 rounds | '
      'rounds to 90.00% |\n'
      '|---|---:|---:|---:|---:|\n'
      f'| fast | 200 | 95.00% | {fast_mean:.2f}% | 40 |\n'
      '| slow | 50 | 50.00% | 25.50% | not reached |')
  assert fast_mean == pytest.approx(95.0)


def test_loss_target_counts_down_and_window_is_a_flag(runs):
  _, slow = runs
  rows = analysis.read_metrics(slow)
  # eval_loss = 3 - r/25 <= 2 first at r = 25.
  assert analysis.rounds_to_target(rows, 'eval_loss', 2.0) == 25
  assert analysis.rounds_to_target(rows, 'eval_accuracy', 0.25) == 25
  table = report.markdown_table([('slow', rows)], 'eval_loss', target=2.0,
                                window=10)
  # Rounds 41..50: mean of 3 - r/25 = 3 - 45.5/25 = 1.18.
  assert table.splitlines()[-1] == '| slow | 50 | 1.0000 | 1.1800 | 25 |'
  assert table.splitlines()[0] == (
      '| run | rounds | final eval_loss | mean of last 10 rounds | '
      'rounds to 2.0000 |')


def test_main_prints_table_and_draws_labelled_plot(runs, tmp_path, capsys):
  fast, slow = runs
  output = str(tmp_path / 'cmp.png')
  assert _main([fast, slow, '--labels=FedYogi,FedAvg', '--target=0.9',
                f'--output={output}']) == 0
  out = capsys.readouterr().out
  assert out.splitlines()[2].startswith('| FedYogi | 200 | 95.00% |')
  assert out.splitlines()[3] == ('| FedAvg | 50 | 50.00% | 25.50% | '
                                 'not reached |')
  assert out.endswith(f'\nplot: {output}\n')
  with open(output, 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'

  figure = report.make_figure(report.load_runs([fast, slow],
                                               ['FedYogi', 'FedAvg']),
                              'eval_accuracy', target=0.9)
  ax = figure.axes[0]
  assert ax.get_xlabel() == 'communication round'
  assert ax.get_ylabel() == 'eval_accuracy (% correct)'
  assert [t.get_text() for t in ax.get_legend().get_texts()] == [
      'FedYogi', 'FedAvg', 'target 90.00%']
  fast_line = ax.get_lines()[0]
  # Evaluation rounds only, in percent.
  np.testing.assert_array_equal(fast_line.get_xdata(), np.arange(10, 201, 10))
  np.testing.assert_allclose(fast_line.get_ydata()[:4], [22.5, 45, 67.5, 90])


@pytest.mark.parametrize('args, message', [
    ([], 'give at least one RUN_DIR.'),
    (['{missing}'], '{missing}: no metrics.csv (not a binaries.train output '
     'directory?).'),
    (['{slow}', '--labels=a,b'], '--labels has 2 labels for 1 run '
     'directories.'),
    (['{slow}', '--metric=eval_mse'], "no run has metric 'eval_mse'; "
     'columns: eval_accuracy, eval_loss, train_loss.'),
    # A file for a run directory, a metrics.csv that is not text.
    (['{slow}/metrics.csv'], '{slow}/metrics.csv is a file; give the run\'s '
     'directory (the one holding metrics.csv).'),
    (['{latin1}'], '{latin1}/metrics.csv is not UTF-8 text (byte 6); not a '
     'metrics.csv written by binaries.train?'),
    (['{slow}', '--output={missing}/plot.png'], '--output={missing}/plot.png: '
     'cannot write it (No such file or directory).'),
])
def test_usage_errors(runs, tmp_path, capsys, args, message):
  latin1 = tmp_path / 'latin1'
  latin1.mkdir()
  (latin1 / 'metrics.csv').write_bytes(b'round,\xe9val\n1,0.5\n')
  names = {'slow': runs[1], 'missing': str(tmp_path / 'missing'),
           'latin1': str(latin1)}
  assert _main([a.format(**names) for a in args]) == 2
  assert capsys.readouterr().err == (
      f'report: error: {message.format(**names)}\n')
