"""The `digits` task: UCI handwritten digits, Dirichlet-partitioned, offline.

Data: scikit-learn's bundled copy of the UCI optical handwritten digits
(`sklearn.datasets.load_digits`): 1,797 grey-scale 8x8 images, pixel values
0..16, ten roughly balanced classes. Real data that needs no download.

Pipeline (every random step seeded from `seed` via `numpy.random.SeedSequence`):

1. Images are scaled to [0, 1] and shaped (8, 8, 1) float32; labels int32.
2. A stratified `test_fraction` of the examples (sklearn's
   `train_test_split(stratify=labels)`; 360 of 1,797 at 0.2) is held out.
3. The held-out part is split over `num_test_clients` **test clients** and the
   rest over `num_clients` **train clients**, both with
   `partitioners.dirichlet_label_partition` (Hsu et al. 2019 label skew with the
   same `alpha`, equal client sizes): held-out clients come from the same
   heterogeneous population as the train clients. No example is in both.
   With the defaults each train client has 1,437 // 100 = 14 examples (37
   train examples are left unused) and each test client 360 // 20 = 18.
4. Client ids are strings, zero-padded to the width of the largest index:
   `train_00` ... `train_99` and `test_00` ... `test_19` with the defaults.

`use_synthetic_data=True` replaces the images by seeded class templates plus
noise (same sizes and pipeline), for fast plumbing tests.
The `model` option picks the network: `cnn` (default,
`models.create_digits_cnn`), `cnn_bn` (the same CNN with batch norm after
each conv, for FedBN: `--fedbn --task_option=model=cnn_bn`) or `mtt_convnet`
(the FedPTR paper's MTT ConvNet, `models.create_mtt_convnet`, e.g.
`--task_option=model=mtt_convnet`).
`data_dir` is accepted for a uniform task interface and ignored (the data ship
with scikit-learn).

Heterogeneity: option `partition` picks the partitioner of step 3 by name
(`dirichlet` above by default; `dirichlet_class`, `sort`, `fedcurv`,
`pachinko`, `domains`, `long_tail`) and `concept_shift` adds FedFOR's concept
shift, with their options (`beta`, `classes_per_client`, `distinct_classes`,
`empty_clients`, `num_domains`, `long_tail_fraction`, `imbalance_ratio`):
see `tasks/heterogeneity.py`, e.g. `--task_option=partition=sort
--task_option=classes_per_client=3`. `long_tail` and `concept_shift` make
the training data depend on the round: `create_round_data` returns the hook
the training loop calls (`binaries/train.py` wires it).

Elements of both `ClientData`s are unbatched `(x, y)` tuples; the preprocess
functions shuffle (buffer `shuffle_buffer_size`, default: the largest client;
1 means no shuffling), repeat `num_epochs` times, take `max_elements`, and
batch by `batch_size`, in that order, giving `(x [None, 8, 8, 1] float32,
y [None] int32)` batches. Eval data default to one pass, batch 64, no shuffle.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
from sklearn import datasets as sk_datasets
import tensorflow as tf
import tensorflow_federated as tff

from tasks import heterogeneity
from tasks import models
from tasks import models_zoo
from tasks import partitioners

NUM_CLASSES = 10
DEFAULT_OPTIONS = {
    'num_clients': 100,
    'num_test_clients': 20,
    'alpha': 0.5,
    'test_fraction': 0.2,
    'model': 'cnn',
    **heterogeneity.DEFAULT_OPTIONS,
}
# The `model` option: `models.create_digits_cnn` or the MTT ConvNet of the
# FedPTR paper (`models.create_mtt_convnet`, 3 blocks of width 128; 8x8
# images pool down to 1x1).
# cnn_bn: with batch norm; cnn_proj: with MOON's projection head
# (`models_zoo.with_projection_head`, for --algorithm=moon).
MODEL_NAMES = ('cnn', 'mtt_convnet', 'cnn_bn', 'cnn_proj')
DEFAULT_EVAL_CLIENT_SPEC = tff.simulation.baselines.ClientSpec(
    num_epochs=1, batch_size=64, shuffle_buffer_size=1)


@dataclasses.dataclass(frozen=True)
class DigitsSplit:
  """The digits arrays and their train/test client partitions."""
  train_images: np.ndarray
  train_labels: np.ndarray
  train_partition: list[np.ndarray]
  test_images: np.ndarray
  test_labels: np.ndarray
  test_partition: list[np.ndarray]
  # The heterogeneity options (tasks/heterogeneity.py) and, for
  # partition='domains', each client's domain.
  options: dict[str, Any] = dataclasses.field(default_factory=dict)
  train_domains: list[int] | None = None
  test_domains: list[int] | None = None


def load_digits_arrays(*, use_synthetic_data: bool = False,
                       seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """All 1,797 examples: images [n, 8, 8, 1] float32 in [0, 1], labels int32."""
  digits = sk_datasets.load_digits()
  labels = digits.target.astype(np.int32)
  if use_synthetic_data:
    rng = np.random.default_rng([seed, 1])
    templates = rng.random((NUM_CLASSES, 8, 8))
    noise = 0.3 * rng.standard_normal((labels.size, 8, 8))
    images = np.clip(templates[labels] + noise, 0.0, 1.0)
  else:
    images = digits.images / 16.0
  return images.reshape((-1,) + models.DIGITS_IMAGE_SHAPE).astype(
      np.float32), labels


def _check_count(name: str, value: int, available: int, what: str) -> None:
  if not 1 <= value <= available:
    raise ValueError(f'{name} must be between 1 and the number of {what} '
                     f'examples ({available}), got {value!r}.')


def split_digits(*, seed: int = 0, use_synthetic_data: bool = False,
                 num_clients: int = DEFAULT_OPTIONS['num_clients'],
                 num_test_clients: int = DEFAULT_OPTIONS['num_test_clients'],
                 alpha: float = DEFAULT_OPTIONS['alpha'],
                 test_fraction: float = DEFAULT_OPTIONS['test_fraction'],
                 **partition_options: Any) -> DigitsSplit:
  """Holds out a stratified test part and partitions both parts over clients.

  Args:
    seed: Seed of every random step.
    use_synthetic_data: Use synthetic images (see module docstring).
    num_clients: Number of train clients.
    num_test_clients: Number of held-out test clients.
    alpha: Dirichlet concentration of the label skew (> 0).
    test_fraction: Share of examples held out, in (0, 1).
    **partition_options: The heterogeneity options (`partition`, ...;
      `heterogeneity.DEFAULT_OPTIONS`).

  Returns:
    A `DigitsSplit`.

  Raises:
    ValueError: If an option is out of range.
  """
  if not 0 < test_fraction < 1:
    raise ValueError(
        f'test_fraction must be in (0, 1), got {test_fraction!r}.')
  options = {**heterogeneity.DEFAULT_OPTIONS, **partition_options,
             'alpha': alpha}
  heterogeneity.check_options(**options)
  if options['partition'] == 'domains' and options['num_domains'] is None:
    options['num_domains'] = min(num_clients,
                                 len(partitioners.DOMAIN_TRANSFORMS))
  images, labels = load_digits_arrays(
      use_synthetic_data=use_synthetic_data, seed=seed)
  # Imported here: it loads a compiled extension (~0.3 s) that every other
  # task would pay for at `import tasks`.
  from sklearn import model_selection  # pylint: disable=g-import-not-at-top
  split_seq, train_seq, test_seq = np.random.SeedSequence(seed).spawn(3)
  train_idx, test_idx = model_selection.train_test_split(
      np.arange(labels.size), test_size=test_fraction, stratify=labels,
      random_state=int(split_seq.generate_state(1)[0]))
  _check_count('num_clients', num_clients, train_idx.size, 'train')
  _check_count('num_test_clients', num_test_clients, test_idx.size,
               'held-out')
  train_labels, test_labels = labels[train_idx], labels[test_idx]
  train = heterogeneity.partition_examples(
      train_labels, num_clients, seed=train_seq, **options)
  test = heterogeneity.partition_examples(
      test_labels, num_test_clients, seed=test_seq,
      **{**options, 'partition': ('dirichlet'
                                  if options['partition'] == 'long_tail' else
                                  options['partition'])})
  return DigitsSplit(
      train_images=heterogeneity.apply_domains(images[train_idx], train,
                                               seed=seed),
      train_labels=train_labels,
      train_partition=train.indices,
      test_images=heterogeneity.apply_domains(images[test_idx], test,
                                              seed=seed),
      test_labels=test_labels,
      test_partition=test.indices,
      options={**options, 'seed': seed},
      train_domains=train.domains,
      test_domains=test.domains,
  )


def describe_split(split: DigitsSplit) -> dict[str, dict[str, Any]]:
  """`partitioners.partition_summary` of the train and test clients.

  With the heterogeneity report of `heterogeneity.describe` (empty client
  ids, domains, a long-tail round) and the options under `settings`.
  """
  options = {k: v for k, v in split.options.items() if k != 'seed'}
  seed = split.options.get('seed', 0)
  return {
      'train': heterogeneity.describe(
          split.train_labels,
          heterogeneity.Partition(split.train_partition, split.train_domains),
          seed=seed, prefix='train', options=options),
      'test': heterogeneity.describe(
          split.test_labels,
          heterogeneity.Partition(split.test_partition, split.test_domains),
          seed=seed, prefix='test', options=options),
      'settings': options,
  }


def _client_data(prefix: str, images: np.ndarray, labels: np.ndarray,
                 partition: list[np.ndarray]
                 ) -> tff.simulation.datasets.ClientData:
  width = len(str(len(partition) - 1))
  return tff.simulation.datasets.TestClientData({
      f'{prefix}_{i:0{width}d}': (images[idx], labels[idx])
      for i, idx in enumerate(partition) if len(idx)  # Empty: never sampled.
  })


def create_preprocess_fn(
    spec: tff.simulation.baselines.ClientSpec,
    default_shuffle_buffer_size: int,
) -> Callable[[tf.data.Dataset], tf.data.Dataset]:
  """Shuffle, repeat `num_epochs`, take `max_elements`, batch (in order)."""
  shuffle_buffer_size = spec.shuffle_buffer_size or default_shuffle_buffer_size

  def preprocess_fn(dataset: tf.data.Dataset) -> tf.data.Dataset:
    if shuffle_buffer_size > 1:
      dataset = dataset.shuffle(shuffle_buffer_size)
    if spec.num_epochs > 1:
      dataset = dataset.repeat(spec.num_epochs)
    if spec.max_elements is not None:
      dataset = dataset.take(spec.max_elements)
    return dataset.batch(spec.batch_size, drop_remainder=False)

  return preprocess_fn


def create_digits_task(
    *,
    train_client_spec: tff.simulation.baselines.ClientSpec,
    eval_client_spec: tff.simulation.baselines.ClientSpec | None = None,
    data_dir: str | None = None,
    use_synthetic_data: bool = False,
    seed: int = 0,
    **options: Any,
) -> tff.simulation.baselines.BaselineTask:
  """Creates the `digits` `BaselineTask` (see the module docstring).

  Args:
    train_client_spec: How train client data are preprocessed.
    eval_client_spec: How test client data are preprocessed; defaults to one
      pass in batches of 64, unshuffled.
    data_dir: Ignored.
    use_synthetic_data: Use synthetic images.
    seed: Seed of the split and the partitions.
    **options: `num_clients`, `num_test_clients`, `alpha`, `test_fraction`
      (see `split_digits`) and `model` (one of `MODEL_NAMES`).

  Returns:
    A `tff.simulation.baselines.BaselineTask` with train and test
    `ClientData` and a `model_fn` building `models.create_digits_cnn` (or
    the `model` option's network) with sparse categorical cross-entropy on
    logits and an `accuracy` metric.

  Raises:
    ValueError: If an option is unknown or out of range.
  """
  del data_dir  # The data ship with scikit-learn.
  unknown = sorted(set(options) - set(DEFAULT_OPTIONS))
  if unknown:
    raise ValueError(f'Unknown option {unknown[0]!r} for task \'digits\'; '
                     f'known options: {", ".join(sorted(DEFAULT_OPTIONS))}')
  options = {**DEFAULT_OPTIONS, **options}
  model_name = options.pop('model')
  if model_name not in MODEL_NAMES:
    raise ValueError(f'model must be one of {", ".join(MODEL_NAMES)}, got '
                     f'{model_name!r}.')
  split = split_digits(seed=seed, use_synthetic_data=use_synthetic_data,
                       **options)
  largest_client = max(
      idx.size for idx in split.train_partition + split.test_partition)
  if eval_client_spec is None:
    eval_client_spec = DEFAULT_EVAL_CLIENT_SPEC
  task_datasets = tff.simulation.baselines.BaselineTaskDatasets(
      train_data=_client_data('train', split.train_images, split.train_labels,
                              split.train_partition),
      test_data=_client_data('test', split.test_images, split.test_labels,
                             split.test_partition),
      validation_data=None,
      train_preprocess_fn=create_preprocess_fn(train_client_spec,
                                               largest_client),
      eval_preprocess_fn=create_preprocess_fn(eval_client_spec,
                                              largest_client),
  )
  input_spec = task_datasets.element_type_structure

  def model_fn() -> tff.learning.models.VariableModel:
    if model_name == 'mtt_convnet':
      keras_model = models.create_mtt_convnet(models.DIGITS_IMAGE_SHAPE,
                                              NUM_CLASSES)
    elif model_name == 'cnn_proj':
      keras_model = models_zoo.with_projection_head(
          models.create_digits_cnn(NUM_CLASSES))
    else:
      keras_model = models.create_digits_cnn(
          NUM_CLASSES, batch_norm=model_name == 'cnn_bn')
    return tff.learning.models.from_keras_model(
        keras_model=keras_model,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=input_spec,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')],
    )

  return tff.simulation.baselines.BaselineTask(task_datasets, model_fn)


def create_round_data(
    task: tff.simulation.baselines.BaselineTask,
    *,
    data_dir: str | None = None,
    use_synthetic_data: bool = False,
    seed: int = 0,
    **options: Any,
) -> heterogeneity.RoundClientData | None:
  """The round-dependent training data of `task`, or None if it has none.

  Args:
    task: The task `create_digits_task` built with the same arguments (its
      training preprocessing is reused).
    data_dir: Ignored.
    use_synthetic_data: As for `create_digits_task`.
    seed: As for `create_digits_task`.
    **options: As for `create_digits_task`.

  Returns:
    A `heterogeneity.RoundClientData` when option `partition` is
    `long_tail` or `concept_shift` > 0; else None.
  """
  del data_dir
  options = {**DEFAULT_OPTIONS, **options}
  options.pop('model', None)
  if options['partition'] != 'long_tail' and not options['concept_shift']:
    return None
  split = split_digits(seed=seed, use_synthetic_data=use_synthetic_data,
                       **options)
  width = len(str(len(split.train_partition) - 1))
  return heterogeneity.RoundClientData(
      split.train_images, split.train_labels,
      {f'train_{i:0{width}d}': idx
       for i, idx in enumerate(split.train_partition)},
      task.datasets.train_preprocess_fn, seed=seed, num_classes=NUM_CLASSES,
      **options)
