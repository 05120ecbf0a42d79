"""The simulation loop: sample clients, run rounds, evaluate, log, checkpoint.

Round r (counting from 1) samples `clients_per_round` distinct training
clients with a generator seeded by (seed, r), builds their datasets after
seeding TensorFlow with (seed, r) (so dataset shuffles are fixed), runs one
`process.next`, and appends one row to `metrics.csv`. A run is therefore a
function of its seed: resuming from a checkpoint after round r replays
rounds r+1... exactly as an uninterrupted run would.

Files in `output_dir`:
  metrics.csv      one row per round; rewritten atomically after each round
  tensorboard/     the same scalars as TensorBoard events
  checkpoints/     program states (`checkpoints.NumpyProgramStateManager`:
                   TFF's directory layout, one NumPy file each), one every
                   `checkpoint_every` rounds and after the last

Processes with per-client state (`client_states.ClientStatefulProcess`,
e.g. SCAFFOLD): the loop keeps `{client_id: state}` for the clients seen so
far (a new client gets `process.initial_client_state()`), passes the sampled
clients' states to `process.next` and stores what it returns; checkpoints
then hold `{'process_state', 'client_states'}` (`client_states.pack`: a
fixed layout over the population), stateless processes keep the
`{'process_state'}` layout.

Round-dependent client data (`round_clients_fn`, e.g. FedFOR's stateless
long-tail clients or concept shift, `tasks/heterogeneity.py`): the loop
still samples ids from `client_ids` as above, then calls
`round_clients_fn(round_num, sampled_ids)` (after seeding TensorFlow) for the
ids and datasets the round trains on, instead of `client_dataset_fn`. The
hook must be a function of the round and the sampled ids (its own seed
bound in), so resuming stays exact; client states are kept only for ids of
`client_ids` (fresh one-round clients never come back).

Resuming: the latest checkpoint (round v) is loaded and the rows of
`metrics.csv` after round v (written before an interruption, not covered by
a checkpoint) are dropped and recomputed, so the file never holds a round
twice or misses one. A `metrics.csv` that logs every round only up to some
L < v (an older copy put back over it while the checkpoints went on) would
leave rounds L+1..v unlogged for good: the run then resumes from the newest
readable checkpoint of round L or earlier and recomputes from there; the
later checkpoints are renamed `program_state_<v>.unlogged` and a copy of
`metrics.csv` as it was is kept as `metrics.csv.unlogged` (nothing is
deleted). With no such checkpoint the run is refused (`MetricsGapError`).

Interrupted (Ctrl-C, or SIGTERM raised as `KeyboardInterrupt` by
`binaries.stop_on_signals`): the round in progress is abandoned, the last
round logged is checkpointed if its checkpoint is not there yet, and the
exception goes on with `checkpointed_round` set (`None` without
`output_dir`), so a resume recomputes nothing that was logged.

Stopping at a target (`stop_at`, an `analysis.Target`): the run ends after
the first round whose metric reaches it (checkpointed there), so its
`metrics.csv` ends at that round. A run resumed with the same target that
had reached it runs nothing; resumed without it, it goes on from its last
checkpoint to `rounds`.
"""

import asyncio
import collections
import concurrent.futures
import csv
import dataclasses
import inspect
import io
import math
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.program import analysis
from tff_opt.program import checkpoints
from tff_opt.program import files
from tff_opt import checks
from tff_opt.round import client_states as client_states_lib
from tff_opt.program import runtime

METRICS_FILE = 'metrics.csv'
CHECKPOINT_DIR = 'checkpoints'
TENSORBOARD_DIR = 'tensorboard'
PROCESS_STATE_KEY = 'process_state'
CLIENT_STATES_KEY = 'client_states'

# Columns first in metrics.csv, in this order; any other metric follows.
LEADING_COLUMNS = ('round', 'train_loss', 'train_accuracy', 'eval_loss',
                   'eval_accuracy', 'round_seconds')


def sample_clients(client_ids: Sequence[str], clients_per_round: int, *,
                   seed: int, round_num: int) -> list[str]:
  """Samples distinct clients for a round, deterministically.

  Args:
    client_ids: The population, in a fixed order.
    clients_per_round: How many to sample, at most `len(client_ids)`.
    seed: The run's seed.
    round_num: The round (from 1); each round gets its own draw.

  Returns:
    The sampled client ids.

  Raises:
    ValueError: If `clients_per_round` is not in [1, len(client_ids)].
  """
  if not 1 <= clients_per_round <= len(client_ids):
    raise ValueError(
        f'clients_per_round must be in [1, {len(client_ids)}] (the number of '
        f'training clients), got {clients_per_round}.')
  rng = np.random.default_rng([seed, round_num])
  chosen = rng.choice(len(client_ids), size=clients_per_round, replace=False)
  return [client_ids[i] for i in chosen]


def flatten_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
  """Flattens a process's nested metrics into `metrics.csv` column names.

  `client_work/train/<m>` becomes `train_<m>`; every other scalar leaf keeps
  its own name (`finalizer/update_non_finite` -> `update_non_finite`), or
  `<part>_<name>` when two parts report the same name.
  """
  leaves = []

  def visit(path, value):
    if isinstance(value, Mapping):
      for key, sub in value.items():
        visit(path + (str(key),), sub)
      return
    array = np.asarray(value)
    if array.size != 1:
      return
    leaves.append((path, float(array.reshape(()))))

  visit((), dict(metrics))
  counts = collections.Counter(path[-1] for path, _ in leaves)
  flat = {}
  for path, value in leaves:
    if path[:2] == ('client_work', 'train'):
      name = 'train_' + '_'.join(path[2:])
    elif counts[path[-1]] == 1:
      name = path[-1]
    else:
      name = '_'.join(path)
    flat[name] = value
  return flat


PARTIAL_SUFFIX = '.partial'


def read_complete_csv(path: str) -> tuple[str, str]:
  """`(whole records, partial last record)` of the CSV file at `path`.

  Every record this package writes ends with a line break, so a file cut
  at any byte (a copy cut short, a machine that stopped mid-write) is whole
  records followed by at most one partial one: the text after the last
  line break. A file cut inside its header has no whole record.

  Raises:
    OSError: If the file cannot be read.
    UnicodeDecodeError: If it is not UTF-8 text.
  """
  with open(path, newline='', encoding='utf-8') as f:
    text = f.read()
  cut = text.rfind('\n') + 1
  return text[:cut], text[cut:]


def _complete_rows(output_dir: str) -> list[dict[str, Any]]:
  """`analysis.read_metrics_if_any`, without a partial last record."""
  path = os.path.join(output_dir, METRICS_FILE)
  if not os.path.exists(path):
    return []
  whole, partial = read_complete_csv(path)
  if not partial:
    return analysis.read_metrics_if_any(output_dir)
  rows = []
  for raw in csv.DictReader(io.StringIO(whole, newline='')):
    row = {k: _parse(v) for k, v in raw.items()}
    if isinstance(row.get('round'), int):
      rows.append(row)
  return rows


class MetricsLog:
  """`metrics.csv` (one row per round, atomic rewrite) plus TensorBoard.

  A partial last record (`read_complete_csv`) is set aside: the file as it
  was is kept as `metrics.csv.partial[N]`, one line says so, and the file
  is rewritten with its whole rows; the round it was recording is
  recomputed from its checkpoint as any round after it.
  """

  def __init__(self, output_dir: str, log: Callable[[str], None] = print):
    self._path = os.path.join(output_dir, METRICS_FILE)
    self._rows: list[dict[str, Any]] = []
    if os.path.exists(self._path):
      whole, partial = read_complete_csv(self._path)
      for row in csv.DictReader(io.StringIO(whole, newline='')):
        self._rows.append({k: _parse(v) for k, v in row.items()})
      if partial:
        kept = _keep_as(self._path, PARTIAL_SUFFIX, move=False)
        self._write_csv()
        log(f'{METRICS_FILE} ended in a partial record ({len(partial)} '
            f'bytes, cut short): set aside; the file as it was is kept as '
            f'{kept}.')
    self._writer = tf.summary.create_file_writer(
        os.path.join(output_dir, TENSORBOARD_DIR))

  @property
  def rows(self) -> list[dict[str, Any]]:
    """A copy of the rows so far, one dict per round, oldest first."""
    return list(self._rows)

  def drop_rounds_after(self, round_num: int) -> int:
    """Drops rows of rounds > `round_num`; returns how many were dropped."""
    kept = [r for r in self._rows if int(r['round']) <= round_num]
    dropped = len(self._rows) - len(kept)
    self._rows = kept
    if dropped:
      self._write_csv()
    return dropped

  def append(self, row: Mapping[str, Any]) -> None:
    """Adds one round's row to `metrics.csv` and its numbers to TensorBoard."""
    self._rows.append(dict(row))
    self._write_csv()
    with self._writer.as_default(step=int(row['round'])):
      for name, value in row.items():
        if name != 'round' and isinstance(value, (int, float)):
          tf.summary.scalar(name, value)
    self._writer.flush()

  def _columns(self) -> list[str]:
    seen = collections.OrderedDict()
    for row in self._rows:
      for name in row:
        seen[name] = None
    leading = [c for c in LEADING_COLUMNS if c in seen]
    return leading + [c for c in seen if c not in LEADING_COLUMNS]

  def _write_csv(self) -> None:
    columns = self._columns()
    with files.replaced_atomically(self._path, newline='') as f:
      writer = csv.DictWriter(f, fieldnames=columns, restval='')
      writer.writeheader()
      for row in self._rows:
        writer.writerow(row)


def _parse(text: str):
  """Reads a CSV cell back: int, float, or '' for a metric not logged."""
  for kind in (int, float):
    try:
      return kind(text)
    except ValueError:
      pass
  return text


def _run_sync(coroutine):
  """Runs a coroutine to completion, also from inside a running event loop."""
  try:
    asyncio.get_running_loop()
  except RuntimeError:
    return asyncio.run(coroutine)
  with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
    return pool.submit(asyncio.run, coroutine).result()


@dataclasses.dataclass
class TrainingResult:
  """What `run_training` returns."""
  state: Any
  rows: list[dict[str, Any]]
  start_round: int
  seconds: float
  # {client_id: state} after the last round, for client-stateful processes.
  client_states: Optional[dict[str, Any]] = None


# TFF's `file_utils.write_saved_model` writes `<path>_temp<4 digits>` and
# renames it; a kill during a save leaves that directory behind.
_TEMP_DIR = re.compile(r'program_state_\d+_temp\d+')
UNREADABLE_SUFFIX = '.unreadable'
_UNREADABLE = re.compile(r'program_state_(\d+)' + re.escape(UNREADABLE_SUFFIX))


def _remove_stale_temp_dirs(checkpoint_dir: str, log) -> None:
  """Removes checkpoint temp directories left by an interrupted save."""
  if not os.path.isdir(checkpoint_dir):
    return
  stale = sorted(e for e in os.listdir(checkpoint_dir) if _TEMP_DIR.fullmatch(e))
  for entry in stale:
    shutil.rmtree(os.path.join(checkpoint_dir, entry), ignore_errors=True)
  if stale and log:
    log(f'Removed {len(stale)} unfinished checkpoint save(s) left by an '
        f'interrupted run: {", ".join(stale)}')


def _load_newest_readable(manager, structure, checkpoint_dir: str, log, *,
                          not_after: Optional[int] = None):
  """(state, version) of the newest checkpoint that loads; (None, 0) if none.

  A checkpoint that cannot be read (a save cut short, a damaged disk) is
  renamed `<name>.unreadable`, never deleted, so that the run can save that
  round again, and the next older one is tried; one line says so.

  Args:
    manager: The run's `NumpyProgramStateManager`.
    structure: The program state's structure, for `manager.load`.
    checkpoint_dir: The manager's directory.
    log: Called with one line per unreadable checkpoint.
    not_after: Only checkpoints of this round or earlier; (None, 0) when
      none of them loads.

  Raises:
    UnreadableCheckpointsError: If checkpoints exist but none can be read,
      or none is left but unreadable ones kept by an earlier start: the
      run's metrics would otherwise be recomputed from round 1 over the
      ones logged, every time it is started until the user acts (not with
      `not_after`).
  """
  versions = _run_sync(manager.get_versions()) or []
  if not_after is not None:
    versions = [v for v in versions if v <= not_after]
  for version in reversed(versions):
    try:
      return _run_sync(manager.load(version, structure)), version
    except Exception as e:  # pylint: disable=broad-except
      name = f'program_state_{version}'
      os.rename(os.path.join(checkpoint_dir, name),
                os.path.join(checkpoint_dir, name + UNREADABLE_SUFFIX))
      reason = str(e).strip().splitlines()[0][:120] if str(e).strip() else ''
      if log:
        log(f'Checkpoint of round {version} is unreadable '
            f'({type(e).__name__}: {reason}); kept as '
            f'{name}{UNREADABLE_SUFFIX}, trying the one before it.')
  unreadable = []
  if not_after is None and os.path.isdir(checkpoint_dir):
    unreadable = sorted(
        (e for e in os.listdir(checkpoint_dir) if _UNREADABLE.fullmatch(e)),
        key=lambda e: int(_UNREADABLE.fullmatch(e).group(1)))
  if unreadable:
    run_dir = os.path.dirname(os.path.normpath(checkpoint_dir))
    raise UnreadableCheckpointsError(
        f'No checkpoint in {checkpoint_dir} can be read (kept as '
        f'{", ".join(unreadable)}), and starting again from round 1 would '
        f'rewrite the {METRICS_FILE} of {run_dir}: move that directory aside '
        '(or use another output directory) to start again. Its metrics are '
        'kept as they are.')
  return None, 0


class UnreadableCheckpointsError(RuntimeError):
  """A run's checkpoints exist but none of them can be read."""


class MetricsGapError(RuntimeError):
  """A run is checkpointed past rounds that its metrics.csv does not log."""


UNLOGGED_SUFFIX = '.unlogged'


def _metrics_gap(output_dir: str, checkpoint_dir: str, manager, structure,
                 newest: int, log):
  """Where a run whose metrics.csv stops before its checkpoint resumes.

  When `metrics.csv` logs every round only up to some round L < `newest`
  (the checkpoint loaded), rounds L+1..`newest` would never be logged. The
  run goes back to the newest readable checkpoint of round L or earlier and
  recomputes from there (module docstring).

  Returns:
    None when nothing is missing, else `(state, version, set_aside)`: the
    checkpoint to resume from, and a no-arg callable to call once the run is
    accepted, which renames the checkpoints after L, keeps a copy of
    `metrics.csv` and logs one line saying so.

  Raises:
    MetricsGapError: If no checkpoint of round L or earlier can be read.
  """
  rows = _complete_rows(output_dir)
  logged = analysis.logged_through(rows)
  if newest <= logged:
    return None
  later = [v for v in (_run_sync(manager.get_versions()) or []) if v > logged]
  saved, version = _load_newest_readable(manager, structure, checkpoint_dir,
                                         log, not_after=logged)
  missing = (f'rounds {logged + 1}-{newest}' if newest > logged + 1 else
             f'round {newest}')
  if logged == 0:
    has = 'logs no round 1'
  elif logged == 1:
    has = 'logs round 1 only'
  else:
    has = f'logs rounds 1-{logged} only'
  if saved is None:
    raise MetricsGapError(
        f'{output_dir} is checkpointed after round {newest}, but its '
        f'{METRICS_FILE} {has}, and no checkpoint of round {logged} or '
        f'earlier can be read to recompute {missing} from: restore '
        f'{METRICS_FILE} (was it replaced by an older copy?), or move the '
        'checkpoints directory aside to start the run again from round 1 '
        '(nothing was changed).')

  def set_aside():
    kept = [_keep_as_unlogged(os.path.join(checkpoint_dir,
                                           f'program_state_{v}'), move=True)
            for v in later]
    metrics_path = os.path.join(output_dir, METRICS_FILE)
    if os.path.exists(metrics_path):
      kept.append(_keep_as_unlogged(metrics_path, move=False))
    log(f'{METRICS_FILE} {has}, but the run is checkpointed after round '
        f'{newest} ({missing} missing from it: was it replaced by an older '
        f'copy?): resuming from the checkpoint of round {version} instead, '
        f'to log them; kept as they were: {", ".join(kept)}.')

  return saved, version, set_aside


def _keep_as_unlogged(path: str, *, move: bool) -> str:
  """Renames (`move`) or copies `path` to a new `<path>.unlogged[N]` name.

  Returns:
    The new name's base name.
  """
  return _keep_as(path, UNLOGGED_SUFFIX, move=move)


def _keep_as(path: str, suffix: str, *, move: bool) -> str:
  """Renames (`move`) or copies `path` to a new `<path><suffix>[N]` name.

  Returns:
    The new name's base name.
  """
  target, k = path + suffix, 1
  while os.path.exists(target):
    k += 1
    target = f'{path}{suffix}{k}'
  if move:
    os.rename(path, target)
  else:
    shutil.copyfile(path, target)
  return os.path.basename(target)


class RoundsBehindCheckpointError(ValueError):
  """`rounds` is below the round a run's checkpoint has reached."""


def format_duration(seconds: float) -> str:
  """`H:MM:SS` (`M:SS` under an hour), whole seconds."""
  minutes, secs = divmod(int(round(seconds)), 60)
  hours, minutes = divmod(minutes, 60)
  return (f'{hours}:{minutes:02d}:{secs:02d}' if hours else
          f'{minutes}:{secs:02d}')


def progress(elapsed: float, done: int, left: int,
             first: Optional[float] = None) -> str:
  """`elapsed 1:02  eta 4:10`: time so far, and the rest at this pace.

  The pace leaves out the invocation's first round when `first` is given
  and a later round has finished: that round also traces and compiles the
  computations (12 s against ~1 s for the rounds after it on `digits`), so
  counting it would put the first minutes' ETA several times too high.

  Args:
    elapsed: Seconds since this invocation's first round began.
    done: Rounds this invocation has finished.
    left: Rounds still to run.
    first: Seconds the invocation's first round took, if known.
  """
  if first is not None and done >= 2:
    eta = (elapsed - first) / (done - 1) * left
  else:
    eta = elapsed / done * left if done else 0.0
  return f'elapsed {format_duration(elapsed)}  eta {format_duration(eta)}'


def _format_row(row: Mapping[str, Any], rounds: int,
                timing: str = '') -> str:
  parts = [f"round {int(row['round']):>{len(str(rounds))}}/{rounds}"]
  for name in ('train_loss', 'train_accuracy', 'eval_loss', 'eval_accuracy'):
    if name in row and row[name] != '':
      parts.append(f'{name} {row[name]:.4f}')
  for name, value in row.items():
    if name.startswith('eval_') and name not in ('eval_loss', 'eval_accuracy',
                                                 'eval_num_examples',
                                                 'eval_num_batches'):
      if isinstance(value, float):
        parts.append(f'{name} {value:.4f}')
  if row.get('update_non_finite'):
    parts.append('REJECTED (non-finite update; model kept)')
  parts.append(f"{row['round_seconds']:.2f}s")
  if timing:
    parts.append(timing)
  return '  '.join(parts)


@dataclasses.dataclass
class _Clients:
  """Who trains, and the states of the clients seen so far (stateful runs)."""
  process: tff.learning.templates.LearningProcess
  ids: list[str]
  stateful: bool
  states: dict[str, Any] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    self.population = frozenset(self.ids)

  def checkpoint(self, server_state, states=None) -> dict[str, Any]:
    """The structure a checkpoint holds: server state, packed client states."""
    structure = {PROCESS_STATE_KEY: server_state}
    if self.stateful:
      structure[CLIENT_STATES_KEY] = client_states_lib.pack(
          self.ids, self.states if states is None else states,
          self.process.initial_client_state())
    return structure

  def next(self, state, sampled: Sequence[str],
           datasets: Sequence[tf.data.Dataset]):
    """Runs the round; keeps the new states of the population's clients."""
    if not self.stateful:
      return self.process.next(state, datasets)
    initial = self.process.initial_client_state()
    output, new_states = self.process.next(
        state, datasets, [self.states.get(cid, initial) for cid in sampled])
    # A new dict: the last finished round's stays as it was.
    self.states = {**self.states, **{
        cid: s for cid, s in zip(sampled, new_states)
        if cid in self.population}}
    return output


@dataclasses.dataclass
class _Start:
  """Where a run goes on from, and what keeps its progress."""
  state: Any
  round_num: int
  manager: Optional[checkpoints.NumpyProgramStateManager] = None
  metrics_log: Optional['MetricsLog'] = None


def _start(clients: _Clients, initial_state, output_dir: Optional[str],
           rounds: int, log, on_start) -> _Start:
  """Reads `output_dir`'s newest usable checkpoint; opens its metrics log.

  The order matters: the checkpoints are read and the run accepted (not
  past `rounds`) before `on_start` and before anything in `output_dir` is
  changed, so that a refused run writes nothing.
  """
  start, set_aside = _Start(initial_state, 0), None
  if output_dir is not None:
    os.makedirs(output_dir, exist_ok=True)
    checkpoint_dir = os.path.join(output_dir, CHECKPOINT_DIR)
    _remove_stale_temp_dirs(checkpoint_dir, log)
    start.manager = checkpoints.NumpyProgramStateManager(
        checkpoint_dir, keep_total=3, keep_first=True)
    structure = clients.checkpoint(initial_state, {})
    saved, version = _load_newest_readable(start.manager, structure,
                                           checkpoint_dir, log)
    if saved is not None:
      gap = _metrics_gap(output_dir, checkpoint_dir, start.manager, structure,
                         version, log)
      if gap is not None:
        saved, version, set_aside = gap
    if saved is not None:
      start.state, start.round_num = saved[PROCESS_STATE_KEY], version
      if clients.stateful:
        clients.states = client_states_lib.unpack(
            clients.ids, saved[CLIENT_STATES_KEY],
            clients.process.initial_client_state())
    if start.round_num > rounds:
      raise RoundsBehindCheckpointError(
          f'{output_dir} is checkpointed at round {start.round_num}, past '
          f'rounds={rounds}: ask for at least {start.round_num} rounds to '
          'continue it, or give another output directory (nothing was '
          'changed).')
  if on_start is not None:
    on_start(start.round_num)
  if set_aside is not None:  # The run is accepted: keep what is unlogged.
    set_aside()
  if output_dir is not None:
    start.metrics_log = MetricsLog(output_dir, log)
    dropped = start.metrics_log.drop_rounds_after(start.round_num)
    if start.round_num:
      log(f'Resuming after round {start.round_num} from '
          f'{os.path.join(output_dir, CHECKPOINT_DIR)}'
          + (f' (recomputing {dropped} rounds logged after that checkpoint)'
             if dropped else ''))
  return start


def _evaluator(evaluate_fn) -> Optional[Callable[[Any, int], dict]]:
  """`(weights, round_num) -> {'eval_<name>': value}` for `evaluate_fn`."""
  if evaluate_fn is None:
    return None
  takes_round = 'round_num' in inspect.signature(evaluate_fn).parameters

  def evaluate(weights, round_num: int) -> dict[str, float]:
    metrics = (evaluate_fn(weights, round_num=round_num) if takes_round
               else evaluate_fn(weights))
    return {f'eval_{name}': value for name, value in metrics.items()
            if isinstance(value, float)}

  return evaluate


@dataclasses.dataclass(frozen=True)
class _Rounds:
  """How each round is drawn and scored (`run_training`'s arguments)."""
  clients_per_round: int
  seed: int
  client_dataset_fn: Callable[[str], tf.data.Dataset]
  round_clients_fn: Optional[Callable[..., Any]]
  evaluate: Optional[Callable[[Any, int], dict]]
  eval_every: int
  rounds: int

  def train(self, clients: _Clients, state, round_num: int):
    """Samples the round's clients and runs it; the process's output."""
    sampled = sample_clients(clients.ids, self.clients_per_round,
                             seed=self.seed, round_num=round_num)
    tf.random.set_seed(self.seed * 1_000_003 + round_num)
    if self.round_clients_fn is None:
      datasets = [self.client_dataset_fn(cid) for cid in sampled]
    else:
      sampled, datasets = map(list, self.round_clients_fn(round_num, sampled))
    return clients.next(state, sampled, datasets)

  def row(self, process, output, round_num: int) -> dict[str, Any]:
    """The round's metrics row; evaluated on the schedule and at the end."""
    row = {'round': round_num, **flatten_metrics(output.metrics)}
    if row.get('update_non_finite'):
      _blank_rejected_training_metrics(row)
    if self.evaluate is not None and (round_num % self.eval_every == 0 or
                                      round_num == self.rounds):
      row.update(self.evaluate(process.get_model_weights(output.state),
                               round_num))
    return row


def run_training(
    process: tff.learning.templates.LearningProcess,
    *,
    client_ids: Sequence[str],
    client_dataset_fn: Callable[[str], tf.data.Dataset],
    clients_per_round: int,
    rounds: int,
    seed: int = 0,
    output_dir: Optional[str] = None,
    evaluate_fn: Optional[Callable[[Any], Mapping[str, Any]]] = None,
    eval_every: int = 1,
    checkpoint_every: int = 10,
    initial_state: Any = None,
    log: Optional[Callable[[str], None]] = print,
    round_clients_fn: Optional[Callable[
        [int, list[str]], tuple[Sequence[str],
                                Sequence[tf.data.Dataset]]]] = None,
    on_start: Optional[Callable[[int], None]] = None,
    stop_at: Optional[analysis.Target] = None,
) -> TrainingResult:
  """Trains `process` for `rounds` rounds, resuming from `output_dir`.

  Args:
    process: The `LearningProcess` to run.
    client_ids: The training population, in a fixed order.
    client_dataset_fn: Client id -> its preprocessed training dataset.
    clients_per_round: Clients sampled each round.
    rounds: Total number of rounds (a resumed run stops at the same round).
    seed: Seeds client sampling and dataset shuffling, per round.
    output_dir: Where metrics and checkpoints go; `None` keeps nothing.
    evaluate_fn: Optional model weights -> metrics, run every `eval_every`
      rounds and after the last; its metrics are logged as `eval_<name>`.
      When it has a `round_num` parameter it is passed the round too.
    eval_every: Evaluation period in rounds.
    checkpoint_every: Checkpoint period in rounds (and after the last).
    initial_state: The state to start from when there is no checkpoint;
      `process.initialize()` when `None`.
    log: Called with one progress line per round and a summary; `None` is
      silent.
    round_clients_fn: Optional `(round_num, sampled ids) -> (ids, datasets)`
      giving the data a round trains on (module docstring); replaces
      `client_dataset_fn` when given.
    on_start: Optional; called with the round the run goes on from (0 for
      a new run, else its checkpoint's) once the checkpoints are read and
      the run is accepted, before `metrics.csv` is touched: nothing it
      writes is written for a refused run.
    stop_at: Optional; stop after the first round whose metric reaches this
      target (module docstring).

  Returns:
    A `TrainingResult` with the final state and all metric rows.

  Raises:
    ValueError: If a count is not positive.
    RoundsBehindCheckpointError: If `output_dir` is checkpointed past
      `rounds`.
    UnreadableCheckpointsError: If `output_dir` has checkpoints and none
      can be read.
    MetricsGapError: If `output_dir` is checkpointed past the rounds its
      `metrics.csv` logs and no earlier checkpoint can be read.
    MissingMetricError: If a round's metrics lack `stop_at`'s metric (an
      evaluated round, for an `eval_` metric); that round is not logged.
  """
  # Over 80 lines with its signature and docstring: the round loop, its
  # stop and its interruption are read in one place; resuming (`_start`)
  # and each round's work (`_Rounds`) are apart.
  for name, value in (('rounds', rounds), ('eval_every', eval_every),
                      ('checkpoint_every', checkpoint_every)):
    checks.check_int(name, value)
  log = log or (lambda _: None)
  clients = _Clients(process, list(client_ids),
                     client_states_lib.is_client_stateful(process))
  sample_clients(clients.ids, clients_per_round, seed=seed, round_num=1)
  if initial_state is None:
    initial_state = process.initialize()
  start = _start(clients, initial_state, output_dir, rounds, log, on_start)
  state, manager = start.state, start.manager
  rows = start.metrics_log.rows if start.metrics_log else []
  schedule = _Rounds(clients_per_round, seed, client_dataset_fn,
                     round_clients_fn, _evaluator(evaluate_fn), eval_every,
                     rounds)
  started = time.perf_counter()
  first_round_seconds = None  # The first round of this invocation (`progress`).
  stopped = None if stop_at is None else stop_at.reached_at(rows)
  if stopped is not None:
    log(f'Stopped before at round {stopped}: {stop_at.describe()} '
        '(stop_at); nothing to run.')
  last_round = rounds if stopped is None else start.round_num
  # The last round logged, with its state, and the last round checkpointed:
  # an interruption checkpoints the former when it is the newer.
  finished = (start.round_num, state, clients.states)
  saved_round = start.round_num
  try:
    for round_num in range(start.round_num + 1, last_round + 1):
      round_start = time.perf_counter()
      output = schedule.train(clients, state, round_num)
      state = output.state
      if round_num == start.round_num + 1:
        # The local worker is up now: it must not outlive this process.
        runtime.watch_workers()
      row = schedule.row(process, output, round_num)
      row['round_seconds'] = time.perf_counter() - round_start
      if stop_at is not None:
        _check_has_metric(row, stop_at)
        if stop_at.reached_at([row]) is not None:
          stopped = round_num
      rows.append(row)
      if start.metrics_log is not None:
        start.metrics_log.append(row)
      finished = (round_num, state, clients.states)
      elapsed = time.perf_counter() - started
      if first_round_seconds is None:
        first_round_seconds = elapsed
      log(_format_row(row, rounds, progress(
          elapsed, round_num - start.round_num, last_round - round_num,
          first_round_seconds)))
      if manager is not None and (round_num % checkpoint_every == 0 or
                                  round_num == rounds or stopped is not None):
        _run_sync(manager.save(clients.checkpoint(state), round_num))
        saved_round = round_num
      if stopped is not None:
        log(f'Stopping after round {round_num} of {rounds}: '
            f'{stop_at.describe()} (stop_at).')
        break
  except KeyboardInterrupt as e:
    # Ctrl-C or SIGTERM (`binaries.Terminated`): the round in progress is
    # abandoned; the last logged one is checkpointed, so that nothing
    # finished is computed again.
    round_num, finished_state, finished_states = finished
    if manager is not None and round_num > saved_round:
      saved_round = _save_unless_saved(
          manager, clients.checkpoint(finished_state, finished_states),
          round_num, saved_round)
    e.checkpointed_round = saved_round if manager is not None else None
    raise
  seconds = time.perf_counter() - started
  done = int(rows[-1]['round']) if rows else start.round_num
  log(summarize(rows, rounds=done, seconds=seconds,
                new_rounds=done - start.round_num, output_dir=output_dir))
  return TrainingResult(state, rows, start.round_num, seconds,
                        clients.states if clients.stateful else None)


def _save_unless_saved(manager, structure, round_num: int,
                       saved_round: int) -> int:
  """Saves round `round_num`; returns the round now checkpointed.

  An interruption during the round's own save may have left it saved (the
  rename done) or not: either way it is there once this returns.
  """
  try:
    _run_sync(manager.save(structure, round_num))
  except tff.program.ProgramStateExistsError:
    pass
  except KeyboardInterrupt:
    return saved_round  # A second signal: the save was abandoned.
  return round_num


class MissingMetricError(ValueError):
  """A round's metrics lack the metric the run stops on (`stop_at`)."""


def _check_has_metric(row: Mapping[str, Any], target: analysis.Target):
  """Raises `MissingMetricError` if `row` should have `target.metric`.

  An `eval_` metric is looked for in evaluated rows only (those with some
  `eval_` column), any other metric in every row.
  """
  evaluated = any(k.startswith('eval_') for k in row)
  if target.metric in row or (target.metric.startswith('eval_') and
                              not evaluated):
    return
  prefix = 'eval_' if target.metric.startswith('eval_') else ''
  names = ', '.join(sorted(k for k in row
                           if k != 'round' and k.startswith(prefix)))
  raise MissingMetricError(
      f'round {row["round"]} logged no {target.metric} (its '
      f'{prefix + " " if prefix else ""}columns: {names}).')


_COUNTS = ('num_examples', 'num_batches', 'num_tokens')


def _blank_rejected_training_metrics(row: dict[str, Any]) -> None:
  """A rejected round's training loss and accuracy become NaN.

  The model kept nothing of that round, and TFF reports the non-finite
  clients' metrics as 0, which a sweep would read as a perfect loss. NaN
  (written `nan` to metrics.csv) makes every reader's window non-finite:
  `analysis.selection_score` scores such a run as diverged. Counts
  (examples, batches, tokens) stay.
  """
  for name in list(row):
    if name.startswith('train_') and not name.endswith(_COUNTS):
      row[name] = math.nan


def summarize(rows: Sequence[Mapping[str, Any]], *, rounds: int,
              seconds: float, new_rounds: int,
              output_dir: Optional[str]) -> str:
  """Returns the one-line summary printed at the end of a run."""
  parts = [f'done: {rounds} rounds ({new_rounds} run now, {seconds:.1f} s)']
  evaluated = [r for r in rows if _is_number(r.get('eval_accuracy'))]
  if evaluated:
    best = max(evaluated, key=lambda r: r['eval_accuracy'])
    parts.append(f"final eval_accuracy {evaluated[-1]['eval_accuracy']:.4f} "
                 f"(best {best['eval_accuracy']:.4f} at round "
                 f"{int(best['round'])})")
  elif rows and _is_number(rows[-1].get('eval_loss')):
    parts.append(f"final eval_loss {rows[-1]['eval_loss']:.4f}")
  if rows and _is_number(rows[-1].get('train_loss')):
    parts.append(f"final train_loss {rows[-1]['train_loss']:.4f}")
  rejected = sum(1 for r in rows if r.get('update_non_finite'))
  if rejected:
    parts.append(f'{rejected} rounds rejected (non-finite update; model '
                 'kept, their training metrics logged as nan)')
  if output_dir:
    parts.append(f'results in {output_dir}')
  return '; '.join(parts)


def _is_number(value) -> bool:
  return isinstance(value, (int, float)) and math.isfinite(value)
