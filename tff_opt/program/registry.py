"""Algorithms by name, as the training binary and sweeps select them.

Each entry pairs an `--algorithm` name with the algorithm's own declaration
(`Spec`, in its module: `fed_curv.SPEC`, ...; see `tff_opt.algorithms.hparams`)
and its flag adapter in `flag_adapters` (flag values -> the
`tff_opt.algorithms.build_*` arguments). Nothing about an algorithm's
hyper-parameters is restated here: which flags it reads, which it needs, its
paper's client weighting (the binary's default; `--client_weighting`
overrides it) and who makes its server step all come from its `Spec`.
"""

import dataclasses
from collections.abc import Callable
from typing import Any, Optional

import tensorflow_federated as tff

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
from tff_opt.program import flag_adapters


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """A registered algorithm.

  Attributes:
    name: The `--algorithm` value.
    spec: Its declaration (`hparams.Spec`), kept in its own module.
    build: `(model_fn, *, client_optimizer_fn, server_optimizer_fn,
      client_weighting, client_lr_schedule, **hparams) -> LearningProcess`,
      the algorithm's adapter in `flag_adapters`; it takes every flag of
      `spec.hparams` under its flag name, and the task facts the spec names.
  """
  name: str
  spec: hparams_lib.Spec
  build: Callable[..., tff.learning.templates.LearningProcess]

  @property
  def summary(self) -> str:
    """One line on what it is, from its spec (`--help` and the docs)."""
    return self.spec.summary

  @property
  def flags(self) -> tuple[str, ...]:
    """Every flag of its own that `build` reads."""
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
    """What `build` takes of the task beside its model (`hparams.TASK_FACTS`)."""
    return self.spec.task_facts


SERVER_RULES = hparams_lib.SERVER_RULES

ALGORITHMS: dict[str, Algorithm] = {
    a.name: a for a in [
        Algorithm('fedopt', fed_opt.SPEC, flag_adapters.fed_opt),
        Algorithm('fedadc', fed_adc.SPEC, flag_adapters.fed_adc),
        Algorithm('fedadc_plus', fed_adc.PLUS_SPEC,
                  flag_adapters.fed_adc_plus),
        Algorithm('slowmo', slowmo.SPEC, flag_adapters.slowmo),
        Algorithm('fedprox', fed_prox.SPEC, flag_adapters.fed_prox),
        Algorithm('fedfor', fed_for.SPEC, flag_adapters.fed_for),
        Algorithm('fedcurv', fed_curv.SPEC, flag_adapters.fed_curv),
        Algorithm('feddyn', fed_dyn.SPEC, flag_adapters.fed_dyn),
        Algorithm('fedntd', fed_ntd.SPEC, flag_adapters.fed_ntd),
        Algorithm('fedrs', fed_rs.SPEC, flag_adapters.fed_rs),
        Algorithm('fedgkd', fed_gkd.SPEC, flag_adapters.fed_gkd),
        Algorithm('moon', moon.SPEC, flag_adapters.moon),
        Algorithm('feddc', fed_dc.SPEC, flag_adapters.fed_dc),
        Algorithm('scaffold', scaffold.SPEC, flag_adapters.scaffold),
        Algorithm('fedptr_s', fed_ptr.SPEC, flag_adapters.fed_ptr),
        Algorithm('fedptr', fed_ptr.CLIENT_SIDE_SPEC,
                  flag_adapters.fed_ptr_client),
    ]
}


def algorithm_hparams() -> tuple[hparams_lib.HParam, ...]:
  """Every registered algorithm's hyper-parameters, each flag once.

  A flag two algorithms read (`--beta`, `--mu`) is one declaration
  (`hparams.GLOBAL_MOMENTUM`, `hparams.PROXIMAL_MU`), shared.

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
    others.update(f for _, f in flag_adapters.SERVER_OPTIMIZER_FLAGS)
  return tuple(sorted(others - set(algorithm.flags)))


def build_process(name: str, model_fn: Callable[[], Any], *,
                  client_optimizer_fn, server_optimizer_fn, client_weighting,
                  client_lr_schedule,
                  client_learning_rate: Optional[float] = None,
                  fedbn: bool = False,
                  num_clients: Optional[int] = None,
                  client_epochs: Optional[int] = None, **hparams):
  """Builds algorithm `name`, passing it only the hyper-parameters it takes.

  With `fedbn`, builds `name` + FedBN (`algorithms.fed_bn`: batch-norm
  layers local to each client) for the bases in `fed_bn.BASES`.
  `num_clients` (the task's training population) and `client_epochs` (the
  local epochs its client datasets hold; `None`: 1) go to the algorithms
  that take them (`Algorithm.task_facts`). `client_learning_rate`, the
  rate of plain client SGD (`None` for another client optimizer), goes to
  the algorithms whose local step is their own (`server_rule == 'own'`:
  FedADC, FedADC+, SlowMo), which take it as a number.

  Raises:
    flag_adapters.FlagError: If the adapter refuses one flag's value.
    ValueError: If `name` is unknown (or has no FedBN variant), a
      hyper-parameter it needs is missing, or the builder refuses the
      settings.
  """
  if name not in ALGORITHMS:
    raise ValueError(f'Unknown algorithm {name!r}; known algorithms: '
                     f'{", ".join(ALGORITHMS)}.')
  algorithm = ALGORITHMS[name]
  missing = [h for h in algorithm.needed if hparams.get(h) is None]
  if missing:
    raise ValueError(f'Algorithm {name!r} needs ' +
                     ', '.join(f'--{h}' for h in missing) + '.')
  facts = dict(num_clients=num_clients, client_epochs=client_epochs or 1)
  extra = {fact: facts[fact] for fact in algorithm.task_facts}
  if algorithm.server_rule == 'own':
    # Its local steps are its own plain SGD steps at this learning rate.
    extra['client_learning_rate'] = client_learning_rate
  if fedbn:
    if name not in fed_bn.BASES:
      raise ValueError(f'--fedbn: algorithm {name!r} has no FedBN variant; '
                       f'FedBN runs on {", ".join(fed_bn.BASES)}.')
    return flag_adapters.fed_bn(
        name, model_fn,
        client_optimizer_fn=client_optimizer_fn,
        server_optimizer_fn=server_optimizer_fn,
        client_weighting=client_weighting,
        client_lr_schedule=client_lr_schedule,
        **{h.flag: hparams.get(h.flag, h.default)
           for h in algorithm.spec.hparams}, **extra)
  return algorithm.build(
      model_fn,
      client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn,
      client_weighting=client_weighting,
      client_lr_schedule=client_lr_schedule,
      **{h.flag: hparams.get(h.flag, h.default)
         for h in algorithm.spec.hparams}, **extra)
