"""An algorithm's hyper-parameters, declared once, in the algorithm's module.

Each algorithm module opens with its `Spec`: the one-line summary, the
hyper-parameters of its own (`HParam`: flag name, default, bounds, help),
its paper's client weighting, who makes its server step and which facts
of the task its builder takes. Everything else reads that declaration:

- the library builder's defaults (`build_fed_curv`'s `client_weighting` is
  `fed_curv.SPEC.client_weighting`, `build_fed_ntd`'s `beta` is
  `fed_ntd.NTD_BETA.default`: the same objects);
- `binaries.train`'s flags (`define_flag`, with the declared default,
  bounds and help);
- the registry's entry (`tff_opt.program.registry`: which flags an
  algorithm reads, which it needs, its default weighting and server rule).

`HParam.check` tests a value against the declared bounds; a declaration's
own default is checked when it is made. Values that reach a builder
without a flag are checked by the builder itself (`tff_opt.checks`), with
the library's messages.

Two hyper-parameters are shared by several algorithms and declared here:
`--beta` (FedADC's and SlowMo's global momentum) and `--mu` (FedProx's
proximal strength, FedPTR's base strength). Everything an algorithm's update
needs beyond its own hyper-parameters (client and server optimizers,
client learning-rate schedule, client weighting) is a builder argument
every algorithm shares (`tff_opt.program.flag_adapters.shared_arguments`).
"""

import dataclasses
import math
from typing import Any, Optional

import tensorflow_federated as tff

KINDS = ('float', 'integer', 'boolean', 'enum')
SERVER_RULES = ('optimizer', 'sgd', 'own')
TASK_FACTS = ('num_clients', 'client_epochs')


@dataclasses.dataclass(frozen=True)
class HParam:
  """One hyper-parameter: its flag, default, bounds and help.

  Attributes:
    flag: The `binaries.train` flag, without dashes (`lam`, `feddyn_alpha`).
    default: The default value, the flag's and the builder's; `None` where
      the algorithm has none (`needed`) or derives one (`--beta_local`).
    help: The flag's help text.
    kind: 'float', 'integer', 'boolean' or 'enum'.
    choices: An enum's values.
    lower: Smallest value allowed (inclusive), or `None`.
    upper: Largest value allowed (inclusive), or `None`.
    needed: The algorithm refuses to run without a value (no default).
  """
  flag: str
  default: Any
  help: str
  kind: str = 'float'
  choices: tuple[str, ...] = ()
  lower: Optional[float] = None
  upper: Optional[float] = None
  needed: bool = False

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f'HParam {self.flag}: kind {self.kind!r} is not one '
                       f'of {KINDS}.')
    if (self.kind == 'enum') != bool(self.choices):
      raise ValueError(f'HParam {self.flag}: choices go with kind enum.')
    if self.needed and self.default is not None:
      raise ValueError(f'HParam {self.flag}: a needed one has no default.')
    if self.default is not None:
      self.check(self.default)

  def check(self, value: Any) -> None:
    """Raises `ValueError` if `value` is out of the declared range.

    `None` passes unless `needed` (the algorithm's own default then).
    """
    if value is None:
      if self.needed:
        raise ValueError(f'--{self.flag} is needed.')
      return
    if self.kind == 'enum':
      if value not in self.choices:
        raise ValueError(f'expected one of {", ".join(self.choices)}.')
      return
    if self.kind == 'boolean':
      if not isinstance(value, bool):
        raise ValueError('expected true or false.')
      return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
        self.kind == 'integer' and not float(value).is_integer()) or (
            not math.isfinite(value)):
      raise ValueError(f'expected {"an integer" if self.kind == "integer" else "a finite number"}.')
    if ((self.lower is not None and value < self.lower) or
        (self.upper is not None and value > self.upper)):
      raise ValueError(f'expected a value in {self.range_text()}.')

  def range_text(self) -> str:
    """`[0, 1]`, `>= 0`, `<= 1` or `any`."""
    if self.lower is not None and self.upper is not None:
      return f'[{self.lower:g}, {self.upper:g}]'
    if self.lower is not None:
      return f'>= {self.lower:g}'
    if self.upper is not None:
      return f'<= {self.upper:g}'
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
      `--server_lr` are unused (FedADC, FedADC+, SlowMo).
    task_facts: What the builder takes of the task beside its model:
      'num_clients', the number of training clients (FedDyn's m);
      'client_epochs', the local epochs each client dataset holds (FedCurv's
      Fisher runs over one of them).
  """
  summary: str
  hparams: tuple[HParam, ...] = ()
  client_weighting: tff.learning.ClientWeighting = (
      tff.learning.ClientWeighting.NUM_EXAMPLES)
  server_rule: str = 'optimizer'
  task_facts: tuple[str, ...] = ()

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
  """Defines `hparam`'s absl flag, with its default, bounds and help.

  Args:
    hparam: The declaration.
    flag_values: absl's `FlagValues` to define it in (default: absl's
      global `FLAGS`).
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  kwargs = {} if flag_values is None else {'flag_values': flag_values}
  bounds = {k: v for k, v in (('lower_bound', hparam.lower),
                              ('upper_bound', hparam.upper)) if v is not None}
  if hparam.kind == 'float':
    flags.DEFINE_float(hparam.flag, hparam.default, hparam.help, **bounds,
                       **kwargs)
  elif hparam.kind == 'integer':
    flags.DEFINE_integer(hparam.flag, hparam.default, hparam.help, **bounds,
                         **kwargs)
  elif hparam.kind == 'boolean':
    flags.DEFINE_boolean(hparam.flag, hparam.default, hparam.help, **kwargs)
  else:
    flags.DEFINE_enum(hparam.flag, hparam.default, list(hparam.choices),
                      hparam.help, **kwargs)


# --- Shared by several algorithms ---------------------------------------------

GLOBAL_MOMENTUM = HParam(
    'beta', 0.9, 'FedADC / SlowMo global momentum beta_global, in [0, 1).',
    lower=0.0, upper=1.0)
PROXIMAL_MU = HParam(
    'mu', None, 'FedProx proximal strength mu (local objective L_k + mu/2 '
    '||w - w_t||^2), FedPTR\'s base strength; needed by fedprox, fedptr and '
    'fedptr_s.', lower=0.0, needed=True)
