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

Model: `models_resnet.create_resnet18_gn` (GroupNorm with 2 groups), logits,
sparse categorical cross-entropy; metric `accuracy`.

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
from tasks import models_resnet
from tasks import partitioners
from tasks import tfds_images

CROP_SHAPE = (24, 24, 3)
CIFAR100_SQLITE = 'cifar100.sqlite'
CIFAR10_OPTIONS = {'alpha': 1.0, 'num_clients': 500, 'num_test_clients': 100,
                   'examples_per_client': 100}
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
                eval_client_spec):
  task_datasets = tff.simulation.baselines.BaselineTaskDatasets(
      train_data=train_data, test_data=test_data, validation_data=None,
      train_preprocess_fn=create_preprocess_fn(train_client_spec, train=True),
      eval_preprocess_fn=create_preprocess_fn(
          eval_client_spec or DEFAULT_EVAL_CLIENT_SPEC, train=False),
  )
  input_spec = task_datasets.element_type_structure

  def model_fn() -> tff.learning.models.VariableModel:
    return tff.learning.models.from_keras_model(
        keras_model=models_resnet.create_resnet18_gn(CROP_SHAPE, num_classes),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=input_spec,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')])

  return tff.simulation.baselines.BaselineTask(task_datasets, model_fn)


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
    data_dir: Directory holding `cifar100.sqlite`; default `~/.tff`.
    use_synthetic_data: Use TFF's synthetic CIFAR-100 (no files).
    seed: Unused (TFF's split).
    **options: None accepted.

  Returns:
    A `BaselineTask` whose model reports `loss` and `accuracy`.

  Raises:
    ValueError: If an option is given.
    data_errors.MissingDataError: If the SQLite file is missing.
  """
  del seed
  if options:
    raise ValueError(f'Unknown option {sorted(options)[0]!r} for task '
                     "'cifar100'; it takes none.")
  if use_synthetic_data:
    train = test = tff.simulation.datasets.cifar100.get_synthetic()
  else:
    path = data_errors.require_file(
        'cifar100', data_dir, CIFAR100_SQLITE,
        data_errors.tff_sqlite_instructions(CIFAR100_SQLITE))
    train, test = tff.simulation.datasets.cifar100.load_data(
        cache_dir=os.path.dirname(path))
  return _build_task(train, test, 100, train_client_spec, eval_client_spec)


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


def _client_data(prefix, images, labels, partition):
  width = len(str(len(partition) - 1))
  return tff.simulation.datasets.TestClientData({
      f'{prefix}_{i:0{width}d}': {'image': images[idx], 'label': labels[idx]}
      for i, idx in enumerate(partition)
  })


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
      `~/tensorflow_datasets`.
    use_synthetic_data: Use seeded random images (no files).
    seed: Seed of the LDA partitions.
    **options: `alpha` (1.0), `num_clients` (500), `num_test_clients` (100),
      `examples_per_client` (100).

  Returns:
    A `BaselineTask` whose model reports `loss` and `accuracy`.

  Raises:
    ValueError: If an option is unknown or out of range.
    data_errors.MissingDataError: If the TFDS data are missing.
  """
  unknown = sorted(set(options) - set(CIFAR10_OPTIONS))
  if unknown:
    raise ValueError(f'Unknown option {unknown[0]!r} for task \'cifar10\'; '
                     f'known options: {", ".join(sorted(CIFAR10_OPTIONS))}')
  opts = {**CIFAR10_OPTIONS, **options}
  if use_synthetic_data:
    opts.update(num_clients=6, num_test_clients=2)
  (train_x, train_y), (test_x, test_y) = load_cifar10_arrays(
      data_dir, use_synthetic_data, seed)
  train_seq, test_seq = np.random.SeedSequence(seed).spawn(2)
  train = _client_data('train', train_x, train_y, split_cifar10(
      train_y, opts['num_clients'], opts['alpha'],
      opts['examples_per_client'], train_seq))
  test = _client_data('test', test_x, test_y, split_cifar10(
      test_y, opts['num_test_clients'], opts['alpha'],
      opts['examples_per_client'], test_seq))
  return _build_task(train, test, 10, train_client_spec, eval_client_spec)
