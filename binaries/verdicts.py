"""What a claim is and how its verdict is reached: checks, tunings, `Claim`.

The verdict machinery of `binaries.claims`. Each paper's claim, as data, is
in its module of `binaries/papers/` (`fedopt.py`: Reddi et al., `fedfor.py`,
`fedcurv.py`, `fedadc.py`, `fedptr.py`); `binaries.claims` gathers them
(`CLAIMS`), runs them, writes the reports, and re-exports the names below.

A `Claim` is one paper's central claim: its grid (methods x settings, as
`binaries.tables.Method` and `Setting`), its checks (`Better`,
`GainLarger`, `Within`, `Fastest`) and its tunings (`Tuning`: a
hyper-parameter picked on `TUNING_SEED` before the method's runs). A
check's verdict comes from the per-seed values of its runs, paired by seed
and compared against the check's `resolution`; `evaluate` gives the claim's
verdict from its checks'. The rules in words are in `binaries/claims.py`'s
docstring (the binary's `--help`), under "Verdicts".
"""

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Optional

from binaries import tables
from tff_opt.program import analysis

Measure = tables.Measure
Method = tables.Method
Setting = tables.Setting

MIN_SEEDS = 2
VERDICTS = ('reproduced', 'not reproduced', 'inconclusive', 'pending')


# --- Checks ------------------------------------------------------------------

# (method label, setting label, measure label) -> {seed: value or None}.
# A seed is present once its run finished; `None` there is a finished run
# without the value (a target never reached, for `rounds_to`: censored).
Values = Mapping[tuple[str, str, str], Mapping[int, Optional[float]]]
# setting label -> predictions scored by one evaluation (test examples, or
# tokens for a language model), read from the runs
# (`binaries.claims.eval_sizes_of`).
EvalSizes = Mapping[str, int]

# What one seed says about a check (`_outcome`).
FOR, AGAINST, TIE, CENSORED, MISSING = (
    'for', 'against', 'tie', 'censored', 'missing')


def _better_sign(measure: Measure) -> float:
  """+1 where a larger value is better, -1 for rounds and losses."""
  if measure.kind == 'rounds_to' or analysis.lower_is_better(measure.metric):
    return -1.0
  return 1.0


@dataclasses.dataclass(frozen=True)
class Resolution:
  """The smallest difference a check can tell from noise, and why.

  Attributes:
    value: A per-seed difference (in the measure's unit) whose size is
      below this is a tie, whatever its sign.
    text: Where the value comes from, for the report.
  """
  value: float
  text: str


def resolution(claim: 'Claim', setting_label: str, measure: Measure,
               level: Optional[float] = None,
               eval_sizes: Optional[EvalSizes] = None) -> Resolution:
  """What a difference on `measure` must exceed to count.

  - `rounds_to`: the evaluation grid (`--eval_every`): two runs that reach
    the target at the same evaluated round are tied, however many rounds
    apart they really were.
  - an accuracy in % (`metric` ends in 'accuracy', `scale` 100): the
    standard error of one evaluation, 100 sqrt(p (1 - p) / n), p the
    accuracy level compared (`level`, in %) and n the predictions one
    evaluation scores (`eval_sizes`; tokens for a language model, whose
    neighbouring characters are not independent, so there this is a floor).
    The papers evaluate each method on one fixed test set, as we do; a
    difference below one evaluation's standard error is noise.
  - anything else: 0 (no resolution stated; every nonzero difference
    counts).
  """
  setting = claim.setting(setting_label)
  if measure.kind == 'rounds_to':
    grid = tables.flag_value((*claim.flags, *setting.flags), 'eval_every')
    grid = int(grid) if grid else 1
    return Resolution(float(grid), f'the {grid}-round evaluation grid')
  size = (eval_sizes or {}).get(setting_label)
  if (measure.metric.endswith('accuracy') and measure.scale == 100.0 and
      size and level is not None and math.isfinite(level)):
    p = min(max(level / 100.0, 0.0), 1.0)
    se = 100.0 * math.sqrt(p * (1.0 - p) / size)
    return Resolution(se, f'one evaluation\'s standard error {se:.2f} '
                      f'points ({size:,} predictions at {level:.1f}%)')
  return Resolution(0.0, 'no resolution stated')


def _level(*value_maps: Mapping[int, Optional[float]]) -> Optional[float]:
  """The mean of the finite values of `value_maps` (the level compared)."""
  got = [v for m in value_maps for v in m.values()
         if v is not None and math.isfinite(v)]
  return statistics.fmean(got) if got else None


def _outcome(d: Optional[float], res: Resolution) -> str:
  if d is None or math.isnan(d):
    return MISSING
  if abs(d) < res.value or d == 0:
    return TIE
  return FOR if d > 0 else AGAINST


def _compare(va: Optional[float], vb: Optional[float], measure: Measure,
             res: Resolution) -> tuple[str, Optional[float]]:
  """One seed: (outcome, difference in the claimed direction or None).

  `va` is the value of the method the claim favours. A `rounds_to` target
  not reached is censored: against a run that reached it, the direction is
  certain (a difference of at least the remaining rounds: it counts
  whatever the grid); two censored runs tell nothing. Any other missing or
  NaN value leaves the seed without an outcome (`MISSING`).
  """
  if measure.kind == 'rounds_to':
    if va is None and vb is None:
      return CENSORED, None
    if va is None:
      return AGAINST, None
    if vb is None:
      return FOR, None
  if va is None or vb is None or math.isnan(va) or math.isnan(vb):
    return MISSING, None
  d = _better_sign(measure) * (va - vb)
  return _outcome(d, res), d


def _verdict_of(outcomes: Mapping[int, str], res: Resolution,
                what_censored: str) -> tuple[str, str]:
  """A check's verdict from its seeds' outcomes, with the reason.

  - pending: fewer than `MIN_SEEDS` seeds have finished both runs;
  - inconclusive: a finished run lacks its value (named), no seed
    separates the methods (all censored, or tied within `res`), or the
    seeds disagree (a tie included: a claim must hold on every seed);
  - reproduced: every seed in the claimed direction, beyond `res`;
  - not reproduced: every seed against it, beyond `res`.
  """
  if len(outcomes) < MIN_SEEDS:
    return 'pending', f'{len(outcomes)} seed(s) finished'
  missing = [s for s, o in sorted(outcomes.items()) if o == MISSING]
  if missing:
    return 'inconclusive', ('no value (missing or NaN) for seed(s) '
                            f'{", ".join(map(str, missing))}')
  kinds = set(outcomes.values())
  if kinds == {FOR}:
    return 'reproduced', f'every seed beyond {res.text}'
  if kinds == {AGAINST}:
    return 'not reproduced', f'every seed against it, beyond {res.text}'
  if kinds == {CENSORED}:
    return 'inconclusive', what_censored
  if kinds <= {TIE, CENSORED}:
    return 'inconclusive', f'tied within {res.text} on every seed'
  counts = ', '.join(f'{sum(o == k for o in outcomes.values())} {k}'
                     for k in (FOR, AGAINST, TIE, CENSORED) if k in kinds)
  return 'inconclusive', f'the seeds disagree ({counts})'


def paired_verdict(diffs: Sequence[float], res: float = 0.0) -> str:
  """The verdict of per-seed differences in the claimed direction."""
  r = Resolution(res, f'{res:g}')
  return _verdict_of({s: _outcome(d, r) for s, d in enumerate(diffs)}, r,
                     '')[0]


def _fmt(values: Sequence[float], unit: str = '') -> str:
  values = [v for v in values if v is not None]
  if not values:
    return 'n/a'
  mean = statistics.fmean(values)
  text = f'{mean:+.2f}' if unit == 'diff' else f'{mean:.2f}'
  if len(values) > 1:
    text += f' ± {statistics.stdev(values):.2f}'
  return text


def _censored_text(measure: Measure, setting: Setting) -> str:
  return (f'no run reached {measure.label.replace("rounds to ", "")} in '
          f'{setting.rounds} rounds')


@dataclasses.dataclass(frozen=True)
class Better:
  """`method` beats `other` in `setting` on `measure`.

  Attributes:
    method: The method the paper says is better.
    other: The method it beats.
    setting: The setting's label.
    measure: The measure's label (within the setting).
  """
  method: str
  other: str
  setting: str
  measure: str

  def describe(self) -> str:
    return (f'{self.method} better than {self.other} ({self.setting}, '
            f'{self.measure})')

  def evaluate(self, claim: 'Claim', values: Values,
               eval_sizes: Optional[EvalSizes] = None) -> tuple[str, str]:
    setting, measure = claim.setting(self.setting), claim.measure(
        self.setting, self.measure)
    a = values.get((self.method, self.setting, self.measure), {})
    b = values.get((self.other, self.setting, self.measure), {})
    res = resolution(claim, self.setting, measure, _level(a, b), eval_sizes)
    outcomes, diffs = {}, []
    for seed in sorted(set(a) & set(b)):
      outcomes[seed], d = _compare(a[seed], b[seed], measure, res)
      diffs.append(d)
    verdict, why = _verdict_of(outcomes, res,
                               _censored_text(measure, setting))
    if verdict == 'pending':
      why += _so_far({self.method: a, self.other: b}, measure)
    return verdict, (
        f'difference in the claimed direction {_fmt(diffs, "diff")} over '
        f'{len(outcomes)} seed(s); {why}')


@dataclasses.dataclass(frozen=True)
class GainLarger:
  """`method`'s gain over `other` is larger in `larger` than in `smaller`.

  The gain is the difference in the better direction of the measure
  (labelled the same in both settings). A seed supports the claim only if
  the gain at `larger` is a gain (> 0) and exceeds the gain at `smaller`:
  d_s = min(gain_larger - gain_smaller, gain_larger). A loss that shrinks
  with the setting is not the claimed growing gain. Values must be
  measured (a censored `rounds_to` gives no gain: the seed has no value).
  """
  method: str
  other: str
  larger: str
  smaller: str
  measure: str

  def describe(self) -> str:
    return (f'gain of {self.method} over {self.other} larger at '
            f'{self.larger} than at {self.smaller} ({self.measure})')

  def evaluate(self, claim: 'Claim', values: Values,
               eval_sizes: Optional[EvalSizes] = None) -> tuple[str, str]:
    gains, finished = {}, {}
    for label in (self.larger, self.smaller):
      measure = claim.measure(label, self.measure)
      sign = _better_sign(measure)
      a = values.get((self.method, label, self.measure), {})
      b = values.get((self.other, label, self.measure), {})
      gains[label], finished[label] = {}, set(a) & set(b)
      for seed in finished[label]:
        va, vb = a[seed], b[seed]
        ok = (va is not None and vb is not None and not math.isnan(va) and
              not math.isnan(vb))
        gains[label][seed] = sign * (va - vb) if ok else None
    measure = claim.measure(self.larger, self.measure)
    level = _level(*(values.get((m, s, self.measure), {}) for m in
                     (self.method, self.other)
                     for s in (self.larger, self.smaller)))
    res = resolution(claim, self.larger, measure, level, eval_sizes)
    outcomes, diffs = {}, []
    for s in sorted(finished[self.larger] & finished[self.smaller]):
      gl, gs = gains[self.larger][s], gains[self.smaller][s]
      d = None if gl is None or gs is None else min(gl - gs, gl)
      outcomes[s] = _outcome(d, res)
      diffs.append(d)
    verdict, why = _verdict_of(outcomes, res, '')
    return verdict, (
        f'gain at {self.larger} '
        f'{_fmt(list(gains[self.larger].values()), "diff")}, at '
        f'{self.smaller} {_fmt(list(gains[self.smaller].values()), "diff")}'
        f'; {why}')


@dataclasses.dataclass(frozen=True)
class Within:
  """The methods' means on `measure` lie within `spread` of each other.

  The spread of the means over seeds is compared with `spread` widened and
  narrowed by the measure's resolution (`resolution`, at the methods' mean
  level): at most `spread - r` is reproduced, more than `spread + r` is
  not, in between is inconclusive (with r = 0: at most `spread`).
  """
  methods: tuple[str, ...]
  setting: str
  measure: str
  spread: float

  def describe(self) -> str:
    return (f'{", ".join(self.methods)} within {self.spread:g} of each '
            f'other ({self.setting}, {self.measure})')

  def evaluate(self, claim: 'Claim', values: Values,
               eval_sizes: Optional[EvalSizes] = None) -> tuple[str, str]:
    means, runs = {}, {}
    for m in self.methods:
      runs[m] = values.get((m, self.setting, self.measure), {})
    short = [m for m in self.methods if len(runs[m]) < MIN_SEEDS]
    if short:
      m = short[0]
      return 'pending', f'{m}: {len(runs[m])} seed(s) finished' + (
          _so_far(runs))
    for m in self.methods:
      bad = [s for s, v in sorted(runs[m].items())
             if v is None or math.isnan(v)]
      if bad:
        return 'inconclusive', (f'{m}: no value (missing or NaN) for '
                                f'seed(s) {", ".join(map(str, bad))}')
      means[m] = statistics.fmean(runs[m].values())
    measure = claim.measure(self.setting, self.measure)
    res = resolution(claim, self.setting, measure,
                     statistics.fmean(means.values()), eval_sizes)
    spread = max(means.values()) - min(means.values())
    numbers = f'spread of the means {spread:.2f} (' + ', '.join(
        f'{m} {v:.2f}' for m, v in means.items()) + ')'
    if res.value == 0.0:
      verdict = 'reproduced' if spread <= self.spread else 'not reproduced'
    elif spread <= self.spread - res.value:
      verdict = 'reproduced'
    elif spread > self.spread + res.value:
      verdict = 'not reproduced'
    else:
      verdict = 'inconclusive'
      numbers += f'; within {res.text} of the limit {self.spread:g}'
    return verdict, numbers


def _so_far(runs: Mapping[str, Mapping[int, Optional[float]]],
            measure: Optional[Measure] = None) -> str:
  """'; so far: A 57.34 (1 seed), ...' for the methods with a value.

  A `rounds_to` measure's values are whole rounds ('A 40 (1 seed)'), and a
  method whose finished runs all missed the target says so ('A not
  reached (1 seed)').
  """
  rounds = measure is not None and measure.kind == 'rounds_to'
  have = []
  for m, by_seed in runs.items():
    got = [v for v in by_seed.values() if v is not None and not math.isnan(v)]
    seeds = len(got) or (len(by_seed) if rounds else 0)
    if not seeds:
      continue
    if not got:
      text = 'not reached'
    elif rounds:
      text = f'{statistics.fmean(got):g}'
    else:
      text = f'{statistics.fmean(got):.2f}'
    have.append(f'{m} {text} ({seeds} seed{"s" if seeds > 1 else ""})')
  return '; so far: ' + ', '.join(have) if have else ''


@dataclasses.dataclass(frozen=True)
class Fastest:
  """`method` reaches the target first: fewer rounds than each of `others`.

  Per seed, the difference is the fewest rounds among `others` minus
  `method`'s rounds; a target not reached is censored (`_compare`).
  """
  method: str
  others: tuple[str, ...]
  setting: str
  measure: str

  def describe(self) -> str:
    return (f'{self.method} reaches {self.measure} in fewer rounds than '
            f'{", ".join(self.others)} ({self.setting})')

  def evaluate(self, claim: 'Claim', values: Values,
               eval_sizes: Optional[EvalSizes] = None) -> tuple[str, str]:
    setting = claim.setting(self.setting)
    measure = claim.measure(self.setting, self.measure)
    if measure.kind != 'rounds_to':
      raise ValueError(f'{self.describe()}: needs a rounds_to measure.')
    runs = {m: values.get((m, self.setting, self.measure), {})
            for m in (self.method, *self.others)}
    res = resolution(claim, self.setting, measure, None, eval_sizes)
    seeds = sorted(set.intersection(*(set(v) for v in runs.values())))
    outcomes, diffs = {}, []
    for s in seeds:
      reached = [runs[m][s] for m in self.others if runs[m][s] is not None]
      best_other = min(reached) if reached else None
      outcomes[s], d = _compare(runs[self.method][s], best_other, measure,
                                res)
      diffs.append(d)
    verdict, why = _verdict_of(outcomes, res,
                               _censored_text(measure, setting))
    if verdict == 'pending':
      why += _so_far(runs, measure)
    return verdict, (
        f'rounds saved against the fastest other {_fmt(diffs, "diff")}; '
        f'{why}')


Check = Better | GainLarger | Within | Fastest


# --- Tuning ------------------------------------------------------------------

# The seed of every tuning run: no check reads it, so the value picked is
# not fitted to the seeds that test the claim (they share the test set,
# not the partition, initial weights or sampled clients).
TUNING_SEED = 100


@dataclasses.dataclass(frozen=True)
class Tuning:
  """How one method's hyper-parameter is picked, fixed before any run.

  Each candidate (the method with `--flag=value`, for every value) runs in
  `setting` on `TUNING_SEED`; the value whose run is best on `measure`
  there is the method's in every run a check reads. Ties go to the first
  of `values`; a candidate without the value (a target not reached, NaN)
  ranks last. Until every candidate finished, the method's runs wait.

  Attributes:
    method: The label of the tuned method (one of the claim's methods).
    flag: The `binaries.train` flag tuned, without dashes.
    values: The candidates, as the flag's text.
    setting: The setting's label the candidates run in.
    measure: The measure's label (in `setting`) that picks.
  """
  method: str
  flag: str
  values: tuple[str, ...]
  setting: str
  measure: str

  def candidate(self, value: str) -> str:
    """The label of the candidate run with `value`."""
    return f'{self.method} {self.flag}={value}'

  def describe(self) -> str:
    return (f'{self.method}: --{self.flag} over {", ".join(self.values)}, '
            f'the best {self.measure} in {self.setting} on seed '
            f'{TUNING_SEED}')


def pick(tuning: Tuning, claim: 'Claim', values: Values) -> Optional[str]:
  """The value `tuning` picks from the finished candidates, or None."""
  measure = claim.measure(tuning.setting, tuning.measure)
  sign = _better_sign(measure)
  scores = []
  for value in tuning.values:
    runs = values.get((tuning.candidate(value), tuning.setting,
                       tuning.measure), {})
    if TUNING_SEED not in runs:
      return None
    got = runs[TUNING_SEED]
    ok = got is not None and not math.isnan(got)
    scores.append(sign * got if ok else -math.inf)
  best = max(scores)
  return tuning.values[scores.index(best)]


# --- Claims ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Claim:
  """One paper's central claim and the runs that test it.

  Attributes:
    name: Short id (`--claims`), the paper's key in `tables.PAPERS`.
    statement: The claim in words, with where the paper makes it.
    setting_text: The setting that tests it here, in words (what is reduced
      from the paper's and why).
    methods: The grid's methods.
    settings: The grid's settings.
    flags: `binaries.train` flags shared by every run.
    checks: What must hold for the claim to be reproduced.
    paper_numbers: The paper's figures the claim rests on, in words.
    tunings: The methods whose hyper-parameter is picked first (`Tuning`).
    seeds: The seeds registered for its runs (0..seeds-1), fixed with the
      checks: `binaries.claims` runs these unless `--seeds` says otherwise,
      and its reports count the claim's runs against them, whichever
      process writes them. At least `MIN_SEEDS`, or no check could leave
      'pending'.

  Raises:
    ValueError: If `seeds` is below `MIN_SEEDS`.
  """
  name: str
  statement: str
  setting_text: str
  methods: tuple[Method, ...]
  settings: tuple[Setting, ...]
  flags: tuple[str, ...]
  checks: tuple[Check, ...]
  paper_numbers: str = ''
  tunings: tuple[Tuning, ...] = ()
  seeds: int = 3

  def __post_init__(self):
    if self.seeds < MIN_SEEDS:
      raise ValueError(f'claim {self.name}: seeds={self.seeds}, but a '
                       f'verdict needs at least {MIN_SEEDS} seeds.')

  def setting(self, label: str) -> Setting:
    for s in self.settings:
      if s.label == label:
        return s
    raise ValueError(f'claim {self.name}: no setting {label!r}.')

  def measure(self, setting: str, label: str) -> Measure:
    for m in self.setting(setting).measures:
      if m.label == label:
        return m
    raise ValueError(f'claim {self.name}: setting {setting!r} has no '
                     f'measure {label!r}.')

  def method(self, label: str) -> Method:
    for m in self.methods:
      if m.label == label:
        return m
    raise ValueError(f'claim {self.name}: no method {label!r}.')

  def tuning(self, label: str) -> Optional[Tuning]:
    """The tuning of method `label`, or None."""
    found = [t for t in self.tunings if t.method == label]
    return found[0] if found else None

  def candidates(self, tuning: Tuning) -> tuple[Method, ...]:
    """The runs that tune `tuning`'s method, as methods of one setting."""
    base = self.method(tuning.method)
    return tuple(dataclasses.replace(
        base, label=tuning.candidate(v),
        flags=(*base.flags, f'--{tuning.flag}={v}'),
        settings=(tuning.setting,)) for v in tuning.values)

  def table(self, methods: Optional[Sequence[Method]] = None
            ) -> tables.Table:
    """The grid as a `tables.Table` (one scale, run as 'small').

    Args:
      methods: The rows (default: the claim's methods).
    """
    scale = tables.Scale(settings=self.settings, seeds=3, flags=self.flags)
    return tables.Table(
        paper=self.name, number='claim', title=self.statement,
        methods=tuple(self.methods if methods is None else methods),
        methods_as_rows=True, printed={}, paper_scale=scale, small=scale)



def evaluate(claim: Claim, values: Values,
             eval_sizes: Optional[EvalSizes] = None
             ) -> tuple[str, list[tuple[Check, str, str]]]:
  """The claim's verdict and each check's (check, verdict, numbers).

  The claim's verdict, in this order: not reproduced if any check is;
  reproduced if every check is; pending if any check is; inconclusive
  otherwise.
  """
  results = [(check, *check.evaluate(claim, values, eval_sizes))
             for check in claim.checks]
  verdicts = [v for _, v, _ in results]
  if any(v == 'not reproduced' for v in verdicts):
    overall = 'not reproduced'
  elif all(v == 'reproduced' for v in verdicts):
    overall = 'reproduced'
  elif any(v == 'pending' for v in verdicts):
    overall = 'pending'
  else:
    overall = 'inconclusive'
  return overall, results
