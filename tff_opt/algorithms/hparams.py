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
  be positive, got 0.0.`); `HParam` is defined in `tff_opt.checks`, beside
  those messages, and named here;
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
from typing import Any

import tensorflow_federated as tff

from tff_opt import checks

SERVER_RULES = ('optimizer', 'sgd', 'own')
TASK_FACTS = ('num_clients', 'client_epochs')


# Defined beside the checks it words its messages as (`tff_opt.checks`), so
# that a value is checked in one file whoever checks it; declared here.
HParam = checks.HParam


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
  if hparam.lower is not None or hparam.upper is not None:
    flags.register_validator(hparam.flag,
                             hparam.flag_validator(flags.ValidationError),
                             **kwargs)


# --- Shared by several algorithms ---------------------------------------------

GLOBAL_MOMENTUM = HParam(
    'beta', 0.9, 'FedADC / SlowMo global momentum beta_global, in [0, 1).',
    lower=0.0, upper=1.0, upper_open=True)
PROXIMAL_MU = HParam(
    'mu', None, 'FedProx proximal strength mu (local objective L_k + mu/2 '
    '||w - w_t||^2), FedPTR\'s base strength; needed by fedprox, fedptr and '
    'fedptr_s.', lower=0.0, needed=True)
