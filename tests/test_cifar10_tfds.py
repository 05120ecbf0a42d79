"""`cifar10` read through the real TFDS code path, offline.

TFDS writes a genuine prepared `cifar10` (`<data_dir>/cifar10/3.0.2/`) from a
few random images (`tests/fake_tfds.py`);
`tasks.create_task('cifar10', data_dir=...)` then loads it with TFDS's own
registered `Cifar10` builder (`tfds.load(..., download=False)`), as it would
a copy prepared on a machine with internet access.
"""

import csv
import json
import os

import numpy as np
import pytest
import tensorflow_datasets as tfds
import tensorflow_federated as tff

import tasks
from tasks import cifar
from tasks import data_errors
from tests import fake_tfds

NUM_TRAIN, NUM_TEST = 120, 60
SPEC = tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=5,
                                           shuffle_buffer_size=1)


def _images(seed, n):
  rng = np.random.default_rng(seed)
  return (rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
          (np.arange(n) % 10).astype(np.int64))


def _pairs(images, labels):
  """Multiset of (image bytes, label), order-free (TFDS shuffles on write)."""
  return sorted((x.tobytes(), int(y)) for x, y in zip(images, labels))


@pytest.fixture(scope='module')
def tfds_dir(tmp_path_factory):
  root = str(tmp_path_factory.mktemp('tfds'))
  fake_tfds.store('cifar10', root, {'train': _images(1, NUM_TRAIN),
                                    'test': _images(2, NUM_TEST)})
  return root


def test_loader_reads_tfds_files_exactly(tfds_dir):
  assert isinstance(tfds.builder('cifar10', data_dir=tfds_dir),
                    tfds.builder_cls('cifar10'))
  (train_x, train_y), (test_x, test_y) = cifar.load_cifar10_arrays(
      tfds_dir, use_synthetic_data=False)
  assert train_x.dtype == np.uint8 and train_y.dtype == np.int64
  assert _pairs(train_x, train_y) == _pairs(*_images(1, NUM_TRAIN))
  assert _pairs(test_x, test_y) == _pairs(*_images(2, NUM_TEST))


def test_task_partitions_tfds_cifar10_into_disjoint_clients(tfds_dir):
  task = tasks.create_task(
      'cifar10', train_client_spec=SPEC, eval_client_spec=SPEC,
      data_dir=tfds_dir, seed=5, num_clients=4, num_test_clients=2,
      examples_per_client=25, alpha=0.5)
  images, labels = _images(1, NUM_TRAIN)
  written = {x.tobytes(): int(y) for x, y in zip(images, labels)}
  train = task.datasets.train_data
  assert sorted(train.client_ids) == ['train_0', 'train_1', 'train_2',
                                      'train_3']
  seen = set()
  for cid in train.client_ids:
    elements = list(train.create_tf_dataset_for_client(cid))
    assert len(elements) == 25
    for e in elements:
      key = e['image'].numpy().tobytes()
      assert written[key] == int(e['label'])  # a written image, its label
      assert key not in seen  # sampled without replacement
      seen.add(key)
  assert sorted(task.datasets.test_data.client_ids) == ['test_0', 'test_1']
  x, y = next(iter(task.datasets.eval_preprocess_fn(
      task.datasets.test_data.create_tf_dataset_for_client('test_0'))))
  assert x.shape == (5, 24, 24, 3) and y.shape == (5,)
  np.testing.assert_allclose(np.mean(x[0]), 0.0, atol=1e-4)


def test_sort_partition_gives_each_client_at_most_two_classes(tfds_dir):
  """FedADC's s = 2 with its CNN: 120 images, 12 per class, 5 clients."""
  task = tasks.create_task(
      'cifar10', train_client_spec=SPEC, eval_client_spec=SPEC,
      data_dir=tfds_dir, seed=2, num_clients=5, num_test_clients=3,
      partition='sort', classes_per_client=2, model='fedadc_cnn')
  train = task.datasets.train_data
  assert len(train.client_ids) == 5
  seen = set()
  for cid in train.client_ids:
    elements = list(train.create_tf_dataset_for_client(cid))
    assert len(elements) == 24  # 10 one-class shards of 12, 2 per client.
    assert len({int(e['label']) for e in elements}) <= 2
    seen |= {e['image'].numpy().tobytes() for e in elements}
  assert len(seen) == NUM_TRAIN
  # The test images are cut evenly over the 3 test clients.
  assert [len(list(task.datasets.test_data.create_tf_dataset_for_client(c)))
          for c in task.datasets.test_data.client_ids] == [20, 20, 20]
  model = task.model_fn()
  assert 'conv' in model.trainable_variables[0].name  # fedadc_cnn: no norm.
  summary = tasks.describe_task_data(
      'cifar10', data_dir=tfds_dir, seed=2, num_clients=5,
      num_test_clients=3, partition='sort', classes_per_client=2)
  assert summary['train']['classes_per_client_max'] <= 2


def test_cifar_options_are_validated_before_the_data_are_read(tmp_path):
  for task, options, message in [
      ('cifar10', {'partition': 'tff'},
       'partition must be one of dirichlet, dirichlet_class, sort, fedcurv, '
       "pachinko, domains, long_tail, got 'tff'."),
      ('cifar10', {'model': 'alexnet_bn'},
       'model must be one of fedadc_cnn, fedadc_cnn_proj, fedbn_cnn, '
       'mtt_convnet, resnet18_gn, resnet18_gn_proj, resnet20, resnet20_gn '
       'for task \'cifar10\', got '
       "'alexnet_bn'."),
      ('cifar100', {'concept_shift': 0.05},
       'concept_shift needs a re-partition of cifar100 (option partition '
       "other than 'tff')."),
      ('cifar100', {'partition': 'dirichlet', 'alpha': 0.0},
       'alpha must be positive, got 0.0.'),
  ]:
    with pytest.raises(ValueError) as error:
      tasks.create_task(task, train_client_spec=SPEC, data_dir=str(tmp_path),
                        **options)
    assert str(error.value) == message


def test_cifar100_repartitions_the_pooled_training_examples():
  """TFF's synthetic CIFAR-100 pooled and re-split by sort, s = 1."""
  default = tasks.create_task('cifar100', train_client_spec=SPEC,
                              use_synthetic_data=True)
  pooled = cifar.pooled_arrays(default.datasets.train_data)[1]
  task = tasks.create_task('cifar100', train_client_spec=SPEC,
                           use_synthetic_data=True, partition='sort',
                           classes_per_client=1, num_clients=2,
                           model='mtt_convnet')
  train = task.datasets.train_data
  labels = [[int(e['label']) for e in train.create_tf_dataset_for_client(c)]
            for c in train.client_ids]
  assert len(labels) == 2 and len(labels[0]) == len(labels[1]) > 0
  assert all(len(set(ls)) == 1 for ls in labels)  # One class each.
  remaining = pooled.tolist()
  for label in sum(labels, []):  # Drawn from the pooled examples.
    remaining.remove(label)
  assert (task.datasets.test_data.client_ids
          == default.datasets.test_data.client_ids)  # TFF's test clients.


def test_missing_tfds_dir_names_path_and_remedy(tmp_path):
  with pytest.raises(data_errors.MissingDataError,
                     match=r"^task 'cifar10' needs .*/cifar10/<version>/"
                     r'dataset_info.json, which does not exist'):
    tasks.create_task('cifar10', train_client_spec=SPEC,
                      data_dir=str(tmp_path))


def test_binary_trains_cifar10_from_tfds_files(tfds_dir, tmp_path):
  """The paper's cifar10 task, one round in the binary, on TFDS's files."""
  from tests import binary  # pylint: disable=g-import-not-at-top
  output_dir = str(tmp_path / 'run')
  assert binary.run_train(
      '--task=cifar10', f'--data_dir={tfds_dir}',
      '--task_option=num_clients=4', '--task_option=num_test_clients=2',
      '--task_option=examples_per_client=25', '--rounds=1',
      '--clients_per_round=2', '--server_opt=sgd', '--server_lr=1',
      '--client_lr=0.01', f'--output_dir={output_dir}') == 0
  with open(os.path.join(output_dir, 'metrics.csv')) as f:
    rows = list(csv.DictReader(f))
  assert [r['round'] for r in rows] == ['1']
  assert np.isfinite(float(rows[0]['train_loss']))
  assert 0.0 <= float(rows[0]['eval_accuracy']) <= 1.0
  # 2 clients x 25 examples, one epoch.
  assert float(rows[0]['train_num_examples']) == 50
  with open(os.path.join(output_dir, 'hparams.json')) as f:
    hparams = json.load(f)
  assert hparams['task_options'] == {'examples_per_client': 25,
                                     'num_clients': 4, 'num_test_clients': 2}
  assert hparams['num_train_clients'] == 4
