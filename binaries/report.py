r"""Compares runs: one plot of a metric against rounds, and a Markdown table.

    python -m binaries.report results/digits_yogi results/digits_sgd
    python -m binaries.report RUN_DIR... --metric=eval_loss --target=0.5 \
        --output=loss.png --labels=FedYogi,FedAvg

Each RUN_DIR is an output directory of `binaries.train` (its `metrics.csv`).
The plot (`--output`; none by default, so nothing is written unless asked)
draws `--metric` against the round number, one line per run, with a
legend; evaluation metrics measured every few rounds are drawn at the
rounds they were measured. The table,
printed to stdout, gives per run:

    rounds         the last round logged
    final          the last measured value of --metric
    last-W mean    its mean over the last --window (100) rounds
    rounds to T    the first round at which it reached --target (>= for
                   accuracies, <= for losses and errors); "not reached"

(`tff_opt.program.analysis` defines each number.) A run's label is `--labels` in
order, else its directory name.
"""

import csv
import os
import sys
from collections.abc import Sequence
from typing import Optional

from absl import flags

from tff_opt.program import analysis
from tff_opt.program import files

# Its own flag set, so that importing it beside binaries.train or
# binaries.sweep defines no flag twice.
FLAGS = flags.FlagValues()
_F = dict(flag_values=FLAGS)

flags.DEFINE_string('metric', 'eval_accuracy', 'metrics.csv column to plot '
                    'and tabulate (eval_accuracy, eval_loss, train_loss, '
                    '...).', **_F)
flags.DEFINE_float('target', None, 'Value whose first reaching round the '
                   'table reports, in the metric\'s own unit (accuracy as '
                   'a fraction: 0.9 for 90%).', **_F)
flags.DEFINE_integer('window', analysis.DEFAULT_WINDOW, 'Rounds averaged '
                     'for the "last-W mean" column.', lower_bound=1, **_F)
flags.DEFINE_string('output', None, 'Where the plot goes (a .png file). '
                    'Default: no plot, the table only.', **_F)
flags.DEFINE_list('labels', None, 'One legend label per RUN_DIR, in order. '
                  'Default: the directory names.', **_F)
flags.DEFINE_string('title', None, 'Plot title. Default: the metric.', **_F)


class UsageError(Exception):
  """A bad argument: reported in one line."""


def metric_label(metric: str) -> str:
  """The y-axis label of `metric`, with its unit."""
  if 'accuracy' in metric:
    return f'{metric} (% correct)'
  if 'mean_squared_error' in metric or metric.endswith('mse'):
    return f'{metric} (mean squared error per pixel)'
  if 'loss' in metric:
    return f'{metric} (mean loss per example)'
  return metric


def _format(value: Optional[float], metric: str) -> str:
  if value is None:
    return '—'
  if 'accuracy' in metric:
    return f'{100 * value:.2f}%'
  return f'{value:.4f}'


def load_runs(run_dirs: Sequence[str], labels: Optional[Sequence[str]] = None
              ) -> list[tuple[str, list[dict]]]:
  """Reads the runs: `[(label, rows)]`.

  Raises:
    UsageError: If a run is not a directory, has no `metrics.csv` or one
      that cannot be read as text, or `labels` does not match.
  """
  if labels is not None and len(labels) != len(run_dirs):
    raise UsageError(f'--labels has {len(labels)} labels for '
                     f'{len(run_dirs)} run directories.')
  runs = []
  for i, run_dir in enumerate(run_dirs):
    path = os.path.join(run_dir, analysis.METRICS_FILE)
    if os.path.exists(run_dir) and not os.path.isdir(run_dir):
      raise UsageError(f'{run_dir} is a file; give the run\'s directory '
                       f'(the one holding {analysis.METRICS_FILE}).')
    try:
      rows = analysis.read_metrics(run_dir)
    except FileNotFoundError as e:
      raise UsageError(f'{run_dir}: no {analysis.METRICS_FILE} (not a '
                       'binaries.train output directory?).') from e
    except UnicodeDecodeError as e:
      raise UsageError(f'{path} is not UTF-8 text (byte {e.start}); not a '
                       f'{analysis.METRICS_FILE} written by binaries.train?'
                       ) from e
    except (OSError, csv.Error) as e:
      reason = e.strerror if isinstance(e, OSError) and e.strerror else e
      raise UsageError(f'{path}: cannot read it ({reason}).') from e
    label = (labels[i] if labels is not None else
             os.path.basename(os.path.normpath(run_dir)))
    runs.append((label, rows))
  return runs


def markdown_table(runs: Sequence[tuple[str, list[dict]]], metric: str, *,
                   target: Optional[float] = None,
                   window: int = analysis.DEFAULT_WINDOW) -> str:
  """The comparison table, one row per run, as Markdown.

  Raises:
    UsageError: If no run measured `metric`.
  """
  if all(analysis.final_value(rows, metric) is None for _, rows in runs):
    known = sorted({k for _, rows in runs for r in rows for k in r
                    if k != 'round'})
    raise UsageError(f'no run has metric {metric!r}; columns: '
                     f'{", ".join(known)}.')
  header = ['run', 'rounds', f'final {metric}',
            f'mean of last {window} rounds']
  if target is not None:
    header.append(f'rounds to {_format(target, metric)}')
  lines = ['| ' + ' | '.join(header) + ' |',
           '|' + '|'.join(['---'] + ['---:'] * (len(header) - 1)) + '|']
  for label, rows in runs:
    cells = [label.replace('|', '\\|'), str(analysis.last_round(rows)),
             _format(analysis.final_value(rows, metric), metric),
             _format(analysis.window_mean(rows, metric, window=window),
                     metric)]
    if target is not None:
      reached = analysis.rounds_to_target(rows, metric, target)
      cells.append('not reached' if reached is None else str(reached))
    lines.append('| ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def make_figure(runs: Sequence[tuple[str, list[dict]]], metric: str, *,
                target: Optional[float] = None, title: Optional[str] = None):
  """Draws `metric` against rounds, one line per run.

  Returns:
    The `matplotlib.figure.Figure` (accuracies drawn in percent).
  """
  import matplotlib.ticker  # pylint: disable=g-import-not-at-top
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  scale = 100.0 if 'accuracy' in metric else 1.0
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for label, rows in runs:
    points = [(r['round'], r[metric] * scale) for r in rows
              if r.get(metric) is not None]
    if not points:
      continue
    xs, ys = zip(*points)
    ax.plot(xs, ys, marker='o' if len(xs) <= 30 else None, markersize=3,
            linewidth=1.5, label=label)
  if target is not None:
    ax.axhline(target * scale, color='gray', linestyle='--', linewidth=1,
               label=f'target {_format(target, metric)}')
  ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
  ax.set_xlabel('communication round')
  ax.set_ylabel(metric_label(metric))
  ax.set_title(title or f'{metric} against rounds')
  ax.grid(True, alpha=0.3)
  ax.legend()
  fig.tight_layout()
  return fig


def plot_runs(runs: Sequence[tuple[str, list[dict]]], metric: str,
              path: str, *, target: Optional[float] = None,
              title: Optional[str] = None) -> None:
  """Saves `make_figure`'s plot to `path` (PNG)."""
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  fig = make_figure(runs, metric, target=target, title=title)
  with files.replaced_atomically(path, 'wb') as f:
    fig.savefig(f, format='png', dpi=120)
  plt.close(fig)


def main(argv: Sequence[str]) -> None:
  """Parses `argv` (program name first), prints the table, saves the plot.

  Exits with status 2 and one `report: error: ...` line on a usage error.
  """
  FLAGS.unparse_flags()
  if '--help' in argv or '-h' in argv:
    print(__doc__ + '\n' + FLAGS.get_help())
    return
  try:
    run_dirs = FLAGS(list(argv))[1:]
  except flags.Error as e:
    _fail(str(e))
  try:
    if not run_dirs:
      raise UsageError('give at least one RUN_DIR.')
    runs = load_runs(run_dirs, FLAGS.labels)
    table = markdown_table(runs, FLAGS.metric, target=FLAGS.target,
                           window=FLAGS.window)
  except UsageError as e:
    _fail(str(e))
  print(table, flush=True)
  if FLAGS.output is None:
    print('\nplot: none (--output=FILE.png draws one)', flush=True)
    return
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')  # Headless: files only.
  try:
    plot_runs(runs, FLAGS.metric, FLAGS.output, target=FLAGS.target,
              title=FLAGS.title)
  except OSError as e:
    _fail(f'--output={FLAGS.output}: cannot write it '
          f'({e.strerror or e}).')
  print(f'\nplot: {FLAGS.output}', flush=True)


def _fail(message: str) -> None:
  print(f'report: error: {message}', file=sys.stderr, flush=True)
  sys.exit(2)


if __name__ == '__main__':
  main(sys.argv)
