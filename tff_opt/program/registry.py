"""Algorithms by name, and how `binaries.train`'s flags become a run of one.

This is the one module between the flags and the library: the binary's
settings, by flag name, go in; a built process comes out. So it holds,
together, what that takes:

- `ALGORITHMS`: each `--algorithm` name with its declaration (`Spec`, in
  its module: `fed_curv.SPEC`, ...; see `tff_opt.algorithms.hparams`), its
  public builder and, where FedBN composes with it, the recipe FedBN wraps.
  Nothing about an algorithm's hyper-parameters is restated here: which
  flags it reads, which it needs, which builder argument each flag is
  (`HParam.argument_name`), its range (`HParam.check`), its paper's client
  weighting, who makes its server step (`Spec.server_rule`), the task facts
  its builder takes and the arguments its entry fixes (`Spec.preset`) all
  come from its `Spec`; `builder_arguments` and `build_process` read them
  the same way for every algorithm.
- the settings every algorithm shares (`shared_arguments`: the client and
  server optimizers, the client learning-rate schedule, the weighting),
  which are the binary's flags and not any algorithm's declaration;
- `FlagError`, the error that names the flag a refused value came from.

Flag errors: a declared hyper-parameter's value is checked by its
declaration (`HParam.check`, the builder's own check) before anything is
built, and refused as `--feddyn_alpha=0.0: alpha must be positive, got
0.0.`. The shared settings' builders (an optimizer, a schedule) check
several flags' values in one call, and which of them an error is about is
known from the call that raised it, never read from the message: each
builder is first called with one flag's value at a time, the others at
valid values (`_build_checking_each_flag`), in the order in which it
checks its arguments, so that the flag reported is the one it would refuse
first (building an optimizer or a schedule costs nothing worth counting).
A check of the task's model against a flag (`--fedbn`: a model with batch
norm; `--personalize`) raises a `FlagError` marked `about_model`, which the
binary reports with the task's name.

Any other `ValueError` (a combination of settings, or a builder's refusal
of a value the declaration allows, e.g. FedBN over FedCurv asked for
Eq. 3) is left as it is: the binary reports its message alone.
"""

import dataclasses
from collections.abc import Callable, Mapping
import functools
from typing import Any, Optional

import tensorflow_federated as tff

from tff_opt import algorithms
from tff_opt.algorithms import fed_adc
from tff_opt.algorithms import fed_bn
from tff_opt.algorithms import fed_curv
from tff_opt.algorithms import fed_dc
from tff_opt.algorithms import fed_dyn
from tff_opt.algorithms import fed_for
from tff_opt.algorithms import fed_gkd
from tff_opt.algorithms import fed_ntd
from tff_opt.algorithms import fed_opt
from tff_opt.algorithms import fed_prox
from tff_opt.algorithms import fed_ptr
from tff_opt.algorithms import fed_rs
from tff_opt.algorithms import hparams as hparams_lib
from tff_opt.algorithms import moon
from tff_opt.algorithms import scaffold
from tff_opt.algorithms import slowmo
from tff_opt.round import optimizers
from tff_opt.round import schedules


# --- The algorithms ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """A registered algorithm.

  Attributes:
    name: The `--algorithm` value.
    spec: Its declaration (`hparams.Spec`), kept in its own module.
    builder: Its public builder (`tff_opt.algorithms.build_*`): it takes
      the model function, the shared arguments (`Spec.server_rule` says
      which), each hyper-parameter of `spec.hparams` under its argument
      name, the task facts `spec.task_facts` names and `spec.preset`.
    fedbn_recipe: The recipe `fed_bn.build_fed_bn` wraps for `--fedbn`
      over it, taking the same hyper-parameters and task facts as
      `builder`; `None`: FedBN does not compose with it.
  """
  name: str
  spec: hparams_lib.Spec
  builder: Callable[..., Any]
  fedbn_recipe: Optional[Callable[..., Any]] = None

  @property
  def summary(self) -> str:
    """One line on what it is, from its spec (`--help` and the docs)."""
    return self.spec.summary

  @property
  def flags(self) -> tuple[str, ...]:
    """Every flag of its own that `builder` reads."""
    return self.spec.flags

  @property
  def needed(self) -> tuple[str, ...]:
    """The flags it cannot run without (no default)."""
    return self.spec.needed

  @property
  def client_weighting(self) -> str:
    """Its paper's weighting as `--client_weighting` spells it."""
    return ('uniform' if self.spec.client_weighting ==
            tff.learning.ClientWeighting.UNIFORM else 'num_examples')

  @property
  def server_rule(self) -> str:
    """Who makes its server step, one of `SERVER_RULES`."""
    return self.spec.server_rule

  @property
  def task_facts(self) -> tuple[str, ...]:
    """What `builder` takes of the task beside its model (`hparams.TASK_FACTS`)."""
    return self.spec.task_facts


SERVER_RULES = hparams_lib.SERVER_RULES

ALGORITHMS: dict[str, Algorithm] = {
    a.name: a for a in [
        Algorithm('fedopt', fed_opt.SPEC, algorithms.build_fed_opt,
                  fedbn_recipe=fed_opt.fed_opt_recipe),
        Algorithm('fedadc', fed_adc.SPEC, algorithms.build_fed_adc),
        Algorithm('fedadc_plus', fed_adc.PLUS_SPEC, algorithms.build_fed_adc),
        Algorithm('slowmo', slowmo.SPEC, algorithms.build_slowmo),
        Algorithm('fedprox', fed_prox.SPEC, algorithms.build_fed_prox,
                  fedbn_recipe=fed_prox.fed_prox_recipe),
        Algorithm('fedfor', fed_for.SPEC, algorithms.build_fed_for,
                  fedbn_recipe=fed_for.fed_for_recipe),
        Algorithm('fedcurv', fed_curv.SPEC, algorithms.build_fed_curv,
                  fedbn_recipe=fed_curv.stateless_recipe),
        Algorithm('feddyn', fed_dyn.SPEC, algorithms.build_fed_dyn,
                  fedbn_recipe=fed_dyn.fed_dyn_recipe),
        Algorithm('fedntd', fed_ntd.SPEC, algorithms.build_fed_ntd),
        Algorithm('fedrs', fed_rs.SPEC, algorithms.build_fed_rs),
        Algorithm('fedgkd', fed_gkd.SPEC, algorithms.build_fed_gkd),
        Algorithm('moon', moon.SPEC, algorithms.build_moon),
        Algorithm('feddc', fed_dc.SPEC, algorithms.build_fed_dc),
        Algorithm('scaffold', scaffold.SPEC, algorithms.build_scaffold),
        Algorithm('fedptr_s', fed_ptr.SPEC, algorithms.build_fed_ptr),
        Algorithm('fedptr', fed_ptr.CLIENT_SIDE_SPEC,
                  algorithms.build_fed_ptr),
    ]
}
FEDBN_BASES = tuple(a.name for a in ALGORITHMS.values() if a.fedbn_recipe)


def algorithm_hparams() -> tuple[hparams_lib.HParam, ...]:
  """Every registered algorithm's hyper-parameters, each flag once.

  A flag two algorithms read (FedADC's and FedADC+'s `--fedadc_beta`,
  FedPTR's and FedPTR-S's `--fedptr_mu`) is one declaration, shared.

  Raises:
    ValueError: If two different declarations name the same flag.
  """
  seen: dict[str, hparams_lib.HParam] = {}
  for algorithm in ALGORITHMS.values():
    for hparam in algorithm.spec.hparams:
      if seen.setdefault(hparam.flag, hparam) is not hparam:
        raise ValueError(f'--{hparam.flag} is declared twice, differently '
                         f'(again by {algorithm.name}).')
  return tuple(seen.values())


def with_current_names(recorded: Mapping[str, Any]) -> dict[str, Any]:
  """A run's recorded settings, its algorithm's old flag spellings renamed.

  Args:
    recorded: A run's `hparams.json`, by flag name; its `algorithm` says
      which declarations' old spellings apply (`mu` is `fedprox_mu` for
      FedProx, `fedptr_mu` for FedPTR).

  Returns:
    A copy with today's flag names (`hparams_lib.with_current_names`);
    `recorded` itself where its algorithm is not registered.
  """
  algorithm = ALGORITHMS.get(recorded.get('algorithm'))
  if algorithm is None:
    return dict(recorded)
  return hparams_lib.with_current_names(recorded, algorithm.spec.hparams)


def flags_not_read_by(name: str) -> tuple[str, ...]:
  """The `binaries.train` flags that algorithm `name` does not read, sorted.

  Those are the other algorithms' own flags (`Algorithm.flags`) and, for an
  algorithm with its own server rule (`server_rule == 'own'`), the server
  optimizer's flags (`--server_opt`, of which only `sgd` is accepted, and
  `--server_lr`, `--server_tau`, ...).

  Args:
    name: A key of `ALGORITHMS`.

  Returns:
    Flag names without dashes.
  """
  algorithm = ALGORITHMS[name]
  others = {f for a in ALGORITHMS.values() for f in a.flags}
  if algorithm.server_rule == 'own':
    others.add('server_opt')
    others.update(f for _, f in SERVER_OPTIMIZER_FLAGS)
  return tuple(sorted(others - set(algorithm.flags)))


# --- Flags -> a process ----------------------------------------------------------


def builder_arguments(name: str, hparams: Mapping[str, Any]) -> dict[str, Any]:
  """Algorithm `name`'s flag values as its builder's arguments, checked.

  Each hyper-parameter its `Spec` declares is looked up under its flag
  (`None` or absent: the declared default), checked by its declaration and
  passed under its argument name (`--feddyn_alpha` is `alpha`); other keys
  of `hparams` are not read.

  Args:
    name: A key of `ALGORITHMS`.
    hparams: Settings by flag name.

  Returns:
    `{argument: value}`.

  Raises:
    FlagError: If a declaration refuses its flag's value.
  """
  arguments = {}
  for hparam in ALGORITHMS[name].spec.hparams:
    value = hparams.get(hparam.flag)
    if value is None:
      value = hparam.default
    check_flag(hparam.flag, value, hparam.check)
    arguments[hparam.argument_name] = value
  return arguments


def build_process(name: str, model_fn: Callable[[], Any], *,
                  client_optimizer_fn, server_optimizer_fn, client_weighting,
                  client_lr_schedule,
                  client_learning_rate: Optional[float] = None,
                  fedbn: bool = False,
                  num_clients: Optional[int] = None,
                  client_epochs: Optional[int] = None, **hparams):
  """Builds algorithm `name` from the run's settings, as its `Spec` says.

  Its builder is given: its hyper-parameters (`builder_arguments`, from
  `hparams`, by flag name; the other algorithms' flags in `hparams` are not
  read); the task facts it takes (`Spec.task_facts`: `num_clients`, the
  task's training population, and `client_epochs`, the local epochs its
  client datasets hold, `None` meaning 1); its preset arguments
  (`Spec.preset`); the client weighting and schedule; and, by its
  `Spec.server_rule`, either the client and server optimizers or, for an
  algorithm whose local steps and server rule are its own ('own': FedADC,
  FedADC+, SlowMo), `client_learning_rate`, the rate of its plain client
  SGD (`None` for another client optimizer, which it cannot run).

  With `fedbn`, builds `name` + FedBN (`fed_bn.build_fed_bn`: batch-norm
  layers local to each client) over the recipe its entry names
  (`Algorithm.fedbn_recipe`), with the same arguments.

  A setting given under its flag's earlier spelling (`lam=` for
  `fedcurv_lam=`, `HParam.aliases`) is read as today's name where that is
  not given, so that programs written before the flags were renamed build
  the same process rather than silently take the default.

  Raises:
    FlagError: If a declaration refuses a flag's value, or (`about_model`)
      `fedbn` is given for a model without a batch-norm layer.
    ValueError: If `name` is unknown (or has no FedBN variant), a
      hyper-parameter it needs is missing, its own local steps have no
      plain SGD learning rate, or the builder refuses the settings.
  """
  if name not in ALGORITHMS:
    raise ValueError(f'Unknown algorithm {name!r}; known algorithms: '
                     f'{", ".join(ALGORITHMS)}.')
  algorithm = ALGORITHMS[name]
  hparams = hparams_lib.with_current_names(hparams, algorithm.spec.hparams)
  missing = [h for h in algorithm.needed if hparams.get(h) is None]
  if missing:
    raise ValueError(f'Algorithm {name!r} needs ' +
                     ', '.join(f'--{h}' for h in missing) + '.')
  arguments = builder_arguments(name, hparams)
  facts = dict(num_clients=num_clients, client_epochs=client_epochs or 1)
  arguments.update({fact: facts[fact] for fact in algorithm.task_facts})
  arguments.update(algorithm.spec.preset)
  arguments.update(client_weighting=client_weighting,
                   client_lr_schedule=client_lr_schedule)
  if algorithm.server_rule == 'own':
    if client_learning_rate is None:
      raise ValueError(f'--algorithm={name} takes its local steps with '
                       'plain SGD; use --client_opt=sgd.')
    arguments['client_learning_rate'] = client_learning_rate
  else:
    arguments.update(client_optimizer_fn=client_optimizer_fn,
                     server_optimizer_fn=server_optimizer_fn)
  if not fedbn:
    return algorithm.builder(model_fn, **arguments)
  if algorithm.fedbn_recipe is None:
    raise ValueError(f'--fedbn: algorithm {name!r} has no FedBN variant; '
                     f'FedBN runs on {", ".join(FEDBN_BASES)}.')
  check_flag('fedbn', None,
             lambda _: fed_bn.find_batch_norm_variables(model_fn),
             about_model=True)
  return algorithms.build_fed_bn(algorithm.fedbn_recipe, model_fn,
                                 **arguments)


# --- Flag errors ---------------------------------------------------------------


class FlagError(ValueError):
  """A flag's value, refused; `str()` is `--flag=value: reason`.

  Attributes:
    flag: The flag's name, without dashes.
    value: Its value (`None`: not shown, as for a boolean flag that is on).
    reason: Why, in the library's words.
    about_model: The value is refused because of the task's model (the
      binary puts the task's name before `reason`).
  """

  def __init__(self, flag: str, reason: str, *, value: Any = None,
               about_model: bool = False):
    self.flag = flag
    self.value = value
    self.reason = reason
    self.about_model = about_model
    super().__init__(self.line())

  def line(self, task: Optional[str] = None) -> str:
    """The one-line message; `task` is named first when `about_model`."""
    setting = f'--{self.flag}' + (
        '' if self.value is None else f'={self.value}')
    where = f'task {task}: ' if self.about_model and task else ''
    return f'{setting}: {where}{self.reason}'


def check_flag(flag: str, value: Any, check: Callable[[Any], Any], *,
               about_model: bool = False) -> None:
  """Calls `check(value)`; a `ValueError` becomes a `FlagError` for `flag`.

  Args:
    flag: The flag `value` comes from.
    value: Its value (`None`: not shown in the message).
    check: Raises `ValueError` if `value` is refused.
    about_model: `check` tests the task's model against the flag.

  Raises:
    FlagError: If `check` raises a `ValueError`.
  """
  try:
    check(value)
  except ValueError as e:
    raise FlagError(flag, str(e), value=value, about_model=about_model) from e


def _build_checking_each_flag(build: Callable[..., Any],
                              flag_of_argument: tuple[tuple[str, str], ...],
                              hparams: Mapping[str, Any],
                              valid: Mapping[str, Any]) -> Any:
  """`build(**{argument: hparams[flag]})`, each flag first checked alone.

  Args:
    build: A builder that checks its arguments when called.
    flag_of_argument: `(argument, flag)` pairs, in the order in which
      `build` checks its arguments.
    hparams: The run's settings, by flag name.
    valid: Valid values of the arguments `build` requires; the others are
      left at `build`'s defaults while one flag is checked.

  Returns:
    What `build` returns.

  Raises:
    FlagError: If `build` refuses one flag's value given alone.
    ValueError: If it refuses only their combination.
  """
  for argument, flag in flag_of_argument:
    check_flag(flag, hparams[flag],
               lambda v, a=argument: build(**{**valid, a: v}))
  return build(**{a: hparams[f] for a, f in flag_of_argument})


# --- The settings every algorithm shares --------------------------------------

# (builder argument, flag), in the order in which each builder checks them.
SERVER_OPTIMIZER_FLAGS = (('learning_rate', 'server_lr'),
                          ('momentum', 'server_momentum'),
                          ('tau', 'server_tau'),
                          ('beta_1', 'server_beta_1'),
                          ('beta_2', 'server_beta_2'))
CLIENT_OPTIMIZER_FLAGS = (('learning_rate', 'client_lr'),)
SCHEDULE_FLAGS = (('learning_rate', 'client_lr'),
                  ('decay_factor', 'client_lr_decay_factor'),
                  ('decay_every', 'client_lr_decay_every'))


def server_optimizer(hparams: Mapping[str, Any]
                     ) -> tff.learning.optimizers.Optimizer:
  """`--server_opt` with `--server_lr`, `--server_tau`, ... (`optimizers`).

  Raises:
    FlagError: If a flag's value is out of range for `--server_opt`.
  """
  return _build_checking_each_flag(
      functools.partial(optimizers.build_server_optimizer,
                        hparams['server_opt']),
      SERVER_OPTIMIZER_FLAGS, hparams, valid={'learning_rate': 1.0})


def client_optimizer(hparams: Mapping[str, Any]
                     ) -> tff.learning.optimizers.Optimizer:
  """`--client_opt` with `--client_lr`.

  Raises:
    FlagError: If `--client_lr` is not positive.
  """
  return _build_checking_each_flag(
      functools.partial(optimizers.build_client_optimizer,
                        hparams['client_opt']),
      CLIENT_OPTIMIZER_FLAGS, hparams, valid={'learning_rate': 1.0})


def client_lr_schedule(hparams: Mapping[str, Any]
                       ) -> Optional[schedules.Schedule]:
  """`--client_lr_decay=staircase` (ExpDecay), else `None` (constant).

  Raises:
    FlagError: If `--client_lr`, `--client_lr_decay_factor` or
      `--client_lr_decay_every` is out of range.
  """
  if hparams['client_lr_decay'] != 'staircase':
    return None
  return _build_checking_each_flag(schedules.staircase_decay, SCHEDULE_FLAGS,
                                   hparams, valid={'learning_rate': 1.0})


def client_weighting(hparams: Mapping[str, Any]) -> tff.learning.ClientWeighting:
  """`--client_weighting`: 'num_examples' or 'uniform'."""
  return (tff.learning.ClientWeighting.NUM_EXAMPLES
          if hparams['client_weighting'] == 'num_examples' else
          tff.learning.ClientWeighting.UNIFORM)


def shared_arguments(hparams: Mapping[str, Any]) -> dict[str, Any]:
  """The builder arguments every algorithm takes, from the flags.

  Returns:
    `{'client_optimizer_fn', 'server_optimizer_fn', 'client_weighting',
    'client_lr_schedule'}`, as `registry.build_process` takes them.

  Raises:
    FlagError: If a flag's value is out of range.
    ValueError: If the builders refuse a combination of flags.
  """
  return {
      'server_optimizer_fn': server_optimizer(hparams),
      'client_optimizer_fn': client_optimizer(hparams),
      'client_lr_schedule': client_lr_schedule(hparams),
      'client_weighting': client_weighting(hparams),
  }


def plain_sgd_learning_rate(hparams: Mapping[str, Any]) -> Optional[float]:
  """`--client_lr` where `--client_opt=sgd`, else `None`.

  The number FedADC, FedADC+ and SlowMo take their own local steps (plain
  SGD) with: `registry.build_process`'s `client_learning_rate`.
  """
  return (float(hparams['client_lr']) if hparams['client_opt'] == 'sgd'
          else None)
