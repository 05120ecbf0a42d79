"""Image-classification tasks read from TFDS: `mnist`, `fashion_mnist`, `svhn`.

One generic builder serves every TFDS image data set of the heterogeneity
benchmarks; a data set is a row of `DATASETS` (TFDS name, image shape,
classes, normalisation, augmentation, default model and the zoo models that
fit its images):

| task            | TFDS name       | images  | default model | paper        |
|-----------------|-----------------|---------|---------------|--------------|
| `mnist`         | `mnist`         | 28x28x1 | `fedcurv_cnn` | FedCurv      |
| `mnist5k`       | (`mnist_5k.csv.gz`) | 28x28x1 | `small_cnn` | claims     |
| `fashion_mnist` | `fashion_mnist` | 28x28x1 | `fedcurv_cnn` | FedPTR       |
| `svhn`          | `svhn_cropped`  | 32x32x3 | `fedbn_cnn`   | FedBN Digits |
| (`cifar10`)     | `cifar10`       | 32x32x3 | `resnet20`    | FedFOR       |
| (`cifar100`)    | `cifar100`      | 32x32x3 | `resnet18_gn` | FedADC       |

`mnist5k` is not read from TFDS: its 5,000 real MNIST images come from
`<data_dir>/mnist_5k.csv.gz` (`tasks/mnist5k.py`: 4,000 train, 1,000 test).

The `cifar10` / `cifar100` rows are for the paper reproducer
(`create_tfds_image_task('cifar10', ...)`); the registered `cifar10` task is
Reddi et al.'s (`tasks/cifar.py`), which reads TFDS through
`load_tfds_arrays` below.

Data: `tfds.load(name, split='train'|'test', data_dir=--data_dir,
download=False)`, read whole into uint8 images and int64 labels. TFDS never
downloads here: if `<data_dir>/<name>/<version>/dataset_info.json` is missing
the task raises `data_errors.MissingDataError`, whose one-line message names
the data set, the path looked for and how to prepare it on a machine with
internet access (`tfds.load(name, data_dir=DIR)`, then copy `DIR/<name>`).
`data_dir=None` means `data` in the working directory, the data directory
of every binary (`data_errors.DEFAULT_DATA_DIR`), not TFDS's
`~/tensorflow_datasets`.

Clients (every step seeded from `seed`, `SeedSequence(seed).spawn(2)` for the
train and the test split):

* train: option `partition` chooses the partitioner of the training labels
  over `num_clients` clients by name, with its options: every partition of
  `tasks/heterogeneity.py` (`dirichlet` (default), `dirichlet_class`,
  `sort`, `fedcurv`, `pachinko`, `domains`, `long_tail`; options `beta`,
  `classes_per_client`, `distinct_classes`, `empty_clients`, `num_domains`,
  `long_tail_fraction`, `imbalance_ratio`, and `concept_shift` on top of
  any), validated before any data are read. One convention of these tasks:
  `'dirichlet'` is the label skew of Hsu et al. with a symmetric Dir(`alpha`)
  over the classes (`partitioners.dirichlet_label_partition` with
  concentration `alpha * num_classes` times the class prior, as
  `tasks/cifar.py` does), `examples_per_client` each (default: all
  examples / `num_clients`; other partitions size their clients
  themselves and refuse `examples_per_client`). `long_tail` and
  `concept_shift` train on round-dependent clients (`create_round_data`).
* test: the test split is shuffled and cut into `num_test_clients` clients of
  (almost) equal size with no example dropped, so evaluation over all test
  clients is accuracy on the whole test set, as the papers report. Choice:
  with `partition='domains'` the test split is partitioned like the train
  split (its own seed), so that test clients see the stand-in domains too.

Preprocessing (in the client datasets' map, after shuffle / repeat / take
and before batch): images to float32 in [0, 1], then per-channel
(x - mean) / std with the data set's usual statistics (MNIST: the PyTorch
example's 0.1307 / 0.3081, which FedCurv's CNN comes from); CIFAR training
images also get He et al.'s augmentation (zero-pad 4, random crop back to
32x32, random horizontal flip). Batches are `(x [b, H, W, C] float32,
y [b] int64)`. Evaluation defaults to one pass in batches of 100, unshuffled.

`use_synthetic_data=True`: seeded random uint8 images of the data set's shape
(600 train, 200 test, partitioned as the options say), for plumbing tests.
"""

import dataclasses
import functools
import glob
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tasks import data_errors
from tasks import digits
from tasks import heterogeneity
from tasks import mnist5k
from tasks import models_zoo

DEFAULT_EVAL_CLIENT_SPEC = tff.simulation.baselines.ClientSpec(
    num_epochs=1, batch_size=100, shuffle_buffer_size=1)
# `<name>_proj`: the model with MOON's projection head
# (`models_zoo.with_projection_head`), for --algorithm=moon.
_SMALL_MODELS = ('fedcurv_cnn', 'fedbn_cnn', 'fedadc_cnn', 'mtt_convnet',
                 'resnet20', 'resnet20_gn', 'small_cnn', 'mnist_2nn',
                 'fedcurv_cnn_proj', 'fedadc_cnn_proj', 'small_cnn_proj',
                 'mnist_2nn_proj')
_CIFAR_MODELS = ('resnet20', 'resnet20_gn', 'resnet18_gn', 'fedadc_cnn',
                 'fedbn_cnn', 'mtt_convnet', 'fedadc_cnn_proj',
                 'resnet18_gn_proj')


@dataclasses.dataclass(frozen=True)
class ImageDataset:
  """An image-classification data set and how the tasks use it.

  `tfds_name` is None for a set not read from TFDS (`mnist5k`).
  """
  tfds_name: str | None
  image_shape: tuple[int, int, int]
  num_classes: int
  mean: tuple[float, ...]  # Per channel, of images scaled to [0, 1].
  std: tuple[float, ...]
  augment: bool  # Pad-4 random crop + horizontal flip of training images.
  default_model: str
  models: tuple[str, ...]


DATASETS: dict[str, ImageDataset] = {
    'mnist': ImageDataset('mnist', (28, 28, 1), 10, (0.1307,), (0.3081,),
                          False, 'fedcurv_cnn', _SMALL_MODELS),
    'mnist5k': ImageDataset(None, (28, 28, 1), 10, (0.1307,), (0.3081,),
                            False, 'small_cnn', _SMALL_MODELS),
    'fashion_mnist': ImageDataset('fashion_mnist', (28, 28, 1), 10,
                                  (0.2860,), (0.3530,), False, 'fedcurv_cnn',
                                  _SMALL_MODELS),
    'svhn': ImageDataset('svhn_cropped', (32, 32, 3), 10,
                         (0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970),
                         False, 'fedbn_cnn', _CIFAR_MODELS),
    'cifar10': ImageDataset('cifar10', (32, 32, 3), 10,
                            (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616),
                            True, 'resnet20', _CIFAR_MODELS),
    'cifar100': ImageDataset('cifar100', (32, 32, 3), 100,
                             (0.5071, 0.4865, 0.4409),
                             (0.2673, 0.2564, 0.2762), True, 'resnet18_gn',
                             _CIFAR_MODELS),
}


def default_options(name: str) -> dict[str, Any]:
  """The options of task `name` (a key of `DATASETS`) and their defaults."""
  return {
      'num_clients': 100,
      'num_test_clients': 10,
      'alpha': 0.5,
      'examples_per_client': None,
      'model': DATASETS[name].default_model,
      **heterogeneity.DEFAULT_OPTIONS,
  }


def check_partition_options(opts: Mapping[str, Any]) -> None:
  """Validates the heterogeneity options in `opts` (before any data load).

  Raises:
    ValueError: Naming the first option out of range.
  """
  heterogeneity.check_options(**{k: opts[k] for k in (
      'partition', 'alpha', 'beta', 'classes_per_client', 'distinct_classes',
      'empty_clients', 'num_domains', 'long_tail_fraction', 'imbalance_ratio',
      'concept_shift')})
  if (opts.get('examples_per_client') is not None
      and opts['partition'] != 'dirichlet'):
    raise ValueError("examples_per_client applies to partition='dirichlet' "
                     f"only; partition={opts['partition']!r} sizes its "
                     'clients itself.')


def partition_train(labels: np.ndarray, num_classes: int, seed,
                    coarse_labels: np.ndarray | None = None,
                    **opts: Any) -> heterogeneity.Partition:
  """`heterogeneity.partition_examples` with the TFDS tasks' conventions.

  `partition='dirichlet'` is the symmetric Dir(`alpha`) over the
  `num_classes` classes (concentration `alpha * num_classes` times the class
  prior) with `examples_per_client` each; every other partition gets the
  options as they are (`dirichlet_class`'s `alpha` is FedPTR's).
  """
  if opts['partition'] == 'dirichlet':
    opts = {**opts, 'alpha': opts['alpha'] * num_classes}
  return heterogeneity.partition_examples(
      labels, opts['num_clients'], seed=seed, coarse_labels=coarse_labels,
      **{k: v for k, v in opts.items() if k != 'num_clients'})


def tfds_instructions(tfds_name: str) -> str:
  """How to prepare TFDS data set `tfds_name` for --data_dir."""
  return (f'Prepare it on a machine with internet access with python -c '
          f'"import tensorflow_datasets as tfds; tfds.load(\'{tfds_name}\', '
          f'data_dir=\'DIR\')" and copy DIR/{tfds_name} into --data_dir.')


def load_tfds_arrays(
    tfds_name: str, data_dir: str | None, *, task: str,
    splits: Sequence[str] = ('train', 'test'),
) -> list[tuple[np.ndarray, np.ndarray]]:
  """Reads TFDS's prepared `tfds_name` whole, one (images, labels) per split.

  Args:
    tfds_name: The TFDS name (e.g. 'svhn_cropped').
    data_dir: TFDS data directory; None means `data`
      (`data_errors.DEFAULT_DATA_DIR`).
    task: The task's name, for the error message.
    splits: The splits to read, in order.

  Returns:
    One `(images uint8 [n, H, W, C], labels int64 [n])` per split.

  Raises:
    data_errors.MissingDataError: If the prepared data set is not in
      `data_dir` (nothing is downloaded).
  """
  root = data_dir or data_errors.default_data_dir()
  if not glob.glob(os.path.join(root, tfds_name, '*', 'dataset_info.json')):
    raise data_errors.MissingDataError(
        task, os.path.join(root, tfds_name, '<version>', 'dataset_info.json'),
        tfds_instructions(tfds_name))
  return list(_read_tfds(tfds_name, root, tuple(splits)))


@functools.lru_cache(maxsize=4)
def _read_tfds(tfds_name: str, root: str, splits: tuple[str, ...]):
  """`load_tfds_arrays`' reading, once per process and data set.

  Building a task, describing its partition for `hparams.json` and building
  its round data each need the arrays; a whole CIFAR-10 is read once, not
  three times. The arrays are shared, so they are made read-only.
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  out = []
  for split in splits:
    data = tfds.as_numpy(tfds.load(tfds_name, split=split, data_dir=root,
                                   download=False, batch_size=-1))
    pair = (data['image'].astype(np.uint8), data['label'].astype(np.int64))
    for array in pair:
      array.setflags(write=False)
    out.append(pair)
  return tuple(out)


def synthetic_arrays(image_shape: Sequence[int], num_classes: int, seed: int,
                     sizes: Sequence[int] = (600, 200)):
  """Seeded random uint8 images with cyclic labels, one pair per size."""
  rng = np.random.default_rng([seed, num_classes])
  return [(rng.integers(0, 256, (n,) + tuple(image_shape), dtype=np.uint8),
           np.arange(n, dtype=np.int64) % num_classes) for n in sizes]


def even_split(num_examples: int, num_clients: int, seed) -> list[np.ndarray]:
  """A seeded shuffle of range(num_examples) cut into near-equal parts."""
  if not 1 <= num_clients <= num_examples:
    raise ValueError(f'num_test_clients must be between 1 and the number of '
                     f'test examples ({num_examples}), got {num_clients!r}.')
  order = np.random.default_rng(seed).permutation(num_examples)
  return [part.astype(np.int64) for part in np.array_split(order,
                                                           num_clients)]


def client_data(images: np.ndarray, labels: np.ndarray,
                partition: Sequence[np.ndarray], client_ids: Sequence[str]
                ) -> tff.simulation.datasets.ClientData:
  """`ClientData` of `(image, label)` elements, client i = `partition[i]`.

  Empty clients (e.g. `dirichlet_class` with `empty_clients='keep'`) keep
  their id in the partition report but are left out: never sampled.
  """
  return tff.simulation.datasets.TestClientData({
      cid: (images[idx], labels[idx])
      for cid, idx in zip(client_ids, partition) if len(idx)
  })


def numbered_ids(prefix: str, count: int) -> list[str]:
  """`prefix_0` ... zero-padded to the width of the largest index."""
  width = len(str(count - 1))
  return [f'{prefix}_{i:0{width}d}' for i in range(count)]


def normalize_fn(mean: Sequence[float], std: Sequence[float], *,
                 augment: bool = False
                 ) -> Callable[[tf.Tensor, bool], tf.Tensor]:
  """(uint8 image, train) -> float32 (image / 255 - mean) / std.

  With `augment`, training images are zero-padded by 4, randomly cropped back
  to their size and randomly flipped left-right first (He et al. 2016).
  """
  mean = tf.constant(mean, tf.float32)
  std = tf.constant(std, tf.float32)

  def transform(image, train):
    x = tf.cast(image, tf.float32) / 255.0
    if augment and train:
      h, w, c = x.shape
      x = tf.image.pad_to_bounding_box(x, 4, 4, h + 8, w + 8)
      x = tf.image.random_crop(x, [h, w, c])
      x = tf.image.random_flip_left_right(x)
    return (x - mean) / std

  return transform


def build_image_task(
    train: tff.simulation.datasets.ClientData,
    test: tff.simulation.datasets.ClientData, *,
    image_shape: Sequence[int], num_classes: int,
    transform: Callable[[tf.Tensor, bool], tf.Tensor], model: str,
    train_client_spec: tff.simulation.baselines.ClientSpec,
    eval_client_spec: tff.simulation.baselines.ClientSpec | None,
    shuffle_buffer_size: int,
) -> tff.simulation.baselines.BaselineTask:
  """A `BaselineTask` over `(uint8 image, label)` client data and a zoo model.

  Args:
    train: Train clients, elements `(image uint8 image_shape, label int)`.
    test: Test clients, same elements.
    image_shape: (height, width, channels) of the images.
    num_classes: Number of classes (model logits).
    transform: `(image, train: bool) -> float32 image`, applied per element.
    model: A `models_zoo.MODEL_NAMES` entry.
    train_client_spec: How train client data are preprocessed.
    eval_client_spec: How test client data are preprocessed (None: one pass,
      batch 100, unshuffled).
    shuffle_buffer_size: Shuffle buffer used when a spec gives none.

  Returns:
    A `BaselineTask` whose model reports `loss` and `accuracy`.
  """
  def preprocess(spec, is_train):
    batch = digits.create_preprocess_fn(spec, shuffle_buffer_size)
    def preprocess_fn(dataset):
      return batch(dataset.map(lambda x, y: (transform(x, is_train), y),
                               num_parallel_calls=tf.data.AUTOTUNE))
    return preprocess_fn

  task_datasets = tff.simulation.baselines.BaselineTaskDatasets(
      train_data=train, test_data=test, validation_data=None,
      train_preprocess_fn=preprocess(train_client_spec, True),
      eval_preprocess_fn=preprocess(
          eval_client_spec or DEFAULT_EVAL_CLIENT_SPEC, False))
  input_spec = task_datasets.element_type_structure
  image_shape = tuple(image_shape)

  def model_fn() -> tff.learning.models.VariableModel:
    return tff.learning.models.from_keras_model(
        keras_model=models_zoo.create_model(model, image_shape, num_classes),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=input_spec,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')])

  return tff.simulation.baselines.BaselineTask(task_datasets, model_fn)


def check_model(task: str, model: str, allowed: Sequence[str]) -> None:
  """Raises ValueError unless `model` is one of `allowed` for `task`."""
  if model not in allowed:
    raise ValueError(f'model must be one of {", ".join(sorted(allowed))} for '
                     f'task {task!r}, got {model!r}.')


def _resolve(name: str, options: Mapping[str, Any]) -> dict[str, Any]:
  if name not in DATASETS:
    raise ValueError(f'Unknown TFDS image data set {name!r}; known: '
                     f'{", ".join(sorted(DATASETS))}')
  defaults = default_options(name)
  unknown = sorted(set(options) - set(defaults))
  if unknown:
    raise ValueError(f'Unknown option {unknown[0]!r} for task {name!r}; '
                     f'known options: {", ".join(sorted(defaults))}')
  opts = {**defaults, **options}
  check_partition_options(opts)
  check_model(name, opts['model'], DATASETS[name].models)
  return opts


def apply_domains_uint8(images: np.ndarray,
                        partition: heterogeneity.Partition, *,
                        seed: int) -> np.ndarray:
  """`heterogeneity.apply_domains` of uint8 images (through [0, 1])."""
  if partition.domains is None:
    return images
  out = heterogeneity.apply_domains(images.astype(np.float32) / 255.0,
                                    partition, seed=seed)
  return np.round(out * 255.0).astype(np.uint8)


def split_arrays(name: str, *, data_dir: str | None, use_synthetic_data: bool,
                 seed: int, **options: Any):
  """Loads data set `name` and partitions it (see the module docstring).

  Returns:
    `((train_x, train_y, train_partition), (test_x, test_y, test_partition),
    resolved options)`; the partitions are `heterogeneity.Partition`s and,
    for `partition='domains'`, the images are already in their clients'
    domains.

  Raises:
    ValueError: If an option is unknown or out of range.
    data_errors.MissingDataError: If the TFDS data are not in `data_dir`.
  """
  opts = _resolve(name, options)
  dataset = DATASETS[name]
  if use_synthetic_data:
    (train_x, train_y), (test_x, test_y) = synthetic_arrays(
        dataset.image_shape, dataset.num_classes, seed)
  elif dataset.tfds_name is None:  # mnist5k, the one non-TFDS set.
    (train_x, train_y), (test_x, test_y) = mnist5k.load_arrays(data_dir)
  else:
    (train_x, train_y), (test_x, test_y) = load_tfds_arrays(
        dataset.tfds_name, data_dir, task=name)
  train_seq, test_seq = np.random.SeedSequence(seed).spawn(2)
  train_partition = partition_train(train_y, dataset.num_classes, train_seq,
                                    **opts)
  if opts['partition'] == 'domains':
    test_partition = partition_train(
        test_y, dataset.num_classes, test_seq,
        **{**opts, 'num_clients': opts['num_test_clients']})
    train_x = apply_domains_uint8(train_x, train_partition, seed=seed)
    test_x = apply_domains_uint8(test_x, test_partition, seed=seed)
  else:
    test_partition = heterogeneity.Partition(
        even_split(test_y.size, opts['num_test_clients'], test_seq))
  return ((train_x, train_y, train_partition),
          (test_x, test_y, test_partition), opts)


def create_tfds_image_task(
    name: str, *,
    train_client_spec: tff.simulation.baselines.ClientSpec,
    eval_client_spec: tff.simulation.baselines.ClientSpec | None = None,
    data_dir: str | None = None,
    use_synthetic_data: bool = False,
    seed: int = 0,
    **options: Any,
) -> tff.simulation.baselines.BaselineTask:
  """The image task on TFDS data set `name` (see the module docstring).

  Args:
    name: A key of `DATASETS`.
    train_client_spec: How train client data are preprocessed.
    eval_client_spec: How test data are preprocessed.
    data_dir: TFDS data directory; default `data`
      (`data_errors.DEFAULT_DATA_DIR`).
    use_synthetic_data: Use seeded random images (no files).
    seed: Seed of the partitions.
    **options: `num_clients` (100), `num_test_clients` (10), `partition`
      ('dirichlet'), `alpha` (0.5), `classes_per_client` (2, for 'sort'),
      `examples_per_client` (None: all / num_clients, for 'dirichlet'),
      `model` (the data set's default), and the other heterogeneity options
      (`heterogeneity.DEFAULT_OPTIONS`).

  Returns:
    A `BaselineTask` whose model reports `loss` and `accuracy`.

  Raises:
    ValueError: If an option is unknown or out of range.
    data_errors.MissingDataError: If the TFDS data are not in `data_dir`.
  """
  train, test, opts = split_arrays(
      name, data_dir=data_dir, use_synthetic_data=use_synthetic_data,
      seed=seed, **options)
  dataset = DATASETS[name]
  train_p, test_p = train[2].indices, test[2].indices
  largest = max(idx.size for idx in list(train_p) + list(test_p))
  return build_image_task(
      client_data(*train[:2], train_p, numbered_ids('train', len(train_p))),
      client_data(*test[:2], test_p, numbered_ids('test', len(test_p))),
      image_shape=dataset.image_shape, num_classes=dataset.num_classes,
      transform=normalize_fn(dataset.mean, dataset.std,
                             augment=dataset.augment),
      model=opts['model'], train_client_spec=train_client_spec,
      eval_client_spec=eval_client_spec, shuffle_buffer_size=largest)


def describe_tfds_image_task(name: str, *, seed: int,
                             use_synthetic_data: bool, data_dir: str | None,
                             **options: Any) -> dict[str, Any]:
  """`heterogeneity.describe` of the train and test clients, and settings."""
  (_, train_y, train_p), (_, test_y, test_p), opts = split_arrays(
      name, data_dir=data_dir, use_synthetic_data=use_synthetic_data,
      seed=seed, **options)
  return describe_partitions(train_y, train_p, test_y, test_p, seed=seed,
                             opts=opts)


def describe_partitions(train_labels, train_partition, test_labels,
                        test_partition, *, seed: int,
                        opts: dict[str, Any]) -> dict[str, Any]:
  """`heterogeneity.describe` of train and test clients, plus the settings.

  What the image tasks (here and `cifar`) write to `hparams.json`.
  """
  settings = {k: opts[k] for k in heterogeneity.DEFAULT_OPTIONS}
  return {
      'train': heterogeneity.describe(train_labels, train_partition,
                                      seed=seed, prefix='train',
                                      options=settings),
      'test': heterogeneity.describe(test_labels, test_partition, seed=seed,
                                     prefix='test', options=settings),
      'settings': settings,
  }


def create_round_data(name: str, task: tff.simulation.baselines.BaselineTask,
                      *, data_dir: str | None = None,
                      use_synthetic_data: bool = False, seed: int = 0,
                      **options: Any) -> heterogeneity.RoundClientData | None:
  """The round-dependent training data of `task`, or None if it has none.

  Args:
    name: A key of `DATASETS`.
    task: The task `create_tfds_image_task` built with the same arguments
      (its training preprocessing is reused).
    data_dir, use_synthetic_data, seed, **options: As for
      `create_tfds_image_task`.

  Returns:
    A `heterogeneity.RoundClientData` when option `partition` is
    `long_tail` or `concept_shift` > 0; else None.
  """
  opts = _resolve(name, options)
  if opts['partition'] != 'long_tail' and not opts['concept_shift']:
    return None
  (train_x, train_y, train_p), _, opts = split_arrays(
      name, data_dir=data_dir, use_synthetic_data=use_synthetic_data,
      seed=seed, **options)
  ids = numbered_ids('train', len(train_p.indices))
  return heterogeneity.RoundClientData(
      train_x, train_y, dict(zip(ids, train_p.indices)),
      task.datasets.train_preprocess_fn, seed=seed,
      num_classes=DATASETS[name].num_classes, **opts)
