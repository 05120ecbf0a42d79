"""Reading runs back: the paper's selection rule and the report's numbers.

Shared by `binaries.sweep` and `binaries.report`; pure Python over the
`metrics.csv` files that `tff_opt.program.training_loop` writes (one row per round,
an empty cell where a metric was not measured that round).

Selection rule (Reddi et al., Section 4 and Appendix D.1): among the points
of a grid, pick the one that minimizes the average training loss over the
last 100 communication rounds,

    score(point) = mean_{r in (R - 100, R]} train_loss_r,   R = last round.

Choices the paper leaves open, made here (each tested):
- Window in rounds, not rows: the rows whose round is in (R - W, R]. A run
  shorter than W rounds averages all its rounds. Metrics measured only on
  some rounds (evaluation every few rounds) average the rows of the window
  that have a value; none in the window -> the last value measured.
- A non-finite training loss in the window (a diverged run) makes the score
  +inf: such a point can only be selected when every point diverged.
- Ties (equal scores) go to the most conservative point: the smaller client
  learning rate, then the smaller server learning rate, then the larger
  adaptivity tau (a larger tau takes smaller adaptive steps); a point
  without tau (SGD servers) counts as the largest tau.
- Only finished points (metrics for every round of the sweep) compete.
- "Rounds to target": the first round whose value reaches the target,
  `>= target` for metrics where higher is better (accuracy), `<= target`
  for losses and errors (names containing `loss`, `error`, `mse`,
  `perplexity`). Both sides are compared as float32, the precision TF
  computes the metrics in: 900 of 1,000 test images right is logged as
  0.8999999761581421 (float32's 0.9), and it reaches a target of 90 %.

A run may stop at a target (`Target`, `binaries.train --stop_at`): once its
metric reached the target, the rounds to it are known and later rounds
cannot change them, so a run whose only use is that number (a tuning
candidate ranked by rounds to an accuracy) stops there.
"""

import csv
import dataclasses
import json
import math
import os
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Optional

METRICS_FILE = 'metrics.csv'
# Every setting of a run, as `binaries.train` resolved them.
HPARAMS_FILE = 'hparams.json'
DEFAULT_WINDOW = 100
_LOWER_IS_BETTER_WORDS = ('loss', 'error', 'mse', 'perplexity')


def read_metrics(run_dir: str) -> list[dict[str, Any]]:
  """Reads `run_dir/metrics.csv`.

  Args:
    run_dir: A run's output directory.

  Returns:
    One dict per row: `round` as an int, every other cell as a float, or
    `None` where the cell is empty or not a number.

  Raises:
    FileNotFoundError: If the run has no `metrics.csv`.
    UnicodeDecodeError: If it is not UTF-8 text.
  """
  path = os.path.join(run_dir, METRICS_FILE)
  rows = []
  with open(path, newline='', encoding='utf-8') as f:
    for raw in csv.DictReader(f):
      row = {}
      for name, text in raw.items():
        row[name] = _to_float(text)
      if row.get('round') is None:
        continue
      row['round'] = int(row['round'])
      rows.append(row)
  return rows


def read_metrics_if_any(run_dir: str) -> list[dict[str, Any]]:
  """`read_metrics(run_dir)`, or `[]` for a run with no `metrics.csv` yet.

  A run that has not logged a round (not started, or stopped before its
  first) has no file; callers that count its rounds count none.

  Raises:
    UnicodeDecodeError: If the file is not UTF-8 text.
  """
  try:
    return read_metrics(run_dir)
  except FileNotFoundError:
    return []


def _to_float(text) -> Optional[float]:
  if text is None or text == '':
    return None
  try:
    return float(text)
  except ValueError:
    return None


def lower_is_better(metric: str) -> bool:
  """Whether a smaller value of `metric` is better (losses, errors)."""
  name = metric.lower()
  return any(word in name for word in _LOWER_IS_BETTER_WORDS)


def last_round(rows: Sequence[Mapping[str, Any]]) -> int:
  """The last round logged (0 when there is none)."""
  return max((int(r['round']) for r in rows), default=0)


def window_mean(rows: Sequence[Mapping[str, Any]], metric: str, *,
                window: int = DEFAULT_WINDOW) -> Optional[float]:
  """Mean of `metric` over the last `window` rounds.

  Args:
    rows: Rows of `read_metrics`.
    metric: A column name.
    window: Length of the window in rounds, positive.

  Returns:
    The mean over the rows with round in (R - window, R] that have a value
    (R = the last round); the last value measured when none of them has one;
    `inf`/`nan` if a value in the window is not finite (propagated as is);
    `None` when the metric was never measured.

  Raises:
    ValueError: If `window` is not positive.
  """
  if window < 1:
    raise ValueError(f'window must be a positive integer, got {window}.')
  measured = [r for r in rows if r.get(metric) is not None]
  if not measured:
    return None
  end = last_round(rows)
  inside = [r[metric] for r in measured if int(r['round']) > end - window]
  if not inside:
    return measured[-1][metric]
  return math.fsum(inside) / len(inside)


def final_value(rows: Sequence[Mapping[str, Any]],
                metric: str) -> Optional[float]:
  """The last measured value of `metric` (`None` if never measured)."""
  measured = [r for r in rows if r.get(metric) is not None]
  return measured[-1][metric] if measured else None


def rounds_to_target(rows: Sequence[Mapping[str, Any]], metric: str,
                     target: float) -> Optional[int]:
  """The first round at which `metric` reaches `target`.

  Args:
    rows: Rows of `read_metrics`, in round order.
    metric: A column name; `lower_is_better(metric)` decides the direction.
    target: The value to reach.

  Returns:
    The round number, or `None` if the target was never reached.
  """
  lower = lower_is_better(metric)
  target = _as_float32(target)
  for row in sorted(rows, key=lambda r: int(r['round'])):
    value = row.get(metric)
    if value is None or not math.isfinite(value):
      continue
    value = _as_float32(value)
    if (value <= target) if lower else (value >= target):
      return int(row['round'])
  return None


def _as_float32(x: float) -> float:
  """`x` rounded to the nearest float32 (beyond float32's range: as is)."""
  try:
    return struct.unpack('<f', struct.pack('<f', x))[0]
  except OverflowError:
    return x


@dataclasses.dataclass(frozen=True)
class Target:
  """A metric's value to reach: where a run may stop (`--stop_at`).

  Attributes:
    metric: A `metrics.csv` column, e.g. `eval_accuracy`.
    value: The value to reach, in the metric's unit (`rounds_to_target`'s
      direction: `>=` unless lower is better).
  """
  metric: str
  value: float

  @classmethod
  def parse(cls, text: str) -> 'Target':
    """Reads `METRIC:VALUE` (e.g. `eval_accuracy:0.9`).

    Raises:
      ValueError: If `text` is not a column name, a colon and a finite
        number.
    """
    metric, sep, value = text.rpartition(':')
    try:
      number = float(value)
    except ValueError:
      number = math.nan
    if not sep or not metric or ':' in metric or not math.isfinite(number):
      raise ValueError(f'expected METRIC:VALUE, e.g. eval_accuracy:0.9, got '
                       f'{text!r}.')
    return cls(metric, number)

  def __str__(self) -> str:
    return f'{self.metric}:{self.value!r}'

  def reached_at(self, rows: Sequence[Mapping[str, Any]]) -> Optional[int]:
    """The first round of `rows` that reached it (`rounds_to_target`)."""
    return rounds_to_target(rows, self.metric, self.value)

  def describe(self) -> str:
    """The target as a person reads it, e.g. `eval_accuracy >= 0.9`."""
    sign = '<=' if lower_is_better(self.metric) else '>='
    return f'{self.metric} {sign} {self.value:g}'


def read_stop_at(run_dir: str) -> Optional[Target]:
  """The target a run stops at (`hparams.json`'s `stop_at`), or None.

  None too when the run has no readable `hparams.json`: its rows decide.
  """
  try:
    with open(os.path.join(run_dir, HPARAMS_FILE), encoding='utf-8') as f:
      text = json.load(f).get('stop_at')
  except (OSError, ValueError, AttributeError):
    return None
  return Target.parse(text) if text else None


def unlogged_rounds(run_dir: str, rounds: int, *,
                    rows: Optional[Sequence[Mapping[str, Any]]] = None
                    ) -> list[int]:
  """The rounds the run in `run_dir` will run but has not logged, ascending.

  Every round 1..`rounds` (all of them when there is no `metrics.csv`), or,
  for a run with a `stop_at` target, every round up to the first that
  reached it (`read_stop_at`). `rows`: the run's `read_metrics_if_any`,
  where the caller has read them already.
  """
  if rows is None:
    rows = read_metrics_if_any(run_dir)
  return _unlogged(rows, read_stop_at(run_dir), rounds)


def _unlogged(rows: Sequence[Mapping[str, Any]], stop_at: Optional[Target],
              rounds: int) -> list[int]:
  """`unlogged_rounds` of a run's read `rows` and `stop_at` target."""
  reached = None if stop_at is None else stop_at.reached_at(rows)
  last = rounds if reached is None else min(reached, rounds)
  logged = {r['round'] for r in rows}
  return [r for r in range(1, last + 1) if r not in logged]


def is_finished(run_dir: str, rounds: int, *,
                rows: Optional[Sequence[Mapping[str, Any]]] = None) -> bool:
  """Whether the run in `run_dir` logged every round it will run.

  See `unlogged_rounds` (and its `rows`).
  """
  return not unlogged_rounds(run_dir, rounds, rows=rows)


# How many of a run's last logged rounds `progress` times its rest by.
RECENT_ROUNDS = 50


@dataclasses.dataclass(frozen=True)
class Progress:
  """Where a run stands (`progress`).

  Attributes:
    logged: Rounds it has logged (of 1..rounds).
    left: Rounds it will still run (`unlogged_rounds`); for a run with an
      unreached `stop_at` target, at most that many (`stops_early`).
    stops_early: Whether it may stop before `left` more rounds.
    seconds_left: `left` times the mean `round_seconds` of its last
      `RECENT_ROUNDS` logged rounds (their evaluations included, and the
      first round's tracing after each start; the checkpoints and the
      process's own start not); 0 when nothing is left, None when no round
      was timed.
  """
  logged: int
  left: int
  stops_early: bool
  seconds_left: Optional[float]


def progress(run_dir: str, rounds: int, *,
             recent: int = RECENT_ROUNDS) -> Progress:
  """Where the run in `run_dir`, of `rounds` rounds, stands (`Progress`)."""
  all_rows = read_metrics_if_any(run_dir)
  stop_at = read_stop_at(run_dir)
  left = len(_unlogged(all_rows, stop_at, rounds))
  rows = sorted((r for r in all_rows if 1 <= r['round'] <= rounds),
                key=lambda r: r['round'])
  times = [r['round_seconds'] for r in rows[-recent:]
           if r.get('round_seconds') is not None
           and math.isfinite(r['round_seconds'])]
  if not left:
    seconds = 0.0
  else:
    seconds = left * sum(times) / len(times) if times else None
  return Progress(logged=len({r['round'] for r in rows}), left=left,
                  stops_early=bool(left) and stop_at is not None,
                  seconds_left=seconds)


def logged_through(rows: Sequence[Mapping[str, Any]]) -> int:
  """The last round r such that `rows` log every round 1..r (0: no round 1)."""
  logged = {int(r['round']) for r in rows}
  last = 0
  while last + 1 in logged:
    last += 1
  return last


def describe_rounds(rounds: Sequence[int]) -> str:
  """Ascending rounds as ranges: [3, 4, 5, 9] -> '3-5, 9'."""
  spans = []
  for r in rounds:
    if spans and r == spans[-1][1] + 1:
      spans[-1][1] = r
    else:
      spans.append([r, r])
  return ', '.join(f'{a}' if a == b else f'{a}-{b}' for a, b in spans)


def selection_score(rows: Sequence[Mapping[str, Any]], *,
                    window: int = DEFAULT_WINDOW,
                    metric: str = 'train_loss') -> float:
  """The paper's selection score: mean training loss of the last rounds.

  Returns:
    `window_mean` of `metric`, with `+inf` for a run that never logged it,
    whose window holds a non-finite value, or whose window has a rejected
    (non-finite, `update_non_finite`) round: a diverged run.
  """
  if rows:
    end = last_round(rows)
    if any(r.get('update_non_finite') for r in rows
           if int(r['round']) > end - window):
      return math.inf
  value = window_mean(rows, metric, window=window)
  if value is None or not math.isfinite(value):
    return math.inf
  return value


@dataclasses.dataclass(frozen=True)
class Candidate:
  """One grid point competing in `select_best`.

  Attributes:
    client_lr: Client learning rate.
    server_lr: Server learning rate.
    server_tau: Adaptivity tau, or `None` for servers without one.
    score: `selection_score` of its run (lower is better).
  """
  client_lr: float
  server_lr: float
  server_tau: Optional[float]
  score: float


def tie_break_key(candidate: Candidate) -> tuple[float, float, float, float]:
  """Sort key: score, then client lr, server lr up, then tau down."""
  tau = math.inf if candidate.server_tau is None else candidate.server_tau
  return (candidate.score, candidate.client_lr, candidate.server_lr, -tau)


def select_best(candidates: Sequence[Candidate]) -> Candidate:
  """Returns the candidate the paper's rule selects.

  The lowest score wins; ties go to the smaller client learning rate, then
  the smaller server learning rate, then the larger tau (module docstring).

  Raises:
    ValueError: If `candidates` is empty.
  """
  if not candidates:
    raise ValueError('candidates must not be empty: no finished grid point '
                     'to select from.')
  return min(candidates, key=tie_break_key)
