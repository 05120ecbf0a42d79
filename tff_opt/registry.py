"""Algorithms by name, as the training binary and sweeps select them.

Every entry builds a `LearningProcess` from the task's `model_fn` and the
settings every algorithm shares (client and server optimizers, client
weighting, client learning-rate schedule), plus the hyper-parameters named in
its `hparams` (each one a flag of `binaries.train`, e.g. `mu` for FedProx).
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import tensorflow_federated as tff

from tff_opt import algorithms


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """A registered algorithm.

  Attributes:
    name: The `--algorithm` value.
    summary: One line for `--helpfull` and logs.
    build: `(model_fn, *, client_optimizer_fn, server_optimizer_fn,
      client_weighting, client_lr_schedule, **hparams) -> LearningProcess`.
    hparams: Names of the algorithm-specific hyper-parameters `build` takes.
  """
  name: str
  summary: str
  build: Callable[..., tff.learning.templates.LearningProcess]
  hparams: tuple[str, ...] = ()


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a for a in [
        Algorithm(
            name='fedopt',
            summary=('FedOpt (Reddi et al.): client SGD, server optimizer '
                     'from --server_opt (sgd = FedAvg, sgdm = FedAvgM, '
                     'adagrad/adam/yogi = FedAdagrad/FedAdam/FedYogi)'),
            build=algorithms.build_fed_opt),
    ]
}


def build_process(name: str, model_fn: Callable[[], Any], *,
                  client_optimizer_fn, server_optimizer_fn, client_weighting,
                  client_lr_schedule, **hparams):
  """Builds algorithm `name`, passing it only the hyper-parameters it takes.

  Raises:
    ValueError: If `name` is unknown, or a hyper-parameter it needs is
      missing.
  """
  if name not in ALGORITHMS:
    raise ValueError(f'Unknown algorithm {name!r}; known algorithms: '
                     f'{", ".join(ALGORITHMS)}.')
  algorithm = ALGORITHMS[name]
  missing = [h for h in algorithm.hparams if hparams.get(h) is None]
  if missing:
    raise ValueError(f'Algorithm {name!r} needs ' +
                     ', '.join(f'--{h}' for h in missing) + '.')
  return algorithm.build(
      model_fn,
      client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn,
      client_weighting=client_weighting,
      client_lr_schedule=client_lr_schedule,
      **{h: hparams[h] for h in algorithm.hparams})
