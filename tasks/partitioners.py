"""Client partitioners for labelled data sets (NumPy only, seeded).

Every partitioner here is a pure function of its arguments and `seed` (one
`numpy.random.Generator`, or one per round for the round-dependent ones), so a
partition can be recomputed instead of stored. They return index arrays into
the data set (int64); `partition_summary` turns a partition into the
JSON-ready heterogeneity report a run writes to its `hparams.json`.

| partitioner | paper | what it promises |
|---|---|---|
| `dirichlet_label_partition` | Hsu et al. 2019 | equal sizes, q_k ~ Dir(alpha p), never empty |
| `dirichlet_class_partition` | Wang et al. 2020a, as FedPTR uses it | per-class shares over clients ~ Dir(alpha 1_K); empty clients handled by `empty_clients` |
| `sort_and_partition` | McMahan et al. 2017; FedADC IV-B | class-pure shards, s per client, equal sizes |
| `fedcurv_partition` | FedCurv Section 4 | 96 devices x 2 homogeneous-label blocks |
| `pachinko_partition` | Reddi et al. App. F (Algorithm 7-8) | two-level (coarse, fine) label skew, no overlap |
| `one_domain_per_client` | FedBN; FedFOR Section 4.3 | each client one domain |
| `LongTailRounds` | FedFOR Section 4.2 (Cao et al. 2019 profile) | fresh long-tail clients each round |
| `ConceptShift` | FedFOR Section 4.4 | persistent global label changes, p = 5 % a round |

## Dirichlet over labels, Hsu et al. (`dirichlet_label_partition`)

Hsu, Qi and Brown (2019), "Measuring the effects of non-identical data
distribution for federated visual classification", Section 3:

    p       = the global class prior (class counts / number of examples),
    q_k     ~ Dir(alpha * p)                 for each client k,
    client k gets `examples_per_client` examples; each one's class is drawn
    from q_k, and the example is drawn, without replacement, from that
    class's pool.

alpha -> 0 gives one class per client; alpha -> inf gives q_k -> p (IID).
Choices (the paper leaves them open, or there are variants):

* **Concentration scaled by the prior.** Every *client* draws class
  proportions from Dir(alpha * p), so a skewed data set keeps its skew on
  average and client sizes are under our control.
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
* Each class pool is shuffled once up front, and each client's indices are
  returned in shuffled order. Classes are the distinct values in `labels`
  (`numpy.unique`), so absent classes never get a zero concentration.

## Dirichlet over clients, as FedPTR uses it (`dirichlet_class_partition`)

FedPTR (Appendix, "Dirichlet sampling") follows Wang et al. (2020a): for each
class c, shares over the K clients s_c ~ Dir(alpha * 1_K), and client k gets
the fraction s_c[k] of class c's examples. Client sizes then vary, and with
alpha = 0.01 or 0.04 and 40 clients on 10 classes *some clients get no data*
(FedPTR Table 11 says so). Choices:

* **Cut points.** Class c's shuffled pool is cut at floor(cumsum(s_c) * n_c):
  every example of every class goes to exactly one client, none is lost.
* **No minimum-size redraw.** Wang et al.'s code redraws the whole partition
  until every client has 10 examples; that hides the empty clients the
  FedPTR paper reports, so it is not done here.
* **Empty clients are never dropped silently.** `empty_clients='keep'`
  (default) returns them as empty arrays at their position (a task then
  leaves them out of its `ClientData` so they are never sampled, and reports
  them by id: `tasks/digits.py`); `'drop'` removes them and warns
  (`EmptyClientsWarning`, naming how many); `'error'` raises `ValueError`.
  `partition_summary` reports `num_empty_clients` and `empty_clients`.
* **Tiny alpha.** A non-finite Dirichlet draw becomes one-hot on a uniformly
  drawn client (the alpha -> 0 limit), as above.

## Sort and partition (`sort_and_partition`, `fedcurv_partition`)

The examples are sorted by label and cut into class-pure shards of q
examples; `num_clients * s` shards are drawn and dealt s to each client.
FedADC (Section IV-B) defines s as the *maximum* number of labels a client
holds, which is what random dealing gives (two shards of one class make a
client with fewer labels); `distinct_classes=True` deals s shards of s
*different* classes to every client, so each holds exactly s classes.
Choices: q is the largest shard size for which the classes give enough
shards (sum_c floor(n_c / q) >= num_clients * s; with `distinct_classes`,
each class counts at most `num_clients` shards); the n_c mod q examples left
in each class, and any shards not drawn, go to no client. Distinct dealing
goes client by client in a random order: a class with as many shards left as
clients left must be taken (so the deal never gets stuck); the other classes
of a client are drawn without replacement in proportion to their shards
left.

FedCurv (Section 4): "We divided the MNIST dataset into 96 x 2 blocks of
homogeneous labels (discarding a small amount of data). We randomly assigned
two blocks to each device." `fedcurv_partition` is sort-and-partition with
96 clients and 2 blocks each, dealt at random: the paper does not say that
a device's two blocks have different labels, so a device can get two blocks
of one label (as in McMahan et al.'s shards). On MNIST (60,000 examples,
classes of 5,421 to 6,742) the blocks are of 306 examples (the largest size
giving 192 class-pure blocks; 1,248 examples are discarded).

## Pachinko allocation (`pachinko_partition`)

Reddi et al., Appendix F, Algorithms 7-8: a DAG root -> coarse labels ->
fine labels. For each client: a root multinomial over the coarse labels
~ Dir(alpha * 1) and, for each coarse label, a multinomial over its fine
labels ~ Dir(beta * 1); each of the client's N examples is drawn by walking
the DAG (coarse, then fine) and taking a random example of that fine label
without replacement. When a fine label runs out it is removed from the DAG
and the client's coarse multinomial is renormalised over its remaining fine
labels (Algorithm 8); a coarse label with no fine labels left is removed and
the root renormalised. Later clients draw their Dirichlets over the pruned
DAG (one fewer category). The paper's values (N = 100, alpha = 0.1, beta = 10
for CIFAR-100's 500 clients) are illegible in our copy; they are those of
TFF's published `cifar100` data set, and are arguments here. Choices:

* The client's examples are drawn in batches: Multinomial(remaining, leaf
  probabilities), capped by each fine label's pool, the shortfall redrawn
  after pruning — the same counts as drawing one at a time.
* If the renormalised multinomial has no mass left (tiny alpha or beta puts
  it all on a removed node), it becomes uniform over the remaining children.
* The fine -> coarse map is read from the data and must be a function
  (`ValueError` otherwise). N defaults to `len(labels) // num_clients`.

## One domain per client (`one_domain_per_client`, `apply_domain_transform`)

Covariate shift (FedBN; FedFOR Section 4.3: "We distribute the data from
each domain to a client separately"): client k gets domain k mod D and an
equal, seeded share of that domain's examples; with `num_clients = D` (the
default) each domain is one client, as FedBN does. When only one real domain
is at hand (the offline `digits` stand-in), `apply_domain_transform` makes D
synthetic ones from it, one image transform per domain (`DOMAIN_TRANSFORMS`):
identity (MNIST), inversion (white on black vs. black on white), rotation by
90 degrees, a gamma curve x^0.4 (the brightness / colour change between
MNIST and SVHN or MNIST-M, on one grey channel), additive Gaussian noise
(sigma 0.2, clipped to [0, 1]; seeded by (seed, domain)), and a left-right
mirror — up to six domains, as many as DomainNet has. These are a stand-in,
not FedBN's domains.

## Long-tail imbalance, stateless (`LongTailRounds`)

FedFOR Section 4.2: "During each global iteration, we first randomly sample
10% training data and further trim the data with a different long tail
distribution using an imbalance ratio of 0.01, i.e., each client possesses a
different split of ~2.5% of the training data." The long-tail profile is
Cao et al. (2019)'s exponential one: the class of rank i (i = 0..C-1) keeps

    n_i = floor(n_max * rho^(i / (C - 1))),   rho = imbalance ratio,

which on CIFAR-10 (10 % = ~500 per class, rho = 0.01) keeps 2.48 % of the
data, the paper's "~2.5 %". Choices (the paper gives no more):

* **Per client, per round.** Round r's clients get ids `r<round>_c<k>` never
  used in another round, so no client is seen twice (stateful methods
  degenerate to stateless ones, as the paper notes).
* **Disjoint 10 % samples.** Round r permutes the training set once and
  client k takes the k-th slice of `floor(fraction * n)` examples: the
  clients of a round never share an example, which needs
  `clients_per_round * fraction <= 1` (10 clients for 10 %).
* **A fresh long tail per client.** The class ranks are a fresh random
  permutation for each client ("a different long tail distribution").
* **n_max** is the smallest class count in the client's sample (so every
  rank's quota can be met) and n_i uses Cao et al.'s floor (after adding
  1e-9 against float error). On a tiny data set the tail classes can get
  0 examples (digits: ~14 per class in 10 % gives n_max ~ 10, so the last
  ranks hold 0); the ratio of a draw is then 0.01 only to that rounding.
* **Randomness** of round r comes from `default_rng([seed, r, tag])`: a
  round's clients are a function of (seed, r) alone, so a resumed run
  redraws them exactly.

## Concept shift (`ConceptShift`)

FedFOR Section 4.4: "at the start of each global iteration ..., the label of
a selected class of data, for all clients, will change to a different one in
the set of available labels with a probability of 5%. Once changed, the
label for this class will not be reverted until being changed again in the
future to a different label." Here the state is a label map `m` (original
class -> current label, the identity before round 1); at the start of round
r, with probability p, a class c is drawn uniformly from the C original
classes and m[c] moves to a label drawn uniformly from the C - 1 labels other
than m[c]. Choices: the map may stop being one-to-one (two classes can share
a label — "a different one in the set of available labels" allows it), which
is the harder, persistent concept change the paper describes; round r's
draws come from `default_rng([seed, r, tag])` (always three numbers, whether
or not a shift happens), so the map at round r is a function of (seed, r)
alone and resume is exact. Evaluation data are relabelled by the same map
(the model is scored on the current concept).
"""

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

EMPTY_CLIENT_POLICIES = ('keep', 'drop', 'error')
# Names of the synthetic domains of `apply_domain_transform`, in order.
DOMAIN_TRANSFORMS = ('identity', 'invert', 'rotate90', 'gamma', 'noise',
                     'mirror')
# Third seed word of the per-round generators (so they differ from others).
_LONG_TAIL_TAG = 0x4C54
_CONCEPT_SHIFT_TAG = 0x4353
_DOMAIN_NOISE_TAG = 0x444E


class EmptyClientsWarning(UserWarning):
  """Clients with no examples were dropped (`empty_clients='drop'`)."""


def _as_labels(labels: Sequence[Any] | np.ndarray,
               name: str = 'labels') -> np.ndarray:
  labels = np.asarray(labels)
  if labels.ndim != 1:
    raise ValueError(f'{name} must be a 1-D array, got shape {labels.shape}.')
  return labels


def _check_args(num_examples: int, num_clients: int, alpha: float,
                examples_per_client: int) -> None:
  if not alpha > 0:
    raise ValueError(f'alpha must be positive, got {alpha!r}.')
  _check_sizes(num_examples, num_clients, examples_per_client)


def _check_sizes(num_examples: int, num_clients: int,
                 examples_per_client: int) -> None:
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


def _draw_class_counts(
    rng: np.random.Generator, q: np.ndarray | Callable[[np.ndarray],
                                                       np.ndarray],
    available: np.ndarray, size: int) -> np.ndarray:
  """Counts of `size` draws from q, renormalised over non-dry pools.

  `q` is a probability vector (renormalised over the pools with examples
  left) or a function of the mask of such pools returning their weights.
  """
  counts = np.zeros_like(available)
  available = available.copy()
  need = size
  while need > 0:
    alive = available > 0
    weights = q(alive) if callable(q) else np.where(alive, q, 0.0)
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

  Hsu et al. (2019); see the module docstring for the algorithm and its
  choices.

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
  labels = _as_labels(labels)
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


def apply_empty_client_policy(partition: list[np.ndarray],
                              empty_clients: str) -> list[np.ndarray]:
  """Keeps, drops (with a warning) or refuses clients with no examples.

  Args:
    partition: One index array per client.
    empty_clients: 'keep' (return `partition` as it is), 'drop' (remove the
      empty clients and warn with `EmptyClientsWarning`) or 'error'.

  Returns:
    The partition under the policy.

  Raises:
    ValueError: If `empty_clients` is not a policy, or it is 'error' and a
      client is empty.
  """
  if empty_clients not in EMPTY_CLIENT_POLICIES:
    raise ValueError(
        f'empty_clients must be one of {", ".join(EMPTY_CLIENT_POLICIES)}, '
        f'got {empty_clients!r}.')
  empty = [k for k, idx in enumerate(partition) if len(idx) == 0]
  if not empty or empty_clients == 'keep':
    return partition
  if empty_clients == 'error':
    raise ValueError(
        f'{len(empty)} of {len(partition)} clients got no examples (clients '
        f'{", ".join(map(str, empty[:10]))}{", ..." if len(empty) > 10 else ""}'
        "); use empty_clients='keep' or 'drop', a larger alpha or fewer "
        'clients.')
  warnings.warn(
      f'{len(empty)} of {len(partition)} clients got no examples and were '
      'dropped (empty_clients=\'drop\').', EmptyClientsWarning, stacklevel=3)
  return [idx for idx in partition if len(idx)]


def dirichlet_class_partition(
    labels: Sequence[Any] | np.ndarray,
    num_clients: int,
    alpha: float,
    *,
    seed: int | np.random.SeedSequence,
    empty_clients: str = 'keep',
) -> list[np.ndarray]:
  """Per-class Dirichlet shares over clients (Wang et al. 2020a; FedPTR).

  For each class c, s_c ~ Dir(alpha * 1_K) over the K clients, and class
  c's shuffled examples are cut at floor(cumsum(s_c) * n_c). See the module
  docstring for the empty-client policy and the other choices.

  Args:
    labels: 1-D array of class labels, one per example.
    num_clients: K, at least 1.
    alpha: Dirichlet concentration (> 0); FedPTR uses 0.01 and 0.04.
    seed: Seed for `numpy.random.default_rng`.
    empty_clients: 'keep' (default), 'drop' or 'error' (see
      `apply_empty_client_policy`).

  Returns:
    Pairwise disjoint int64 index arrays into `labels`, covering every
    example, in shuffled order: `num_clients` of them (some possibly empty)
    unless `empty_clients='drop'` removed the empty ones.

  Raises:
    ValueError: If `labels` is not 1-D, `alpha <= 0`, `num_clients < 1`,
      `empty_clients` is not a policy, or it is 'error' and a client is
      empty.
  """
  labels = _as_labels(labels)
  if not alpha > 0:
    raise ValueError(f'alpha must be positive, got {alpha!r}.')
  if num_clients < 1:
    raise ValueError(f'num_clients must be at least 1, got {num_clients!r}.')
  if empty_clients not in EMPTY_CLIENT_POLICIES:
    raise ValueError(
        f'empty_clients must be one of {", ".join(EMPTY_CLIENT_POLICIES)}, '
        f'got {empty_clients!r}.')
  rng = np.random.default_rng(seed)
  _, class_of = np.unique(labels, return_inverse=True)
  uniform = np.full(num_clients, 1.0 / num_clients)
  pieces = [[] for _ in range(num_clients)]
  for c in range(int(class_of.max()) + 1 if labels.size else 0):
    pool = rng.permutation(np.flatnonzero(class_of == c))
    shares = _draw_proportions(rng, np.full(num_clients, float(alpha)),
                               uniform)
    cuts = np.floor(np.cumsum(shares)[:-1] * pool.size).astype(np.int64)
    for k, part in enumerate(np.split(pool, np.minimum(cuts, pool.size))):
      pieces[k].append(part)
  partition = [
      rng.permutation(np.concatenate(p)).astype(np.int64) if p else
      np.zeros(0, np.int64) for p in pieces
  ]
  return apply_empty_client_policy(partition, empty_clients)


def _cut_shards(rng: np.random.Generator, class_of: np.ndarray,
                class_sizes: np.ndarray, shard_size: int):
  """Each class shuffled and cut into shards of `shard_size` examples.

  Returns:
    `(shards, shard_class)`: the shards' example indices, class by class,
    and each shard's class; a class's remainder is in no shard.
  """
  shards, shard_class = [], []
  for c in range(class_sizes.size):
    pool = rng.permutation(np.flatnonzero(class_of == c))
    for k in range(class_sizes[c] // shard_size):
      shards.append(pool[k * shard_size:(k + 1) * shard_size])
      shard_class.append(c)
  return shards, shard_class


def sort_and_partition(
    labels: Sequence[Any] | np.ndarray,
    num_clients: int,
    classes_per_client: int,
    *,
    seed: int | np.random.SeedSequence,
    distinct_classes: bool = False,
) -> list[np.ndarray]:
  """"Sort and partition" label skew (McMahan et al. 2017; FedADC Sec. IV-B).

  The examples are sorted by label and cut into shards of q examples that
  never straddle two classes; `num_clients * classes_per_client` shards are
  drawn at random and dealt `classes_per_client` to each client. So every
  client holds exactly `classes_per_client * q` examples (equal sizes) from
  at most `classes_per_client` classes (fewer when it draws two shards of
  one class), as the FedADC paper defines s; with `distinct_classes=True`
  its shards are of `classes_per_client` different classes, so it holds
  exactly that many.

  Choices: q is the largest shard size for which the classes give enough
  shards (sum_c floor(n_c / q) >= num_clients * classes_per_client, each
  class counting at most `num_clients` shards when `distinct_classes`); the
  n_c mod q examples left in each class, and any shards not drawn, go to no
  client. Each class is shuffled before it is cut; everything random comes
  from one `numpy.random.Generator` seeded by `seed`. The distinct deal is in
  the module docstring.

  Args:
    labels: 1-D array of class labels, one per example.
    num_clients: Number of clients, at least 1.
    classes_per_client: s, the number of shards (hence the maximum number of
      classes) per client, at least 1.
    seed: Seed for `numpy.random.default_rng`.
    distinct_classes: Deal every client shards of s different classes.

  Returns:
    A list of `num_clients` pairwise disjoint int64 index arrays into
    `labels`, all of the same length, each in shuffled order.

  Raises:
    ValueError: If `labels` is not 1-D, a count is below 1, there are
      fewer examples than `num_clients * classes_per_client`, or (with
      `distinct_classes`) fewer classes than `classes_per_client`.
  """
  # Over 80 lines with its docstring: the argument checks and the shard dealing
  # share the class counts and the generator, and are read in one place.
  labels = _as_labels(labels)
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
  if distinct_classes and classes_per_client > class_sizes.size:
    raise ValueError(
        f'classes_per_client ({classes_per_client}) exceeds the number of '
        f'classes ({class_sizes.size}); distinct_classes needs at least as '
        'many classes.')
  cap = num_clients if distinct_classes else labels.size

  def usable(size):
    return np.minimum(class_sizes // size, cap)

  shard_size = labels.size // num_shards
  while usable(shard_size).sum() < num_shards:
    shard_size -= 1
  shards, shard_class = _cut_shards(rng, class_of, class_sizes, shard_size)
  if not distinct_classes:
    chosen = rng.permutation(len(shards))[:num_shards]
    hands = [chosen[k * classes_per_client:(k + 1) * classes_per_client]
             for k in range(num_clients)]
  else:
    hands = _deal_distinct(rng, np.array(shard_class), class_sizes.size,
                           num_clients, classes_per_client)
  return [
      rng.permutation(np.concatenate([shards[i] for i in hand])).astype(
          np.int64) for hand in hands
  ]


def _deal_distinct(rng: np.random.Generator, shard_class: np.ndarray,
                   num_classes: int, num_clients: int,
                   per_client: int) -> list[np.ndarray]:
  """Deals `per_client` shards of different classes to every client."""
  # Draw num_clients * per_client shards, at most num_clients per class.
  taken = np.zeros(num_classes, np.int64)
  chosen = []
  for i in rng.permutation(shard_class.size):
    if taken[shard_class[i]] < num_clients:
      taken[shard_class[i]] += 1
      chosen.append(i)
      if len(chosen) == num_clients * per_client:
        break
  by_class = [[i for i in chosen if shard_class[i] == c]
              for c in range(num_classes)]
  left = np.array([len(b) for b in by_class])
  hands = [None] * num_clients
  for remaining, client in zip(range(num_clients, 0, -1),
                               rng.permutation(num_clients)):
    forced = np.flatnonzero(left == remaining)
    free = np.flatnonzero((left > 0) & (left < remaining))
    extra = per_client - forced.size
    picked = list(forced)
    if extra:
      weights = left[free] / left[free].sum()
      picked += list(rng.choice(free, size=extra, replace=False, p=weights))
    hands[client] = np.array([by_class[c].pop() for c in picked])
    left[picked] -= 1
  return hands


def fedcurv_partition(
    labels: Sequence[Any] | np.ndarray,
    *,
    seed: int | np.random.SeedSequence,
    num_clients: int = 96,
    blocks_per_client: int = 2,
) -> list[np.ndarray]:
  """FedCurv's split: 96 devices, two blocks of homogeneous labels each.

  `sort_and_partition(labels, num_clients, blocks_per_client)` with the
  paper's 96 x 2 (FedCurv Section 4; the module docstring says what the
  paper leaves open).

  Args:
    labels: 1-D array of class labels.
    seed: Seed for `numpy.random.default_rng`.
    num_clients: Number of devices (the paper: 96).
    blocks_per_client: Blocks per device (the paper: 2).

  Returns:
    `num_clients` disjoint int64 index arrays of `blocks_per_client`
    class-pure blocks each, all of one size.

  Raises:
    ValueError: As `sort_and_partition`.
  """
  return sort_and_partition(labels, num_clients, blocks_per_client, seed=seed)


def _label_tree(coarse_labels: np.ndarray, fine_labels: np.ndarray):
  """The (coarse, fine) label tree that Pachinko allocation walks.

  Returns:
    `(fine_of, fine_sizes, coarse_names, parent)`: each example's fine
    label index, each fine label's count, the coarse labels, and each fine
    label's coarse label index.

  Raises:
    ValueError: If a fine label sits under two coarse labels.
  """
  _, fine_of, fine_sizes = np.unique(
      fine_labels, return_inverse=True, return_counts=True)
  coarse_names, coarse_of = np.unique(coarse_labels, return_inverse=True)
  parent = np.full(fine_sizes.size, -1)
  for f in range(fine_sizes.size):
    parents = np.unique(coarse_of[fine_of == f])
    if parents.size != 1:
      raise ValueError(
          f'fine label {np.unique(fine_labels)[f]!r} sits under several '
          f'coarse labels ({", ".join(map(str, coarse_names[parents]))}); '
          'Pachinko allocation needs a tree.')
    parent[f] = parents[0]
  return fine_of, fine_sizes, coarse_names, parent


def pachinko_partition(
    coarse_labels: Sequence[Any] | np.ndarray,
    fine_labels: Sequence[Any] | np.ndarray,
    num_clients: int,
    alpha: float,
    beta: float,
    *,
    seed: int | np.random.SeedSequence,
    examples_per_client: int | None = None,
) -> list[np.ndarray]:
  """Pachinko allocation over (coarse, fine) labels (Reddi et al., App. F).

  See the module docstring for the algorithm and its choices.

  Args:
    coarse_labels: 1-D array, the coarse label of each example.
    fine_labels: 1-D array of the same length, the fine label of each
      example; every fine label must sit under one coarse label.
    num_clients: Number of clients, at least 1.
    alpha: Root Dirichlet concentration over coarse labels (> 0).
    beta: Coarse-to-fine Dirichlet concentration (> 0).
    seed: Seed for `numpy.random.default_rng`.
    examples_per_client: N; defaults to `len(fine_labels) // num_clients`.

  Returns:
    `num_clients` pairwise disjoint int64 index arrays of N examples each,
    each in shuffled order.

  Raises:
    ValueError: If the labels are not 1-D arrays of one length, a fine
      label sits under two coarse labels, `alpha` or `beta` is not
      positive, or the sizes do not fit.
  """
  # Over 80 lines with its docstring: the draws share one generator and the
  # pools' counts; the sampling is read in one place, as Reddi et al.'s
  # Appendix describes it.
  coarse_labels = _as_labels(coarse_labels, 'coarse_labels')
  fine_labels = _as_labels(fine_labels, 'fine_labels')
  if coarse_labels.size != fine_labels.size:
    raise ValueError(
        f'coarse_labels and fine_labels must have one length, got '
        f'{coarse_labels.size} and {fine_labels.size}.')
  if not beta > 0:
    raise ValueError(f'beta must be positive, got {beta!r}.')
  num_examples = fine_labels.size
  if examples_per_client is None and 1 <= num_clients <= num_examples:
    examples_per_client = num_examples // num_clients
  _check_args(num_examples, num_clients, alpha,
              examples_per_client if examples_per_client is not None else 0)
  fine_of, fine_sizes, coarse_names, parent = _label_tree(coarse_labels,
                                                         fine_labels)
  rng = np.random.default_rng(seed)
  pools = [rng.permutation(np.flatnonzero(fine_of == f))
           for f in range(fine_sizes.size)]
  used = np.zeros(fine_sizes.size, np.int64)

  def dirichlet(size, concentration):
    q = rng.dirichlet(np.full(size, float(concentration)))
    if not (np.all(np.isfinite(q)) and q.sum() > 0):
      q = np.zeros(size)
      q[rng.integers(size)] = 1.0
    return q / q.sum()

  partition = []
  for _ in range(num_clients):
    alive = fine_sizes - used > 0
    live_coarse = np.unique(parent[alive])
    root = np.zeros(coarse_names.size)
    root[live_coarse] = dirichlet(live_coarse.size, alpha)
    within = np.zeros(fine_sizes.size)  # Each coarse label's multinomial.
    for c in live_coarse:
      children = np.flatnonzero(alive & (parent == c))
      within[children] = dirichlet(children.size, beta)

    def leaf_weights(alive_now, root=root, within=within):
      weights = np.zeros(fine_sizes.size)
      coarse_mass = np.zeros(coarse_names.size)
      for c in np.unique(parent[alive_now]):
        children = alive_now & (parent == c)
        mass = within[children]
        mass = (mass / mass.sum() if mass.sum() > 0 else
                np.full(mass.size, 1.0 / mass.size))  # Algorithm 8.
        weights[children] = mass
        coarse_mass[c] = root[c]
      if not coarse_mass.sum() > 0:
        coarse_mass[np.unique(parent[alive_now])] = 1.0
      return weights * (coarse_mass / coarse_mass.sum())[parent]

    counts = _draw_class_counts(rng, leaf_weights, fine_sizes - used,
                                examples_per_client)
    indices = np.concatenate([
        pool[start:start + count]
        for pool, start, count in zip(pools, used, counts)
    ]).astype(np.int64)
    used += counts
    partition.append(rng.permutation(indices))
  return partition


def one_domain_per_client(
    domains: Sequence[Sequence[Any] | np.ndarray | int],
    num_clients: int | None = None,
    *,
    seed: int | np.random.SeedSequence,
) -> list[tuple[int, np.ndarray]]:
  """Covariate shift: each client holds examples of one domain only.

  Client k gets domain k mod D and an equal share (`numpy.array_split` of a
  seeded permutation) of that domain's examples.

  Args:
    domains: One entry per domain: its examples (any sequence; only the
      length is used) or its number of examples.
    num_clients: Number of clients, at least D; defaults to D (one client
      per domain, as FedBN).
    seed: Seed for `numpy.random.default_rng`.

  Returns:
    One `(domain index, int64 indices into that domain)` pair per client.

  Raises:
    ValueError: If there is no domain, a domain is empty, or `num_clients`
      is below D or above the examples of a domain's share.
  """
  sizes = [d if isinstance(d, (int, np.integer)) else len(d) for d in domains]
  if not sizes:
    raise ValueError('domains must hold at least one domain, got none.')
  for d, size in enumerate(sizes):
    if size < 1:
      raise ValueError(f'domain {d} has no examples.')
  num_clients = len(sizes) if num_clients is None else num_clients
  if num_clients < len(sizes):
    raise ValueError(f'num_clients ({num_clients}) is smaller than the '
                     f'number of domains ({len(sizes)}).')
  rng = np.random.default_rng(seed)
  clients: list[tuple[int, np.ndarray]] = [None] * num_clients
  for d, size in enumerate(sizes):
    members = list(range(d, num_clients, len(sizes)))
    if len(members) > size:
      raise ValueError(f'domain {d} has {size} examples, fewer than its '
                       f'{len(members)} clients.')
    for k, part in zip(members,
                       np.array_split(rng.permutation(size), len(members))):
      clients[k] = (d, part.astype(np.int64))
  return clients


def apply_domain_transform(images: np.ndarray, domain: int, *,
                           seed: int = 0) -> np.ndarray:
  """The stand-in domain `domain` of images in [0, 1] (`DOMAIN_TRANSFORMS`).

  Args:
    images: float array [n, height, width, channels] with values in [0, 1];
      height == width for the rotation.
    domain: Index into `DOMAIN_TRANSFORMS`.
    seed: Seeds the noise of the 'noise' domain (with the domain index).

  Returns:
    The transformed float32 images, same shape, values in [0, 1].

  Raises:
    ValueError: If `domain` is not an index into `DOMAIN_TRANSFORMS` or the
      images are not 4-D.
  """
  if not 0 <= domain < len(DOMAIN_TRANSFORMS):
    raise ValueError(f'domain must be in [0, {len(DOMAIN_TRANSFORMS)}) '
                     f'({", ".join(DOMAIN_TRANSFORMS)}), got {domain!r}.')
  images = np.asarray(images, np.float32)
  if images.ndim != 4:
    raise ValueError('images must be 4-D [n, height, width, channels], got '
                     f'shape {images.shape}.')
  name = DOMAIN_TRANSFORMS[domain]
  if name == 'invert':
    out = 1.0 - images
  elif name == 'rotate90':
    out = np.rot90(images, k=1, axes=(1, 2))
  elif name == 'gamma':
    out = np.power(images, 0.4)
  elif name == 'noise':
    rng = np.random.default_rng([seed, domain, _DOMAIN_NOISE_TAG])
    out = np.clip(images + 0.2 * rng.standard_normal(images.shape), 0.0, 1.0)
  elif name == 'mirror':
    out = images[:, :, ::-1, :]
  else:
    out = images
  return np.ascontiguousarray(out, dtype=np.float32)


def long_tail_counts(num_classes: int, n_max: int,
                     imbalance_ratio: float) -> np.ndarray:
  """Cao et al.'s profile: n_i = floor(n_max * rho^(i / (C - 1))) by rank i.

  Args:
    num_classes: C, at least 1.
    n_max: Examples of the head class (rank 0), at least 0.
    imbalance_ratio: rho = n_tail / n_head, in (0, 1].

  Returns:
    int64 counts, one per rank, non-increasing.

  Raises:
    ValueError: If an argument is out of range.
  """
  if num_classes < 1:
    raise ValueError(f'num_classes must be at least 1, got {num_classes!r}.')
  if n_max < 0:
    raise ValueError(f'n_max must be non-negative, got {n_max!r}.')
  if not 0 < imbalance_ratio <= 1:
    raise ValueError('imbalance_ratio must be in (0, 1], got '
                     f'{imbalance_ratio!r}.')
  if num_classes == 1:
    return np.array([n_max], np.int64)
  ranks = np.arange(num_classes)
  return np.floor(n_max * imbalance_ratio**(ranks / (num_classes - 1)) +
                  1e-9).astype(np.int64)


class LongTailRounds:
  """FedFOR's stateless long-tail clients: fresh ones every round.

  Round r's client k takes the k-th disjoint slice of `fraction` of the
  training set (one permutation per round) and trims it to a long tail of
  `imbalance_ratio` with its own random class ranking (module docstring).

      rounds = LongTailRounds(train_labels, fraction=0.1,
                              imbalance_ratio=0.01)
      ids = rounds.client_ids(round_num, 10)
      parts = rounds.clients_for_round(round_num, 10, seed=seed)
  """

  def __init__(self, labels: Sequence[Any] | np.ndarray, *,
               fraction: float = 0.1, imbalance_ratio: float = 0.01):
    """Validates and keeps the training labels.

    Args:
      labels: 1-D labels of the training set.
      fraction: Share of the training set each client samples, in (0, 1].
      imbalance_ratio: rho, in (0, 1].

    Raises:
      ValueError: If an argument is out of range or `fraction` gives a
        client no example.
    """
    self._labels = _as_labels(labels)
    if not 0 < fraction <= 1:
      raise ValueError(f'fraction must be in (0, 1], got {fraction!r}.')
    if not 0 < imbalance_ratio <= 1:
      raise ValueError('imbalance_ratio must be in (0, 1], got '
                       f'{imbalance_ratio!r}.')
    self._sample_size = int(np.floor(fraction * self._labels.size + 1e-9))
    if self._sample_size < 1:
      raise ValueError(f'fraction ({fraction}) of {self._labels.size} '
                       'examples is less than one example.')
    self.fraction = fraction
    self.imbalance_ratio = imbalance_ratio
    _, self._class_of = np.unique(self._labels, return_inverse=True)
    self._num_classes = int(self._class_of.max()) + 1
    self.max_clients_per_round = self._labels.size // self._sample_size

  @staticmethod
  def client_ids(round_num: int, num_clients: int) -> list[str]:
    """Round `round_num`'s client ids, `r<round>_c<k>`: new every round."""
    return [f'r{round_num:06d}_c{k:03d}' for k in range(num_clients)]

  def clients_for_round(self, round_num: int, num_clients: int, *,
                        seed: int) -> list[np.ndarray]:
    """Index arrays (into the labels) of round `round_num`'s clients.

    Args:
      round_num: The round, from 1.
      num_clients: Clients of the round, at most `max_clients_per_round`.
      seed: The run's seed (non-negative).

    Returns:
      `num_clients` pairwise disjoint int64 index arrays, each a long tail
      of ratio `imbalance_ratio` (to rounding) over a fresh class ranking,
      in shuffled order; a function of (seed, round_num) only.

    Raises:
      ValueError: If `num_clients` is not in [1, max_clients_per_round].
    """
    if not 1 <= num_clients <= self.max_clients_per_round:
      raise ValueError(
          f'num_clients must be in [1, {self.max_clients_per_round}] (disjoint '
          f'samples of {self.fraction} of the data), got {num_clients}.')
    rng = np.random.default_rng([seed, round_num, _LONG_TAIL_TAG])
    order = rng.permutation(self._labels.size)
    clients = []
    for k in range(num_clients):
      sample = order[k * self._sample_size:(k + 1) * self._sample_size]
      classes = self._class_of[sample]
      available = np.bincount(classes, minlength=self._num_classes)
      counts = long_tail_counts(self._num_classes, int(available.min()),
                                self.imbalance_ratio)
      rank_to_class = rng.permutation(self._num_classes)
      kept = np.concatenate([
          sample[classes == c][:n] for c, n in zip(rank_to_class, counts)
      ]).astype(np.int64)
      clients.append(rng.permutation(kept))
    return clients


class ConceptShift:
  """FedFOR's persistent, global concept shift: a label map per round.

  `label_map(r)[c]` is the label class c carries during round r (the
  identity before any shift); see the module docstring.
  """

  def __init__(self, num_classes: int, probability: float = 0.05, *,
               seed: int):
    """Validates the settings.

    Args:
      num_classes: C, at least 2 (a label must have somewhere to go).
      probability: Chance of a shift at the start of each round, in [0, 1].
      seed: The run's seed (non-negative).

    Raises:
      ValueError: If an argument is out of range.
    """
    if num_classes < 2:
      raise ValueError(f'num_classes must be at least 2, got {num_classes!r}.')
    if not 0 <= probability <= 1:
      raise ValueError(f'probability must be in [0, 1], got {probability!r}.')
    self.num_classes = num_classes
    self.probability = probability
    self.seed = seed
    self._cache = (0, np.arange(num_classes, dtype=np.int64))

  def _draw(self, round_num: int) -> tuple[bool, int, int]:
    rng = np.random.default_rng([self.seed, round_num, _CONCEPT_SHIFT_TAG])
    u, c, step = (rng.random(), int(rng.integers(self.num_classes)),
                  int(rng.integers(1, self.num_classes)))
    return u < self.probability, c, step

  def shift_at(self, round_num: int) -> tuple[int, int, int] | None:
    """`(class, old label, new label)` of round `round_num`'s shift, or None."""
    happens, c, step = self._draw(round_num)
    if not happens:
      return None
    old = int(self.label_map(round_num - 1)[c])
    return c, old, (old + step) % self.num_classes

  def label_map(self, round_num: int) -> np.ndarray:
    """The map original class -> current label during round `round_num`.

    Args:
      round_num: The round (from 1; 0 gives the identity).

    Returns:
      An int64 array of C labels (a copy).
    """
    done, current = self._cache
    if round_num < done:
      done, current = 0, np.arange(self.num_classes, dtype=np.int64)
    current = current.copy()
    for r in range(done + 1, round_num + 1):
      happens, c, step = self._draw(r)
      if happens:
        current[c] = (current[c] + step) % self.num_classes
    self._cache = (max(round_num, 0), current.copy())
    return current

  def shift_rounds(self, rounds: int) -> list[int]:
    """The rounds in 1..`rounds` that start with a shift."""
    return [r for r in range(1, rounds + 1) if self._draw(r)[0]]


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
  """JSON-ready heterogeneity of a partition (for a run's hparams.json).

  Args:
    labels: 1-D array of labels of the whole data set.
    partition: One index array into `labels` per client (empty ones count).

  Returns:
    A dict with `num_clients`, `num_examples` (assigned to some client),
    `num_classes` (in `labels`), `size_min`, `size_mean`, `size_max`,
    `mean_label_entropy` (nats; log(num_classes) is the uniform maximum;
    an empty client counts 0), `label_entropy_min`, `label_entropy_median`,
    `label_entropy_max` (over all clients, likewise), `mean_max_class_share`
    (mean over non-empty clients of the largest class's share),
    `classes_per_client_min`, `classes_per_client_mean`,
    `classes_per_client_max` (distinct labels a client holds),
    `num_empty_clients` and `empty_clients` (their positions in
    `partition`).
  """
  labels = np.asarray(labels)
  client_labels = [labels[np.asarray(idx, dtype=np.int64)] for idx in partition]
  sizes = np.array([len(c) for c in client_labels], dtype=np.int64)
  max_shares = [
      np.unique(c, return_counts=True)[1].max() / len(c)
      for c in client_labels if len(c)
  ]
  distinct = np.array([np.unique(c).size for c in client_labels], np.int64)
  entropies = label_entropy(client_labels)
  has_clients = sizes.size > 0

  def stat(values, fn, cast=float):
    return cast(fn(values)) if has_clients else cast(0)

  return {
      'num_clients': int(sizes.size),
      'num_examples': int(sizes.sum()),
      'num_classes': int(np.unique(labels).size),
      'size_min': stat(sizes, np.min, int),
      'size_mean': stat(sizes, np.mean),
      'size_max': stat(sizes, np.max, int),
      'mean_label_entropy': stat(entropies, np.mean),
      'label_entropy_min': stat(entropies, np.min),
      'label_entropy_median': stat(entropies, np.median),
      'label_entropy_max': stat(entropies, np.max),
      'mean_max_class_share': (float(np.mean(max_shares))
                               if max_shares else 0.0),
      'classes_per_client_min': stat(distinct, np.min, int),
      'classes_per_client_mean': stat(distinct, np.mean),
      'classes_per_client_max': stat(distinct, np.max, int),
      'num_empty_clients': int((sizes == 0).sum()),
      'empty_clients': [int(k) for k in np.flatnonzero(sizes == 0)],
  }
