r"""Grid search over client and server learning rates, the paper's way.

    python -m binaries.sweep --task=digits --server_opt=yogi --grid=paper \
        --sweep_dir=sweeps/digits_yogi --parallel=2
    python -m binaries.sweep --task=digits --server_opt=sgd \
        --client_lrs=0.1,0.03 --server_lrs=1,0.3 --rounds=50 \
        --sweep_dir=sweeps/small --train_flag=--clients_per_round=5

Every grid point is one run of `python -m binaries.train` with its own
`--output_dir` under `--sweep_dir` (`<sweep_dir>/<point name>/`, logs in
`<sweep_dir>/logs/`), at most `--parallel` at once. Running the sweep again
skips finished points (their `metrics.csv` has every round) and resumes the
others from their checkpoints. A run killed by SIGKILL, what the kernel's
out-of-memory killer sends, is started again at once from its last
checkpoint, `KILLED_RETRIES` times at most (`run_jobs`; a run this process
stopped is not). Then:

    summary.csv    one row per point: learning rates, tau, status, the
                   selection score (mean train_loss over the last 100
                   rounds), --metric over the same window, its final value,
                   which point was selected
    heatmap.png    --metric (mean of the last 100 rounds) over (client lr,
                   server lr), like Figure 2 of Reddi et al.
    sweep.json     the sweep's identity (task, algorithm, server optimizer,
                   --train_flag): re-running into the directory with another
                   identity is refused in one line, never mixed in

Selection (Reddi et al. Section 4, Appendix D.1): the lowest average
training loss over the last 100 rounds; ties and diverged runs as in
`tff_opt.program.analysis`.

Grids of Appendix D.2 (`--grid=paper`). Our text copy of the paper lost the
grids themselves; these are the published ones as we recall them, written
as log10 exponents in steps of 1/2:

    client lr 10^{-3, -2.5, ..., 0.5}, server lr 10^{-3, -2.5, ..., 1}
        CIFAR-10, CIFAR-100, EMNIST CR, Shakespeare, Stack Overflow NWP
        (and `digits`, not in the paper: the paper's initial grid)
    client lr 10^{-1.5, ..., 2},      server lr 10^{-2, ..., 1}   EMNIST AE
    client lr 10^{-1, ..., 3},        server lr 10^{-2, ..., 1.5} SO LR
    tau in {10^-1, ..., 10^-5} for adaptive server optimizers
        (adagrad, adam, yogi and TFF's tff_*); none for sgd / sgdm.

They agree with every best point of the paper's Table 8 (each inside its
task's grid). The heat map fixes tau, as the paper's figures do, at the tau
of the selected point.
"""

import concurrent.futures
import csv
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import NoReturn, Optional

# TensorFlow's environment (oneDNN, C++ log level): binaries/__init__.py.

from absl import flags  # pylint: disable=g-import-not-at-top

import binaries  # pylint: disable=g-bad-import-order
from tff_opt.program import analysis  # pylint: disable=g-import-not-at-top
from tff_opt.program import files  # pylint: disable=g-import-not-at-top
from tff_opt.program import output_lock  # pylint: disable=g-import-not-at-top
from tff_opt.program import worker_env  # pylint: disable=g-import-not-at-top

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUMMARY_FILE = 'summary.csv'
HEATMAP_FILE = 'heatmap.png'
LOGS_DIR = 'logs'
ADAPTIVE_SERVER_OPTIMIZERS = ('adagrad', 'adam', 'yogi', 'tff_adagrad',
                              'tff_adam', 'tff_yogi')
# Flags of binaries.train that the sweep sets itself.
_OWN_TRAIN_FLAGS = ('task', 'algorithm', 'server_opt', 'client_lr',
                    'server_lr', 'server_tau', 'rounds', 'output_dir')


def _log10_grid(low: float, high: float) -> tuple[float, ...]:
  """10^low, 10^(low + 1/2), ..., 10^high."""
  steps = int(round((high - low) * 2))
  return tuple(10.0**(low + k / 2) for k in range(steps + 1))


_STANDARD_GRID = (_log10_grid(-3, 0.5), _log10_grid(-3, 1))
# task -> (client learning rates, server learning rates), Appendix D.2.
PAPER_GRIDS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    'cifar10': _STANDARD_GRID,
    'cifar100': _STANDARD_GRID,
    'emnist_cr': _STANDARD_GRID,
    'shakespeare': _STANDARD_GRID,
    'stackoverflow_nwp': _STANDARD_GRID,
    'digits': _STANDARD_GRID,
    'emnist_ae': (_log10_grid(-1.5, 2), _log10_grid(-2, 1)),
    'stackoverflow_lr': (_log10_grid(-1, 3), _log10_grid(-2, 1.5)),
}
PAPER_TAUS: tuple[float, ...] = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5)

# A launcher runs `python -m binaries.train ARGV`, sending its output to the
# log path, and returns its exit status.
Launcher = Callable[[list[str], str], int]


@dataclasses.dataclass(frozen=True)
class GridPoint:
  """One point of the grid; `server_tau=None` leaves tau to the binary."""
  client_lr: float
  server_lr: float
  server_tau: Optional[float] = None

  @property
  def name(self) -> str:
    """The point's directory name, e.g. `clr=0.1_slr=0.0316_tau=0.001`."""
    name = f'clr={self.client_lr:.3g}_slr={self.server_lr:.3g}'
    if self.server_tau is not None:
      name += f'_tau={self.server_tau:.3g}'
    return name


@dataclasses.dataclass(frozen=True)
class PointResult:
  """A point after the sweep: its status and numbers."""
  point: GridPoint
  output_dir: str
  # 'finished' (every round logged), 'unfinished' (some), or 'failed' (no
  # metrics: the run failed before its first round, or never ran).
  status: str
  rounds_done: int
  score: float  # analysis.selection_score; inf unless finished.
  metric_mean: Optional[float]
  metric_final: Optional[float]
  # How many of the window's rounds measured the metric (evaluations).
  metric_count: int = 0


def describe_window(result: PointResult, window: int) -> str:
  """What a point's window mean is over, truthfully.

  `window` is the one `collect` read the point with.

  'the last 100 rounds' on a 50-round run is the last 50; an evaluated
  metric is measured only every `--eval_every` rounds, so its mean is over
  fewer values than rounds: 'the last 50 rounds (5 evaluations)'.
  """
  rounds = min(window, result.rounds_done) if result.rounds_done else window
  text = f'the last {rounds} rounds'
  if result.metric_count and result.metric_count != rounds:
    text += (f' ({result.metric_count} evaluation'
             f'{"s" if result.metric_count > 1 else ""})')
  return text


def paper_grid(task: str, server_opt: str) -> list[GridPoint]:
  """The grid of Reddi et al. Appendix D.2 for `task` and `server_opt`.

  Raises:
    ValueError: If the paper has no grid for `task`.
  """
  if task not in PAPER_GRIDS:
    raise ValueError(f'No paper grid for task {task!r}; paper grids exist '
                     f'for {", ".join(sorted(PAPER_GRIDS))}. Give '
                     '--client_lrs and --server_lrs instead.')
  client_lrs, server_lrs = PAPER_GRIDS[task]
  taus = PAPER_TAUS if server_opt in ADAPTIVE_SERVER_OPTIMIZERS else (None,)
  return explicit_grid(client_lrs, server_lrs, taus)


def explicit_grid(client_lrs: Sequence[float], server_lrs: Sequence[float],
                  taus: Sequence[Optional[float]] = (None,)
                  ) -> list[GridPoint]:
  """The product grid, in order client lr, server lr, tau.

  Raises:
    ValueError: If a list is empty, holds a duplicate, or a value is not a
      positive finite number, or two points would share a directory name
      (3 significant digits).
  """
  for name, values in (('client_lrs', client_lrs),
                       ('server_lrs', server_lrs), ('taus', taus)):
    if not values:
      raise ValueError(f'{name} must not be empty.')
    if len(set(values)) != len(values):
      raise ValueError(f'{name} has a repeated value: {list(values)}.')
    for value in values:
      if value is None and name == 'taus':
        continue
      if not (isinstance(value, (int, float)) and math.isfinite(value) and
              value > 0):
        raise ValueError(f'{name} must hold positive numbers, got {value!r}.')
  if None in taus and len(taus) > 1:
    raise ValueError('taus must not mix None with values.')
  points = [GridPoint(float(c), float(s), None if t is None else float(t))
            for c in client_lrs for s in server_lrs for t in taus]
  names = [p.name for p in points]
  if len(set(names)) != len(names):
    raise ValueError('values closer than 3 significant digits share a point '
                     f'directory name: {sorted(names)}.')
  return points


def train_argv(point: GridPoint, *, task: str, algorithm: str,
               server_opt: str, rounds: int, output_dir: str,
               train_flags: Sequence[str] = ()) -> list[str]:
  """The `binaries.train` arguments of one grid point."""
  argv = [f'--task={task}', f'--algorithm={algorithm}',
          f'--server_opt={server_opt}', f'--client_lr={point.client_lr!r}',
          f'--server_lr={point.server_lr!r}']
  if point.server_tau is not None:
    argv.append(f'--server_tau={point.server_tau!r}')
  argv += [f'--rounds={rounds}', f'--output_dir={output_dir}',
           *train_flags]
  return argv


# The `binaries.train` processes `subprocess_launcher` is waiting for.
_RUNNING: set[subprocess.Popen] = set()
_RUNNING_LOCK = threading.Lock()
_STOPPING = threading.Event()  # Set by `stop_running`: launch no more.
# How long `stop_running` waits for the runs to exit before SIGKILL.
STOP_SECONDS = 30.0
# How many times a run killed by SIGKILL is launched again (it resumes from
# its last checkpoint): a FedCurv run whose worker held ~15 GB was killed so
# on a 23 GB machine when tests ran beside it, and its queue went on without
# it.
KILLED_RETRIES = 2


def train_command(argv: Sequence[str]) -> list[str]:
  """The command line of one `binaries.train` run."""
  return [sys.executable, '-m', 'binaries.train', *argv]


def subprocess_launcher(argv: list[str], log_path: str) -> int:
  """Runs `python -m binaries.train ARGV` from the repository root."""
  with open(log_path, 'a') as log, _RUNNING_LOCK:
    if _STOPPING.is_set():  # Stopped while this run was being set up.
      return 130
    # A session of its own: Ctrl-C at the terminal reaches the sweep alone,
    # which interrupts its runs once (`stop_running`); a run that got the
    # terminal's SIGINT too would be interrupted twice, the second time in
    # its clean-up, leaving a traceback in its log.
    child = subprocess.Popen(  # pylint: disable=consider-using-with
        train_command(argv), cwd=REPO, stdin=subprocess.DEVNULL, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True)
    _RUNNING.add(child)
  with child:
    try:
      return child.wait()
    finally:
      with _RUNNING_LOCK:
        _RUNNING.discard(child)


def stop_running() -> None:
  """Interrupts the runs `subprocess_launcher` started, and waits for them.

  SIGINT, as Ctrl-C at a terminal sends it: `binaries.train` exits with 130
  and keeps what it wrote (a re-run resumes). A run not gone after
  `STOP_SECONDS` is killed. Without this, a sweep or claims process stopped
  by SIGTERM (which reaches it alone, not its runs) would wait for its
  current runs to end, and leave them running if killed.
  """
  with _RUNNING_LOCK:
    _STOPPING.set()
    children = list(_RUNNING)
  for child in children:
    if child.poll() is None:
      child.send_signal(signal.SIGINT)
  for child in children:
    try:
      child.wait(timeout=STOP_SECONDS)
    except subprocess.TimeoutExpired:
      child.kill()
      child.wait()


@dataclasses.dataclass(frozen=True)
class Job:
  """One `binaries.train` run of a grid: what `run_jobs` launches.

  Attributes:
    name: Its name in the log lines and its log file's (`<name>.log`).
    argv: The `binaries.train` arguments (with its `--output_dir`).
    output_dir: The run's `--output_dir`.
    rounds: The rounds it must log to count as finished.
  """
  name: str
  argv: tuple[str, ...]
  output_dir: str
  rounds: int


def describe_progress(progress: analysis.Progress) -> str:
  """Where a run stands, in words: what `print_dry_run` puts after it."""
  if not progress.left:
    return 'finished, would be skipped'
  if not progress.logged:
    return 'not begun'
  text = (f'{progress.logged} rounds logged, '
          f'{"at most " if progress.stops_early else ""}{progress.left} left')
  if progress.seconds_left is not None:
    text += (f' (~{describe_seconds(progress.seconds_left)} at the pace of '
             'its last rounds)')
  return text


def describe_seconds(seconds: float) -> str:
  """A duration to two figures: '40 s', '25 min', '3.1 h', '52 h'."""
  if round(seconds) < 60:
    return f'{seconds:.0f} s'
  if round(seconds / 60) < 60:
    return f'{seconds / 60:.0f} min'
  hours = seconds / 3600
  return f'{hours:.1f} h' if round(hours, 1) < 10 else f'{hours:.0f} h'


def print_dry_run(jobs: Sequence[Job], *, prog: str,
                  log: Callable[[str], None] = print) -> None:
  """Prints each job's command and where its run stands, then a total.

  One line a job: `python -m binaries.train <argv>  # <describe_progress>`,
  then `<prog>: F finished, B begun (~T of run time left by their own
  pace), N not begun`. T adds the begun runs' estimates
  (`analysis.progress`); a run not begun has no pace to go by, so none is
  counted for it.
  """
  finished = begun = not_begun = 0
  seconds = 0.0
  for job in jobs:
    progress = analysis.progress(job.output_dir, job.rounds)
    log(f'python -m binaries.train {" ".join(job.argv)}  '
        f'# {describe_progress(progress)}')
    if not progress.left:
      finished += 1
    elif not progress.logged:
      not_begun += 1
    else:
      begun += 1
      seconds += progress.seconds_left or 0.0
  pace = (f' (~{describe_seconds(seconds)} of run time left by their own '
          'pace)' if begun else '')
  log(f'{prog}: {finished} finished, {begun} begun{pace}, {not_begun} not '
      'begun')


def run_jobs(jobs: Sequence[Job], *, logs_dir: str, parallel: int = 1,
             launcher: Launcher = subprocess_launcher,
             log: Callable[[str], None] = print) -> dict[str, str]:
  """Runs the jobs not finished yet, at most `parallel` at once.

  A job is finished when `analysis.is_finished(job.output_dir,
  job.rounds)`; the others are launched (an unfinished one resumes from its checkpoints, as
  `binaries.train` does), each logging to `<logs_dir>/<name>.log`, unless,
  when its turn comes, another process is writing its directory
  (`output_lock.holder`): that one is left to it. A run killed by SIGKILL
  (exit -9; the out-of-memory killer's signal) is launched again at once,
  up to `KILLED_RETRIES` times, unless `stop_running` stopped it.

  Args:
    jobs: The runs, with distinct names.
    logs_dir: Where the runs' logs go (created).
    parallel: How many runs at once, positive.
    launcher: Runs one job (`subprocess_launcher`; tests record instead).
    log: Called with one line per job started, skipped or ended.

  Returns:
    `{name: 'skipped' | 'finished' | 'failed' | 'elsewhere' |
    'interrupted'}` ('failed': the run exited with an error, or ended
    without logging every round; 'elsewhere': another process was running
    it; 'interrupted': stopped by `stop_running`, it resumes later).

  Raises:
    ValueError: If `parallel` or a job's `rounds` is not positive, or two
      jobs share a name.
  """
  _check_jobs(jobs, parallel)
  os.makedirs(logs_dir, exist_ok=True)
  _STOPPING.clear()
  outcome = {}
  todo = []
  for job in jobs:
    if analysis.is_finished(job.output_dir, job.rounds):
      outcome[job.name] = 'skipped'
      log(f'{job.name}: finished before, skipped')
    else:
      todo.append(job)
  lock = threading.Lock()

  def say(line: str) -> None:
    with lock:
      log(line)

  def run_one(job):
    return job.name, _run_job(job, logs_dir=logs_dir, launcher=launcher,
                              log=say)

  pool = concurrent.futures.ThreadPoolExecutor(max_workers=parallel)
  previous = binaries.stop_on_signals()
  try:
    for name, status in pool.map(run_one, todo):
      outcome[name] = status
  except BaseException:
    # Ctrl-C, or SIGTERM as SystemExit: launch nothing more, stop the runs
    # under way (they keep what they wrote), then let the exception go on.
    pool.shutdown(wait=False, cancel_futures=True)
    stop_running()
    raise
  finally:
    pool.shutdown(wait=True)
    binaries.restore_signals(previous)
  return outcome


# SIGTERM or SIGHUP, raised in the main thread as Ctrl-C is: one path stops
# the runs on either (`binaries.stop_on_signals`).
Terminated = binaries.Terminated


def _check_jobs(jobs: Sequence[Job], parallel: int) -> None:
  """`run_jobs`' arguments, or ValueError."""
  if parallel < 1:
    raise ValueError(f'parallel must be a positive integer, got {parallel}.')
  names = [job.name for job in jobs]
  if len(set(names)) != len(names):
    raise ValueError(f'job names must be distinct, got {sorted(names)}.')
  for job in jobs:
    if job.rounds < 1:
      raise ValueError(
          f'rounds must be a positive integer, got {job.rounds}.')


def _run_job(job: Job, *, logs_dir: str, launcher: Launcher,
             log: Callable[[str], None]) -> str:
  """Runs one unfinished job (`run_jobs`); its outcome."""
  log_path = os.path.join(logs_dir, job.name + '.log')
  pid = output_lock.holder(job.output_dir)
  if pid is not None:  # Another sweep or claims process runs it now.
    log(f'{job.name}: being run by another process (pid {pid}), skipped')
    return 'elsewhere'
  log(f'{job.name}: started (log {log_path})')
  status = launcher(list(job.argv), log_path)
  for attempt in range(1, KILLED_RETRIES + 1):
    if status != -signal.SIGKILL or _STOPPING.is_set():
      break
    note = (f'{job.name}: killed by SIGKILL (the kernel\'s out-of-memory '
            'killer sends it: see dmesg); started again from its last '
            f'checkpoint ({attempt} of {KILLED_RETRIES})')
    with open(log_path, 'a') as f:
      f.write(f'sweep: {note}\n')
    log(note)
    status = launcher(list(job.argv), log_path)
  ok = status == 0 and analysis.is_finished(job.output_dir, job.rounds)
  if not ok and _STOPPING.is_set():  # Stopped by us: it resumes later.
    log(f'{job.name}: interrupted (exit {status}; resumes with the same '
        'command)')
    return 'interrupted'
  why = f'exit {status}'
  if status == 0 and not ok:  # It ended well but left rounds unlogged.
    unlogged = analysis.unlogged_rounds(job.output_dir, job.rounds)
    why += (f', but its {analysis.METRICS_FILE} lacks round(s) '
            f'{analysis.describe_rounds(unlogged)}')
  log(f'{job.name}: ' + ('finished' if ok else
                         f'FAILED ({why}; see {log_path})'))
  return 'finished' if ok else 'failed'


def exit_interrupted(prog: str,
                     error: Optional[BaseException] = None) -> NoReturn:
  """One line naming the command that resumes; exit 130 or 143.

  The runs keep what they wrote (`binaries.exit_interrupted`).
  """
  binaries.exit_interrupted(prog, error)


SWEEP_FILE = 'sweep.json'


def _read_json(path: str, sweep_dir: str) -> dict:
  """The JSON object in `path`; a file cut short or damaged is refused.

  Raises:
    UsageError: If `path` cannot be read or is not a whole JSON object
      (nothing is changed).
  """
  try:
    with open(path, encoding='utf-8') as f:
      value = json.load(f)
  except (OSError, ValueError) as e:
    raise UsageError(f'--sweep_dir={sweep_dir}: cannot read {path} ({e}); '
                     'refusing to touch that directory (nothing was '
                     'changed).') from e
  if not isinstance(value, dict):
    raise UsageError(f'--sweep_dir={sweep_dir}: {path} is not a JSON object; '
                     'refusing to touch that directory (nothing was '
                     'changed).')
  return value


def claim_sweep_dir(sweep_dir: str, identity: dict) -> None:
  """Makes `sweep_dir` this sweep's, or refuses one that holds another.

  A sweep is its task, algorithm, server optimizer and `--train_flag`s
  (`identity`); the grid points and `--rounds` may change between runs
  (points are their own directories; a run resumes with more rounds).
  `<sweep_dir>/sweep.json` records the identity; a directory made before
  that file existed is checked against its points' `hparams.json`.

  Raises:
    UsageError: If `sweep_dir` holds a sweep with another identity.
  """
  path = os.path.join(sweep_dir, SWEEP_FILE)
  recorded = None
  if os.path.exists(path):
    recorded = _read_json(path, sweep_dir)
  elif os.path.isdir(sweep_dir):
    for entry in sorted(os.listdir(sweep_dir)):
      hparams_path = os.path.join(sweep_dir, entry, analysis.HPARAMS_FILE)
      if os.path.isfile(hparams_path):
        hparams = _read_json(hparams_path, sweep_dir)
        recorded = {k: hparams.get(k) for k in ('task', 'algorithm',
                                                'server_opt')}
        break
  if recorded is not None:
    differ = [k for k in identity if k in recorded and recorded[k] !=
              identity[k]]
    if differ:
      what = '; '.join(f'{k} {recorded[k]!r} there, {identity[k]!r} now'
                       for k in differ)
      raise UsageError(f'--sweep_dir={sweep_dir} holds a sweep with other '
                       f'settings ({what}); use another --sweep_dir (nothing '
                       'was changed).')
  os.makedirs(sweep_dir, exist_ok=True)
  with files.replaced_atomically(path) as f:
    json.dump(identity, f, indent=2, sort_keys=True)


def run_sweep(points: Sequence[GridPoint], *, sweep_dir: str, task: str,
              algorithm: str, server_opt: str, rounds: int,
              train_flags: Sequence[str] = (), parallel: int = 1,
              launcher: Launcher = subprocess_launcher,
              log: Callable[[str], None] = print) -> dict[GridPoint, str]:
  """Runs the points not finished yet, at most `parallel` at once.

  Args:
    points: The grid.
    sweep_dir: Where every point's output directory goes.
    task, algorithm, server_opt, rounds: Passed to every run.
    train_flags: Other `binaries.train` flags passed to every run.
    parallel: How many runs at once, positive.
    launcher: Runs one point (`subprocess_launcher`; tests record instead).
    log: Called with one line per point started, skipped or ended.

  Returns:
    `{point: 'skipped' | 'finished' | 'failed' | 'elsewhere'}` (as
    `run_jobs`).

  Raises:
    ValueError: If `parallel` or `rounds` is not positive.
  """
  if parallel < 1:
    raise ValueError(f'parallel must be a positive integer, got {parallel}.')
  if rounds < 1:
    raise ValueError(f'rounds must be a positive integer, got {rounds}.')
  jobs = sweep_jobs(points, sweep_dir=sweep_dir, task=task,
                    algorithm=algorithm, server_opt=server_opt, rounds=rounds,
                    train_flags=train_flags)
  outcome = run_jobs(jobs, logs_dir=os.path.join(sweep_dir, LOGS_DIR),
                     parallel=parallel, launcher=launcher, log=log)
  return {point: outcome[point.name] for point in points}


def sweep_jobs(points: Sequence[GridPoint], *, sweep_dir: str, task: str,
               algorithm: str, server_opt: str, rounds: int,
               train_flags: Optional[Sequence[str]] = None) -> list[Job]:
  """The grid's runs, each in `<sweep_dir>/<point name>/` (`train_argv`)."""
  jobs = []
  for point in points:
    output_dir = os.path.join(sweep_dir, point.name)
    jobs.append(Job(
        name=point.name, output_dir=output_dir, rounds=rounds,
        argv=tuple(train_argv(point, task=task, algorithm=algorithm,
                              server_opt=server_opt, rounds=rounds,
                              output_dir=output_dir,
                              train_flags=train_flags))))
  return jobs


def collect(points: Sequence[GridPoint], *, sweep_dir: str, rounds: int,
            metric: str = 'eval_accuracy',
            window: int = analysis.DEFAULT_WINDOW) -> list[PointResult]:
  """Reads every point's metrics back (no training)."""
  results = []
  for point in points:
    output_dir = os.path.join(sweep_dir, point.name)
    rows = analysis.read_metrics_if_any(output_dir)
    finished = set(range(1, rounds + 1)) <= {r['round'] for r in rows}
    # Rows past --rounds (a longer earlier run) are not part of this sweep.
    rows = [r for r in rows if r['round'] <= rounds]
    status = 'finished' if finished else (
        'unfinished' if rows else 'failed')
    results.append(PointResult(
        point=point, output_dir=output_dir, status=status,
        rounds_done=analysis.last_round(rows),
        score=(analysis.selection_score(rows, window=window)
               if finished else math.inf),
        metric_mean=analysis.window_mean(rows, metric, window=window),
        metric_final=analysis.final_value(rows, metric),
        metric_count=sum(
            1 for r in rows if r.get(metric) is not None and
            r['round'] > analysis.last_round(rows) - window)))
  return results


def select(results: Sequence[PointResult]) -> Optional[PointResult]:
  """The finished point the paper's rule selects (`None` if none)."""
  finished = [r for r in results if r.status == 'finished']
  if not finished:
    return None
  by_candidate = {
      analysis.Candidate(r.point.client_lr, r.point.server_lr,
                         r.point.server_tau, r.score): r for r in finished}
  return by_candidate[analysis.select_best(list(by_candidate))]


def write_summary(results: Sequence[PointResult],
                  best: Optional[PointResult], path: str, *,
                  metric: str = 'eval_accuracy',
                  window: int = analysis.DEFAULT_WINDOW) -> None:
  """Writes `summary.csv`: finished points best first, then the others."""

  def order(r):
    return (r.status != 'finished',
            analysis.tie_break_key(analysis.Candidate(
                r.point.client_lr, r.point.server_lr, r.point.server_tau,
                r.score)))

  columns = ['client_lr', 'server_lr', 'server_tau', 'status', 'rounds_done',
             f'train_loss_last{window}', f'{metric}_last{window}',
             f'final_{metric}', 'selected', 'output_dir']
  with files.replaced_atomically(path, newline='') as f:
    writer = csv.writer(f)
    writer.writerow(columns)
    for r in sorted(results, key=order):
      writer.writerow([
          repr(r.point.client_lr), repr(r.point.server_lr),
          '' if r.point.server_tau is None else repr(r.point.server_tau),
          r.status, r.rounds_done,
          '' if math.isinf(r.score) and r.status != 'finished' else r.score,
          '' if r.metric_mean is None else r.metric_mean,
          '' if r.metric_final is None else r.metric_final,
          int(r is best), r.output_dir])


def plot_heatmap(results: Sequence[PointResult], best: PointResult,
                 path: str, *, metric: str = 'eval_accuracy',
                 window: int = analysis.DEFAULT_WINDOW,
                 title: str = ''):
  """Draws `metric` over (client lr, server lr) at the selected tau.

  Cells are the mean of `metric` over the last `window` rounds (accuracies
  in percent); a point not finished is drawn blank, the selected point is
  framed.

  Returns:
    The drawn values, a NumPy array indexed [server lr, client lr] (both
    ascending), NaN where blank.
  """
  import matplotlib.patches  # pylint: disable=g-import-not-at-top
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  tau = best.point.server_tau
  cells = [r for r in results if r.point.server_tau == tau]
  client_lrs = sorted({r.point.client_lr for r in cells})
  server_lrs = sorted({r.point.server_lr for r in cells})
  values = np.full((len(server_lrs), len(client_lrs)), np.nan)
  for r in cells:
    if r.status == 'finished' and r.metric_mean is not None:
      values[server_lrs.index(r.point.server_lr),
             client_lrs.index(r.point.client_lr)] = r.metric_mean
  lower = analysis.lower_is_better(metric)
  scale = 100.0 if 'accuracy' in metric else 1.0
  values *= scale
  fig, ax = plt.subplots(figsize=(max(6.0, 2.5 + 0.8 * len(client_lrs)),
                                  max(4.5, 2.0 + 0.5 * len(server_lrs))))
  image = ax.imshow(values, origin='lower', aspect='auto',
                    cmap='viridis_r' if lower else 'viridis')
  finite = values[np.isfinite(values)]
  middle = float(np.mean([finite.min(), finite.max()])) if finite.size else 0
  for i in range(len(server_lrs)):
    for j in range(len(client_lrs)):
      value = values[i, j]
      text = '—' if not np.isfinite(value) else (
          f'{value:.1f}' if scale != 1.0 else f'{value:.3g}')
      dark = np.isfinite(value) and ((value < middle) != lower)
      ax.text(j, i, text, ha='center', va='center', fontsize=9,
              color='white' if dark else 'black')
  i = server_lrs.index(best.point.server_lr)
  j = client_lrs.index(best.point.client_lr)
  ax.add_patch(matplotlib.patches.Rectangle(
      (j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor='red', linewidth=2.5))
  ax.set_xticks(range(len(client_lrs)),
                [f'{math.log10(v):.1f}' for v in client_lrs])
  ax.set_yticks(range(len(server_lrs)),
                [f'{math.log10(v):.1f}' for v in server_lrs])
  ax.set_xlabel('client learning rate (log10)')
  ax.set_ylabel('server learning rate (log10)')
  colorbar = fig.colorbar(image, ax=ax)
  colorbar.set_label(_metric_label(metric) +
                     f'\nmean of {describe_window(best, window)}')
  lines = [title] if title else []
  train_window = min(window, best.rounds_done) or window
  lines.append((f'tau = {tau:g}; ' if tau is not None else '') +
               f'red box: selected (lowest mean train loss, last '
               f'{train_window} rounds)')
  ax.set_title('\n'.join(lines), fontsize=10)
  fig.tight_layout()
  with files.replaced_atomically(path, 'wb') as f:
    fig.savefig(f, format='png', dpi=120)
  plt.close(fig)
  return values


def _metric_label(metric: str) -> str:
  if 'accuracy' in metric:
    return f'{metric} (%)'
  return metric


# --- The binary --------------------------------------------------------------

def define_launch_flags(flag_values: flags.FlagValues) -> None:
  """Defines how a binary launches its runs: `--parallel`, `--threads_per_run`.

  The flags of every binary that trains a grid of `binaries.train` runs
  (this one, `binaries.reproduce`, `binaries.claims`); `parse_argv` applies
  `--threads_per_run`.
  """
  flags.DEFINE_integer('parallel', 1, 'Points trained at once.',
                       lower_bound=1, flag_values=flag_values)
  flags.DEFINE_integer(
      'threads_per_run', None, 'TensorFlow threads of each run, its '
      'trainer\'s and its worker\'s (both thread pools: '
      'TF_NUM_INTRAOP_THREADS, TF_NUM_INTEROP_THREADS in their environment); '
      'with --parallel=P on C cores, C/P. Each local run then also runs '
      'at most that many clients at once (binaries.train\'s '
      '--max_concurrent_clients default). How the runs compute, not what '
      '(float round-off): a run resumes across it. Default: TensorFlow\'s, '
      'one per core.', lower_bound=1, flag_values=flag_values)


# Its own flag set: the sweep's --task, --rounds, ... must not collide with
# binaries.train's when both modules are imported (the tests do).
FLAGS = flags.FlagValues()
_F = dict(flag_values=FLAGS)

flags.DEFINE_string('task', 'digits', 'Benchmark task (binaries.train).', **_F)
flags.DEFINE_string('algorithm', 'fedopt', 'Algorithm (binaries.train).',
                    **_F)
flags.DEFINE_string('server_opt', 'yogi', 'Server optimizer '
                    '(binaries.train); decides whether tau is swept.', **_F)
flags.DEFINE_enum('grid', None, ['paper'], 'paper: the grid of Reddi et al. '
                  'Appendix D.2 for --task. Otherwise give --client_lrs and '
                  '--server_lrs (and --taus).', **_F)
flags.DEFINE_list('client_lrs', None, 'Client learning rates, e.g. 0.1,0.03.',
                  **_F)
flags.DEFINE_list('server_lrs', None, 'Server learning rates.', **_F)
flags.DEFINE_list('taus', None, 'Adaptivity values tau; default: the '
                  'binary\'s (the task\'s) tau.', **_F)
flags.DEFINE_string('sweep_dir', None, 'Where the points\' runs, the '
                    'summary and the heat map go (required).', **_F)
flags.DEFINE_integer('rounds', None, 'Rounds per point. Default: the '
                     'task\'s.', lower_bound=1, **_F)
define_launch_flags(FLAGS)
flags.DEFINE_integer('window', analysis.DEFAULT_WINDOW, 'Rounds averaged by '
                     'the selection rule and the heat map.', lower_bound=1,
                     **_F)
flags.DEFINE_string('metric', 'eval_accuracy', 'metrics.csv column of the '
                    'heat map (e.g. eval_loss for tasks without accuracy).',
                    **_F)
flags.DEFINE_multi_string('train_flag', [], 'A flag passed to every run, '
                          'e.g. --train_flag=--clients_per_round=5 '
                          '(repeatable).', **_F)
flags.DEFINE_boolean('dry_run', False, 'Print the points and their '
                     'commands; run nothing.', **_F)


# Asking for help is a success (exit 0) in every binary; absl's own
# --helpfull exits 1.
HELP_FLAGS = ('--help', '-h', '-?', '--helpfull', '--helpshort')


def parse_argv(argv: Sequence[str], flag_values: flags.FlagValues,
               doc: str, fail: Callable[[str], None]) -> bool:
  """Parses `argv` into `flag_values`; False when it asked for --help.

  Prints `doc` and the flags' help for --help/-h; a flag error or a
  positional argument goes to `fail` (which exits) as one line. With
  `define_launch_flags`'s `--threads_per_run` given, the runs launched from
  then on inherit its thread counts (`worker_env.thread_environment`).
  """
  flag_values.unparse_flags()
  binaries.note_args(argv[1:])
  if any(arg in HELP_FLAGS for arg in argv):
    print(doc + '\n' + flag_values.get_help())
    return False
  try:
    rest = flag_values(list(argv))
  except flags.Error as e:
    fail(str(e))
  if len(rest) > 1:
    fail(f'unexpected arguments: {" ".join(rest[1:])} (flags take the '
         'form --name=value).')
  if 'threads_per_run' in flag_values and (
      flag_values.threads_per_run is not None):
    os.environ.update(
        worker_env.thread_environment(flag_values.threads_per_run))
  return True


class UsageError(Exception):
  """A bad flag: reported in one line."""


def _floats(flag_name: str) -> Optional[list[float]]:
  values = FLAGS[flag_name].value
  if values is None:
    return None
  try:
    return [float(v) for v in values]
  except ValueError as e:
    raise UsageError(f'--{flag_name}={",".join(values)}: {e}.') from e


def points_from_flags() -> list[GridPoint]:
  """The grid the flags ask for.

  Raises:
    UsageError: If the flags give no grid, two grids, or bad values.
  """
  client_lrs, server_lrs, taus = (_floats('client_lrs'),
                                  _floats('server_lrs'), _floats('taus'))
  explicit = client_lrs is not None or server_lrs is not None
  try:
    if FLAGS.grid == 'paper':
      if explicit or taus is not None:
        raise UsageError('--grid=paper sets the learning rates and taus; '
                         'drop --client_lrs/--server_lrs/--taus, or drop '
                         '--grid.')
      return paper_grid(FLAGS.task, FLAGS.server_opt)
    if client_lrs is None or server_lrs is None:
      raise UsageError('give --grid=paper, or both --client_lrs and '
                       '--server_lrs.')
    return explicit_grid(client_lrs, server_lrs, taus or (None,))
  except ValueError as e:
    raise UsageError(str(e)) from e


def _check_train_flags(train_flags: Sequence[str]) -> None:
  for flag in train_flags:
    name = flag.lstrip('-').split('=', 1)[0]
    if name in _OWN_TRAIN_FLAGS:
      raise UsageError(f'--train_flag={flag}: the sweep sets --{name} '
                       'itself; use the sweep\'s own flag.')
    if name == 'stop_at':
      raise UsageError(f'--train_flag={flag}: the sweep selects by the '
                       'training loss of each run\'s last rounds, so every '
                       'run goes to --rounds.')


def _rounds() -> int:
  if FLAGS.rounds is not None:
    return FLAGS.rounds
  import tasks  # pylint: disable=g-import-not-at-top
  try:
    return tasks.task_defaults(FLAGS.task).rounds
  except (KeyError, ValueError) as e:
    raise UsageError(str(e)) from e


def main(argv: Sequence[str],
         launcher: Launcher = subprocess_launcher) -> None:
  """Parses `argv` (program name first), runs the sweep, reports.

  Exits with status 2 and one `sweep: error: ...` line on a usage error or
  when points failed (after writing the summary of the others); with status
  130 and one line on Ctrl-C (finished points are kept; a re-run resumes).
  """
  try:
    _main(argv, launcher)
  except KeyboardInterrupt as e:
    exit_interrupted('sweep', e)


def _main(argv: Sequence[str], launcher: Launcher) -> None:
  """`main` without the Ctrl-C handling."""
  if not parse_argv(argv, FLAGS, __doc__, _fail):
    return
  try:
    if not FLAGS.sweep_dir:
      raise UsageError('--sweep_dir is required.')
    points = points_from_flags()
    _check_train_flags(FLAGS.train_flag)
    rounds = _rounds()
  except UsageError as e:
    _fail(str(e))
  sweep_dir = FLAGS.sweep_dir
  settings = dict(task=FLAGS.task, algorithm=FLAGS.algorithm,
                  server_opt=FLAGS.server_opt, rounds=rounds)
  print(f'sweep: {len(points)} points, {rounds} rounds each, '
        f'{FLAGS.parallel} at a time, in {sweep_dir}', flush=True)
  if FLAGS.dry_run:
    print_dry_run(sweep_jobs(points, sweep_dir=sweep_dir,
                             train_flags=FLAGS.train_flag, **settings),
                  prog='sweep', log=lambda line: print(line, flush=True))
    return
  try:
    claim_sweep_dir(sweep_dir, dict(
        task=FLAGS.task, algorithm=FLAGS.algorithm,
        server_opt=FLAGS.server_opt,
        train_flags=sorted(FLAGS.train_flag or [])))
  except UsageError as e:
    _fail(str(e))
  outcome = run_sweep(points, sweep_dir=sweep_dir,
                      train_flags=FLAGS.train_flag, parallel=FLAGS.parallel,
                      launcher=launcher,
                      log=lambda line: print(line, flush=True), **settings)
  results = collect(points, sweep_dir=sweep_dir, rounds=rounds,
                    metric=FLAGS.metric, window=FLAGS.window)
  best = select(results)
  write_summary(results, best, os.path.join(sweep_dir, SUMMARY_FILE),
                metric=FLAGS.metric, window=FLAGS.window)
  failed = [p.name for p, s in outcome.items() if s == 'failed']
  if best is None:
    _fail(f'no point finished ({len(failed)} failed); see '
          f'{os.path.join(sweep_dir, LOGS_DIR)}.')
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')  # Headless: files only.
  plot_heatmap(results, best, os.path.join(sweep_dir, HEATMAP_FILE),
               metric=FLAGS.metric, window=FLAGS.window,
               title=f'{FLAGS.task}, {FLAGS.algorithm}, {FLAGS.server_opt}')
  if math.isinf(best.score):
    _fail(f'every finished point diverged (non-finite or rejected rounds in '
          f'its last {FLAGS.window} rounds); nothing to select. Summary in '
          f'{os.path.join(sweep_dir, SUMMARY_FILE)}.')
  tau = ('' if best.point.server_tau is None else
         f' server_tau={best.point.server_tau:g}')
  print(f'selected: client_lr={best.point.client_lr:g} '
        f'server_lr={best.point.server_lr:g}{tau} (mean train_loss of the '
        f'last {min(FLAGS.window, best.rounds_done)} rounds '
        f'{best.score:.4f}); summary in '
        f'{os.path.join(sweep_dir, SUMMARY_FILE)}', flush=True)
  if failed:
    _fail(f'{len(failed)} points failed: {", ".join(failed)}; see '
          f'{os.path.join(sweep_dir, LOGS_DIR)}.')


def _fail(message: str) -> None:
  print(f'sweep: error: {message}', file=sys.stderr, flush=True)
  sys.exit(2)


if __name__ == '__main__':
  binaries.run_main('sweep', main, sys.argv)
