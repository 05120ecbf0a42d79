"""Benchmark tasks: federated data + preprocessing + model + metrics.

A task is a name in a small registry mapping it to a builder, the options the
builder accepts (with their defaults), and the default training settings the
binary uses when a flag is not given:

    task = tasks.create_task('digits', train_client_spec=ClientSpec(1, 10),
                             alpha=0.1)
    task.model_fn()          # tff.learning.models.VariableModel
    task.datasets.train_data, task.datasets.test_data   # ClientData
    tasks.task_defaults('digits').server_lr

To add a task, write `tasks/<name>.py` with a builder taking
`(*, train_client_spec, eval_client_spec, data_dir, use_synthetic_data, seed,
**options)` and returning a `tff.simulation.baselines.BaselineTask`, and add
one `_TaskEntry` to `_REGISTRY` below.
"""

import dataclasses
import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff

from tasks import cifar
from tasks import data_errors
from tasks import digits
from tasks import domains
from tasks import emnist
from tasks import paper_settings as _paper
from tasks import shakespeare
from tasks import sqlite_data
from tasks import stackoverflow
from tasks import tfds_images
# Imported for its exit hook: TFF's default execution context is released
# while the interpreter is whole, so that `import tasks` does not end with
# TFF's "Exception ignored ... Popen" traceback (`runtime._release_contexts`).
from tff_opt.program import runtime as _runtime  # pylint: disable=unused-import


@dataclasses.dataclass(frozen=True)
class TaskDefaults:
  """Default training settings of a task (used when a flag is not given).

  `client_optimizer` and `server_optimizer` are names (e.g. 'sgd', 'yogi');
  `server_tau` is the adaptivity / epsilon of adaptive server optimizers and
  `server_beta_1`, `server_beta_2` their moment decays. Evaluation on the
  held-out clients runs every `eval_every` rounds (and after the last).
  """
  rounds: int
  clients_per_round: int
  client_epochs: int
  client_batch_size: int
  client_optimizer: str
  client_lr: float
  server_optimizer: str
  server_lr: float
  server_tau: float
  server_beta_1: float
  server_beta_2: float
  eval_every: int


@dataclasses.dataclass(frozen=True)
class _TaskEntry:
  builder: Callable[..., tff.simulation.baselines.BaselineTask]
  options: Mapping[str, Any]  # Option name -> default value.
  defaults: TaskDefaults
  # (seed, use_synthetic_data, data_dir, **options) -> JSON-ready summaries
  # of the client partitions, or None when the task has none to report.
  describe: Callable[..., dict[str, Any]] | None = None
  # server_opt -> (client_lr, server_lr, tau or None): per-optimizer
  # defaults (the paper's Tables 8-9); for the optimizer chosen they win over
  # `defaults`' client_lr, server_lr, server_tau. None: `defaults` for all.
  paper_settings: Mapping[str, tuple[float, float, Any]] | None = None
  # Evaluate on a seeded sample of this many test examples (None: all), and,
  # if `final_full_eval`, on the whole test set once after the last round.
  eval_examples: int | None = None
  final_full_eval: bool = False
  # (task, seed, use_synthetic_data, data_dir, **options) -> round-dependent
  # training data (`heterogeneity.RoundClientData`) or None.
  round_data: Callable[..., Any] | None = None
  # The TFF SQLite file (in data_dir) whose 'test' split `eval_examples`
  # samples example by example (Reddi et al.'s Stack Overflow validation).
  sqlite_file: str | None = None


def _describe_digits(*, seed, use_synthetic_data, data_dir, **options):
  del data_dir
  options.pop('model', None)  # The network does not change the partition.
  return digits.describe_split(digits.split_digits(
      seed=seed, use_synthetic_data=use_synthetic_data, **options))


_REGISTRY: dict[str, _TaskEntry] = {
    'digits': _TaskEntry(
        builder=digits.create_digits_task,
        options=digits.DEFAULT_OPTIONS,
        defaults=TaskDefaults(
            rounds=150,
            clients_per_round=10,
            client_epochs=2,
            client_batch_size=10,
            client_optimizer='sgd',
            client_lr=0.1,
            server_optimizer='yogi',
            server_lr=0.01,
            server_tau=1e-3,
            server_beta_1=0.9,
            server_beta_2=0.99,
            eval_every=10,
        ),
        describe=_describe_digits,
        round_data=digits.create_round_data,
    ),
}



def _paper_entry(task: str, builder, options, *, rounds: int,
                 batch_size: int, clients_per_round: int = 10,
                 eval_examples: int | None = None,
                 final_full_eval: bool = False) -> _TaskEntry:
  """Reddi et al.'s settings for `task` (see `tasks/paper_settings.py`)."""
  settings = _paper.paper_settings(task)
  client_lr, server_lr, tau = settings['yogi']
  return _TaskEntry(
      builder=builder, options=options,
      defaults=TaskDefaults(
          rounds=rounds, clients_per_round=clients_per_round, client_epochs=1,
          client_batch_size=batch_size, client_optimizer='sgd',
          client_lr=client_lr, server_optimizer='yogi', server_lr=server_lr,
          server_tau=tau, server_beta_1=None, server_beta_2=0.99,
          eval_every=10),
      paper_settings=settings, eval_examples=eval_examples,
      final_full_eval=final_full_eval)


_REGISTRY.update({
    'cifar10': dataclasses.replace(
        _paper_entry('cifar10', cifar.create_cifar10_task,
                     cifar.CIFAR10_OPTIONS, rounds=4000, batch_size=20),
        describe=cifar.describe_cifar10_task,
        round_data=cifar.create_cifar10_round_data),
    'cifar100': dataclasses.replace(
        _paper_entry('cifar100', cifar.create_cifar100_task,
                     cifar.CIFAR100_OPTIONS, rounds=4000, batch_size=20),
        round_data=cifar.create_cifar100_round_data),
    'emnist_ae': _paper_entry('emnist_ae', emnist.create_emnist_ae_task, {},
                              rounds=3000, batch_size=20),
    'emnist_cr': _paper_entry('emnist_cr', emnist.create_emnist_cr_task, {},
                              rounds=1500, batch_size=20),
    'shakespeare': _paper_entry(
        'shakespeare', shakespeare.create_shakespeare_task,
        shakespeare.DEFAULT_OPTIONS, rounds=1500, batch_size=4),
    'stackoverflow_lr': dataclasses.replace(_paper_entry(
        'stackoverflow_lr', stackoverflow.create_stackoverflow_lr_task,
        stackoverflow.LR_OPTIONS, rounds=1500, batch_size=100,
        eval_examples=10000, final_full_eval=True),
        sqlite_file=stackoverflow.SQLITE_FILE),
    'stackoverflow_nwp': dataclasses.replace(_paper_entry(
        'stackoverflow_nwp', stackoverflow.create_stackoverflow_nwp_task,
        stackoverflow.NWP_OPTIONS, rounds=1500, batch_size=16,
        clients_per_round=50, eval_examples=10000, final_full_eval=True),
        sqlite_file=stackoverflow.SQLITE_FILE),
})


def eval_sqlite_path(name: str, data_dir: str | None) -> str | None:
  """The SQLite file whose test examples `eval_examples` samples, or None.

  None for tasks evaluated on a client-order sample (`sqlite_data.
  sample_examples`) and when the file is absent (synthetic data).
  """
  filename = _entry(name).sqlite_file
  if filename is None:
    return None
  path = os.path.join(data_dir or data_errors.default_data_dir(), filename)
  return path if os.path.isfile(path) else None


# FedFOR's and FedBN's client learning rate, the image tasks' default, and
# what it gives on mnist5k's first rounds (`task_start_note`).
_FEDFOR_CLIENT_LR = 0.01
# Measured on 2026-12-02 under load (~13 on 2 cores): `python -m
# binaries.train --task=mnist5k --rounds=20 --eval_every=20`, with and
# without --client_lr=0.1, both 90 s for their 20 rounds.
_MNIST5K_PACE = ('eval accuracy 0.586 after 20 rounds; --client_lr=0.1 '
                 'reaches 0.857 in the same 20 rounds (90 s here, loaded).')


def _heterogeneity_entry(builder, describe, name: str, options, *,
                         rounds: int, clients_per_round: int,
                         round_data=None) -> _TaskEntry:
  """FedFOR / FedBN's local training (SGD 0.01, batch 32) and FedAvg."""
  return _TaskEntry(
      builder=functools.partial(builder, name), options=options,
      defaults=TaskDefaults(
          rounds=rounds, clients_per_round=clients_per_round,
          client_epochs=1, client_batch_size=32, client_optimizer='sgd',
          client_lr=_FEDFOR_CLIENT_LR, server_optimizer='sgd', server_lr=1.0,
          server_tau=1e-3, server_beta_1=0.9, server_beta_2=0.99,
          eval_every=10),
      describe=functools.partial(describe, name),
      round_data=round_data and functools.partial(round_data, name))


# TFDS image tasks and one-domain-per-client tasks (tasks/tfds_images.py,
# tasks/domains.py).
_REGISTRY.update({
    name: _heterogeneity_entry(
        tfds_images.create_tfds_image_task,
        tfds_images.describe_tfds_image_task, name,
        tfds_images.default_options(name), rounds=200, clients_per_round=10,
        round_data=tfds_images.create_round_data)
    for name in ('mnist', 'mnist5k', 'fashion_mnist', 'svhn')
})
_REGISTRY.update({
    name: _heterogeneity_entry(
        domains.create_domain_task, domains.describe_domain_task, name,
        domains.default_options(name), rounds=rounds,
        clients_per_round=len(domains.COLLECTIONS[name].domains),
        round_data=domains.create_round_data)
    for name, rounds in (('digits_domains', 100), ('domainnet', 300))
})

TASK_NAMES: tuple[str, ...] = tuple(sorted(_REGISTRY))


def _entry(name: str) -> _TaskEntry:
  if name not in _REGISTRY:
    raise ValueError(
        f'Unknown task {name!r}; known tasks: {", ".join(TASK_NAMES)}')
  return _REGISTRY[name]


def _option_kind(default: Any) -> str | None:
  """The type an option's value must have, read from its default."""
  if isinstance(default, bool):
    return 'a boolean (True or False)'
  if isinstance(default, int):
    return 'an integer'
  if isinstance(default, float):
    return 'a number'
  if isinstance(default, str):
    return 'a string'
  return None  # None or a structure: the task checks it.


def _check_option_type(name: str, option: str, value: Any,
                       default: Any) -> Any:
  """`value`, checked against the type of `default` (ints pass as numbers).

  Raises:
    ValueError: If `value` is not of the option's type.
  """
  kind = _option_kind(default)
  if kind is None:
    return value
  if isinstance(default, bool):
    ok = isinstance(value, bool)
  elif isinstance(default, int):
    ok = isinstance(value, int) and not isinstance(value, bool)
  elif isinstance(default, float):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    value = float(value) if ok else value
  else:
    ok = isinstance(value, str)
  if not ok:
    del name
    raise ValueError(f'option {option}={value!r}: expected {kind} (default '
                     f'{default!r})')
  return value


def _resolve_options(name: str, entry: _TaskEntry,
                     options: Mapping[str, Any]) -> dict[str, Any]:
  checked = {}
  for option in sorted(options):
    if not entry.options:
      raise ValueError(f'Unknown option {option!r}: task {name!r} takes no '
                       'options.')
    if option not in entry.options:
      raise ValueError(
          f'Unknown option {option!r} for task {name!r}; known options: '
          f'{", ".join(sorted(entry.options))}')
    checked[option] = _check_option_type(name, option, options[option],
                                         entry.options[option])
  return {**entry.options, **checked}


def task_defaults(name: str) -> TaskDefaults:
  """The default training settings of task `name`.

  Raises:
    ValueError: If `name` is not a known task.
  """
  return _entry(name).defaults


def task_start_note(name: str, hparams: Mapping[str, Any]) -> str | None:
  """A line for the start of a run of task `name` with `hparams`, or None.

  Where a task's defaults are slow, and the flags that make them faster
  give other numbers (so they are not the defaults): what those flags are
  and the gain measured; where its defaults learn slowly at first, the
  paper setting they follow and what a first look can use instead.
  """
  if name == 'shakespeare' and not hparams.get('client_vectorization'):
    return ('note: --client_vectorization=10 trains each round\'s clients '
            'in groups of 10, 1.25x faster a round (FedOpt 6.09 -> 4.87 s on '
            'a quiet machine, results/perf/vectorized_round.md), the same '
            'model up to float32 rounding; the default trains one client at '
            'a time, exactly. A resumed run may add or drop it.')
  if name == 'mnist5k' and (hparams.get('client_lr'), hparams.get(
      'server_opt')) == (_FEDFOR_CLIENT_LR, 'sgd'):
    return (f'note: --task=mnist5k\'s defaults follow FedFOR\'s and FedBN\'s '
            f'local training (client SGD lr {_FEDFOR_CLIENT_LR}, batch 32, 1 '
            'epoch; FedAvg): ' + _MNIST5K_PACE)
  return None


def task_paper_settings(
    name: str) -> dict[str, tuple[float, float, Any]]:
  """server_opt -> (client_lr, server_lr, tau or None) defaults of `name`.

  Empty for tasks without per-optimizer defaults.

  Raises:
    ValueError: If `name` is not a known task.
  """
  return dict(_entry(name).paper_settings or {})


def task_eval_defaults(name: str) -> tuple[int | None, bool]:
  """(eval sample size or None for all, final full evaluation?) of `name`.

  Raises:
    ValueError: If `name` is not a known task.
  """
  entry = _entry(name)
  return entry.eval_examples, entry.final_full_eval


def task_options(name: str) -> dict[str, Any]:
  """The options task `name` accepts, with their default values.

  Raises:
    ValueError: If `name` is not a known task.
  """
  return dict(_entry(name).options)


def create_task(
    name: str,
    *,
    train_client_spec: tff.simulation.baselines.ClientSpec,
    eval_client_spec: tff.simulation.baselines.ClientSpec | None = None,
    data_dir: str | None = None,
    use_synthetic_data: bool = False,
    seed: int = 0,
    **options: Any,
) -> tff.simulation.baselines.BaselineTask:
  """Creates the benchmark task `name`.

  Args:
    name: One of `TASK_NAMES`.
    train_client_spec: How train client datasets are preprocessed (epochs,
      batch size, max elements, shuffle buffer).
    eval_client_spec: How evaluation client datasets are preprocessed; `None`
      means the task's default (one pass, unshuffled).
    data_dir: Where the task's data are cached, for tasks that load files.
    use_synthetic_data: Use small synthetic data of the task's shapes.
    seed: Seed of everything random in the data (splits, partitions).
    **options: Task-specific options (see `task_options(name)`).

  Returns:
    A `tff.simulation.baselines.BaselineTask`.

  Raises:
    ValueError: If `name` or an option is unknown, or an option is invalid.
  """
  entry = _entry(name)
  return entry.builder(
      train_client_spec=train_client_spec,
      eval_client_spec=eval_client_spec,
      data_dir=data_dir,
      use_synthetic_data=use_synthetic_data,
      seed=seed,
      **_resolve_options(name, entry, options))


def pooled_test_data(
    task: tff.simulation.baselines.BaselineTask) -> tf.data.Dataset:
  """The task's held-out clients pooled and preprocessed for evaluation.

  Every element of every test client, clients in sorted id order
  (`sqlite_data.pooled_examples`: TFF's own pooling shuffles them unseeded,
  so the evaluation's loss varied in its last bit from run to run), through
  the task's `eval_preprocess_fn`.

  Args:
    task: A task from `create_task`.

  Returns:
    A `tf.data.Dataset` of evaluation batches, the same on every call.
  """
  return task.datasets.eval_preprocess_fn(
      sqlite_data.pooled_examples(task.datasets.test_data))


def describe_task_data(name: str, *, data_dir: str | None = None,
                       use_synthetic_data: bool = False, seed: int = 0,
                       **options: Any) -> dict[str, Any]:
  """JSON-ready summaries of the task's client partitions (for hparams.json).

  Same arguments as `create_task` (without the client specs). For `digits`:
  `{'train': partition_summary, 'test': partition_summary}` (see
  `partitioners.partition_summary`); `{}` for tasks with nothing to report.

  Raises:
    ValueError: If `name` or an option is unknown, or an option is invalid.
  """
  entry = _entry(name)
  resolved = _resolve_options(name, entry, options)
  if entry.describe is None:
    return {}
  return entry.describe(seed=seed, use_synthetic_data=use_synthetic_data,
                        data_dir=data_dir, **resolved)


def create_round_data(name: str, task: tff.simulation.baselines.BaselineTask,
                      *, data_dir: str | None = None,
                      use_synthetic_data: bool = False, seed: int = 0,
                      **options: Any) -> Any:
  """The task's round-dependent training data, or None (static clients).

  Same arguments as `create_task`, plus the task it built. For `digits` with
  option `partition=long_tail` or `concept_shift` > 0: a
  `heterogeneity.RoundClientData`, whose `clients_for_round` is the
  `round_clients_fn` of `tff_opt.program.training_loop.run_training`.

  Raises:
    ValueError: If `name` or an option is unknown, or an option is invalid.
  """
  entry = _entry(name)
  resolved = _resolve_options(name, entry, options)
  if entry.round_data is None:
    return None
  return entry.round_data(task, seed=seed,
                          use_synthetic_data=use_synthetic_data,
                          data_dir=data_dir, **resolved)
