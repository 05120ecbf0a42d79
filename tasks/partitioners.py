"""Label-skew partitioners for labelled data sets (NumPy only).

`dirichlet_label_partition` implements the Dirichlet / LDA label skew of Hsu,
Qi and Brown (2019), "Measuring the effects of non-identical data distribution
for federated visual classification", Section 3:

    p       = the global class prior (class counts / number of examples),
    q_k     ~ Dir(alpha * p)                 for each client k,
    client k gets `examples_per_client` examples; each one's class is drawn
    from q_k, and the example is drawn, without replacement, from that
    class's pool.

alpha -> 0 gives one class per client; alpha -> inf gives q_k -> p (IID).

Choices made here (the paper leaves them open, or there are variants):

* **Hsu et al. style, not per-class Dirichlet over clients.** A common variant
  (e.g. Yurochkin et al. 2019, Wang et al. 2020) draws, for each class c,
  shares over clients s_c ~ Dir(alpha * 1_K) and hands out class c's examples
  by s_c; client sizes then vary wildly and some clients can be empty. Here
  every *client* draws class proportions from Dir(alpha * p), so the
  concentration is scaled by the prior (a skewed data set keeps its skew on
  average) and client sizes are under our control.
* **Equal client sizes.** Every client gets exactly `examples_per_client`
  examples (default `len(labels) // num_clients`); the
  `len(labels) - num_clients * examples_per_client` examples left over are
  assigned to no client. No client is ever empty.
* **Dry pools.** Clients are filled one after another (client 0 first); a
  client's class counts are drawn as Multinomial(n, q_k); a class whose pool
  has fewer examples than drawn gives all it has, and the shortfall is drawn
  again from q_k renormalised over the classes that still have examples,
  until the client is full. This is exactly the distribution of drawing the
  client's examples one at a time from q_k restricted to non-empty pools. If
  q_k puts (numerically) no mass on any non-empty pool — e.g. alpha is tiny
  and q_k is one-hot on an exhausted class — the shortfall is drawn in
  proportion to the remaining pool sizes (uniformly from the remaining
  examples). Because the total demand never exceeds the supply, every client
  is filled. Consequence: when many clients favour the same class, the
  clients filled last can be less skewed than their q_k says.
* **Tiny alpha.** `numpy`'s Dirichlet sampler can return a vector that is not
  finite or sums to zero when every concentration is tiny; q_k is then the
  limit alpha -> 0, one-hot on a class drawn from p.
* **Randomness.** Each class pool is shuffled once up front, and each client's
  indices are returned in shuffled order; everything comes from one
  `numpy.random.Generator` seeded by `seed`, so the partition is a function of
  (labels, num_clients, alpha, seed, examples_per_client).
* Classes are the distinct values in `labels` (`numpy.unique`), so absent
  classes never get a zero concentration.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np


def _check_args(num_examples: int, num_clients: int, alpha: float,
                examples_per_client: int) -> None:
  if not alpha > 0:
    raise ValueError(f'alpha must be positive, got {alpha!r}.')
  if num_clients < 1:
    raise ValueError(f'num_clients must be at least 1, got {num_clients!r}.')
  if num_clients > num_examples:
    raise ValueError(f'num_clients ({num_clients}) exceeds the number of '
                     f'examples ({num_examples}).')
  if examples_per_client < 1:
    raise ValueError('examples_per_client must be at least 1, got '
                     f'{examples_per_client!r}.')
  if num_clients * examples_per_client > num_examples:
    raise ValueError(
        f'num_clients * examples_per_client ({num_clients} * '
        f'{examples_per_client} = {num_clients * examples_per_client}) '
        f'exceeds the number of examples ({num_examples}).')


def _draw_proportions(rng: np.random.Generator,
                      concentration: np.ndarray,
                      prior: np.ndarray) -> np.ndarray:
  """Draws q ~ Dir(concentration), falling back to one-hot as alpha -> 0."""
  q = rng.dirichlet(concentration)
  total = q.sum()
  if not (np.all(np.isfinite(q)) and total > 0):
    q = np.zeros_like(prior)
    q[rng.choice(prior.size, p=prior)] = 1.0
    return q
  return q / total


def _draw_class_counts(rng: np.random.Generator, q: np.ndarray,
                       available: np.ndarray, size: int) -> np.ndarray:
  """Class counts of `size` draws from q, renormalised over non-dry pools."""
  counts = np.zeros_like(available)
  available = available.copy()
  need = size
  while need > 0:
    weights = np.where(available > 0, q, 0.0)
    if not weights.sum() > 0:
      weights = available.astype(np.float64)
    draws = rng.multinomial(need, weights / weights.sum())
    take = np.minimum(draws, available)
    counts += take
    available -= take
    need -= int(take.sum())
  return counts


def dirichlet_label_partition(
    labels: Sequence[Any] | np.ndarray,
    num_clients: int,
    alpha: float,
    *,
    seed: int | np.random.SeedSequence,
    examples_per_client: int | None = None,
) -> list[np.ndarray]:
  """Partitions example indices over clients with Dirichlet label skew.

  See the module docstring for the algorithm and its choices.

  Args:
    labels: 1-D array of class labels, one per example.
    num_clients: Number of clients, at least 1.
    alpha: Dirichlet concentration (> 0); small means skewed.
    seed: Seed for `numpy.random.default_rng`.
    examples_per_client: Size of every client; defaults to
      `len(labels) // num_clients`.

  Returns:
    A list of `num_clients` int64 index arrays into `labels`, each of length
    `examples_per_client`, pairwise disjoint.

  Raises:
    ValueError: If `labels` is not 1-D, `alpha <= 0`, `num_clients < 1`,
      `examples_per_client < 1`, or there are fewer examples than
      `num_clients * examples_per_client`.
  """
  labels = np.asarray(labels)
  if labels.ndim != 1:
    raise ValueError(f'labels must be a 1-D array, got shape {labels.shape}.')
  num_examples = labels.shape[0]
  if examples_per_client is None and 1 <= num_clients <= num_examples:
    examples_per_client = num_examples // num_clients
  _check_args(num_examples, num_clients, alpha,
              examples_per_client if examples_per_client is not None else 0)

  rng = np.random.default_rng(seed)
  _, class_of, class_sizes = np.unique(
      labels, return_inverse=True, return_counts=True)
  prior = class_sizes / num_examples
  pools = [rng.permutation(np.flatnonzero(class_of == c))
           for c in range(class_sizes.size)]
  used = np.zeros(class_sizes.size, dtype=np.int64)

  partition = []
  for _ in range(num_clients):
    q = _draw_proportions(rng, alpha * prior, prior)
    counts = _draw_class_counts(rng, q, class_sizes - used,
                                examples_per_client)
    indices = np.concatenate([
        pool[start:start + count]
        for pool, start, count in zip(pools, used, counts)
    ]).astype(np.int64)
    used += counts
    partition.append(rng.permutation(indices))
  return partition


def sort_and_partition(
    labels: Sequence[Any] | np.ndarray,
    num_clients: int,
    classes_per_client: int,
    *,
    seed: int | np.random.SeedSequence,
) -> list[np.ndarray]:
  """"Sort and partition" label skew (McMahan et al. 2017; FedADC Sec. IV-B).

  The examples are sorted by label and cut into shards of q examples that
  never straddle two classes; `num_clients * classes_per_client` shards are
  drawn at random and dealt `classes_per_client` to each client. So every
  client holds exactly `classes_per_client * q` examples (equal sizes) from
  at most `classes_per_client` classes (fewer when it draws two shards of
  one class), as the FedADC paper defines s.

  Choices: q is the largest shard size for which the classes give enough
  shards (sum_c floor(n_c / q) >= num_clients * classes_per_client); the
  n_c mod q examples left in each class, and any shards not drawn, go to no
  client. Each class is shuffled before it is cut; everything random comes
  from one `numpy.random.Generator` seeded by `seed`.

  Args:
    labels: 1-D array of class labels, one per example.
    num_clients: Number of clients, at least 1.
    classes_per_client: s, the number of shards (hence the maximum number of
      classes) per client, at least 1.
    seed: Seed for `numpy.random.default_rng`.

  Returns:
    A list of `num_clients` pairwise disjoint int64 index arrays into
    `labels`, all of the same length, each in shuffled order.

  Raises:
    ValueError: If `labels` is not 1-D, a count is below 1, or there are
      fewer examples than `num_clients * classes_per_client`.
  """
  labels = np.asarray(labels)
  if labels.ndim != 1:
    raise ValueError(f'labels must be a 1-D array, got shape {labels.shape}.')
  if num_clients < 1:
    raise ValueError(f'num_clients must be at least 1, got {num_clients!r}.')
  if classes_per_client < 1:
    raise ValueError('classes_per_client must be at least 1, got '
                     f'{classes_per_client!r}.')
  num_shards = num_clients * classes_per_client
  if num_shards > labels.size:
    raise ValueError(
        f'num_clients * classes_per_client ({num_clients} * '
        f'{classes_per_client} = {num_shards}) exceeds the number of '
        f'examples ({labels.size}).')
  rng = np.random.default_rng(seed)
  _, class_of, class_sizes = np.unique(
      labels, return_inverse=True, return_counts=True)
  shard_size = labels.size // num_shards
  while (class_sizes // shard_size).sum() < num_shards:
    shard_size -= 1
  shards = []
  for c in range(class_sizes.size):
    pool = rng.permutation(np.flatnonzero(class_of == c))
    for k in range(class_sizes[c] // shard_size):
      shards.append(pool[k * shard_size:(k + 1) * shard_size])
  chosen = rng.permutation(len(shards))[:num_shards]
  return [
      rng.permutation(np.concatenate([
          shards[i] for i in chosen[k * classes_per_client:
                                    (k + 1) * classes_per_client]
      ])).astype(np.int64) for k in range(num_clients)
  ]


def label_entropy(labels_per_client: Sequence[Sequence[Any]]) -> np.ndarray:
  """Entropy (nats) of each client's empirical label distribution.

  Args:
    labels_per_client: One sequence of labels per client.

  Returns:
    A float64 array with one entropy per client; 0 for an empty client.
  """
  entropies = np.zeros(len(labels_per_client), dtype=np.float64)
  for i, client_labels in enumerate(labels_per_client):
    client_labels = np.asarray(client_labels)
    if client_labels.size == 0:
      continue
    _, counts = np.unique(client_labels, return_counts=True)
    shares = counts / counts.sum()
    entropies[i] = float(-(shares * np.log(shares)).sum())
  return entropies


def partition_summary(labels: Sequence[Any] | np.ndarray,
                      partition: Sequence[np.ndarray]) -> dict[str, Any]:
  """JSON-ready statistics of a partition (for a run's hparams.json).

  Args:
    labels: 1-D array of labels of the whole data set.
    partition: One index array into `labels` per client.

  Returns:
    A dict with `num_clients`, `num_examples` (assigned to some client),
    `num_classes` (in `labels`), `size_min`, `size_mean`, `size_max`,
    `mean_label_entropy` (nats; log(num_classes) is the uniform maximum),
    `mean_max_class_share` (mean over non-empty clients of the largest
    class's share) and `num_empty_clients`.
  """
  labels = np.asarray(labels)
  client_labels = [labels[np.asarray(idx, dtype=np.int64)] for idx in partition]
  sizes = np.array([len(c) for c in client_labels], dtype=np.int64)
  max_shares = [
      np.unique(c, return_counts=True)[1].max() / len(c)
      for c in client_labels if len(c)
  ]
  has_clients = sizes.size > 0
  return {
      'num_clients': int(sizes.size),
      'num_examples': int(sizes.sum()),
      'num_classes': int(np.unique(labels).size),
      'size_min': int(sizes.min()) if has_clients else 0,
      'size_mean': float(sizes.mean()) if has_clients else 0.0,
      'size_max': int(sizes.max()) if has_clients else 0,
      'mean_label_entropy': (float(label_entropy(client_labels).mean())
                             if has_clients else 0.0),
      'mean_max_class_share': (float(np.mean(max_shares))
                               if max_shares else 0.0),
      'num_empty_clients': int((sizes == 0).sum()),
  }
