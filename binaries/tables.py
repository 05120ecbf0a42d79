"""What a paper's result table is: the specs, the tables, and `expand`.

The machinery of `binaries.paper_tables`. Each paper's tables, as data, are
in its module of `binaries/papers/` (`fedfor.py`, `fedcurv.py`, `fedadc.py`,
`fedptr.py`, `fedopt.py`: Reddi et al.); `binaries.paper_tables` gathers them
(`SPECS`, `TABLES`, `get_table`) and re-exports the names below.

`binaries.reproduce` runs one table: every grid point (method x setting x
seed) is one `binaries.train` run, and the table it writes is laid out as
the paper's, our mean +- std over seeds next to the paper's printed number.

Each table is one `TableSpec`, plain data: the paper and table number, the
title, the methods (each an algorithm and its `binaries.train` flags), the
points (a product of `axes`, each point a set of variables such as the
local epochs E or the Dirichlet alpha), the measures of each point, the
paper's printed numbers, and how the points run at each scale (`ScaleSpec`:
the task, its options and model, the points' other flags as templates over
the variables, the rounds, the seeds, the flags every run shares). One
function, `expand`, reads a spec into the `Table` that `binaries.reproduce`
runs; it checks the spec as it goes and names the table and the method,
point or printed row of anything malformed (`SpecError`). For instance:

    TableSpec(
        paper='fedcurv', number='1', title='Rounds to reach ...',
        methods=(Method('FedAvg', ('--algorithm=fedopt',)), ...),
        methods_as_rows=True,
        axes=(({'E': 50, 'small_E': 5}, {'E': 10, 'small_E': 1}),),
        label='E={E}',
        measures=(MeasureSpec('0.95', 'rounds_to', 0.95, scale=1.0), ...),
        paper_scale=ScaleSpec(task='mnist', model='fedcurv_cnn', ...,
                              point_flags=('--client_epochs={E}',),
                              rounds=150, seeds=1),
        small=ScaleSpec(task=STAND_IN_TASK, ...,
                        point_flags=('--client_epochs={small_E}',),
                        rounds=30, seeds=1, stand_in='24 devices ...'),
        printed={'FedAvg': (76, 30, 22, 106, 51, 43), ...})

A `Table` says what the paper printed (`printed`, keyed by row, column and
measure labels as the paper lays them out) and how to run it at two scales:

- `paper`: the paper's setting (its task, partition, model, rounds, clients,
  participation, batch size, learning rate); needs the datasets.
- `small`: an offline stand-in with the same kind of partition, few rounds
  and one seed, on one of `STAND_INS`: `mnist5k` (default: 5,000 real
  28x28 MNIST digits, `make data`) or `digits` (scikit-learn's 8x8 digits,
  no file needed: the fast smoke setting). Its numbers are NOT comparable
  with the paper's; every table it writes says so. Unless its spec gives
  its own measures, a stand-in point's measures are the paper's with their
  rounds scaled to the stand-in's rounds (`_stand_in_measures`).

Each table's small scale is written once, on `digits` (`Table.small`);
`Table.scale('small', stand_in='mnist5k')` derives the MNIST-5k grid from it
by `on_stand_in`: `--task=digits` becomes `--task=mnist5k` and each digits
model becomes its MNIST-5k counterpart (`STAND_IN_MODELS`: the digits CNN ->
`small_cnn`, its batch-norm variant -> FedBN's `fedbn_cnn`; `mtt_convnet`
fits both), everything else (partition, clients, rounds, learning rates)
unchanged. Choice: the stand-ins' untuned learning rates are kept on
MNIST-5k rather than re-tuned, so the two stand-ins differ only in data and
model.

What each cell measures (`Measure.kind`, on `metrics.csv`):

- `best_up_to` (FedFOR Tables 2-4: "the best validation accuracy up to the
  specified global iterations"): max of the metric over rounds <= t.
- `rounds_to` (FedFOR's ACC40/ACC80, FedCurv's rounds to 95/90/85%): the
  first round the metric reaches the target (`analysis.rounds_to_target`).
- `final` (FedADC Table I, "top-1 test accuracy" after the last round):
  `analysis.final_value`.
- `last_mean` (Reddi et al. Table 1, last 100 rounds; FedPTR "average
  accuracy of the last five global rounds"): `analysis.window_mean`.
- `mean` (FedFOR Table 5): the mean over every evaluated round.
- `at_round` (accuracy at a fixed round, `binaries.claims`): the last value
  measured at or before round t.

Our text copies of the papers lost symbols (fractions, Greek letters, some
numbers). Illegible printed cells are `None` with a comment; settings the
papers do not give are chosen in the papers' modules, each one marked
`# choice:` there.

The names of algorithms (`--algorithm`), tasks (`--task`) and task options
(`--task_option`) of a spec are looked up in the package's registries before
anything runs; a name the package lacks stops `binaries.reproduce` with a
one-line error naming it. `check_names` checks a spec's methods against the
registered algorithms and `binaries.train`'s flags (the tests run it on
every table).
"""

import dataclasses
import itertools
import math
import re
from collections.abc import Container, Mapping, Sequence
from typing import Any, Optional, Union

PAPERS = ('fedfor', 'fedcurv', 'fedadc', 'fedptr', 'fedopt')
PAPER_TITLES = {
    'fedfor': 'FedFOR: Stateless Heterogeneous FL with First-Order '
              'Regularization (Tian, Smith, Kira)',
    'fedcurv': 'Overcoming Forgetting in Federated Learning on Non-IID Data '
               '(Shoham et al.)',
    'fedadc': 'FedADC: Accelerated Federated Learning with Drift Control '
              '(Ozfatura et al.)',
    'fedptr': 'Federated Learning with Projected Trajectory Regularization',
    'fedopt': 'Adaptive Federated Optimization (Reddi et al.)',
}
SCALES = ('small', 'paper')
# What stands in for the paper's data at --scale=small; the first is the
# default.
STAND_INS = ('mnist5k', 'digits')

# --- Names of the stand-ins' partitions (task options of `digits`) ----------
# The partitioners live in tasks/partitioners.py and are chosen on `digits`
# with --task_option=partition=NAME.
LONG_TAIL = 'long_tail'            # FedFOR 4.2: stateless long-tail sampling
DOMAINS = 'domains'                # one (simulated) domain per client
CONCEPT_SHIFT = 'concept_shift'    # FedFOR 4.4 (a task option, see below)
FEDCURV_SPLIT = 'fedcurv'          # FedCurv: two label blocks per device
SORT = 'sort'                      # FedADC: sort and partition, s classes
DIRICHLET = 'dirichlet'            # Dirichlet over labels (alpha)
DIRICHLET_CLASS = 'dirichlet_class'  # FedPTR's: per class over clients
# The FedBN option of binaries.train: batch-norm variables stay local.
FEDBN_FLAG = '--fedbn'
# FedDyn's alpha flag of binaries.train.
FEDDYN_ALPHA_FLAG = '--feddyn_alpha'

STAND_IN_TASK = 'digits'
# FedBN needs batch norm: the stand-in's CNN with batch norm after each conv.
BN_STAND_IN_MODEL = 'cnn_bn'
# The digits model -> the same role's model on MNIST-5k (`on_stand_in`).
STAND_IN_MODELS = {'mnist5k': {'cnn': 'small_cnn', BN_STAND_IN_MODEL:
                               'fedbn_cnn', 'mtt_convnet': 'mtt_convnet',
                               'cnn_proj': 'small_cnn_proj'},
                   'digits': {}}
# How each stand-in's data are named in a table's stand-in sentence.
_STAND_IN_DATA = {
    'digits': 'scikit-learn digits (8x8, 1,437 train examples)',
    'mnist5k': 'MNIST-5k (real 28x28 MNIST digits, 4,000 train and 1,000 '
               'test images)',
}
# The stand-in sentence of every small scale; `ScaleSpec.stand_in` is its
# {what}.
_SMALL_NOTE = ('STAND-IN: ' + _STAND_IN_DATA[STAND_IN_TASK] + ' with '
               "{what}; few rounds and seeds. Not the paper's setting: "
               'compare orderings, not numbers.')


def flag_value(argv: Sequence[str], name: str) -> Optional[str]:
  """The last `--name=value` of `argv` (a run's flags), or None."""
  value = None
  for arg in argv:
    if arg.startswith(f'--{name}='):
      value = arg.split('=', 1)[1]
  return value


# === The expanded tables: what binaries.reproduce runs ========================


@dataclasses.dataclass(frozen=True)
class Measure:
  """One number of a cell, read from a run's `metrics.csv`.

  Attributes:
    label: The paper's column label (e.g. 't=100', 'ACC40', '0.95').
    kind: One of `MEASURE_KINDS` (see the module docstring).
    arg: The round t (`best_up_to`, `at_round`), the target in the
      metric's own unit (`rounds_to`, e.g. 0.4), the window in rounds
      (`last_mean`); unused otherwise.
    metric: The `metrics.csv` column.
    scale: Our value times `scale` is in the paper's unit (100: percent);
      rounds are never scaled.
  """
  label: str
  kind: str
  arg: Optional[float] = None
  metric: str = 'eval_accuracy'
  scale: float = 100.0

  def __post_init__(self):
    if self.kind not in MEASURE_KINDS:
      raise ValueError(f'kind must be one of {", ".join(MEASURE_KINDS)}, '
                       f'got {self.kind!r}.')
    if self.kind in ('best_up_to', 'rounds_to', 'last_mean',
                     'at_round') and self.arg is None:
      raise ValueError(f'measure {self.label!r}: kind {self.kind} needs arg.')


MEASURE_KINDS = ('best_up_to', 'rounds_to', 'final', 'last_mean', 'mean',
                 'at_round')


@dataclasses.dataclass(frozen=True)
class Method:
  """A row (or column) of a table: one algorithm with its settings.

  Attributes:
    label: As the paper prints it.
    flags: `binaries.train` flags (`--algorithm=...` and its
      hyper-parameters); empty when `missing` says why it cannot run.
    missing: Why the package cannot run it (e.g. 'MOON is not implemented');
      such a row shows the paper's numbers only.
    settings: The setting labels it runs in; `None`: all.
    model_suffix: Appended to the setting's model (`--task_option=model=`,
      or the task's default model, `TASK_DEFAULT_MODELS`, when the setting
      names none): MOON's '_proj', the same model with a projection head
      (`tasks.models_zoo.with_projection_head`).
  """
  label: str
  flags: tuple[str, ...] = ()
  missing: Optional[str] = None
  settings: Optional[tuple[str, ...]] = None
  model_suffix: str = ''


# The default `model` task option of the tasks a table runs without naming
# one (tests/test_reproduce.py checks them against `tasks.task_options`).
TASK_DEFAULT_MODELS = {'digits': 'cnn', 'mnist5k': 'small_cnn'}


@dataclasses.dataclass(frozen=True)
class Setting:
  """A group of columns (or a row): one data/training setting.

  Attributes:
    label: As the paper prints it (e.g. 'E=1', 'CIFAR-10 s=2 C=0.2').
    flags: `binaries.train` flags of this setting (task, task options,
      epochs, clients per round, batch, learning rates, ...).
    rounds: Rounds of every run of the setting.
    measures: The numbers each cell of the setting shows, in the paper's
      column order.
  """
  label: str
  flags: tuple[str, ...]
  rounds: int
  measures: tuple[Measure, ...]


@dataclasses.dataclass(frozen=True)
class Scale:
  """How a table runs at one scale.

  Attributes:
    settings: In the paper's order.
    seeds: Default number of seeds (0, 1, ...).
    flags: `binaries.train` flags shared by every run.
    method_flags: Extra flags per method label at this scale (e.g. the
      stand-in's learning rates).
    stand_in: `None` at paper scale; at small scale, the sentence every
      output carries saying what stands in for the paper's setting.
  """
  settings: tuple[Setting, ...]
  seeds: int
  flags: tuple[str, ...] = ()
  method_flags: Mapping[str, tuple[str, ...]] = dataclasses.field(
      default_factory=dict)
  stand_in: Optional[str] = None


# (mean, std) as printed; std None where the paper prints none; the whole
# value None where our copy lost it.
Printed = Optional[tuple[Optional[float], Optional[float]]]


@dataclasses.dataclass(frozen=True)
class Table:
  """One result table of a paper, expanded from its `TableSpec`.

  Attributes:
    paper: One of `PAPERS`.
    number: The table's number in the paper.
    title: What the table shows (the paper's caption, shortened).
    methods: In the paper's order.
    methods_as_rows: True: rows are methods and columns are settings x
      measures (FedFOR, FedCurv, FedADC); False: rows are settings and
      columns are methods x measures (Reddi et al., FedPTR).
    printed: `{(method label, setting label, measure label): Printed}`.
    paper_scale: The paper-scale run.
    small: The small-scale stand-in.
    notes: Choices and reconstructions, printed under the table.
  """
  paper: str
  number: str
  title: str
  methods: tuple[Method, ...]
  methods_as_rows: bool
  printed: Mapping[tuple[str, str, str], Printed]
  paper_scale: Scale
  small: Scale
  notes: tuple[str, ...] = ()

  def scale(self, name: str, stand_in: str = STAND_INS[0]) -> Scale:
    """The `Scale` called `name` ('small' or 'paper').

    Args:
      name: 'small' or 'paper'.
      stand_in: At 'small', one of `STAND_INS` (ignored at 'paper').

    Raises:
      ValueError: If `name` or `stand_in` is unknown.
    """
    if name not in SCALES:
      raise ValueError(f'scale must be one of {", ".join(SCALES)}, got '
                       f'{name!r}.')
    if name == 'paper':
      return self.paper_scale
    return on_stand_in(self.small, stand_in)


def _retarget(argv: Sequence[str], stand_in: str) -> tuple[str, ...]:
  models = STAND_IN_MODELS[stand_in]
  out = []
  for arg in argv:
    if arg == f'--task={STAND_IN_TASK}':
      arg = f'--task={stand_in}'
    elif arg.startswith('--task_option=model='):
      model = arg.split('=', 2)[2]
      arg = f'--task_option=model={models.get(model, model)}'
    out.append(arg)
  return tuple(out)


def on_stand_in(scale: Scale, stand_in: str) -> Scale:
  """`scale`, written on `digits`, run on the stand-in `stand_in`.

  `--task=digits` becomes `--task=<stand_in>` and each digits model its
  counterpart (`STAND_IN_MODELS`), in the scale's, its settings' and its
  methods' flags; the stand-in sentence names the data. Flags of other tasks
  (a claim's own grid) are left as they are.

  Raises:
    ValueError: If `stand_in` is not one of `STAND_INS`.
  """
  if stand_in not in STAND_INS:
    raise ValueError(f'stand_in must be one of {", ".join(STAND_INS)}, got '
                     f'{stand_in!r}.')
  if stand_in == STAND_IN_TASK:
    return scale
  note = scale.stand_in
  if note is not None:
    note = note.replace(_STAND_IN_DATA[STAND_IN_TASK],
                        _STAND_IN_DATA[stand_in])
  return dataclasses.replace(
      scale,
      settings=tuple(dataclasses.replace(s, flags=_retarget(s.flags, stand_in))
                     for s in scale.settings),
      flags=_retarget(scale.flags, stand_in),
      method_flags={label: _retarget(flags, stand_in)
                    for label, flags in scale.method_flags.items()},
      stand_in=note)


def _scaled_round(t: int, paper_rounds: int, small_rounds: int) -> int:
  return max(1, math.ceil(t * small_rounds / paper_rounds))


def _stand_in_measures(measures: Sequence[Measure], paper_rounds: int,
                       small_rounds: int) -> tuple[Measure, ...]:
  """The paper's measures with their rounds scaled to the stand-in's."""
  out = []
  for m in measures:
    if m.kind == 'best_up_to':
      m = dataclasses.replace(
          m, arg=_scaled_round(int(m.arg), paper_rounds, small_rounds))
    elif m.kind == 'last_mean':
      m = dataclasses.replace(
          m, arg=min(int(m.arg), small_rounds))
    out.append(m)
  return tuple(out)


# === The specs: each table as data ============================================

# A number, or the name of a point's variable holding it.
NumberOrVariable = Union[int, float, str]


@dataclasses.dataclass(frozen=True)
class MeasureSpec:
  """A `Measure` of every point, over the point's variables.

  `label` and `metric` are templates (`'t={half}'`); `arg` is a number or
  the name of a variable (`'half'`). The other attributes are `Measure`'s.
  """
  label: str
  kind: str
  arg: Optional[NumberOrVariable] = None
  metric: str = 'eval_accuracy'
  scale: float = 100.0


@dataclasses.dataclass(frozen=True)
class ScaleSpec:
  """How a table's points run at one scale.

  Templates are Python format strings over the point's variables (its axes'
  values, then the table's and this scale's `variables`). In a list of flag
  templates, an entry that is exactly one `{variable}` whose value is a
  tuple stands for the tuple's templates (none for an empty tuple).

  A point's `Setting.flags` are, in this order: `--task=<task>`, one
  `--task_option=<option>` per `task_options`, `--task_option=model=<model>`
  when `model` is given, then `point_flags`.

  Attributes:
    task: The `--task` of every point (a template).
    rounds: Rounds of each point: a number or the name of a variable.
    seeds: Default number of seeds.
    task_options: `NAME=VALUE` templates, in order.
    model: The `model` task option (a template); `None`: the task's default.
    point_flags: More `binaries.train` flags of each point (templates).
    flags: Flags shared by every run (`Scale.flags`).
    method_flags: Extra flags per method label (`Scale.method_flags`).
    only: The points run at this scale: those that match every
      `variable: value` of one of these; empty: every point.
    measures: Each point's measures at this scale; `None`: the table's
      (at small scale rescaled to the stand-in's rounds).
    variables: Constants of this scale's templates.
    stand_in: At small scale, what stands in for the paper's setting, in
      words (the `{what}` of `_SMALL_NOTE`); `None` at paper scale.
  """
  task: str
  rounds: NumberOrVariable
  seeds: int
  task_options: tuple[str, ...] = ()
  model: Optional[str] = None
  point_flags: tuple[str, ...] = ()
  flags: tuple[str, ...] = ()
  method_flags: Mapping[str, tuple[str, ...]] = dataclasses.field(
      default_factory=dict)
  only: tuple[Mapping[str, Any], ...] = ()
  measures: Optional[tuple[MeasureSpec, ...]] = None
  variables: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  stand_in: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class TableSpec:
  """One result table of a paper, as data (`expand` reads it).

  Attributes:
    paper: One of `PAPERS`.
    number: The table's number in the paper.
    title: What the table shows (the paper's caption, shortened).
    methods: In the paper's order.
    methods_as_rows: As `Table.methods_as_rows`.
    axes: The points are every combination of one value of each axis (the
      first axis outermost); a value is a mapping of variables.
    label: The template of a point's setting label (e.g. 'E={E}').
    measures: Each point's measures, in the paper's column order.
    paper_scale: The paper's setting.
    small: The stand-in, on `STAND_IN_TASK`.
    printed: The paper's numbers, one row as printed per key: a method
      label (`methods_as_rows`) with a value per (setting, measure) of the
      paper scale, or a setting label with a value per (method, measure);
      `None`: illegible.
    printed_stds: The std rows, by the same keys: one std per cell whose
      measure is not in `stdless`; `None`: none printed.
    stdless: Labels of the measures the std rows skip.
    variables: Constants of every template.
    notes: Choices and reconstructions, printed under the table.
  """
  paper: str
  number: str
  title: str
  methods: tuple[Method, ...]
  methods_as_rows: bool
  axes: tuple[tuple[Mapping[str, Any], ...], ...]
  measures: tuple[MeasureSpec, ...]
  paper_scale: ScaleSpec
  small: ScaleSpec
  printed: Mapping[str, Sequence[Optional[float]]]
  label: str = '{label}'
  printed_stds: Mapping[str, Sequence[Optional[float]]] = dataclasses.field(
      default_factory=dict)
  stdless: tuple[str, ...] = ()
  variables: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  notes: tuple[str, ...] = ()


class SpecError(ValueError):
  """A malformed `TableSpec`; the message names the table and the part."""


_FLAG = re.compile(r'--[A-Za-z0-9_]+(=.*)?', re.DOTALL)
_ONE_VARIABLE = re.compile(r'\{(\w+)\}')


def _format(template: str, variables: Mapping[str, Any], where: str) -> str:
  try:
    return template.format(**variables)
  except KeyError as e:
    raise SpecError(f'{where}: {template!r} names no variable {e.args[0]!r} '
                    f'(variables: {", ".join(sorted(variables))}).') from None
  except (IndexError, ValueError) as e:
    raise SpecError(f'{where}: bad template {template!r}: {e}.') from None


def _templates(templates: Sequence[str], variables: Mapping[str, Any],
               where: str) -> tuple[str, ...]:
  """Formats each template; a lone `{variable}` holding a tuple splices it."""
  out = []
  for template in templates:
    one = _ONE_VARIABLE.fullmatch(template)
    if one and isinstance(variables.get(one[1]), tuple):
      out += [_format(t, variables, where) for t in variables[one[1]]]
    else:
      out.append(_format(template, variables, where))
  return tuple(out)


def _number(value: NumberOrVariable, variables: Mapping[str, Any],
            where: str) -> Any:
  if not isinstance(value, str):
    return value
  if value not in variables:
    raise SpecError(f'{where}: {value!r} names no variable (variables: '
                    f'{", ".join(sorted(variables))}).')
  return variables[value]


def _measures(specs: Sequence[MeasureSpec], variables: Mapping[str, Any],
              where: str) -> tuple[Measure, ...]:
  out = []
  for m in specs:
    arg = None if m.arg is None else _number(m.arg, variables, where)
    try:
      out.append(Measure(_format(m.label, variables, where), m.kind, arg,
                         _format(m.metric, variables, where), m.scale))
    except SpecError:
      raise
    except ValueError as e:
      raise SpecError(f'{where}: {e}') from None
  return tuple(out)


def _matches(point: Mapping[str, Any],
             only: Sequence[Mapping[str, Any]]) -> bool:
  return not only or any(all(point.get(k) == v for k, v in alt.items())
                         for alt in only)


def _scale(spec: TableSpec, name: str, points: Sequence[Mapping[str, Any]],
           where: str) -> Scale:
  """The `Scale` called `name` of `spec`, one `Setting` per point it runs."""
  scale = spec.paper_scale if name == 'paper' else spec.small
  for alt in scale.only:
    known = {k for p in points for k in p}
    unknown = sorted(set(alt) - known)
    if unknown:
      raise SpecError(f'{where}, {name} scale: only names no variable '
                      f'{unknown[0]!r} (variables of the axes: '
                      f'{", ".join(sorted(known))}).')
    if not any(_matches(p, (alt,)) for p in points):
      raise SpecError(f'{where}, {name} scale: only {dict(alt)} matches no '
                      'point.')
  settings = []
  for point in points:
    if not _matches(point, scale.only):
      continue
    variables = {**spec.variables, **scale.variables, **point}
    label = _format(spec.label, variables, f'{where}, {name} scale')
    at = f'{where}, point {label!r} at {name} scale'
    flags = (f'--task={_format(scale.task, variables, at)}',
             *(f'--task_option={option}' for option in
               _templates(scale.task_options, variables, at)),
             *(() if scale.model is None else
               (f'--task_option=model={_format(scale.model, variables, at)}',)),
             *_templates(scale.point_flags, variables, at))
    rounds = _number(scale.rounds, variables, at)
    measures = _measures(scale.measures or spec.measures, variables, at)
    if name != 'paper' and scale.measures is None:
      paper = {**spec.variables, **spec.paper_scale.variables, **point}
      measures = _stand_in_measures(
          measures, _number(spec.paper_scale.rounds, paper, at), rounds)
    settings.append(Setting(label, flags, rounds, measures))
  labels = [s.label for s in settings]
  for label in labels:
    if labels.count(label) > 1:
      raise SpecError(f'{where}, {name} scale: two points are labelled '
                      f'{label!r}; the label template {spec.label!r} must '
                      'tell them apart.')
  stand_in = (None if scale.stand_in is None else
              _SMALL_NOTE.format(what=scale.stand_in))
  return Scale(settings=tuple(settings), seeds=scale.seeds, flags=scale.flags,
               method_flags=scale.method_flags, stand_in=stand_in)


def _check_methods(spec: TableSpec, settings: Sequence[Setting],
                   where: str) -> None:
  labels = [m.label for m in spec.methods]
  setting_labels = [s.label for s in settings]
  for method in spec.methods:
    at = f'{where}, method {method.label!r}'
    if labels.count(method.label) > 1:
      raise SpecError(f'{at}: two methods have this label.')
    if method.missing is not None and method.flags:
      raise SpecError(f'{at}: has flags and a reason it is missing; give '
                      'one.')
    if method.missing is None:
      bad = [f for f in method.flags if not _FLAG.fullmatch(f)]
      if not method.flags or bad:
        raise SpecError(f'{at}: ' + (f'{bad[0]!r} is not a --name=value flag.'
                                     if bad else 'no flags and no reason it '
                                     'is missing.'))
      algorithms = [f for f in method.flags if f.startswith('--algorithm=')]
      if len(algorithms) != 1:
        raise SpecError(f'{at}: needs one --algorithm= flag, has '
                        f'{len(algorithms)}.')
    for label in method.settings or ():
      if label not in setting_labels:
        raise SpecError(f'{at}: runs in {label!r}, which is no setting of '
                        f'the paper scale ({", ".join(setting_labels)}).')
  for name, scale in (('paper', spec.paper_scale), ('small', spec.small)):
    for label in scale.method_flags:
      if label not in labels:
        raise SpecError(f'{where}, {name} scale: method_flags for '
                        f'{label!r}, which is no method of the table.')


def _printed(spec: TableSpec, settings: Sequence[Setting],
             where: str) -> dict[tuple[str, str, str], Printed]:
  """`printed` rows -> `{(method, setting, measure): (mean, std) or None}`."""
  by_label = {s.label: s for s in settings}
  for row in spec.printed_stds:
    if row not in spec.printed:
      raise SpecError(f'{where}, printed_stds row {row!r}: no such printed '
                      'row.')
  printed = {}
  for row, values in spec.printed.items():
    at = f'{where}, printed row {row!r}'
    if spec.methods_as_rows:
      if row not in [m.label for m in spec.methods]:
        raise SpecError(f'{at}: no such method.')
      cells = [(row, s.label, m.label) for s in settings for m in s.measures]
    else:
      if row not in by_label:
        raise SpecError(f'{at}: no such setting at paper scale.')
      cells = [(method.label, row, m.label) for method in spec.methods
               for m in by_label[row].measures]
    if len(values) != len(cells):
      raise SpecError(f'{at}: {len(values)} values for {len(cells)} cells.')
    has_std = [cell[2] not in spec.stdless for cell in cells]
    stds = spec.printed_stds.get(row)
    if stds is None:
      stds = [None] * sum(has_std)
    if len(stds) != sum(has_std):
      raise SpecError(f'{at}: {len(stds)} stds for {sum(has_std)} cells '
                      'with a std.')
    stds = iter(stds)
    for cell, value, with_std in zip(cells, values, has_std):
      std = next(stds) if with_std else None
      printed[cell] = None if value is None else (value, std)
  return printed


def expand(spec: TableSpec) -> Table:
  """The `Table` of `spec`: its points at each scale, as `binaries.train` flags.

  Raises:
    SpecError: If the spec is malformed (a template naming no variable, a
      method without exactly one `--algorithm=`, a printed row of the wrong
      length, ...); the message names the table and the method, point or
      row.
  """
  where = f'{spec.paper} table {spec.number}'
  if spec.paper not in PAPERS:
    raise SpecError(f'{where}: unknown paper (papers: {", ".join(PAPERS)}).')
  points = [dict(itertools.chain.from_iterable(v.items() for v in values))
            for values in itertools.product(*spec.axes)]
  paper = _scale(spec, 'paper', points, where)
  small = _scale(spec, 'small', points, where)
  if small.stand_in is None or paper.stand_in is not None:
    raise SpecError(f'{where}: the small scale says what stands in '
                    '(stand_in), the paper scale does not.')
  _check_methods(spec, paper.settings, where)
  return Table(paper=spec.paper, number=spec.number, title=spec.title,
               methods=spec.methods, methods_as_rows=spec.methods_as_rows,
               printed=_printed(spec, paper.settings, where),
               paper_scale=paper, small=small, notes=spec.notes)


def check_names(spec: TableSpec, *, algorithms: Container[str],
                flag_names: Container[str]) -> None:
  """Checks that `spec`'s methods name known algorithms and flags.

  Args:
    spec: The table.
    algorithms: The registered algorithm names.
    flag_names: `binaries.train`'s flags (a `--noNAME` is NAME's negation).

  Raises:
    SpecError: Naming the table and the method.
  """
  where = f'{spec.paper} table {spec.number}'
  for method in spec.methods:
    extra = [flag for scale in (spec.paper_scale, spec.small)
             for flag in scale.method_flags.get(method.label, ())]
    for flag in (*method.flags, *extra):
      name, _, value = flag[2:].partition('=')
      at = f'{where}, method {method.label!r}'
      if name == 'algorithm' and value not in algorithms:
        raise SpecError(f'{at}: --algorithm={value} is not a registered '
                        'algorithm.')
      if name not in flag_names and not (name.startswith('no') and
                                         name[2:] in flag_names):
        raise SpecError(f'{at}: binaries.train has no flag --{name}.')

