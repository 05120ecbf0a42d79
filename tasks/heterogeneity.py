"""Heterogeneity settings of a labelled image task, chosen by name.

A task with arrays (images, labels) picks its client partition with the
option `partition` (the partitioners are in `tasks/partitioners.py`):

| `partition` | partitioner | options used |
|---|---|---|
| `dirichlet` (default) | `dirichlet_label_partition` (Hsu et al.) | `alpha` |
| `dirichlet_class` | `dirichlet_class_partition` (FedPTR's) | `alpha`, `empty_clients` |
| `sort` | `sort_and_partition` (FedADC) | `classes_per_client`, `distinct_classes` |
| `fedcurv` | `fedcurv_partition` (2 blocks per client) | (`num_clients=96` is the paper's) |
| `pachinko` | `pachinko_partition` (Reddi et al. App. F) | `alpha` (root), `beta` (coarse -> fine) |
| `domains` | `one_domain_per_client` + `apply_domain_transform` | `num_domains` |
| `long_tail` | `LongTailRounds` (FedFOR 4.2, per round) | `long_tail_fraction`, `imbalance_ratio` |

and `concept_shift` (a probability, 0 = off) adds FedFOR 4.4's concept shift
(`ConceptShift`) to any of them. The same partitioner (same options, its own
seed) splits the test examples over the test clients, except `long_tail`,
whose test clients are split by `dirichlet` (the long tail is a property of
the rounds' training clients; evaluation pools all test clients anyway).

Choices the papers leave open, for a task without what a partitioner needs:

* `pachinko` needs coarse labels: a task without a label hierarchy uses the
  stand-in coarse label `fine // 2` (digits: {0,1}, {2,3}, ..., {8,9}).
* `domains` with one real domain: the examples are split IID (seeded) into
  `num_domains` pools, pool d is domain d and its images get
  `partitioners.apply_domain_transform(..., d)`; client k holds domain
  k mod D. `num_domains=None` means min(num_clients, 6): one domain per
  client, as FedBN, up to the six stand-in transforms.
* `long_tail`: the static train partition (the task's `ClientData`) is the
  round-free view of the pool: floor(1 / fraction) disjoint IID slices of
  `fraction` of the data, untrimmed; training draws fresh trimmed clients
  every round through `RoundClientData`, which also limits
  `clients_per_round` to floor(1 / fraction) (the slices are disjoint).
* `dirichlet_class` with `empty_clients='keep'`: empty clients keep their
  index (and id) in the partition and in the report but have no place in
  the task's `ClientData`, so they are never sampled.

Round-dependent client data (`RoundClientData`): the training loop
(`tff_opt.program.training_loop.run_training(round_clients_fn=...)`) samples ids
from the static population as always and hands them with the round number
to `clients_for_round(round_num, sampled_ids)`, which returns the ids and
datasets actually trained on: fresh long-tail clients (new ids) and / or
the sampled clients' data relabelled by the round's concept-shift map. Both
are functions of (seed, round) only, so resumed runs are exact.
"""

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tasks import partitioners

PARTITIONS = ('dirichlet', 'dirichlet_class', 'sort', 'fedcurv', 'pachinko',
              'domains', 'long_tail')
# Task options of the heterogeneity settings and their defaults (a task adds
# its own `num_clients` and `alpha`).
DEFAULT_OPTIONS = {
    'partition': 'dirichlet',
    'beta': 10.0,
    'classes_per_client': 2,
    'distinct_classes': False,
    'empty_clients': 'keep',
    'num_domains': None,
    'long_tail_fraction': 0.1,
    'imbalance_ratio': 0.01,
    'concept_shift': 0.0,
}


@dataclasses.dataclass(frozen=True)
class Partition:
  """A static partition: index arrays and, for `domains`, each's domain."""
  indices: list[np.ndarray]
  domains: list[int] | None = None


def check_options(*, partition: str, alpha: float, beta: float,
                  classes_per_client: int, distinct_classes: bool,
                  empty_clients: str, num_domains: int | None,
                  long_tail_fraction: float, imbalance_ratio: float,
                  concept_shift: float) -> None:
  """Validates the heterogeneity options up front.

  Raises:
    ValueError: Naming the first option out of range.
  """
  if partition not in PARTITIONS:
    raise ValueError(f'partition must be one of {", ".join(PARTITIONS)}, '
                     f'got {partition!r}.')
  if not alpha > 0:
    raise ValueError(f'alpha must be positive, got {alpha!r}.')
  if not beta > 0:
    raise ValueError(f'beta must be positive, got {beta!r}.')
  if not (isinstance(classes_per_client, int) and classes_per_client >= 1):
    raise ValueError('classes_per_client must be a positive integer, got '
                     f'{classes_per_client!r}.')
  if not isinstance(distinct_classes, bool):
    raise ValueError('distinct_classes must be True or False, got '
                     f'{distinct_classes!r}.')
  if empty_clients not in partitioners.EMPTY_CLIENT_POLICIES:
    raise ValueError(
        'empty_clients must be one of '
        f'{", ".join(partitioners.EMPTY_CLIENT_POLICIES)}, got '
        f'{empty_clients!r}.')
  max_domains = len(partitioners.DOMAIN_TRANSFORMS)
  if num_domains is not None and not (isinstance(num_domains, int) and
                                      1 <= num_domains <= max_domains):
    raise ValueError(f'num_domains must be an integer in [1, {max_domains}] '
                     f'(the stand-in transforms), got {num_domains!r}.')
  if not 0 < long_tail_fraction <= 1:
    raise ValueError('long_tail_fraction must be in (0, 1], got '
                     f'{long_tail_fraction!r}.')
  if not 0 < imbalance_ratio <= 1:
    raise ValueError(f'imbalance_ratio must be in (0, 1], got '
                     f'{imbalance_ratio!r}.')
  if not 0 <= concept_shift <= 1:
    raise ValueError(f'concept_shift must be a probability in [0, 1], got '
                     f'{concept_shift!r}.')


def partition_examples(labels: np.ndarray, num_clients: int, *,
                       seed: int | np.random.SeedSequence, partition: str,
                       alpha: float, beta: float, classes_per_client: int,
                       distinct_classes: bool, empty_clients: str,
                       num_domains: int | None, long_tail_fraction: float,
                       examples_per_client: int | None = None,
                       coarse_labels: np.ndarray | None = None,
                       **unused: Any) -> Partition:
  """Partitions `labels` over `num_clients` clients by `partition`'s name.

  Args:
    labels: 1-D integer labels.
    num_clients: Number of clients (ignored by `long_tail`, see the module
      docstring).
    seed: Seed of the partitioner.
    partition: One of `PARTITIONS`.
    alpha, beta, classes_per_client, distinct_classes, empty_clients,
      num_domains, long_tail_fraction: The options (module docstring).
    examples_per_client: For `dirichlet`, examples per client (None: all
      examples / `num_clients`).
    coarse_labels: For `pachinko`, the coarse label of each example (None:
      the stand-in `labels // 2`).
    **unused: Other task options (ignored).

  Returns:
    A `Partition`.

  Raises:
    ValueError: If the partitioner refuses its arguments.
  """
  del unused
  if partition == 'dirichlet_class':
    return Partition(partitioners.dirichlet_class_partition(
        labels, num_clients, alpha, seed=seed, empty_clients=empty_clients))
  if partition == 'sort':
    return Partition(partitioners.sort_and_partition(
        labels, num_clients, classes_per_client, seed=seed,
        distinct_classes=distinct_classes))
  if partition == 'fedcurv':
    return Partition(partitioners.fedcurv_partition(
        labels, seed=seed, num_clients=num_clients))
  if partition == 'pachinko':
    return Partition(partitioners.pachinko_partition(
        labels // 2 if coarse_labels is None else coarse_labels, labels,
        num_clients, alpha, beta, seed=seed))
  if partition == 'domains':
    num_domains = num_domains or min(num_clients,
                                     len(partitioners.DOMAIN_TRANSFORMS))
    rng = np.random.default_rng(seed)
    pools = np.array_split(rng.permutation(labels.size), num_domains)
    clients = partitioners.one_domain_per_client(
        pools, num_clients, seed=rng.integers(2**63))
    return Partition([pools[d][idx] for d, idx in clients],
                     [d for d, _ in clients])
  if partition == 'long_tail':
    rounds = partitioners.LongTailRounds(labels, fraction=long_tail_fraction)
    order = np.random.default_rng(seed).permutation(labels.size)
    size = int(np.floor(long_tail_fraction * labels.size + 1e-9))
    return Partition([order[k * size:(k + 1) * size].astype(np.int64)
                      for k in range(rounds.max_clients_per_round)])
  return Partition(partitioners.dirichlet_label_partition(
      labels, num_clients, alpha, seed=seed,
      examples_per_client=examples_per_client))


def apply_domains(images: np.ndarray, partition: Partition, *,
                  seed: int) -> np.ndarray:
  """A copy of `images` with each client's examples in its client's domain."""
  if partition.domains is None:
    return images
  images = images.copy()
  for domain, idx in zip(partition.domains, partition.indices):
    images[idx] = partitioners.apply_domain_transform(images[idx], domain,
                                                      seed=seed)
  return images


def describe(labels: np.ndarray, partition: Partition, *, seed: int,
             prefix: str, options: dict[str, Any]) -> dict[str, Any]:
  """`partition_summary`, plus the ids of empty clients and the domains."""
  summary = partitioners.partition_summary(labels, partition.indices)
  width = len(str(len(partition.indices) - 1))
  summary['empty_client_ids'] = [f'{prefix}_{k:0{width}d}'
                                 for k in summary['empty_clients']]
  if partition.domains is not None:
    summary['domains'] = [partitioners.DOMAIN_TRANSFORMS[d]
                          for d in partition.domains]
  if prefix == 'train' and options['partition'] == 'long_tail':
    rounds = partitioners.LongTailRounds(
        labels, fraction=options['long_tail_fraction'],
        imbalance_ratio=options['imbalance_ratio'])
    summary['long_tail_round_1'] = partitioners.partition_summary(
        labels, rounds.clients_for_round(1, rounds.max_clients_per_round,
                                         seed=seed))
  return summary


class RoundClientData:
  """Round-dependent training data: long-tail draws and/or concept shift.

  `clients_for_round(round_num, sampled_ids)` is what
  `tff_opt.program.training_loop.run_training` calls as `round_clients_fn`.
  """

  def __init__(self, images: np.ndarray, labels: np.ndarray,
               client_indices: dict[str, np.ndarray],
               preprocess_fn: Callable[[tf.data.Dataset], tf.data.Dataset],
               *, seed: int, num_classes: int, partition: str,
               long_tail_fraction: float, imbalance_ratio: float,
               concept_shift: float, **unused: Any):
    """Keeps the arrays and settings (see the module docstring).

    Args:
      images: Training images, one per label.
      labels: Training labels (integers in [0, num_classes)).
      client_indices: Static client id -> its indices into the arrays.
      preprocess_fn: The task's training preprocessing of an unbatched
        `(x, y)` dataset.
      seed: The run's seed.
      num_classes: Number of classes (for the concept-shift map).
      partition, long_tail_fraction, imbalance_ratio, concept_shift: The
        task options.
      **unused: Other task options (ignored).
    """
    del unused
    self._images, self._labels = images, labels
    self._client_indices = client_indices
    self._preprocess_fn = preprocess_fn
    self._seed = seed
    self.long_tail = (partitioners.LongTailRounds(
        labels, fraction=long_tail_fraction, imbalance_ratio=imbalance_ratio)
                      if partition == 'long_tail' else None)
    self.concept_shift = (partitioners.ConceptShift(
        num_classes, concept_shift, seed=seed) if concept_shift > 0 else None)

  def label_map(self, round_num: int) -> np.ndarray | None:
    """Round `round_num`'s concept-shift map, or None without a shift."""
    if self.concept_shift is None:
      return None
    return self.concept_shift.label_map(round_num)

  def relabel(self, dataset: tf.data.Dataset,
              round_num: int) -> tf.data.Dataset:
    """`dataset` of `(x, y)` (batched or not) with y mapped by the round's map.

    Evaluation under concept shift scores the model on the current concept.
    Without a concept shift, `dataset` itself.
    """
    label_map = self.label_map(round_num)
    if label_map is None:
      return dataset
    table = tf.constant(label_map, tf.int64)
    return dataset.map(lambda x, y: (x, tf.cast(
        tf.gather(table, tf.cast(y, tf.int64)), y.dtype)))

  def clients_for_round(
      self, round_num: int, sampled_ids: Sequence[str]
  ) -> tuple[list[str], list[tf.data.Dataset]]:
    """The ids and preprocessed datasets trained on in round `round_num`.

    Args:
      round_num: The round, from 1.
      sampled_ids: The loop's sample from the static population; long-tail
        rounds replace them by as many fresh clients.

    Returns:
      `(client ids, datasets)`, a function of (seed, round_num,
      sampled_ids).
    """
    if self.long_tail is not None:
      ids = self.long_tail.client_ids(round_num, len(sampled_ids))
      parts = self.long_tail.clients_for_round(round_num, len(sampled_ids),
                                               seed=self._seed)
    else:
      ids = list(sampled_ids)
      parts = [self._client_indices[cid] for cid in ids]
    label_map = self.label_map(round_num)
    datasets = []
    for idx in parts:
      labels = self._labels[idx]
      if label_map is not None:
        labels = label_map[labels].astype(self._labels.dtype)
      datasets.append(self._preprocess_fn(
          tf.data.Dataset.from_tensor_slices((self._images[idx], labels))))
    return ids, datasets

  def describe(self, rounds: int) -> dict[str, Any]:
    """JSON-ready settings and, for concept shift, the shifts of the run."""
    report = {}
    if self.long_tail is not None:
      report['long_tail'] = {
          'fraction': self.long_tail.fraction,
          'imbalance_ratio': self.long_tail.imbalance_ratio,
          'max_clients_per_round': self.long_tail.max_clients_per_round,
      }
    if self.concept_shift is not None:
      shifts = []
      for r in self.concept_shift.shift_rounds(rounds):
        c, old, new = self.concept_shift.shift_at(r)
        shifts.append({'round': r, 'class': c, 'from': old, 'to': new})
      report['concept_shift'] = {
          'probability': self.concept_shift.probability,
          'shifts': shifts,
          'final_label_map': self.concept_shift.label_map(rounds).tolist(),
      }
    return report
