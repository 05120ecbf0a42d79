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

Every flag is named `<algorithm>_<hyper-parameter>` (`--fedcurv_lam`;
FedADC+ reads FedADC's flags, FedPTR-S FedPTR's). The earlier spellings are
each declaration's `aliases` and keep working: a one-to-one one as absl's
alias, `--mu` (FedProx's and FedPTR's) and `--beta` (FedADC's and SlowMo's)
through `old_spelling_targets`, which sends the value to the flag of the
run's `--algorithm`. The four declarations those two fed are here.
Everything an algorithm's update needs beyond its own hyper-parameters
(client and server optimizers, client learning-rate schedule, client
weighting) is a builder argument every algorithm shares
(`tff_opt.program.registry.shared_arguments`).
"""

import dataclasses
from typing import Any, Mapping, Sequence

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
  --fedadc_beta=1.0: beta must be in [0, 1), got 1.0.`). An enum's and a
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


def old_spelling_targets(declared: Sequence[HParam]
                         ) -> dict[str, tuple[HParam, ...]]:
  """Each earlier spelling in `declared`, with the declarations it names.

  Args:
    declared: Every declaration, each once (`registry.algorithm_hparams`).

  Returns:
    `{old spelling: (declaration, ...)}`: one declaration for a plain
    rename (`lam`: `--fedcurv_lam`), several where one old flag fed several
    algorithms (`mu`: `--fedprox_mu`, `--fedptr_mu`).

  Raises:
    ValueError: If an old spelling is also a declaration's flag.
  """
  flags_now = {h.flag for h in declared}
  targets: dict[str, list[HParam]] = {}
  for hparam in declared:
    for alias in hparam.aliases:
      if alias in flags_now:
        raise ValueError(f'--{alias} is both a flag and an old spelling of '
                         f'--{hparam.flag}.')
      targets.setdefault(alias, []).append(hparam)
  return {alias: tuple(hs) for alias, hs in targets.items()}


def define_flags(declared: Sequence[HParam], flag_values=None) -> None:
  """Defines every declaration's flag (`define_flag`) and its old spellings.

  A one-to-one old spelling is absl's alias of its flag (`--lam=3` sets
  `--fedcurv_lam`); one that several declarations list is a flag of its own,
  unset by default, whose value `binaries.train` gives to the flag of the
  run's `--algorithm` after parsing. That flag checks its value against
  every declaration it names while parsing, so `--mu=-1` is refused as
  before, whichever algorithm the run is.

  Args:
    declared: Every declaration, each once.
    flag_values: absl's `FlagValues` (default: absl's global `FLAGS`).

  Raises:
    ValueError: If an old spelling is also a flag, or one shared by several
      declarations names flags that are not all floats.
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  kwargs = {} if flag_values is None else {'flag_values': flag_values}
  for hparam in declared:
    define_flag(hparam, flag_values)
  for alias, targets in old_spelling_targets(declared).items():
    if len(targets) == 1:
      flags.DEFINE_alias(alias, targets[0].flag, **kwargs)
      continue
    kinds = {h.kind for h in targets}
    if kinds != {'float'}:
      raise ValueError(f'--{alias}: an old spelling shared by several flags '
                       f'must name float flags, got kinds {sorted(kinds)}.')
    names = ', '.join(f'--{h.flag}' for h in targets)
    flags.DEFINE_float(alias, None, f'Earlier spelling of {names}: the value '
                       'goes to the one the run\'s --algorithm reads.',
                       **kwargs)
    for hparam in targets:
      flags.register_validator(
          alias, hparam.flag_validator(flags.ValidationError), **kwargs)


def with_current_names(recorded: Mapping[str, Any],
                       own: Sequence[HParam]) -> dict[str, Any]:
  """`recorded` settings with old flag spellings renamed to today's.

  A run recorded before the flags were renamed keeps `{'mu': 0.1}` in its
  `hparams.json`; resuming it compares today's `{'fedprox_mu': 0.1}`.

  Args:
    recorded: Settings by flag name, as a run recorded them.
    own: The declarations of the recorded run's algorithm.

  Returns:
    A copy of `recorded` in which each declaration's flag holds the value
    recorded under an old spelling, where today's name is absent.
  """
  current = dict(recorded)
  for hparam in own:
    if hparam.flag in current:
      continue
    for alias in hparam.aliases:
      if alias in current:
        current[hparam.flag] = current.pop(alias)
        break
  return current


# --- Shared by several algorithms ---------------------------------------------

FEDADC_BETA = HParam(
    'fedadc_beta', 0.9, 'FedADC global momentum beta_global, in [0, 1).',
    lower=0.0, upper=1.0, upper_open=True, argument='beta', aliases=('beta',))
SLOWMO_BETA = HParam(
    'slowmo_beta', 0.9, 'SlowMo global momentum beta, in [0, 1).',
    lower=0.0, upper=1.0, upper_open=True, argument='beta', aliases=('beta',))
FEDPROX_MU = HParam(
    'fedprox_mu', None, 'FedProx proximal strength mu (local objective L_k + '
    'mu/2 ||w - w_t||^2); needed by fedprox.', lower=0.0, needed=True,
    argument='mu', aliases=('mu',))
# FedPTR and FedPTR-S are one method, its two sides: one flag.
FEDPTR_MU = HParam(
    'fedptr_mu', None, 'FedPTR base proximal strength mu (towards the '
    'projected model); needed by fedptr and fedptr_s.', lower=0.0,
    needed=True, argument='mu', aliases=('mu',))
