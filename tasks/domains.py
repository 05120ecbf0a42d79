"""Covariate-shift tasks, one domain per client: `digits_domains`, `domainnet`.

FedBN's benchmarks, which FedFOR's covariate-shift tables (Tables 3-4) reuse:
every client holds the data of one domain, all domains share the labels.

* `digits_domains`: the five digit domains MNIST, SVHN, USPS, SynthDigits,
  MNIST-M (ten classes, 0-9).
* `domainnet`: the six DomainNet domains clipart, infograph, painting,
  quickdraw, real, sketch, on FedBN's ten classes (bird, feather, headphones,
  ice_cream, teapot, tiger, whale, windmill, wine_glass, zebra; labels 0-9
  in that order).

TFDS lacks most of these domains, so they are read from files in this
layout under `--data_dir`:

    <data_dir>/digits_domains/<domain>/train.npz   domain in mnist, svhn,
    <data_dir>/digits_domains/<domain>/test.npz      usps, synth_digits, mnist_m
    <data_dir>/domainnet/<domain>/train.npz        domain in clipart, ...,
    <data_dir>/domainnet/<domain>/test.npz           sketch

each an `.npz` (`numpy.savez`) with arrays `x`: uint8 images [N, H, W, C]
(C = 1 or 3; sizes may differ between domains) and `y`: integer labels [N]
in 0..9. (FedBN's own pickles hold exactly these arrays for the digits, and
image paths for DomainNet: decode and resize those to, e.g., 256x256 once.)
A missing file raises `data_errors.MissingDataError` naming it; malformed
arrays raise `ValueError` naming the file and what was expected.

Pipeline (FedBN's code, `federated/fed_digits.py`, `fed_domainnet.py`):

1. Every domain's images are resized (bilinear) to `image_size` squared and
   grey images get three equal channels: 28x28x3 for the digits, 256x256x3
   for DomainNet (the defaults), so one model fits all domains.
2. FedBN truncates every domain to the smallest one and trains on a
   fraction of it: client d gets `floor(train_fraction * min_d N_d)`
   training examples of domain d, drawn by a seeded permutation (FedBN:
   10% for the digits, i.e. 743 of USPS's 7,438; 5% for DomainNet).
3. Clients: `partitioners.one_domain_per_client` (seeded). With
   `clients_per_domain` = 1 (default, FedBN) client d holds all of domain
   d's training examples; with c > 1 every domain's examples are split
   equally over c clients. Test clients are the domains' whole test sets,
   one client per domain.
4. Concept shift (FedFOR 4.4, option `concept_shift`, a probability per
   round, 0 = off): on top of the domains, `heterogeneity.RoundClientData`
   relabels the sampled clients' data by the round's persistent label map
   (`partitioners.ConceptShift`; `create_round_data`).
5. Client ids: `train_<domain>` (`train_<domain>_<j>` when
   clients_per_domain > 1) and `test_<domain>`, in the order of option
   `domains` (a comma-separated subset; default all).

Preprocessing (in the datasets' map): digits `x / 255` then
`(x - 0.5) / 0.5` per channel; DomainNet `x / 255` (FedBN does not
normalise), training images randomly flipped left-right and rotated by a
uniform angle in [-30, 30] degrees (nearest neighbour, zero fill, as
torchvision's `RandomRotation`). Models: `fedbn_cnn` (digits) and
`alexnet_bn` (DomainNet) by default, option `model`.

`use_synthetic_data=True`: per domain 60 train and 20 test seeded random
images whose brightness and colour depend on the domain (a covariate shift
the plumbing can see), at the domain's usual size; no files.
"""

import dataclasses
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tasks import data_errors
from tasks import heterogeneity
from tasks import partitioners
from tasks import tfds_images

DIGITS_DOMAINS = ('mnist', 'svhn', 'usps', 'synth_digits', 'mnist_m')
DOMAINNET_DOMAINS = ('clipart', 'infograph', 'painting', 'quickdraw', 'real',
                     'sketch')
DOMAINNET_CLASSES = ('bird', 'feather', 'headphones', 'ice_cream', 'teapot',
                     'tiger', 'whale', 'windmill', 'wine_glass', 'zebra')
NUM_CLASSES = 10
DEFAULT_EVAL_CLIENT_SPEC = tff.simulation.baselines.ClientSpec(
    num_epochs=1, batch_size=32, shuffle_buffer_size=1)


@dataclasses.dataclass(frozen=True)
class DomainCollection:
  """A set of domains sharing labels, read from `<data_dir>/<folder>/`."""
  folder: str
  domains: tuple[str, ...]
  image_size: int
  train_fraction: float
  normalize: bool  # (x - 0.5) / 0.5 after scaling to [0, 1].
  augment: bool  # Random flip and rotation of training images.
  synthetic_size: tuple[int, ...]  # (H, W, C) of synthetic images.
  default_model: str
  models: tuple[str, ...]


COLLECTIONS: dict[str, DomainCollection] = {
    'digits_domains': DomainCollection(
        'digits_domains', DIGITS_DOMAINS, 28, 0.1, True, False, (28, 28, 3),
        'fedbn_cnn', ('fedbn_cnn', 'fedadc_cnn', 'fedcurv_cnn', 'mtt_convnet',
                      'resnet20', 'resnet20_gn')),
    'domainnet': DomainCollection(
        'domainnet', DOMAINNET_DOMAINS, 256, 0.05, False, True,
        (64, 64, 3), 'alexnet_bn', ('alexnet_bn', 'resnet18_gn', 'resnet20',
                                    'resnet20_gn', 'mtt_convnet')),
}


def default_options(task: str) -> dict[str, Any]:
  """The options of task `task` (a key of `COLLECTIONS`), with defaults."""
  collection = COLLECTIONS[task]
  return {'domains': ','.join(collection.domains),
          'image_size': collection.image_size,
          'train_fraction': collection.train_fraction,
          'clients_per_domain': 1,
          'model': collection.default_model,
          'concept_shift': 0.0}


def _instructions(task: str, directory: str) -> str:
  return (f'Write {directory}/train.npz and test.npz with numpy.savez(path, '
          f'x=uint8 images [N, H, W, C], y=labels [N] in 0..9); the layout is '
          f'described in tasks/domains.py (task {task!r}).')


def load_domain(task: str, domain: str, split: str,
                data_dir: str | None) -> tuple[np.ndarray, np.ndarray]:
  """Reads `<data_dir>/<folder>/<domain>/<split>.npz` (see the module).

  Args:
    task: A key of `COLLECTIONS`.
    domain: One of the collection's domains.
    split: 'train' or 'test'.
    data_dir: The data directory; None means `data`
      (`data_errors.DEFAULT_DATA_DIR`).

  Returns:
    `(x uint8 [N, H, W, C], y int64 [N])`.

  Raises:
    data_errors.MissingDataError: If the file does not exist.
    ValueError: If its arrays are not as documented.
  """
  folder = os.path.join(COLLECTIONS[task].folder, domain)
  path = data_errors.require_file(
      task, data_dir, os.path.join(folder, f'{split}.npz'),
      _instructions(task, os.path.join(
          data_dir or data_errors.default_data_dir(), folder)))
  with np.load(path) as data:
    if 'x' not in data or 'y' not in data:
      raise ValueError(f'{path}: expected arrays x and y, found '
                       f'{", ".join(sorted(data.files)) or "none"}.')
    x, y = data['x'], data['y']
  if (x.dtype != np.uint8 or x.ndim != 4 or x.shape[-1] not in (1, 3)
      or y.ndim != 1 or y.shape[0] != x.shape[0]
      or not np.issubdtype(y.dtype, np.integer)):
    raise ValueError(
        f'{path}: expected x uint8 [N, H, W, 1 or 3] and y integer [N], got '
        f'x {x.dtype} {list(x.shape)} and y {y.dtype} {list(y.shape)}.')
  if y.size and (y.min() < 0 or y.max() >= NUM_CLASSES):
    raise ValueError(f'{path}: labels must be in 0..{NUM_CLASSES - 1}, got '
                     f'{int(y.min())}..{int(y.max())}.')
  return x, y.astype(np.int64)


def to_rgb_size(images: np.ndarray, size: int) -> np.ndarray:
  """Resizes uint8 images to size x size (bilinear) with three channels."""
  x = tf.convert_to_tensor(images)
  if x.shape[-1] == 1:
    x = tf.repeat(x, 3, axis=-1)
  if tuple(x.shape[1:3]) != (size, size):
    x = tf.image.resize(tf.cast(x, tf.float32), (size, size),
                        method='bilinear')
    x = tf.cast(tf.clip_by_value(tf.round(x), 0, 255), tf.uint8)
  return x.numpy()


def _synthetic_domain(task: str, index: int, seed: int):
  collection = COLLECTIONS[task]
  rng = np.random.default_rng([seed, index])
  tint = rng.uniform(0.3, 1.0, size=3)
  out = []
  for n in (60, 20):
    noise = rng.uniform(0, 255, (n,) + collection.synthetic_size) * tint
    out.append((noise.astype(np.uint8),
                np.arange(n, dtype=np.int64) % NUM_CLASSES))
  return out


def _resolve(task: str, options: dict[str, Any]) -> dict[str, Any]:
  defaults = default_options(task)
  unknown = sorted(set(options) - set(defaults))
  if unknown:
    raise ValueError(f'Unknown option {unknown[0]!r} for task {task!r}; '
                     f'known options: {", ".join(sorted(defaults))}')
  opts = {**defaults, **options}
  collection = COLLECTIONS[task]
  domains = tuple(d.strip() for d in str(opts['domains']).split(',')
                  if d.strip())
  bad = [d for d in domains if d not in collection.domains]
  if not domains or bad or len(set(domains)) != len(domains):
    raise ValueError(
        f'domains must be distinct names from '
        f'{", ".join(collection.domains)}, comma-separated, got '
        f'{opts["domains"]!r}.')
  opts['domains'] = domains
  if not 0 < opts['train_fraction'] <= 1:
    raise ValueError(f'train_fraction must be in (0, 1], got '
                     f'{opts["train_fraction"]!r}.')
  if not (isinstance(opts['clients_per_domain'], int)
          and opts['clients_per_domain'] >= 1):
    raise ValueError(f'clients_per_domain must be an integer >= 1, got '
                     f'{opts["clients_per_domain"]!r}.')
  if not (isinstance(opts['image_size'], int) and opts['image_size'] >= 4):
    raise ValueError(f'image_size must be an integer >= 4, got '
                     f'{opts["image_size"]!r}.')
  if not 0 <= opts['concept_shift'] <= 1:
    raise ValueError(f'concept_shift must be a probability in [0, 1], got '
                     f'{opts["concept_shift"]!r}.')
  tfds_images.check_model(task, opts['model'], collection.models)
  return opts


@dataclasses.dataclass(frozen=True)
class DomainSplit:
  """Per-domain train and test arrays, already resized, in `domains` order."""
  domains: tuple[str, ...]
  train: list[tuple[np.ndarray, np.ndarray]]
  test: list[tuple[np.ndarray, np.ndarray]]
  options: dict[str, Any]
  client_seeds: tuple[np.random.SeedSequence, np.random.SeedSequence]


def split_domains(task: str, *, data_dir: str | None,
                  use_synthetic_data: bool, seed: int,
                  **options: Any) -> DomainSplit:
  """Loads, resizes and truncates every domain (steps 1-2 of the module).

  Raises:
    ValueError: If an option is unknown or out of range, or a file is
      malformed.
    data_errors.MissingDataError: If a domain's file is missing.
  """
  opts = _resolve(task, options)
  collection = COLLECTIONS[task]
  raw = []
  for domain in opts['domains']:
    if use_synthetic_data:
      raw.append(_synthetic_domain(
          task, collection.domains.index(domain), seed))
    else:
      raw.append([load_domain(task, domain, split, data_dir)
                  for split in ('train', 'test')])
  size = opts['image_size']
  per_domain = math.floor(opts['train_fraction']
                          * min(train[1].size for train, _ in raw))
  if per_domain < 1:
    raise ValueError(f'train_fraction={opts["train_fraction"]!r} leaves no '
                     f'training example in the smallest domain.')
  seeds = np.random.SeedSequence(seed).spawn(len(raw) + 2)
  train_parts, test_parts = [], []
  for (train, test), domain_seed in zip(raw, seeds[:len(raw)]):
    keep = np.random.default_rng(domain_seed).permutation(
        train[1].size)[:per_domain]
    train_parts.append((to_rgb_size(train[0][keep], size), train[1][keep]))
    test_parts.append((to_rgb_size(test[0], size), test[1]))
  return DomainSplit(opts['domains'], train_parts, test_parts, opts,
                     tuple(seeds[len(raw):]))


def domain_clients(parts: Sequence[tuple[np.ndarray, np.ndarray]],
                   clients_per_domain: int, seed):
  """Concatenated per-domain arrays and a one-domain-per-client partition.

  The clients are `partitioners.one_domain_per_client`'s: with
  `clients_per_domain` = c, client k holds domain k mod D and an equal share
  (a seeded permutation cut into c parts) of its examples.

  Returns:
    `(images, labels, partition, domain_of_client)`; `partition[k]` indexes
    the concatenated arrays.
  """
  sizes = [labels.size for _, labels in parts]
  offsets = np.cumsum([0] + sizes)
  clients = partitioners.one_domain_per_client(
      sizes, clients_per_domain * len(parts), seed=seed)
  return (np.concatenate([x for x, _ in parts]),
          np.concatenate([y for _, y in parts]),
          [(offsets[d] + idx).astype(np.int64) for d, idx in clients],
          [d for d, _ in clients])


def _client_ids(prefix: str, domains: Sequence[str],
                domain_of_client: Sequence[int]) -> list[str]:
  per_domain = len(domain_of_client) // len(domains)
  if per_domain == 1:
    return [f'{prefix}_{domains[d]}' for d in domain_of_client]
  return [f'{prefix}_{domains[d]}_{k // len(domains)}'
          for k, d in enumerate(domain_of_client)]


def _transform(collection: DomainCollection):
  if collection.normalize:
    return tfds_images.normalize_fn((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
  rotate = tf.keras.layers.RandomRotation(
      30 / 360, fill_mode='constant', interpolation='nearest', fill_value=0.0)

  def transform(image, train):
    x = tf.cast(image, tf.float32) / 255.0
    if collection.augment and train:
      x = rotate(tf.image.random_flip_left_right(x), training=True)
    return x

  return transform


def create_domain_task(
    task: str, *,
    train_client_spec: tff.simulation.baselines.ClientSpec,
    eval_client_spec: tff.simulation.baselines.ClientSpec | None = None,
    data_dir: str | None = None,
    use_synthetic_data: bool = False,
    seed: int = 0,
    **options: Any,
) -> tff.simulation.baselines.BaselineTask:
  """The one-domain-per-client task `task` (see the module docstring).

  Args:
    task: 'digits_domains' or 'domainnet'.
    train_client_spec: How train client data are preprocessed.
    eval_client_spec: How test data are preprocessed (default: one pass,
      batch 32, unshuffled).
    data_dir: Directory holding the `.npz` layout; default `data`
      (`data_errors.DEFAULT_DATA_DIR`).
    use_synthetic_data: Use seeded synthetic domains (no files).
    seed: Seed of the truncation.
    **options: `domains`, `image_size`, `train_fraction`,
      `clients_per_domain`, `model`, `concept_shift` (used by
      `create_round_data`).

  Returns:
    A `BaselineTask` whose model reports `loss` and `accuracy`.

  Raises:
    ValueError: If an option is unknown or out of range, or a file is
      malformed.
    data_errors.MissingDataError: If a domain's file is missing.
  """
  split = split_domains(task, data_dir=data_dir,
                        use_synthetic_data=use_synthetic_data, seed=seed,
                        **options)
  train_seq, test_seq = split.client_seeds
  train_x, train_y, train_p, train_d = domain_clients(
      split.train, split.options['clients_per_domain'], train_seq)
  test_x, test_y, test_p, test_d = domain_clients(split.test, 1, test_seq)
  size = split.options['image_size']
  return tfds_images.build_image_task(
      tfds_images.client_data(train_x, train_y, train_p,
                              _client_ids('train', split.domains, train_d)),
      tfds_images.client_data(test_x, test_y, test_p,
                              _client_ids('test', split.domains, test_d)),
      image_shape=(size, size, 3), num_classes=NUM_CLASSES,
      transform=_transform(COLLECTIONS[task]), model=split.options['model'],
      train_client_spec=train_client_spec,
      eval_client_spec=eval_client_spec or DEFAULT_EVAL_CLIENT_SPEC,
      shuffle_buffer_size=max(p.size for p in train_p))


def create_round_data(task: str,
                      built: tff.simulation.baselines.BaselineTask, *,
                      data_dir: str | None = None,
                      use_synthetic_data: bool = False, seed: int = 0,
                      **options: Any) -> heterogeneity.RoundClientData | None:
  """The concept-shifted training data of `built`, or None without a shift.

  Args:
    task: 'digits_domains' or 'domainnet'.
    built: The task `create_domain_task` built with the same arguments (its
      training preprocessing is reused).
    data_dir, use_synthetic_data, seed, **options: As for
      `create_domain_task`.

  Returns:
    A `heterogeneity.RoundClientData` relabelling the sampled clients' data
    by the round's concept-shift map when option `concept_shift` > 0; else
    None.
  """
  opts = _resolve(task, options)
  if not opts['concept_shift']:
    return None
  split = split_domains(task, data_dir=data_dir,
                        use_synthetic_data=use_synthetic_data, seed=seed,
                        **options)
  train_x, train_y, train_p, train_d = domain_clients(
      split.train, split.options['clients_per_domain'], split.client_seeds[0])
  ids = _client_ids('train', split.domains, train_d)
  return heterogeneity.RoundClientData(
      train_x, train_y, dict(zip(ids, train_p)),
      built.datasets.train_preprocess_fn, seed=seed, num_classes=NUM_CLASSES,
      partition='domains', long_tail_fraction=1.0, imbalance_ratio=1.0,
      concept_shift=opts['concept_shift'])


def describe_domain_task(task: str, *, seed: int, use_synthetic_data: bool,
                         data_dir: str | None,
                         **options: Any) -> dict[str, Any]:
  """`partitioners.partition_summary` of the train and test clients, plus
  the domain of each client (in client order)."""
  split = split_domains(task, data_dir=data_dir,
                        use_synthetic_data=use_synthetic_data, seed=seed,
                        **options)
  summary = {'domains': list(split.domains)}
  seqs = split.client_seeds
  for name, parts, per_domain, seq in (
      ('train', split.train, split.options['clients_per_domain'], seqs[0]),
      ('test', split.test, 1, seqs[1])):
    _, labels, partition, _ = domain_clients(parts, per_domain, seq)
    summary[name] = partitioners.partition_summary(labels, partition)
  return summary
