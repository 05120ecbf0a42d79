r"""Runs one of the papers' result tables and writes it, laid out as printed.

    python -m binaries.reproduce --paper=fedopt --table=1 --scale=small
    python -m binaries.reproduce --paper=fedopt --table=1 --stand_in=digits
    python -m binaries.reproduce --paper=fedfor --table=2 --scale=paper \
        --data_dir=D --seeds=3 --parallel=2 --out_dir=results/reproduce
    python -m binaries.reproduce --paper=fedcurv --table=1 --dry_run

The tables (`binaries/paper_tables.py`): FedFOR 2-5, FedCurv 1, FedADC 1,
FedPTR 1-2, Reddi et al. (fedopt) 1 and 11. Every grid point (method x
setting x seed) is one `python -m binaries.train` run with its own
`--output_dir`, at most `--parallel` at once (`binaries.sweep.run_jobs`).
Running the same command again skips finished points and resumes the
others from their checkpoints. In `<out_dir>/<paper>_table<N>_<scale>/`
(`..._small_digits/` for the digits stand-in):

    runs/<point>/   each point's binaries.train output (metrics.csv, ...)
    logs/           each point's log
    table.md        the table as the paper lays it out: in each cell our
                    mean +- std over seeds, then the paper's printed number
    table.csv       the same, one column per (cell, ours/paper, mean/std)

`--scale=small` (default) runs an offline stand-in with the same kind of
partition, few rounds and one seed; every output says that it is a
stand-in. Its data (`--stand_in`): `mnist5k` (default; 5,000 real MNIST
digits, read from `<data_dir>/mnist_5k.csv.gz`, `--data_dir` defaulting to
`data/` where `make data` puts it) or `digits` (scikit-learn's 8x8 digits,
no file: the fast smoke setting). `--scale=paper` is the paper's setting
and needs its datasets (`--data_dir`).

Before anything runs, every point's flags are checked against this
package: its algorithm and task must be registered, its `binaries.train`
flags and task options must exist, its dataset files must be there. The
first problem stops the binary with one `reproduce: error: ...` line naming
what is missing. Methods this package does not implement (e.g. MOON) are
shown with the paper's numbers only.

Numbers (see `binaries.paper_tables` for each measure): the std is the
sample standard deviation over seeds (none with one seed); a "rounds to X%"
cell averages the seeds that reached X and says how many did.
"""

import csv
import dataclasses
import os
import re
import statistics
import sys
from collections.abc import Sequence
from typing import Any, Optional, Union

# TensorFlow's environment (oneDNN, C++ log level): binaries/__init__.py.

from absl import flags  # pylint: disable=g-import-not-at-top

import binaries  # pylint: disable=g-bad-import-order
from binaries import paper_tables  # pylint: disable=g-import-not-at-top
from binaries import tables  # pylint: disable=g-import-not-at-top
from binaries import sweep  # pylint: disable=g-import-not-at-top
from tff_opt.program import analysis  # pylint: disable=g-import-not-at-top
from tff_opt.program import output_dir as output_dir_lib  # pylint: disable=g-import-not-at-top
from tff_opt.program import files  # pylint: disable=g-import-not-at-top

RUNS_DIR = 'runs'
# Where `make data` puts mnist_5k.csv.gz: the mnist5k stand-in's default.
MNIST5K_DATA_DIR = 'data'
TABLE_MD = 'table.md'
TABLE_CSV = 'table.csv'

FLAGS = flags.FlagValues()
_F = dict(flag_values=FLAGS)
flags.DEFINE_enum('paper', None, list(paper_tables.PAPERS), 'The paper.',
                  **_F)
flags.DEFINE_string('table', None, 'The table number in the paper.', **_F)
flags.DEFINE_enum('scale', 'small', list(paper_tables.SCALES),
                  'small: offline stand-in (see --stand_in); paper: the '
                  'paper\'s setting, needs the datasets.', **_F)
flags.DEFINE_enum('stand_in', paper_tables.STAND_INS[0],
                  list(paper_tables.STAND_INS),
                  'The data of --scale=small: mnist5k (real MNIST digits, '
                  '`make data`) or digits (8x8, no file; fast smoke run).',
                  **_F)
flags.DEFINE_integer('seeds', None, 'Seeds per point (0..K-1). Default: the '
                     'table\'s at that scale.', lower_bound=1, **_F)
flags.DEFINE_string('out_dir', 'results/reproduce', 'Where the table\'s '
                    'directory goes.', **_F)
sweep.define_launch_flags(FLAGS)
flags.DEFINE_string('data_dir', None, 'Dataset directory passed to every '
                    'run. Default: none at --scale=paper; '
                    f'{MNIST5K_DATA_DIR}/ for the mnist5k stand-in.', **_F)
flags.DEFINE_boolean('dry_run', False, 'Check every point, print the runs '
                     'it would launch; run nothing.', **_F)


class UsageError(Exception):
  """A bad flag or a table this package cannot run: one line."""


@dataclasses.dataclass(frozen=True)
class Point:
  """One run of the table's grid."""
  method: paper_tables.Method
  setting: paper_tables.Setting
  seed: int
  name: str
  argv: tuple[str, ...]
  output_dir: str

  @property
  def rounds(self) -> int:
    return self.setting.rounds


def _slug(text: str) -> str:
  text = text.lower().replace('+', 'plus')
  return re.sub(r'[^a-z0-9.]+', '_', text).strip('_')


def runs_in(method: paper_tables.Method,
            setting: paper_tables.Setting) -> bool:
  """Whether `method` is run in `setting` (implemented, and applies)."""
  return method.missing is None and (method.settings is None or
                                     setting.label in method.settings)


def table_dir(out_dir: str, table: paper_tables.Table, scale: str,
              stand_in: str = paper_tables.STAND_INS[0]) -> str:
  """`<out_dir>/<paper>_table<N>_<scale>[_<stand_in>]`.

  The default stand-in adds nothing (`..._small`); another one is named
  (`..._small_digits`), so the two stand-ins' runs never share a directory.
  """
  suffix = ('' if scale == 'paper' or stand_in == paper_tables.STAND_INS[0]
            else f'_{stand_in}')
  return os.path.join(out_dir,
                      f'{table.paper}_table{table.number}_{scale}{suffix}')


def grid(table: paper_tables.Table, scale: str, *,
         seeds: Union[int, Sequence[int]], work_dir: str,
         data_dir: Optional[str] = None,
         stand_in: str = paper_tables.STAND_INS[0]) -> list[Point]:
  """Every run of the table at `scale`: methods x settings x seeds.

  Args:
    table: The table.
    scale: 'small' or 'paper'.
    stand_in: The data of the small scale (`paper_tables.STAND_INS`).
    seeds: Seeds 0..seeds-1 per (method, setting), or the seeds
      themselves (a sequence of non-negative integers).
    work_dir: The table's directory (`table_dir`).
    data_dir: Passed to every run as `--data_dir` when given.

  Returns:
    The points, in table order (method, setting, seed).

  Raises:
    ValueError: If `seeds` is not positive, or a sequence that is empty or
      holds a negative seed.
  """
  if isinstance(seeds, int):
    if seeds < 1:
      raise ValueError(f'seeds must be a positive integer, got {seeds}.')
    seeds = range(seeds)
  elif not seeds or min(seeds) < 0:
    raise ValueError(f'seeds must be non-negative integers, got {seeds}.')
  spec = table.scale(scale, stand_in)
  points = []
  for method in table.methods:
    for setting in spec.settings:
      if not runs_in(method, setting):
        continue
      for seed in seeds:
        name = f'{_slug(method.label)}__{_slug(setting.label)}__seed{seed}'
        output_dir = os.path.join(work_dir, RUNS_DIR, name)
        argv = (*with_model_suffix(
                    merged_flags(spec.flags, setting.flags, method.flags,
                                 spec.method_flags.get(method.label, ())),
                    method.model_suffix),
                *((f'--data_dir={data_dir}',) if data_dir else ()),
                f'--seed={seed}', f'--rounds={setting.rounds}',
                f'--output_dir={output_dir}')
        points.append(Point(method, setting, seed, name, argv, output_dir))
  return points


_TASK_OPTION = '--task_option='


def merged_flags(*groups: Sequence[str]) -> tuple[str, ...]:
  """The flags of `groups` in order; a later task option replaces an earlier.

  `binaries.train` refuses a task option given twice, so a method that
  needs another value of one of its setting's task options (MOON's model
  with a projection head, `--task_option=model=small_cnn_proj`, in a
  setting of `model=small_cnn`) replaces the setting's: the earlier
  `--task_option=NAME=...` is dropped. Every other flag is kept (for those,
  the last one given wins in `binaries.train`).
  """
  flags = [f for group in groups for f in group]

  def option_name(flag):
    if not flag.startswith(_TASK_OPTION):
      return None
    return flag[len(_TASK_OPTION):].split('=', 1)[0]

  last = {option_name(f): i for i, f in enumerate(flags)
          if option_name(f) is not None}
  return tuple(f for i, f in enumerate(flags)
               if option_name(f) is None or last[option_name(f)] == i)


def with_model_suffix(argv: Sequence[str], suffix: str) -> tuple[str, ...]:
  """`argv` with `suffix` appended to its model (`Method.model_suffix`).

  The model is the last `--task_option=model=` of `argv`, or the task's
  default model (`paper_tables.TASK_DEFAULT_MODELS`), added.

  Raises:
    ValueError: If `argv` names no model and its task's default model is
      not known.
  """
  if not suffix:
    return tuple(argv)
  model_flag = _TASK_OPTION + 'model='
  argv = list(argv)
  for i in reversed(range(len(argv))):
    if argv[i].startswith(model_flag):
      argv[i] += suffix
      return tuple(argv)
  task = tables.flag_value(argv, 'task')
  if task not in paper_tables.TASK_DEFAULT_MODELS:
    raise ValueError(f'a model suffix {suffix!r} needs a model: --task={task} '
                     'names none and its default model is not known.')
  return (*argv, f'{model_flag}{paper_tables.TASK_DEFAULT_MODELS[task]}'
          f'{suffix}')


# --- Checking every point before anything runs -------------------------------


def _flag_names(argv: Sequence[str]) -> list[str]:
  return [a[2:].split('=', 1)[0] for a in argv if a.startswith('--')]


def check_points(points: Sequence[Point], *, where: str,
                 load_data: bool = True) -> None:
  """Checks that this package can run every point, or raises.

  In order: algorithms and tasks are registered, every `binaries.train`
  flag exists, every task option exists (all problems of these kinds are
  reported together); then each point's flags parse and resolve as
  `binaries.train` does (an algorithm's required hyper-parameters, the
  paper settings of the task), and a point's earlier run, if any, was made
  with the same settings; then, once per task and options, the task is
  built, which finds missing dataset files, bad option values and too few
  clients for `--clients_per_round`.

  Args:
    points: The grid.
    where: The table and scale, leading each message.
    load_data: Build each task (False: skip the last step).

  Raises:
    UsageError: One line naming what is missing.
  """
  _check_names(points, where)
  resolved = _resolve(points, where)
  if load_data:
    _check_tasks(resolved, where)


def _check_names(points: Sequence[Point], where: str) -> None:
  """Every algorithm, task, flag and task option the points name exists."""
  # Heavy imports (TensorFlow, TFF) only once a table is chosen.
  from binaries import train  # pylint: disable=g-import-not-at-top
  import tasks  # pylint: disable=g-import-not-at-top
  from tff_opt.program import registry  # pylint: disable=g-import-not-at-top

  # What is missing -> who needs it (in order), so that each missing name
  # is reported once.
  problems: dict[str, list[str]] = {}

  def problem(text, needed_by):
    users = problems.setdefault(text, [])
    if needed_by not in users:
      users.append(needed_by)

  for p in points:
    algorithm = tables.flag_value(p.argv, 'algorithm') or 'fedopt'
    if algorithm not in registry.ALGORITHMS:
      problem(f'--algorithm={algorithm} is not registered (registered: '
              f'{", ".join(registry.ALGORITHMS)})', p.method.label)
    task = tables.flag_value(p.argv, 'task') or 'digits'
    if task not in tasks.TASK_NAMES:
      problem(f'--task={task} is not a task of this package (tasks: '
              f'{", ".join(tasks.TASK_NAMES)})', p.setting.label)
    for name in _flag_names(p.argv):
      if name not in train.FLAGS and not (
          name.startswith('no') and name[2:] in train.FLAGS):
        problem(f'binaries.train has no flag --{name}', p.method.label)
    if task in tasks.TASK_NAMES:
      known = tasks.task_options(task)
      for item in [a.split('=', 1)[1] for a in p.argv
                   if a.startswith('--task_option=')]:
        option = item.split('=', 1)[0]
        if option not in known:
          problem(f'task {task} has no option {option} (its options: '
                  f'{", ".join(sorted(known)) or "none"})', p.setting.label)
  if problems:
    raise UsageError(f'{where} cannot run here: ' + '; '.join(
        f'{text}, needed by {", ".join(users)}'
        for text, users in problems.items()) + '.')


def _resolve(points: Sequence[Point], where: str) -> dict:
  """Each point's settings as `binaries.train` resolves them, by task.

  Returns:
    {(task, options, data_dir): [(point, hparams), ...]}.
  """
  from binaries import train  # pylint: disable=g-import-not-at-top
  from tff_opt.program import registry  # pylint: disable=g-import-not-at-top

  resolved = {}
  for p in points:
    train.FLAGS.unparse_flags()
    try:
      train.FLAGS(['train', *p.argv])
      hparams = train.resolve_hparams()
    except (flags.Error, train.UsageError) as e:  # `--mu` and `--fedprox_mu`.
      raise UsageError(f'{where}: point {p.name}: binaries.train rejects '
                       f'its flags: {e}') from e
    finally:
      train.FLAGS.unparse_flags()
    if os.path.exists(os.path.join(p.output_dir, analysis.HPARAMS_FILE)):
      # A run to resume: refused now if it was made with other settings,
      # rather than when its turn comes.
      try:
        output_dir_lib.prepare(hparams, train.RESUMABLE_CHANGES)
      except output_dir_lib.RefusedError as e:
        raise UsageError(f'{where}: point {p.name}: {e}') from e
    needed = registry.ALGORITHMS[hparams['algorithm']].needed
    missing = [h for h in needed if hparams.get(h) is None]
    if missing:
      raise UsageError(f'{where}: point {p.name}: algorithm '
                       f'{hparams["algorithm"]} needs ' +
                       ', '.join(f'--{h}' for h in missing) + '.')
    key = (hparams['task'], repr(hparams['task_options']),
           hparams['data_dir'])
    resolved.setdefault(key, []).append((p, hparams))
  return resolved


def _check_tasks(resolved: dict, where: str) -> None:
  """Builds each task once: its data is there and has clients enough."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  import tasks  # pylint: disable=g-import-not-at-top
  from tasks import data_errors  # pylint: disable=g-import-not-at-top
  for (task, _, data_dir), group in resolved.items():
    hparams = group[0][1]
    options = hparams['task_options']
    shown = ' '.join(f'--task_option={k}={v}' for k, v in options.items())
    try:
      built = tasks.create_task(
          task, train_client_spec=tff.simulation.baselines.ClientSpec(
              num_epochs=1, batch_size=1), data_dir=data_dir,
          seed=hparams['seed'], **options)
    except data_errors.DataError as e:
      raise UsageError(f'{where}: {e}') from e
    except (ValueError, TypeError) as e:
      raise UsageError(f'{where}: --task={task} {shown}: {e}') from e
    num_clients = len(built.datasets.train_data.client_ids)
    for p, h in group:
      if h['clients_per_round'] > num_clients:
        raise UsageError(
            f'{where}: point {p.name}: --clients_per_round='
            f'{h["clients_per_round"]} is larger than the {num_clients} '
            f'training clients of --task={task} {shown}.')


# --- Reading the runs back ---------------------------------------------------


def measure_value(rows: Sequence[dict[str, Any]],
                  measure: paper_tables.Measure,
                  rounds: int) -> Optional[float]:
  """One measure of one run, in the paper's unit (`None`: not available).

  Args:
    rows: The run's `analysis.read_metrics` rows.
    measure: What to read.
    rounds: The setting's rounds; later rows (a longer earlier run) are
      ignored.

  Returns:
    The value times `measure.scale` (a round number for `rounds_to`, not
    scaled), or `None` when the metric was never measured in range or the
    target never reached.
  """
  rows = [r for r in rows if r['round'] <= rounds]
  metric = measure.metric
  if measure.kind == 'rounds_to':
    found = analysis.rounds_to_target(rows, metric, measure.arg)
    return None if found is None else float(found)
  if measure.kind == 'best_up_to':
    values = [r[metric] for r in rows
              if r['round'] <= measure.arg and r.get(metric) is not None]
    if not values:
      return None
    value = (min(values) if analysis.lower_is_better(metric) else
             max(values))
  elif measure.kind == 'at_round':
    values = [r[metric] for r in rows
              if r['round'] <= measure.arg and r.get(metric) is not None]
    if not values:
      return None
    value = values[-1]
  elif measure.kind == 'final':
    value = analysis.final_value(rows, metric)
  elif measure.kind == 'last_mean':
    value = analysis.window_mean(rows, metric, window=int(measure.arg))
  else:  # 'mean': every evaluated round.
    value = analysis.window_mean(rows, metric, window=max(rounds, 1))
  return None if value is None else value * measure.scale


@dataclasses.dataclass(frozen=True)
class Cell:
  """Our numbers for one (method, setting, measure).

  Attributes:
    values: One value per finished seed that has one.
    finished: Seeds whose run finished.
    seeds: Seeds asked for.
    runs: Whether the method runs in this setting at all.
  """
  values: tuple[float, ...]
  finished: int
  seeds: int
  runs: bool = True

  @property
  def mean(self) -> Optional[float]:
    return statistics.fmean(self.values) if self.values else None

  @property
  def std(self) -> Optional[float]:
    return statistics.stdev(self.values) if len(self.values) > 1 else None


def collect(table: paper_tables.Table, scale: str,
            points: Sequence[Point]) -> dict[tuple[str, str, str], Cell]:
  """Reads every finished point back into cells (no training)."""
  spec = table.scale(scale)
  by_cell = {}
  for p in points:
    by_cell.setdefault((p.method.label, p.setting.label), []).append(p)
  cells = {}
  for method in table.methods:
    for setting in spec.settings:
      group = by_cell.get((method.label, setting.label), [])
      finished = [p for p in group
                  if analysis.is_finished(p.output_dir, p.rounds)]
      rows_of = [analysis.read_metrics(p.output_dir) for p in finished]
      for measure in setting.measures:
        values = [measure_value(rows, measure, setting.rounds)
                  for rows in rows_of]
        cells[(method.label, setting.label, measure.label)] = Cell(
            values=tuple(v for v in values if v is not None),
            finished=len(finished), seeds=len(group),
            runs=runs_in(method, setting))
  return cells


# --- Writing the table -------------------------------------------------------


def _number(value: float, kind: str) -> str:
  if kind == 'rounds_to':
    return f'{value:.1f}'.rstrip('0').rstrip('.')
  return f'{value:.2f}'


def format_ours(cell: Cell, kind: str) -> str:
  """Our part of a cell: `mean ± std`, with what is missing said."""
  if not cell.runs:
    return '—'
  if cell.finished == 0:
    return 'not run yet' if cell.seeds else 'not run'
  if not cell.values:
    return 'not reached' if kind == 'rounds_to' else 'no value'
  text = _number(cell.mean, kind)
  if cell.std is not None:
    text += f' ± {_number(cell.std, kind)}'
  if kind == 'rounds_to' and len(cell.values) < cell.finished:
    text += f' ({len(cell.values)}/{cell.finished} reached)'
  if cell.finished < cell.seeds:
    text += f' [{cell.finished}/{cell.seeds} seeds]'
  return text


def format_printed(printed: paper_tables.Printed, kind: str) -> str:
  """The paper's part of a cell."""
  if printed is None:
    return 'illegible'
  mean, std = printed
  if mean is None:
    return 'illegible'
  del kind  # As printed: Python's shortest form of the number stored.
  text = str(mean)
  if std is not None:
    text += f' ± {std}'
  return text


def layout(table: paper_tables.Table, scale: str
           ) -> tuple[list[str], list[tuple[str, list[tuple[Any, ...]]]]]:
  """The table's shape: column headers and rows of (method, setting, measure).

  Returns:
    `(headers, rows)`: `headers[0]` names the row labels; each row is
    `(row label, [(method, setting, measure) per column])`.
  """
  spec = table.scale(scale)
  if table.methods_as_rows:
    headers = ['Method'] + [
        (f'{s.label} {m.label}' if len(s.measures) > 1 else s.label)
        for s in spec.settings for m in s.measures]
    rows = [(method.label, [(method, s, m) for s in spec.settings
                            for m in s.measures])
            for method in table.methods]
  else:
    measures = {m.label for s in spec.settings for m in s.measures}
    headers = ['Setting'] + [
        (f'{method.label} {m.label}' if len(measures) > 1 else method.label)
        for method in table.methods
        for m in spec.settings[0].measures]
    rows = [(s.label, [(method, s, m) for method in table.methods
                       for m in s.measures])
            for s in spec.settings]
  return headers, rows


def render_markdown(table: paper_tables.Table, scale: str,
                    cells: dict[tuple[str, str, str], Cell], *,
                    seeds: int,
                    stand_in: str = paper_tables.STAND_INS[0]) -> str:
  """The table as Markdown: `ours (paper ...)` in every cell."""
  spec = table.scale(scale, stand_in)
  headers, rows = layout(table, scale)
  lines = [f'# {paper_tables.PAPER_TITLES[table.paper]}: Table '
           f'{table.number}', '', table.title + '.', '']
  if spec.stand_in:
    lines += [f'**--scale=small: {spec.stand_in}**', '']
  else:
    lines += ['--scale=paper: the paper\'s setting.', '']
  lines += [f'Each cell: ours, mean ± std over {seeds} seed(s) '
            f'(`binaries.reproduce --seeds`), then the paper\'s printed '
            'number in parentheses.', '']
  lines.append('| ' + ' | '.join(headers) + ' |')
  lines.append('|' + '---|' * len(headers))
  for label, row in rows:
    out = [label]
    for method, setting, measure in row:
      cell = cells[(method.label, setting.label, measure.label)]
      printed = table.printed.get((method.label, setting.label,
                                   measure.label))
      if method.settings is not None and setting.label not in method.settings:
        out.append('—')  # Not part of the paper's grid.
        continue
      if method.missing is not None:
        ours = 'not implemented'
      else:
        ours = format_ours(cell, measure.kind)
      out.append(f'{ours} (paper {format_printed(printed, measure.kind)})')
    lines.append('| ' + ' | '.join(out) + ' |')
  lines.append('')
  kinds = sorted({m.kind for s in spec.settings for m in s.measures})
  lines.append('Measures: ' + '; '.join(_KIND_TEXT[k] for k in kinds) + '.')
  for method in table.methods:
    if method.missing:
      lines.append(f'- {method.label}: {method.missing}; the paper\'s '
                   'numbers only.')
  for note in table.notes:
    lines.append(f'- {note}')
  return '\n'.join(lines) + '\n'


_KIND_TEXT = {
    'best_up_to': 't=N: best validation accuracy (%) up to round N',
    'rounds_to': 'ACCx / 0.xx: first round reaching that accuracy',
    'final': 'accuracy (%) after the last round',
    'last_mean': 'mean accuracy (%) over the last rounds (window as labelled;'
                 ' at --scale=small the window is the stand-in\'s)',
    'mean': 'mean validation accuracy (%) over every round',
    'at_round': '@N: accuracy (%) at round N (last evaluation up to N)',
}


def write_csv(table: paper_tables.Table, scale: str,
              cells: dict[tuple[str, str, str], Cell], path: str) -> None:
  """The table as CSV: per column, ours mean/std/seeds and paper mean/std."""
  headers, rows = layout(table, scale)
  out = [headers[0]]
  for h in headers[1:]:
    out += [f'{h} ours', f'{h} ours std', f'{h} ours seeds',
            f'{h} paper', f'{h} paper std']
  with files.replaced_atomically(path, newline='') as f:
    writer = csv.writer(f)
    writer.writerow(out)
    for label, row in rows:
      line = [label]
      for method, setting, measure in row:
        cell = cells[(method.label, setting.label, measure.label)]
        printed = table.printed.get(
            (method.label, setting.label, measure.label)) or (None, None)
        line += ['' if cell.mean is None else cell.mean,
                 '' if cell.std is None else cell.std,
                 len(cell.values),
                 '' if printed[0] is None else printed[0],
                 '' if printed[1] is None else printed[1]]
      writer.writerow(line)


# --- The binary --------------------------------------------------------------


def main(argv: Sequence[str],
         launcher: sweep.Launcher = sweep.subprocess_launcher,
         load_data: bool = True) -> None:
  """Parses `argv` (program name first), runs the table, writes it.

  Exits with status 2 and one `reproduce: error: ...` line on a usage
  error, a table this package cannot run, or points that failed (after
  writing the table of the others); with status 130 and one line on Ctrl-C
  (the runs under way are interrupted, keeping what they wrote).
  """
  if not sweep.parse_argv(argv, FLAGS, __doc__, _fail):
    return
  try:
    if FLAGS.paper is None:
      raise UsageError('--paper is required (one of '
                       f'{", ".join(paper_tables.PAPERS)}).')
    if FLAGS.table is None:
      raise UsageError(f'--table is required; {FLAGS.paper}\'s tables are '
                       f'{", ".join(paper_tables.tables_of(FLAGS.paper))}.')
    try:
      table = paper_tables.get_table(FLAGS.paper, FLAGS.table)
    except ValueError as e:
      raise UsageError(str(e)) from e
    scale = FLAGS.scale
    stand_in = FLAGS.stand_in
    spec = table.scale(scale, stand_in)
    seeds = FLAGS.seeds or spec.seeds
    work_dir = table_dir(FLAGS.out_dir, table, scale, stand_in)
    data_dir = FLAGS.data_dir
    if data_dir is None and scale == 'small' and stand_in == 'mnist5k':
      data_dir = MNIST5K_DATA_DIR
    points = grid(table, scale, seeds=seeds, work_dir=work_dir,
                  data_dir=data_dir, stand_in=stand_in)
    where = (f'{table.paper} table {table.number} (--scale={scale}' +
             (f', --stand_in={stand_in})' if scale == 'small' else ')'))
    check_points(points, where=where, load_data=load_data)
  except UsageError as e:
    _fail(str(e))
  print(f'reproduce: {where}: {len(points)} runs ({seeds} seed(s)), '
        f'{FLAGS.parallel} at a time, in {work_dir}', flush=True)
  if spec.stand_in:
    print(f'reproduce: {spec.stand_in}', flush=True)
  jobs = [sweep.Job(name=p.name, argv=p.argv, output_dir=p.output_dir,
                    rounds=p.rounds) for p in points]
  if FLAGS.dry_run:
    sweep.print_dry_run(jobs, prog='reproduce',
                        log=lambda line: print(line, flush=True))
    return
  try:
    outcome = sweep.run_jobs(
        jobs, logs_dir=os.path.join(work_dir, sweep.LOGS_DIR),
        parallel=FLAGS.parallel, launcher=launcher,
        log=lambda line: print(line, flush=True))
  except KeyboardInterrupt as e:
    # The runs under way were interrupted and keep what they wrote.
    sweep.exit_interrupted('reproduce', e)
  cells = collect(table, scale, points)
  markdown = render_markdown(table, scale, cells, seeds=seeds,
                             stand_in=stand_in)
  files.write_text(os.path.join(work_dir, TABLE_MD), markdown)
  write_csv(table, scale, cells, os.path.join(work_dir, TABLE_CSV))
  print(markdown, flush=True)
  print(f'reproduce: wrote {os.path.join(work_dir, TABLE_MD)} and '
        f'{os.path.join(work_dir, TABLE_CSV)}', flush=True)
  failed = [name for name, status in outcome.items() if status == 'failed']
  if failed:
    _fail(f'{len(failed)} runs failed: {", ".join(failed)}; see '
          f'{os.path.join(work_dir, sweep.LOGS_DIR)}.')


def _fail(message: str) -> None:
  print(f'reproduce: error: {message}', file=sys.stderr, flush=True)
  sys.exit(2)


if __name__ == '__main__':
  binaries.run_main('reproduce', main, sys.argv)
