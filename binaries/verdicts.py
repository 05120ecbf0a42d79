"""What a claim is and how its verdict is reached: checks, tunings, `Claim`.

The verdict machinery of `binaries.claims`. Each paper's claim, as data, is
in its module of `binaries/papers/` (`fedopt.py`: Reddi et al., `fedfor.py`,
`fedcurv.py`, `fedadc.py`, `fedptr.py`); `binaries.claims` gathers them
(`CLAIMS`), runs them, writes the reports, and re-exports the names below.

A `Claim` is one paper's central claim: its grid (methods x settings, as
`binaries.tables.Method` and `Setting`), its checks (`Better`,
`GainLarger`, `Within`, `Fastest`), its tunings (`Tuning`: a
hyper-parameter picked on `TUNING_SEED` before the method's runs) and its
registered seeds. Each check carries, fixed in the claim's spec before
its runs are scored, a margin `delta` (the smallest effect the claim is
about) and a `role` (primary checks decide the claim).

The protocol (`evaluate`):

1. Per seed s, d_s: the paired difference of the two methods in the
   claimed direction (same seed = same partition, initial weights and
   sampled clients). `GainLarger`: min(gain_larger - gain_smaller,
   gain_larger), so that a loss that shrinks is no growing gain.
   `Fastest`: against the best of the others on that seed.
2. A 90 % interval on the mean of d (5 % one-sided each way), Student's t
   (`scipy.stats.t`, Welch-Satterthwaite degrees of freedom: n - 1 for the
   seeds' term, infinite for the test set's, `Estimate.df`) on the
   standard error sqrt(s_d^2 / n + v_test): s_d^2 / n the seed-to-seed
   spread, v_test the
   test set's own sampling error, which the seeds share (one fixed test
   set) and so does not shrink with n. v_test, in order of preference:
   - paired over test examples (the analytic equivalent of a paired
     bootstrap that resamples the same examples for every seed): with
     x_i the example's correctness combined as d is (1 or 0 for each run,
     averaged over the evaluations the measure reads), e_i its mean over
     seeds, v_test = var(e) / N. Used where every run of the check logged
     its per-example correctness (`Examples`, read from
     `tff_opt.program.evaluation.CORRECT_FILE`).
   - otherwise the conservative unpaired bound, for runs that logged no
     per-example results: the accuracies' standard errors combined,
     sum_k c_k^2 p_k (1 - p_k) / N averaged over seeds (p_k each run's
     accuracy, c_k its coefficient in d, N the predictions an evaluation
     scores). The two models' errors on the same images are positively
     correlated, so this overstates the noise of a difference.
   - rounds to a target: the evaluation grid's rounding of the two
     readings, 2 g^2 / 12 (g the grid); the test set's error enters
     through the seeds' spread only, which is why every "faster" check
     has beside it a curve measure that needs no censoring (the mean
     accuracy over rounds 1..H).
3. Per check a margin delta > 0, no smaller than the test set resolves (a
   delta below the standard error of one difference of two evaluations,
   or below the evaluation grid, is raised to it, and the report says
   so). Reproduced when the interval lies above 0; not reproduced when it
   lies below delta and not above 0 (an effect as large as delta is ruled
   out at this setting); inconclusive otherwise. Expressed as one-sided
   p-values (H0: effect <= 0, and H0: effect >= delta), so that Holm's
   step-down (`holm`) adjusts them across a claim's primary checks, each
   family (for / against) apart; a check that is not primary is read at
   its own 5 %.
4. `Within` ("within one point of each other"): an equivalence test, two
   one-sided tests (TOST) on every pair's mean difference against
   +-spread; equivalent when every pair's interval lies inside
   (-spread, spread) (intersection-union: no adjustment), not equivalent
   when some pair's lies outside it (Holm over the pairs).
5. Every registered seed (`Claim.seeds`) finished for every run a check
   reads before it is decided: until then "pending (k/n seeds)", with the
   interval so far.
6. Divergence is a failure, never missing: a run with a non-finite loss,
   a rejected update, or a training loss above `DIVERGED_LOSS_FACTOR`
   times its first round's in the rounds a measure reads scores the worst
   outcome (`binaries.claims.run_values`): the claim's chance accuracy
   (`Claim.chance`), and a target never reached (censored). A NaN value
   that reaches a check is scored the same way here.
7. Rounds to a target: a run that missed it (or diverged) is censored and
   kept at the horizon H (the setting's rounds), which understates its
   gap to a run that reached it; the grid is stated. A check whose seeds
   are all censored on both sides is inconclusive.

The claim's verdict (`evaluate`), from its primary checks after Holm:
reproduced when every primary check is; not reproduced when any is;
pending when any is pending; inconclusive otherwise.
"""

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Optional

import numpy as np
from scipy import stats

from binaries import tables
from tff_opt.program import analysis

Measure = tables.Measure
Method = tables.Method
Setting = tables.Setting

MIN_SEEDS = 2
VERDICTS = ('reproduced', 'not reproduced', 'inconclusive', 'pending')
# One-sided level each way: the intervals are 90 %.
ALPHA = 0.05
# A training loss above this many times the run's first round's: diverged.
# FedFOR at alpha 5 reaches 3.6e12 by round 4 from 1.1 (and ends at 10 %,
# chance); no run that trains stays above 1.0 x its first loss.
DIVERGED_LOSS_FACTOR = 100.0
# Degrees of freedom taken as infinite (t's quantile is then the normal's).
MAX_DF = 1e6

# Roles of a check, fixed in the claim's spec.
PRIMARY, SECONDARY, PAPER_SETTING = (
    'primary', 'secondary', "the paper's hyper-parameter")
ROLES = (PRIMARY, SECONDARY, PAPER_SETTING)


# --- Values -------------------------------------------------------------------

Key = tuple[str, str, str]  # (method label, setting label, measure label)
# Key -> {seed: value or None}. A seed is present once its run finished;
# `None` there is a finished run without the value (for `rounds_to`, a
# target never reached: censored).
Values = Mapping[Key, Mapping[int, Optional[float]]]
# Key -> {seed: each test example's correctness (0..1), averaged over the
# evaluations the measure reads}: what the paired test-set term needs
# (`binaries.claims.examples_of`). A run without the file is absent.
Examples = Mapping[Key, Mapping[int, np.ndarray]]
# setting label -> predictions scored by one evaluation (test examples, or
# tokens for a language model), read from the runs
# (`binaries.claims.eval_sizes_of`).
EvalSizes = Mapping[str, int]


def _better_sign(measure: Measure) -> float:
  """+1 where a larger value is better, -1 for rounds and losses."""
  if measure.kind == 'rounds_to' or analysis.lower_is_better(measure.metric):
    return -1.0
  return 1.0


def _finite(v: Optional[float]) -> bool:
  return v is not None and math.isfinite(v)


def grid_of(claim: 'Claim', setting_label: str) -> int:
  """The setting's evaluation grid (`--eval_every`, 1 when unset)."""
  grid = tables.flag_value((*claim.flags, *claim.setting(setting_label).flags),
                           'eval_every')
  return int(grid) if grid else 1


def scored(claim: 'Claim', setting_label: str, measure: Measure,
           value: Optional[float]) -> tuple[float, bool]:
  """(the value a check reads, whether it is the worst outcome).

  A `rounds_to` value that is missing or not finite is censored at the
  horizon (the setting's rounds); a missing or non-finite accuracy is
  the claim's chance accuracy. Either way the run scores the worst
  outcome, whatever the order of its values.

  Raises:
    ValueError: If the value is missing for a measure with no worst
      outcome (neither rounds to a target nor an accuracy).
  """
  if _finite(value):
    return float(value), False
  if measure.kind == 'rounds_to':
    return float(claim.setting(setting_label).rounds), True
  if measure.metric.endswith('accuracy'):
    return claim.chance * measure.scale / 100.0, True
  raise ValueError(f'claim {claim.name}: no value of {measure.label!r} in '
                   f'{setting_label!r}, and no worst outcome for '
                   f'{measure.metric}.')


# --- The statistics -----------------------------------------------------------


def holm(pvalues: Sequence[float]) -> list[float]:
  """Holm's step-down adjusted p-values, in the order given.

  The i-th smallest of m p-values becomes max over j <= i of
  min(1, (m - j + 1) p_(j)); rejecting where the adjusted value is below
  alpha controls the family-wise error at alpha.
  """
  m = len(pvalues)
  order = sorted(range(m), key=lambda i: pvalues[i])
  adjusted, running = [0.0] * m, 0.0
  for rank, i in enumerate(order):
    running = max(running, min(1.0, (m - rank) * pvalues[i]))
    adjusted[i] = running
  return adjusted


@dataclasses.dataclass(frozen=True)
class Estimate:
  """The mean of per-seed differences, and its noise.

  Attributes:
    diffs: d_s per seed, in the claimed direction (the measure's unit).
    var_test: The test set's sampling variance of the mean (shared by the
      seeds, so not divided by their number).
    test_text: Where `var_test` comes from, for the report.
  """
  diffs: tuple[float, ...]
  var_test: float
  test_text: str

  @property
  def n(self) -> int:
    return len(self.diffs)

  @property
  def mean(self) -> float:
    return statistics.fmean(self.diffs)

  @property
  def se_seeds(self) -> float:
    return statistics.stdev(self.diffs) / math.sqrt(self.n)

  @property
  def se_test(self) -> float:
    return math.sqrt(self.var_test)

  @property
  def se(self) -> float:
    return math.sqrt(self.se_seeds ** 2 + self.var_test)

  @property
  def df(self) -> float:
    """Welch-Satterthwaite degrees of freedom of `se`.

    The seeds' term has n - 1; the test set's is known (binomial over
    N >= 1,000 examples: infinite), so df = (n - 1) (se^2 / se_seeds^2)^2,
    at least n - 1 and capped at `MAX_DF` (a normal quantile).
    """
    if self.se_seeds == 0.0:
      return MAX_DF
    return min(MAX_DF, (self.n - 1) * (self.se / self.se_seeds) ** 4)

  def interval(self, alpha: float = ALPHA) -> tuple[float, float]:
    """The two-sided 1 - 2 alpha interval on the mean (Student's t)."""
    half = stats.t.ppf(1.0 - alpha, self.df) * self.se
    return self.mean - half, self.mean + half

  def p_above(self, x: float) -> float:
    """One-sided p of H0 "effect <= x" (small: the effect exceeds x)."""
    if self.se == 0.0:
      return 0.0 if self.mean > x else 1.0
    return float(stats.t.sf((self.mean - x) / self.se, self.df))

  def p_below(self, x: float) -> float:
    """One-sided p of H0 "effect >= x" (small: the effect is below x)."""
    if self.se == 0.0:
      return 0.0 if self.mean < x else 1.0
    return float(stats.t.cdf((self.mean - x) / self.se, self.df))


def decide(diffs: Sequence[float], delta: float, var_test: float = 0.0
           ) -> str:
  """The verdict of one check alone (no adjustment) from its differences.

  Reproduced when the 90 % interval lies above 0, not reproduced when it
  lies below `delta` (and not above 0), inconclusive otherwise; fewer
  than two differences cannot be decided ('pending').
  """
  if len(diffs) < MIN_SEEDS:
    return 'pending'
  est = Estimate(tuple(diffs), var_test, '')
  return _verdict(est.p_above(0.0), est.p_below(delta))


def _verdict(p_for: float, p_against: float) -> str:
  if p_for < ALPHA:
    return 'reproduced'
  if p_against < ALPHA:
    return 'not reproduced'
  return 'inconclusive'


# One seed's difference as a combination of runs' values: [(coef, key)].
Terms = list[tuple[float, Key]]


def _test_variance(claim: 'Claim', terms_by_seed: Mapping[int, Terms],
                   values: Mapping[Key, Mapping[int, float]],
                   measure: Measure, eval_size: Optional[int],
                   examples: Optional[Examples]) -> tuple[float, str]:
  """The test set's variance of the mean difference, and its source.

  Paired over examples where every run logged them, else the unpaired
  bound (module docstring, step 2).
  """
  if measure.kind == 'rounds_to':
    raise ValueError('rounds to a target: use the grid')
  examples = examples or {}
  arrays = {(k, s): examples.get(k, {}).get(s)
            for s, terms in terms_by_seed.items() for _, k in terms}
  sizes = {a.size for a in arrays.values() if a is not None}
  if arrays and all(a is not None for a in arrays.values()) and (
      len(sizes) == 1):
    e = sum(c * arrays[(k, s)].astype(np.float64)
            for s, terms in terms_by_seed.items()
            for c, k in terms) * measure.scale / len(terms_by_seed)
    size = sizes.pop()
    return float(np.var(e, ddof=1) / size), (
        f'paired over the same {size:,} test examples')
  if not eval_size:
    return 0.0, 'no test-set term (evaluation size unknown)'
  per_seed = []
  for s, terms in terms_by_seed.items():
    v = 0.0
    for c, k in terms:
      p = min(max(values[k][s] / measure.scale, 0.0), 1.0)
      v += c * c * p * (1.0 - p) / eval_size
    per_seed.append(v * measure.scale ** 2)
  return statistics.fmean(per_seed), (
      f'unpaired bound on {eval_size:,} predictions (no per-example log)')


def _target(measure: Measure) -> str:
  """A rounds-to measure's target: '90%' for an accuracy."""
  if measure.metric.endswith('accuracy'):
    return f'{measure.arg:.0%}'
  return f'{measure.metric} {measure.arg:g}'


def _rounds_text(grid: int, readings: int) -> tuple[float, str]:
  return readings * grid * grid / 12.0, f'the {grid}-round evaluation grid'


@dataclasses.dataclass(frozen=True)
class Finding:
  """What a check's runs say, before the claim's adjustment.

  Attributes:
    status: 'pending' (registered seeds unfinished), 'undecided' (no test
      possible: `text` says why) or 'estimated'.
    text: The numbers and reason, for the report.
    estimate: The (widest, for `Within`) estimate, if any.
    delta: The margin used (the spec's, or the resolution if larger).
    seeds: Seeds finished for every run the check reads.
    p_for: One-sided p that the effect is above 0 (equivalent, `Within`).
    p_against: One-sided p that it is below delta (not equivalent).
  """
  status: str
  text: str
  estimate: Optional[Estimate] = None
  delta: float = 0.0
  seeds: int = 0
  p_for: float = 1.0
  p_against: float = 1.0


def _paired_finding(claim: 'Claim', check, keys: Sequence[Key],
                    values: Values, diff_fn, *, measure: Measure,
                    setting: str, readings: int,
                    eval_sizes: Optional[EvalSizes],
                    examples: Optional[Examples]) -> Finding:
  """The finding of a check whose seeds give one difference each.

  `diff_fn(scored values by key, seed) -> (d_s, terms)` computes a seed's
  difference in the claimed direction and its combination of runs.
  """
  registered = range(claim.seeds)
  runs = {k: values.get(k, {}) for k in keys}
  seeds = [s for s in registered if all(s in runs[k] for k in keys)]
  got, worst = {}, {}
  for k in keys:
    s_measure = claim.measure(k[1], k[2])
    got[k], worst[k] = {}, set()
    for s in seeds:
      got[k][s], bad = scored(claim, k[1], s_measure, runs[k][s])
      if bad:
        worst[k].add(s)
  diffs, terms_by_seed = [], {}
  for s in seeds:
    d, terms = diff_fn(got, s)
    diffs.append(d + 0.0)  # No -0.0.
    terms_by_seed[s] = terms
  pending = len(seeds) < claim.seeds
  if pending and len(seeds) < MIN_SEEDS:
    text = f'{len(seeds)}/{claim.seeds} seeds finished'
    if diffs:
      text += f'; so far {diffs[0]:+.2f} on seed {seeds[0]}'
    return Finding('pending', text + _so_far(runs, measure), seeds=len(seeds))
  extra = ''
  if measure.kind == 'rounds_to':
    h = claim.setting(setting).rounds
    both = [s for s in seeds if all(s in worst[k] for k in keys)]
    if len(both) == len(seeds) and not pending:
      return Finding('undecided', f'no run reached {_target(measure)} in '
                     f'{h} rounds ({len(seeds)} seeds)', seeds=len(seeds))
    var_test, test_text = _rounds_text(grid_of(claim, setting), readings)
    resolution = float(grid_of(claim, setting))
  else:
    var_test, test_text = _test_variance(
        claim, terms_by_seed, got, measure,
        (eval_sizes or {}).get(setting), examples)
    resolution = math.sqrt(var_test)
  n_worst = sum(len(w) for w in worst.values())
  if n_worst:
    extra = (f'; {n_worst} run(s) missed the target or diverged, censored '
             f'at the horizon' if measure.kind == 'rounds_to' else
             f'; {n_worst} run(s) diverged, scored at chance '
             f'{claim.chance:.3g}%')
  f = _finding(check, Estimate(tuple(diffs), var_test, test_text),
               resolution, extra)
  if pending:
    return dataclasses.replace(
        f, status='pending', p_for=1.0, p_against=1.0,
        text=f'{len(seeds)}/{claim.seeds} seeds finished; so far: ' +
        f.text)
  return f


def _finding(check, est: Estimate, resolution: float, extra: str) -> Finding:
  delta = max(check.delta, resolution)
  raised = (f' (raised from {check.delta:g} to the test set\'s resolution)'
            if delta > check.delta else '')
  lo, hi = est.interval()
  paper = '' if check.paper is None else f'; the paper {check.paper:+g}'
  text = (f'mean difference {est.mean:+.2f}{paper}; 90% interval '
          f'[{lo:+.2f}, {hi:+.2f}] over {est.n} seeds (seeds ±'
          f'{est.se_seeds:.2f}, test set ±{est.se_test:.2f}: '
          f'{est.test_text}); δ {delta:.2f}{raised}{extra}')
  return Finding('estimated', text, est, delta, est.n, est.p_above(0.0),
                 est.p_below(delta))


def _so_far(runs: Mapping[Key, Mapping[int, Optional[float]]],
            measure: Optional[Measure] = None) -> str:
  """'; so far: A 57.34 (1 seed), ...' for the runs with a value.

  A `rounds_to` measure's values are whole rounds ('A 40 (1 seed)'), and a
  method whose finished runs all missed the target says so ('A not
  reached (1 seed)').
  """
  rounds = measure is not None and measure.kind == 'rounds_to'
  have = []
  settings = {key[1] for key in runs}
  for key, by_seed in runs.items():
    m = key[0] if len(settings) == 1 else f'{key[0]} at {key[1]}'
    got = [v for v in by_seed.values() if _finite(v)]
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


class _Check:
  """What every check shares: its one-check verdict (`evaluate`)."""

  def evaluate(self, claim: 'Claim', values: Values,
               eval_sizes: Optional[EvalSizes] = None,
               examples: Optional[Examples] = None) -> tuple[str, str]:
    """(verdict, numbers) of this check alone, at its own 5 % each way."""
    f = self.finding(claim, values, eval_sizes, examples)
    return _status_verdict(f, f.p_for, f.p_against), f.text


def _status_verdict(f: Finding, p_for: float, p_against: float) -> str:
  if f.status == 'pending':
    return 'pending'
  if f.status == 'undecided':
    return 'inconclusive'
  return _verdict(p_for, p_against)


@dataclasses.dataclass(frozen=True)
class Better(_Check):
  """`method` beats `other` in `setting` on `measure`.

  Attributes:
    method: The method the paper says is better.
    other: The method it beats.
    setting: The setting's label.
    measure: The measure's label (within the setting).
    delta: The margin (module docstring, step 3), in the measure's unit.
    role: One of `ROLES`.
    paper: The paper's own difference, in the claimed direction, if it
      gives one.
  """
  method: str
  other: str
  setting: str
  measure: str
  delta: float = 0.0
  role: str = PRIMARY
  paper: Optional[float] = None

  def describe(self) -> str:
    return (f'{self.method} better than {self.other} ({self.setting}, '
            f'{self.measure})')

  def finding(self, claim: 'Claim', values: Values,
              eval_sizes: Optional[EvalSizes] = None,
              examples: Optional[Examples] = None) -> Finding:
    measure = claim.measure(self.setting, self.measure)
    sign = _better_sign(measure)
    a = (self.method, self.setting, self.measure)
    b = (self.other, self.setting, self.measure)

    def diff(got, s):
      return sign * (got[a][s] - got[b][s]), [(sign, a), (-sign, b)]

    return _paired_finding(claim, self, (a, b), values, diff,
                           measure=measure, setting=self.setting, readings=2,
                           eval_sizes=eval_sizes, examples=examples)


@dataclasses.dataclass(frozen=True)
class GainLarger(_Check):
  """`method`'s gain over `other` is larger in `larger` than in `smaller`.

  The gain is the difference in the better direction of the measure
  (labelled the same in both settings). A seed's difference is
  d_s = min(gain_larger - gain_smaller, gain_larger): a loss that shrinks
  with the setting is not the claimed growing gain. Attributes as
  `Better`'s.
  """
  method: str
  other: str
  larger: str
  smaller: str
  measure: str
  delta: float = 0.0
  role: str = PRIMARY
  paper: Optional[float] = None

  def describe(self) -> str:
    return (f'gain of {self.method} over {self.other} larger at '
            f'{self.larger} than at {self.smaller} ({self.measure})')

  def finding(self, claim: 'Claim', values: Values,
              eval_sizes: Optional[EvalSizes] = None,
              examples: Optional[Examples] = None) -> Finding:
    measure = claim.measure(self.larger, self.measure)
    sign = _better_sign(measure)
    keys = [(m, s, self.measure) for s in (self.larger, self.smaller)
            for m in (self.method, self.other)]
    al, bl, as_, bs = keys

    def diff(got, s):
      gl = sign * (got[al][s] - got[bl][s])
      gs = sign * (got[as_][s] - got[bs][s])
      return min(gl - gs, gl), [(sign, al), (-sign, bl), (-sign, as_),
                                (sign, bs)]

    f = _paired_finding(claim, self, keys, values, diff, measure=measure,
                        setting=self.larger, readings=4,
                        eval_sizes=eval_sizes, examples=examples)
    if f.status != 'estimated':
      return f
    gains = []
    for hi, lo in ((al, bl), (as_, bs)):
      g = [sign * (scored(claim, hi[1], measure, values[hi][s])[0] -
                   scored(claim, lo[1], measure, values[lo][s])[0])
           for s in range(claim.seeds)]
      gains.append(statistics.fmean(g))
    return dataclasses.replace(f, text=(
        f'gain at {self.larger} {gains[0]:+.2f}, at {self.smaller} '
        f'{gains[1]:+.2f}; ' + f.text))


@dataclasses.dataclass(frozen=True)
class Fastest(_Check):
  """`method` does better than the best of `others`, seed by seed.

  On rounds to a target: fewer rounds than each of the others (its claim,
  "converges faster"); on a curve measure (the mean accuracy over rounds
  1..H): a higher one. Per seed, the difference is against the best of
  the others on that seed. Attributes as `Better`'s.
  """
  method: str
  others: tuple[str, ...]
  setting: str
  measure: str
  delta: float = 0.0
  role: str = PRIMARY
  paper: Optional[float] = None

  def describe(self) -> str:
    what = ('reaches ' + self.measure.replace('rounds to ', '') +
            ' in fewer rounds than' if self.measure.startswith('rounds to')
            else f'better {self.measure} than')
    return (f'{self.method} {what} {", ".join(self.others)} '
            f'({self.setting})')

  def finding(self, claim: 'Claim', values: Values,
              eval_sizes: Optional[EvalSizes] = None,
              examples: Optional[Examples] = None) -> Finding:
    measure = claim.measure(self.setting, self.measure)
    sign = _better_sign(measure)
    a = (self.method, self.setting, self.measure)
    others = [(m, self.setting, self.measure) for m in self.others]

    def diff(got, s):
      best = max(others, key=lambda k: sign * got[k][s])  # First of ties.
      return sign * (got[a][s] - got[best][s]), [(sign, a), (-sign, best)]

    return _paired_finding(claim, self, (a, *others), values, diff,
                           measure=measure, setting=self.setting, readings=2,
                           eval_sizes=eval_sizes, examples=examples)


@dataclasses.dataclass(frozen=True)
class Within(_Check):
  """The methods' means on `measure` lie within `spread` of each other.

  An equivalence test (module docstring, step 4): every pair's paired
  mean difference against +-`spread`, which is this check's margin.

  Attributes:
    methods: The methods.
    setting: The setting's label.
    measure: The measure's label.
    spread: The equivalence margin, in the measure's unit.
    role: One of `ROLES`.
  """
  methods: tuple[str, ...]
  setting: str
  measure: str
  spread: float
  role: str = PRIMARY
  paper: Optional[float] = None

  @property
  def delta(self) -> float:
    return self.spread

  def describe(self) -> str:
    return (f'{", ".join(self.methods)} within {self.spread:g} of each '
            f'other ({self.setting}, {self.measure})')

  def finding(self, claim: 'Claim', values: Values,
              eval_sizes: Optional[EvalSizes] = None,
              examples: Optional[Examples] = None) -> Finding:
    measure = claim.measure(self.setting, self.measure)
    keys = [(m, self.setting, self.measure) for m in self.methods]
    pairs = [(keys[i], keys[j]) for i in range(len(keys))
             for j in range(i + 1, len(keys))]
    found = []
    for a, b in pairs:
      found.append(_paired_finding(
          claim, Better(a[0], b[0], self.setting, self.measure, self.spread),
          (a, b), values,
          lambda got, s, a=a, b=b: (got[a][s] - got[b][s],
                                    [(1.0, a), (-1.0, b)]),
          measure=measure, setting=self.setting, readings=2,
          eval_sizes=eval_sizes, examples=examples))
    if any(f.status == 'pending' for f in found):
      seeds = min(f.seeds for f in found)
      return Finding('pending', f'{seeds}/{claim.seeds} seeds finished' +
                     _so_far({k: values.get(k, {}) for k in keys}),
                     seeds=seeds)
    p_equiv, p_out, widest = [], [], None
    for f in found:
      est = f.estimate
      p_equiv.append(max(est.p_above(-self.spread),
                         est.p_below(self.spread)))
      p_out.append(min(est.p_above(self.spread),
                       est.p_below(-self.spread)))
      if widest is None or max(map(abs, est.interval())) > max(
          map(abs, widest[1].interval())):
        widest = ((f, est))
    (a, b), est = pairs[found.index(widest[0])], widest[1]
    lo, hi = est.interval()
    means = ', '.join(f'{k[0]} {self._mean(claim, measure, values[k]):.2f}'
                      for k in keys)
    text = (f'means {means}; the widest pair {a[0]} - {b[0]} '
            f'{est.mean:+.2f}, 90% interval [{lo:+.2f}, {hi:+.2f}] over '
            f'{est.n} seeds (seeds ±{est.se_seeds:.2f}, test set '
            f'±{est.se_test:.2f}: {est.test_text}); margin ±{self.spread:g}'
            f' (TOST, {len(pairs)} pairs)')
    return Finding('estimated', text, est, self.spread, est.n, max(p_equiv),
                   min(holm(p_out)))


  def _mean(self, claim: 'Claim', measure: Measure,
            by_seed: Mapping[int, Optional[float]]) -> float:
    """A method's mean over the registered seeds, diverged runs worst."""
    return statistics.fmean(
        scored(claim, self.setting, measure, by_seed[s])[0]
        for s in range(claim.seeds))


Check = Better | GainLarger | Within | Fastest


@dataclasses.dataclass(frozen=True)
class Result:
  """One check's verdict in its claim.

  Attributes:
    check: The check.
    verdict: One of `VERDICTS`.
    numbers: Its numbers and reason, for the report.
    finding: What its runs say (`Finding`).
    p_for: Its p-value for the claim, adjusted (Holm) if primary.
    p_against: Its p-value against it, adjusted (Holm) if primary.
  """
  check: Check
  verdict: str
  numbers: str
  finding: Finding
  p_for: float
  p_against: float

  def interval(self) -> Optional[tuple[float, float]]:
    est = self.finding.estimate
    return None if est is None else est.interval()


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
      its reports count the claim's runs against them, whichever process
      writes them, and a check waits for all of them ('pending').
    chance: The accuracy of a guess, in %: a diverged run's score.
    rule: How the claim's verdict follows from its primary checks, in
      words, for the report (`evaluate` applies it).

  Raises:
    ValueError: If `seeds` is below `MIN_SEEDS`, no check is primary, a
      check's role is not one of `ROLES`, or its margin is not positive.
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
  chance: float = 10.0
  rule: str = ('reproduced when every primary check is, not reproduced '
               'when any is')

  def __post_init__(self):
    if self.seeds < MIN_SEEDS:
      raise ValueError(f'claim {self.name}: seeds={self.seeds}, but a '
                       f'verdict needs at least {MIN_SEEDS} seeds.')
    for c in self.checks:
      if c.role not in ROLES:
        raise ValueError(f'claim {self.name}: {c.describe()}: role '
                         f'{c.role!r}, expected one of {", ".join(ROLES)}.')
      if not c.delta > 0:
        raise ValueError(f'claim {self.name}: {c.describe()}: delta must '
                         f'be > 0, got {c.delta!r}.')
    if self.checks and not any(c.role == PRIMARY for c in self.checks):
      raise ValueError(f'claim {self.name}: no primary check.')
    if not 0.0 <= self.chance < 100.0:
      raise ValueError(f'claim {self.name}: chance must be in [0, 100), '
                       f'got {self.chance!r}.')

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
             eval_sizes: Optional[EvalSizes] = None,
             examples: Optional[Examples] = None
             ) -> tuple[str, list[Result]]:
  """The claim's verdict and each check's `Result`.

  Holm's adjustment runs over the primary checks (a pending or undecided
  one counts with p = 1), the "for" and "against" p-values each as one
  family; the other checks are read at their own 5 %. The claim's
  verdict, from its primary checks: reproduced if every one is; not
  reproduced if any is; pending if any is; inconclusive otherwise.
  """
  findings = [c.finding(claim, values, eval_sizes, examples)
              for c in claim.checks]
  primary = [i for i, c in enumerate(claim.checks) if c.role == PRIMARY]
  p_for = [f.p_for for f in findings]
  p_against = [f.p_against for f in findings]
  for ps in (p_for, p_against):
    adjusted = holm([ps[i] if findings[i].status == 'estimated' else 1.0
                     for i in primary])
    for i, p in zip(primary, adjusted):
      ps[i] = p
  results = []
  for i, (check, f) in enumerate(zip(claim.checks, findings)):
    verdict = _status_verdict(f, p_for[i], p_against[i])
    numbers = f.text
    if f.status == 'estimated':
      holm_text = ', Holm' if i in primary else ''
      numbers += (f'; p{holm_text}: {p_for[i]:.3g} for, {p_against[i]:.3g} '
                  f'against')
    results.append(Result(check, verdict, numbers, f, p_for[i],
                          p_against[i]))
  verdicts = [results[i].verdict for i in primary]
  if all(v == 'reproduced' for v in verdicts):
    overall = 'reproduced'
  elif any(v == 'not reproduced' for v in verdicts):
    overall = 'not reproduced'
  elif any(v == 'pending' for v in verdicts):
    overall = 'pending'
  else:
    overall = 'inconclusive'
  return overall, results
