"""CIFAR tasks of Reddi et al. (Appendix C.1): `cifar100` and `cifar10`.

`cifar100`: TFF's federated CIFAR-100 (`tff.simulation.datasets.cifar100.
load_data`), the paper's Pachinko split: 500 train clients x 100 examples,
100 test clients x 100. Read from `<data_dir>/cifar100.sqlite`.

`cifar10`: TFDS `cifar10` (read from `--data_dir`, `download=False`), the
50,000 train images split over 500 clients x 100 examples and the 10,000 test
images over 100 clients x 100, each by LDA over labels (Hsu et al. 2019):
client k's label distribution q_k ~ Dir(alpha * 1_10), examples drawn from
q_k without replacement (`partitioners.dirichlet_label_partition`, whose
concentration is `alpha_p * prior`; CIFAR-10's prior is uniform, so we pass
`alpha_p = 10 * alpha` to get the paper's symmetric Dir(alpha)). The paper's
alpha was lost in our copy of Appendix C.1; we use **alpha = 1** (option
`alpha`). Train and test partitions use seeds derived from `seed`
(`SeedSequence(seed).spawn(2)`), so the split is deterministic.

Preprocessing (Appendix C.1; TFF's `cifar100` image map): train: random crop
24x24x3 + random horizontal flip; test: central 24x24 crop; both then
`tf.image.per_image_standardization`. Shuffle (buffer 100), repeat, take,
map, batch. Elements are `(image [24, 24, 3] float32, label int64)`.

Model: option `model`, a zoo model (`tasks/models_zoo.py`, `MODELS`) built
for the 24x24x3 crops; default `resnet18_gn` (`models_resnet.
create_resnet18_gn`, GroupNorm with 2 groups); logits, sparse categorical
cross-entropy; metric `accuracy`. Choice: the heterogeneity papers train on
32x32 CIFAR images; every model here sees Reddi et al.'s 24x24 crops, so one
preprocessing serves every table.

Other heterogeneity settings (option `partition` and its options, as
`tasks/heterogeneity.py`; validated before any data are read):

* `cifar10`: `partition='dirichlet'` (default) is the LDA split above;
  any other partition splits the 50,000 training images over
  `num_clients` by that partitioner (`examples_per_client` unused) and
  the test images evenly over `num_test_clients` (shuffled; `domains`:
  the test images get the same partitioner and stand-in domains).
  `long_tail` and `concept_shift` train on round-dependent clients
  (`create_cifar10_round_data`).
* `cifar100`: `partition='tff'` (default) is TFF's shipped split above;
  any other partition of `heterogeneity.PARTITIONS` but `domains` pools
  TFF's 50,000 training examples and re-partitions them over `num_clients`
  (`pachinko` with the real coarse labels; `dirichlet` is the symmetric
  Dir(`alpha`) over the 100 classes); the test clients stay TFF's.
  `concept_shift` needs a re-partition.

Differences from TFF's `baselines.cifar100.create_image_classification_task`
corrected here: TFF does not distort training images by default (the paper
does); TFF's ResNet-18 uses 32-group norm (the paper: 2); metric name.
`use_synthetic_data=True`: TFF's `cifar100.get_synthetic()` for `cifar100`;
seeded random uint8 images (600 train, 200 test, 6 / 2 clients) for `cifar10`.
"""

import os
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines.cifar100 import image_classification_preprocessing

from tasks import data_errors
from tasks import heterogeneity
from tasks import models_zoo
from tasks import partitioners
from tasks import tfds_images

CROP_SHAPE = (24, 24, 3)
CIFAR100_SQLITE = 'cifar100.sqlite'
# Zoo models offered on the (24x24x3 crops of the) CIFAR images.
MODELS = ('fedadc_cnn', 'fedbn_cnn', 'mtt_convnet', 'resnet18_gn',
          'resnet20', 'resnet20_gn', 'fedadc_cnn_proj', 'resnet18_gn_proj')
CIFAR10_OPTIONS = {'alpha': 1.0, 'num_clients': 500, 'num_test_clients': 100,
                   'examples_per_client': 100, 'model': 'resnet18_gn',
                   **heterogeneity.DEFAULT_OPTIONS}
# `partition='tff'`: TFF's shipped Pachinko split (the other options then
# unused but `model`); any `heterogeneity.PARTITIONS` name re-partitions the
# pooled training examples over `num_clients`.
TFF_SPLIT = 'tff'
CIFAR100_OPTIONS = {'num_clients': 500, 'alpha': 0.1, 'model': 'resnet18_gn',
                    **heterogeneity.DEFAULT_OPTIONS, 'partition': TFF_SPLIT}
DEFAULT_EVAL_CLIENT_SPEC = tff.simulation.baselines.ClientSpec(
    num_epochs=1, batch_size=100, shuffle_buffer_size=1)
_SHUFFLE_BUFFER = 100


def create_preprocess_fn(spec: tff.simulation.baselines.ClientSpec, *,
                         train: bool):
  """Crop (random + flip for train, central for test), standardise, batch."""
  if spec.shuffle_buffer_size is None:
    spec = tff.simulation.baselines.ClientSpec(
        num_epochs=spec.num_epochs, batch_size=spec.batch_size,
        max_elements=spec.max_elements, shuffle_buffer_size=_SHUFFLE_BUFFER)
  return image_classification_preprocessing.create_preprocess_fn(
      spec, crop_shape=CROP_SHAPE, distort_image=train)


def _build_task(train_data, test_data, num_classes, train_client_spec,
                eval_client_spec, model='resnet18_gn'):
  task_datasets = tff.simulation.baselines.BaselineTaskDatasets(
      train_data=train_data, test_data=test_data, validation_data=None,
      train_preprocess_fn=create_preprocess_fn(train_client_spec, train=True),
      eval_preprocess_fn=create_preprocess_fn(
          eval_client_spec or DEFAULT_EVAL_CLIENT_SPEC, train=False),
  )
  input_spec = task_datasets.element_type_structure

  def model_fn() -> tff.learning.models.VariableModel:
    return tff.learning.models.from_keras_model(
        keras_model=models_zoo.create_model(model, CROP_SHAPE, num_classes),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=input_spec,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')])

  return tff.simulation.baselines.BaselineTask(task_datasets, model_fn)


def _check_options(task: str, options, defaults) -> dict[str, Any]:
  """Merges `options` into `defaults` and validates them (no data read).

  Raises:
    ValueError: Naming the first unknown or out-of-range option.
  """
  unknown = sorted(set(options) - set(defaults))
  if unknown:
    raise ValueError(f'Unknown option {unknown[0]!r} for task {task!r}; '
                     f'known options: {", ".join(sorted(defaults))}')
  opts = {**defaults, **options}
  partition = opts['partition']
  if task == 'cifar100':
    if partition == TFF_SPLIT:
      if opts['concept_shift']:
        raise ValueError("concept_shift needs a re-partition of cifar100 "
                         "(option partition other than 'tff').")
      partition = 'dirichlet'  # Validate the unused options all the same.
    elif partition == 'domains':
      raise ValueError("partition='domains' is not offered for cifar100 (its "
                       "test clients are TFF's); use digits or cifar10.")
    elif partition not in heterogeneity.PARTITIONS:
      raise ValueError(f'partition must be one of {TFF_SPLIT}, '
                       f'{", ".join(heterogeneity.PARTITIONS)}, got '
                       f'{partition!r}.')
  heterogeneity.check_options(**{**{k: opts[k] for k in (
      'alpha', 'beta', 'classes_per_client', 'distinct_classes',
      'empty_clients', 'num_domains', 'long_tail_fraction', 'imbalance_ratio',
      'concept_shift')}, 'partition': partition})
  if not (isinstance(opts['num_clients'], int) and opts['num_clients'] >= 1):
    raise ValueError('num_clients must be a positive integer, got '
                     f'{opts["num_clients"]!r}.')
  tfds_images.check_model(task, opts['model'], MODELS)
  return opts


def _dict_client_data(prefix, images, labels, partition, coarse=None):
  """`{'image', 'label'[, 'coarse_label']}` clients; empty ones left out."""
  width = len(str(len(partition) - 1))
  return tff.simulation.datasets.TestClientData({
      f'{prefix}_{i:0{width}d}': {
          'image': images[idx], 'label': labels[idx],
          **({} if coarse is None else {'coarse_label': coarse[idx]})}
      for i, idx in enumerate(partition) if len(idx)
  })


def pooled_arrays(data: tff.simulation.datasets.ClientData):
  """(images uint8, labels int64, coarse labels int64) of all clients."""
  images, labels, coarse = [], [], []
  for cid in data.client_ids:
    for e in data.create_tf_dataset_for_client(cid).as_numpy_iterator():
      images.append(np.asarray(e['image'], np.uint8))
      labels.append(int(e['label']))
      coarse.append(int(e['coarse_label']))
  return (np.stack(images), np.asarray(labels, np.int64),
          np.asarray(coarse, np.int64))


def _load_cifar100(data_dir, use_synthetic_data):
  if use_synthetic_data:
    train = test = tff.simulation.datasets.cifar100.get_synthetic()
    return train, test
  path = data_errors.require_file(
      'cifar100', data_dir, CIFAR100_SQLITE,
      data_errors.tff_sqlite_instructions(CIFAR100_SQLITE))
  return tff.simulation.datasets.cifar100.load_data(
      cache_dir=os.path.dirname(path))


def _cifar100_repartition(train, seed, opts):
  """Pooled TFF training arrays and their `heterogeneity.Partition`."""
  images, labels, coarse = pooled_arrays(train)
  partition = tfds_images.partition_train(
      labels, 100, np.random.SeedSequence(seed).spawn(2)[0],
      coarse_labels=coarse, **{**opts, 'examples_per_client': None})
  return images, labels, coarse, partition


def create_cifar100_task(
    *,
    train_client_spec: tff.simulation.baselines.ClientSpec,
    eval_client_spec: tff.simulation.baselines.ClientSpec | None = None,
    data_dir: str | None = None,
    use_synthetic_data: bool = False,
    seed: int = 0,
    **options: Any,
) -> tff.simulation.baselines.BaselineTask:
  """The `cifar100` task (see the module docstring).

  Args:
    train_client_spec: How train client data are preprocessed.
    eval_client_spec: How test data are preprocessed (default: one pass,
      batch 100, unshuffled).
    data_dir: Directory holding `cifar100.sqlite`; default `data`
      (`data_errors.DEFAULT_DATA_DIR`).
    use_synthetic_data: Use TFF's synthetic CIFAR-100 (no files).
    seed: Seed of a re-partition (unused with TFF's split).
    **options: `partition` ('tff': TFF's split), `num_clients` (500),
      `alpha` (0.1), `model` ('resnet18_gn') and the other heterogeneity
      options (`CIFAR100_OPTIONS`).

  Returns:
    A `BaselineTask` whose model reports `loss` and `accuracy`.

  Raises:
    ValueError: If an option is unknown or out of range.
    data_errors.MissingDataError: If the SQLite file is missing.
  """
  opts = _check_options('cifar100', options, CIFAR100_OPTIONS)
  train, test = _load_cifar100(data_dir, use_synthetic_data)
  if opts['partition'] != TFF_SPLIT:
    images, labels, coarse, partition = _cifar100_repartition(train, seed,
                                                              opts)
    train = _dict_client_data('train', images, labels, partition.indices,
                              coarse)
  return _build_task(train, test, 100, train_client_spec, eval_client_spec,
                     opts['model'])


def load_cifar10_arrays(data_dir: str | None, use_synthetic_data: bool,
                        seed: int = 0):
  """((train images, labels), (test images, labels)) as uint8 / int64.

  Raises:
    data_errors.MissingDataError: If TFDS's prepared `cifar10` is not in
      `data_dir`.
  """
  if use_synthetic_data:
    return tuple(tfds_images.synthetic_arrays((32, 32, 3), 10, seed))
  return tuple(tfds_images.load_tfds_arrays('cifar10', data_dir,
                                            task='cifar10'))


def split_cifar10(labels: np.ndarray, num_clients: int, alpha: float,
                  examples_per_client: int, seed) -> list[np.ndarray]:
  """Symmetric Dir(alpha) LDA partition of CIFAR-10 labels (see module)."""
  num_classes = np.unique(labels).size
  return partitioners.dirichlet_label_partition(
      labels, num_clients, alpha * num_classes, seed=seed,
      examples_per_client=examples_per_client)


def create_cifar10_task(
    *,
    train_client_spec: tff.simulation.baselines.ClientSpec,
    eval_client_spec: tff.simulation.baselines.ClientSpec | None = None,
    data_dir: str | None = None,
    use_synthetic_data: bool = False,
    seed: int = 0,
    **options: Any,
) -> tff.simulation.baselines.BaselineTask:
  """The `cifar10` task (see the module docstring).

  Args:
    train_client_spec: How train client data are preprocessed.
    eval_client_spec: How test data are preprocessed.
    data_dir: TFDS data directory holding a prepared `cifar10`; default
      `data` (`data_errors.DEFAULT_DATA_DIR`).
    use_synthetic_data: Use seeded random images (no files).
    seed: Seed of the partitions.
    **options: `alpha` (1.0), `num_clients` (500), `num_test_clients` (100),
      `examples_per_client` (100, for `partition='dirichlet'` only), `model`
      ('resnet18_gn'), `partition` ('dirichlet') and the other
      heterogeneity options (`CIFAR10_OPTIONS`).

  Returns:
    A `BaselineTask` whose model reports `loss` and `accuracy`.

  Raises:
    ValueError: If an option is unknown or out of range.
    data_errors.MissingDataError: If the TFDS data are missing.
  """
  opts = _check_options('cifar10', options, CIFAR10_OPTIONS)
  (train_x, train_y), (test_x, test_y), train_p, test_p = _split_cifar10(
      data_dir, use_synthetic_data, seed, opts)
  train = _dict_client_data('train', train_x, train_y, train_p.indices)
  test = _dict_client_data('test', test_x, test_y, test_p.indices)
  return _build_task(train, test, 10, train_client_spec, eval_client_spec,
                     opts['model'])


def _split_cifar10(data_dir, use_synthetic_data, seed, opts):
  """Arrays and train / test `heterogeneity.Partition`s (see the module)."""
  if use_synthetic_data:
    opts.update(num_clients=6, num_test_clients=2)
  (train_x, train_y), (test_x, test_y) = load_cifar10_arrays(
      data_dir, use_synthetic_data, seed)
  train_seq, test_seq = np.random.SeedSequence(seed).spawn(2)
  if opts['partition'] == 'dirichlet':
    train_p = heterogeneity.Partition(split_cifar10(
        train_y, opts['num_clients'], opts['alpha'],
        opts['examples_per_client'], train_seq))
    test_p = heterogeneity.Partition(split_cifar10(
        test_y, opts['num_test_clients'], opts['alpha'],
        opts['examples_per_client'], test_seq))
  else:
    train_p = tfds_images.partition_train(
        train_y, 10, train_seq, **{**opts, 'examples_per_client': None})
    if opts['partition'] == 'domains':
      test_p = tfds_images.partition_train(
          test_y, 10, test_seq, **{**opts, 'examples_per_client': None,
                                   'num_clients': opts['num_test_clients']})
      train_x = tfds_images.apply_domains_uint8(train_x, train_p, seed=seed)
      test_x = tfds_images.apply_domains_uint8(test_x, test_p, seed=seed)
    else:
      test_p = heterogeneity.Partition(tfds_images.even_split(
          test_y.size, opts['num_test_clients'], test_seq))
  return (train_x, train_y), (test_x, test_y), train_p, test_p


def _round_data(task, images, labels, partition, *, seed, num_classes,
                opts) -> heterogeneity.RoundClientData:
  """`RoundClientData` over dict-element CIFAR client data."""
  preprocess = task.datasets.train_preprocess_fn
  width = len(str(len(partition.indices) - 1))
  return heterogeneity.RoundClientData(
      images, labels,
      {f'train_{i:0{width}d}': idx for i, idx in enumerate(partition.indices)},
      lambda ds: preprocess(ds.map(lambda x, y: {'image': x, 'label': y})),
      seed=seed, num_classes=num_classes, **opts)


def create_cifar10_round_data(
    task: tff.simulation.baselines.BaselineTask, *,
    data_dir: str | None = None, use_synthetic_data: bool = False,
    seed: int = 0, **options: Any) -> heterogeneity.RoundClientData | None:
  """The round-dependent training data of `task`, or None if it has none.

  Args:
    task: The task `create_cifar10_task` built with the same arguments.
    data_dir, use_synthetic_data, seed, **options: As for
      `create_cifar10_task`.

  Returns:
    A `heterogeneity.RoundClientData` when option `partition` is
    `long_tail` or `concept_shift` > 0; else None.
  """
  opts = _check_options('cifar10', options, CIFAR10_OPTIONS)
  if opts['partition'] != 'long_tail' and not opts['concept_shift']:
    return None
  (train_x, train_y), _, train_p, _ = _split_cifar10(
      data_dir, use_synthetic_data, seed, opts)
  return _round_data(task, train_x, train_y, train_p, seed=seed,
                     num_classes=10, opts=opts)


def create_cifar100_round_data(
    task: tff.simulation.baselines.BaselineTask, *,
    data_dir: str | None = None, use_synthetic_data: bool = False,
    seed: int = 0, **options: Any) -> heterogeneity.RoundClientData | None:
  """As `create_cifar10_round_data`, for a re-partitioned `cifar100`."""
  opts = _check_options('cifar100', options, CIFAR100_OPTIONS)
  if opts['partition'] != 'long_tail' and not opts['concept_shift']:
    return None
  train, _ = _load_cifar100(data_dir, use_synthetic_data)
  images, labels, _, partition = _cifar100_repartition(train, seed, opts)
  return _round_data(task, images, labels, partition, seed=seed,
                     num_classes=100, opts=opts)


def describe_cifar10_task(*, seed: int, use_synthetic_data: bool,
                          data_dir: str | None,
                          **options: Any) -> dict[str, Any]:
  """`heterogeneity.describe` of the train and test clients, and settings."""
  opts = _check_options('cifar10', options, CIFAR10_OPTIONS)
  (_, train_y), (_, test_y), train_p, test_p = _split_cifar10(
      data_dir, use_synthetic_data, seed, opts)
  return tfds_images.describe_partitions(train_y, train_p, test_y, test_p,
                                         seed=seed, opts=opts)
