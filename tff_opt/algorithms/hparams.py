"""An algorithm's hyper-parameters, declared once, in the algorithm's module.

Each algorithm module opens with its `Spec`: the one-line summary, the
hyper-parameters of its own (`HParam`: flag name, builder argument,
default, bounds, help), its paper's client weighting, who makes its server
step, which facts of the task its builder takes and which builder arguments
its registry entry fixes. Everything else reads that declaration:

- the library builder's defaults (`build_fed_curv`'s `client_weighting` is
  `fed_curv.SPEC.client_weighting`, `build_fed_ntd`'s `beta` is
  `fed_ntd.NTD_BETA.default`: the same objects);
- the library builder's range checks: `HParam.check` is the one validator
  of a declared hyper-parameter (`build_fed_dyn` calls
  `fed_dyn.ALPHA.check(alpha)`), with the library's messages (`alpha must
  be positive, got 0.0.`, `tff_opt.checks`);
- `binaries.train`'s flags (`define_flag`: the declared default and help,
  and a validator that is `HParam.check`, so that `--feddyn_alpha=0` is
  refused with the builder's own sentence);
- the registry (`tff_opt.program.registry`): which flags an algorithm
  reads, which it needs, which builder argument each flag is, its default
  weighting and server rule;
- the documentation's flag reference (`docs/_ext/tffopt_docs.py`:
  `HParam.range_text`).

Two hyper-parameters are shared by several algorithms and declared here:
`--beta` (FedADC's and SlowMo's global momentum) and `--mu` (FedProx's
proximal strength, FedPTR's base strength). Everything an algorithm's update
needs beyond its own hyper-parameters (client and server optimizers,
client learning-rate schedule, client weighting) is a builder argument
every algorithm shares (`tff_opt.program.registry.shared_arguments`).
"""

import dataclasses
from typing import Any, Optional

import numpy as np
import tensorflow_federated as tff

from tff_opt import checks

KINDS = ('float', 'integer', 'boolean', 'enum')
SERVER_RULES = ('optimizer', 'sgd', 'own')
TASK_FACTS = ('num_clients', 'client_epochs')


@dataclasses.dataclass(frozen=True)
class HParam:
  """One hyper-parameter: its flag, builder argument, default, bounds, help.

  Attributes:
    flag: The `binaries.train` flag, without dashes (`lam`, `feddyn_alpha`).
    default: The default value, the flag's and the builder's; `None` where
      the algorithm has none (`needed`) or derives one (`--beta_local`).
    help: The flag's help text.
    kind: 'float', 'integer', 'boolean' or 'enum'.
    choices: An enum's values.
    lower: The lower bound, or `None`.
    upper: The upper bound, or `None`.
    lower_open: `lower` itself is refused (`> 0` rather than `>= 0`).
    upper_open: `upper` itself is refused (a momentum's `[0, 1)`).
    needed: The algorithm refuses to run without a value (no default).
    argument: The builder's argument the flag's value is passed as, where
      it is not the flag's name (`--feddyn_alpha` is `alpha`); see
      `argument_name`.
  """
  flag: str
  default: Any
  help: str
  kind: str = 'float'
  choices: tuple[str, ...] = ()
  lower: Optional[float] = None
  upper: Optional[float] = None
  lower_open: bool = False
  upper_open: bool = False
  needed: bool = False
  argument: Optional[str] = None

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f'HParam {self.flag}: kind {self.kind!r} is not one '
                       f'of {KINDS}.')
    if (self.kind == 'enum') != bool(self.choices):
      raise ValueError(f'HParam {self.flag}: choices go with kind enum.')
    if self.kind not in ('float', 'integer') and (
        self.lower is not None or self.upper is not None):
      raise ValueError(f'HParam {self.flag}: bounds go with kind float or '
                       'integer.')
    if (self.lower_open and self.lower is None) or (
        self.upper_open and self.upper is None):
      raise ValueError(f'HParam {self.flag}: an open bound needs its value.')
    if self.needed and self.default is not None:
      raise ValueError(f'HParam {self.flag}: a needed one has no default.')
    if self.default is not None:
      self.check(self.default)

  @property
  def argument_name(self) -> str:
    """The builder's argument: `argument`, or else the flag's name."""
    return self.argument or self.flag

  def check(self, value: Any, name: Optional[str] = None) -> None:
    """Raises `ValueError` if `value` is out of the declared range.

    The one check of a declared hyper-parameter: the builders call it on
    their arguments, `define_flag`'s validator on the flag's value and the
    registry on the values it is given. `None` passes where the declared
    default is `None` and the value is not `needed` (the builder derives
    one: `--beta_local`); a symbolic tensor (a value set inside a
    computation) cannot be checked and passes.

    Args:
      value: The value.
      name: What the message calls it (default: `argument_name`).

    Raises:
      ValueError: `<name> must be <what>, got <value>.`, e.g. `alpha must
        be positive, got 0.0.` (`requirement` says what).
    """
    name = name or self.argument_name
    if value is None and self.default is None and not self.needed:
      return
    if value is not None and (not checks.checkable(value) or
                              self._accepts(value)):
      return
    shown = (checks.shown(value) if self.kind == 'float' else repr(value))
    raise ValueError(f'{name} must be {self.requirement()}, got {shown}.')

  def _accepts(self, value: Any) -> bool:
    """Whether `value` (not `None`) is of the kind and in the bounds."""
    if self.kind == 'enum':
      return isinstance(value, str) and value in self.choices
    if self.kind == 'boolean':
      return isinstance(value, (bool, np.bool_))
    if self.kind == 'integer':
      if isinstance(value, (bool, np.bool_)) or not isinstance(
          value, (int, np.integer)):
        return False
      number = float(value)
    else:
      number = checks.finite_number(value)
      if number is None:
        return False
    if self.lower is not None and (
        number < self.lower or (self.lower_open and number == self.lower)):
      return False
    return self.upper is None or not (
        number > self.upper or (self.upper_open and number == self.upper))

  def requirement(self) -> str:
    """What a value must be, as the messages say it.

    E.g. `positive`, `a non-negative number`, `in [0, 1)`, `a positive
    integer`, `an integer >= 0`, `one of auto, on, off`, `true or false`:
    the words of `tff_opt.checks`' messages where a declaration has their
    range.
    """
    if self.kind == 'enum':
      return f'one of {", ".join(self.choices)}'
    if self.kind == 'boolean':
      return 'true or false'
    if self.kind == 'integer':
      if self.lower == 1 and not self.lower_open and self.upper is None:
        return 'a positive integer'
      bounds = self.range_text()
      return 'an integer' + ('' if bounds == 'any' else
                             f' {bounds}' if bounds[0] in '<>' else
                             f' in {bounds}')
    if self.lower == 0 and self.upper is None:
      return 'positive' if self.lower_open else 'a non-negative number'
    bounds = self.range_text()
    return ('a finite number' if bounds == 'any' else
            f'a number {bounds}' if bounds[0] in '<>' else f'in {bounds}')

  def range_text(self) -> str:
    """`[0, 1]`, `[0, 1)`, `> 0`, `>= 0`, `<= 1` or `any`."""
    if self.lower is not None and self.upper is not None:
      return (f'{"(" if self.lower_open else "["}{self.lower:g}, '
              f'{self.upper:g}{")" if self.upper_open else "]"}')
    if self.lower is not None:
      return f'{">" if self.lower_open else ">="} {self.lower:g}'
    if self.upper is not None:
      return f'{"<" if self.upper_open else "<="} {self.upper:g}'
    return 'any'


@dataclasses.dataclass(frozen=True)
class Spec:
  """What an algorithm declares once: its hyper-parameters and defaults.

  Attributes:
    summary: One line for `--helpfull` and logs.
    hparams: Its own hyper-parameters, in flag order.
    client_weighting: Its paper's averaging of client updates: the
      builder's default and the binary's when `--client_weighting` is not
      given.
    server_rule: Who makes the server step. 'optimizer': the `--server_opt`
      optimizer on the mean delta (FedOpt and the penalty methods); 'sgd':
      its paper's plain step, SGD with learning rate 1 unless `--server_lr`
      says otherwise, and an adaptive `--server_opt` is refused (FedDyn,
      FedDC); 'own': its own server rule, built in, and `--server_opt` and
      `--server_lr` are unused (FedADC, FedADC+, SlowMo): its builder takes
      `client_learning_rate`, the rate of its own local plain SGD steps,
      and no optimizers.
    task_facts: What the builder takes of the task beside its model:
      'num_clients', the number of training clients (FedDyn's m, FedCurv's
      `cross_silo='auto'`); 'client_epochs', the local epochs each client
      dataset holds (FedCurv's Fisher runs over one of them).
    preset: Builder arguments this entry fixes, as `(argument, value)`
      pairs: FedADC+ is FedADC's builder with `distillation=True`, FedPTR
      its builder with `side='client'`.
  """
  summary: str
  hparams: tuple[HParam, ...] = ()
  client_weighting: tff.learning.ClientWeighting = (
      tff.learning.ClientWeighting.NUM_EXAMPLES)
  server_rule: str = 'optimizer'
  task_facts: tuple[str, ...] = ()
  preset: tuple[tuple[str, Any], ...] = ()

  def __post_init__(self):
    if self.server_rule not in SERVER_RULES:
      raise ValueError(f'server_rule {self.server_rule!r} is not one of '
                       f'{SERVER_RULES}.')
    unknown = set(self.task_facts) - set(TASK_FACTS)
    if unknown:
      raise ValueError(f'Unknown task facts {sorted(unknown)}.')

  @property
  def flags(self) -> tuple[str, ...]:
    """The flags of its own hyper-parameters."""
    return tuple(h.flag for h in self.hparams)

  @property
  def needed(self) -> tuple[str, ...]:
    """The flags it cannot run without."""
    return tuple(h.flag for h in self.hparams if h.needed)


def define_flag(hparam: HParam, flag_values=None) -> None:
  """Defines `hparam`'s absl flag: its default, help and `HParam.check`.

  A number's bounds are not absl's `lower_bound`/`upper_bound` (which have
  no open bound and say it in other words): the flag's validator is the
  declaration's own check, so the flag refuses exactly what the builder
  refuses, with the builder's sentence (absl reports it as `flag
  --beta=1.0: beta must be in [0, 1), got 1.0.`). An enum's and a
  boolean's values are absl's parser's.

  Args:
    hparam: The declaration.
    flag_values: absl's `FlagValues` to define it in (default: absl's
      global `FLAGS`).
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  kwargs = {} if flag_values is None else {'flag_values': flag_values}
  if hparam.kind == 'float':
    flags.DEFINE_float(hparam.flag, hparam.default, hparam.help, **kwargs)
  elif hparam.kind == 'integer':
    flags.DEFINE_integer(hparam.flag, hparam.default, hparam.help, **kwargs)
  elif hparam.kind == 'boolean':
    flags.DEFINE_boolean(hparam.flag, hparam.default, hparam.help, **kwargs)
  else:
    flags.DEFINE_enum(hparam.flag, hparam.default, list(hparam.choices),
                      hparam.help, **kwargs)
  if hparam.lower is None and hparam.upper is None:
    return

  def validate(value) -> bool:
    # An unset flag (None) is the algorithm's default or, where needed, the
    # registry's to report.
    if value is not None:
      try:
        hparam.check(value)
      except ValueError as e:
        raise flags.ValidationError(str(e)) from e
    return True

  flags.register_validator(hparam.flag, validate, **kwargs)


# --- Shared by several algorithms ---------------------------------------------

GLOBAL_MOMENTUM = HParam(
    'beta', 0.9, 'FedADC / SlowMo global momentum beta_global, in [0, 1).',
    lower=0.0, upper=1.0, upper_open=True)
PROXIMAL_MU = HParam(
    'mu', None, 'FedProx proximal strength mu (local objective L_k + mu/2 '
    '||w - w_t||^2), FedPTR\'s base strength; needed by fedprox, fedptr and '
    'fedptr_s.', lower=0.0, needed=True)
