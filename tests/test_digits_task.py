"""Tests of the task registry (tasks/__init__.py) and the `digits` task."""

import dataclasses

import numpy as np
import pytest
from sklearn import datasets as sk_datasets
import tensorflow as tf
import tensorflow_federated as tff

import tasks
from tasks import digits
from tasks import models

ClientSpec = tff.simulation.baselines.ClientSpec

# Trainable parameters of models.create_digits_cnn(10), by hand:
#   conv3x3 1->32 'same':   3*3*1*32 + 32  =    320  (8x8x32)
#   conv3x3 32->64 'valid': 3*3*32*64 + 64 = 18,496  (6x6x64)
#   maxpool 2x2:                                  0  (3x3x64 = 576)
#   dense 576->128:         576*128 + 128  = 73,856
#   dense 128->10:          128*10 + 10    =  1,290
_CNN_PARAMS = 320 + 18_496 + 73_856 + 1_290  # = 93,962


def _raw_examples(client_data):
  """All (image, label) pairs of a ClientData, unbatched, client by client."""
  images, labels = [], []
  for client_id in client_data.client_ids:
    for x, y in client_data.create_tf_dataset_for_client(client_id):
      images.append(x.numpy())
      labels.append(int(y.numpy()))
  return np.stack(images), np.array(labels)


@pytest.fixture(scope='module')
def task():
  return tasks.create_task(
      'digits', train_client_spec=ClientSpec(num_epochs=3, batch_size=4))


@pytest.fixture(scope='module')
def raw(task):
  return {
      'train': _raw_examples(task.datasets.train_data),
      'test': _raw_examples(task.datasets.test_data),
  }


def test_client_counts_and_ids(task):
  train_ids = task.datasets.train_data.client_ids
  test_ids = task.datasets.test_data.client_ids
  assert len(train_ids) == 100 and len(test_ids) == 20
  assert all(isinstance(i, str) for i in train_ids + test_ids)
  assert train_ids[0] == 'train_00' and train_ids[-1] == 'train_99'
  assert test_ids[0] == 'test_00' and test_ids[-1] == 'test_19'
  assert not set(train_ids) & set(test_ids)


def test_client_counts_follow_options():
  task = tasks.create_task(
      'digits', train_client_spec=ClientSpec(1, 8), num_clients=30,
      num_test_clients=7)
  assert len(task.datasets.train_data.client_ids) == 30
  assert len(task.datasets.test_data.client_ids) == 7


def test_equal_client_sizes_and_stratified_holdout():
  split = digits.split_digits(seed=0)
  assert [len(i) for i in split.train_partition] == [1437 // 100] * 100
  assert [len(i) for i in split.test_partition] == [360 // 20] * 20
  # Stratified 20%: every class's held-out count is 20% of it, to rounding.
  all_counts = np.bincount(sk_datasets.load_digits().target, minlength=10)
  test_counts = np.bincount(split.test_labels, minlength=10)
  assert test_counts.sum() == 360
  assert np.all(np.abs(test_counts - 0.2 * all_counts) <= 1)


def test_no_example_shared_between_train_and_test(raw):
  train_hashes = {x.tobytes() for x in raw['train'][0]}
  test_hashes = {x.tobytes() for x in raw['test'][0]}
  assert len(train_hashes) == 1400 and len(test_hashes) == 360
  assert not train_hashes & test_hashes
  # And every example is a real, correctly labelled UCI digit.
  uci = sk_datasets.load_digits()
  label_of = {(x / 16.0).astype(np.float32).tobytes(): y
              for x, y in zip(uci.images, uci.target)}
  for images, labels in raw.values():
    assert [label_of[x[..., 0].tobytes()] for x in images] == list(labels)


def test_images_are_scaled(raw):
  images = raw['train'][0]
  assert images.dtype == np.float32 and images.shape[1:] == (8, 8, 1)
  assert images.min() == 0.0 and images.max() == 1.0


def test_train_clients_are_label_skewed():
  summaries = tasks.describe_task_data('digits')
  assert summaries['train']['num_clients'] == 100
  assert summaries['test']['num_clients'] == 20
  # alpha = 0.5 on 10 classes: far from the IID entropy log(10) = 2.30.
  assert summaries['train']['mean_label_entropy'] < 1.0
  iid_like = tasks.describe_task_data('digits', alpha=1000.0)
  assert iid_like['train']['mean_label_entropy'] > 1.7


def test_deterministic_given_seed():
  first = digits.split_digits(seed=0)
  again = digits.split_digits(seed=0)
  other = digits.split_digits(seed=1)
  assert np.array_equal(first.test_images, again.test_images)
  assert all(np.array_equal(a, b) for a, b in
             zip(first.train_partition, again.train_partition))
  assert not np.array_equal(first.test_images, other.test_images)
  a = tasks.create_task('digits', train_client_spec=ClientSpec(1, 8), seed=5)
  b = tasks.create_task('digits', train_client_spec=ClientSpec(1, 8), seed=5)
  for data_a, data_b in ((a.datasets.train_data, b.datasets.train_data),
                         (a.datasets.test_data, b.datasets.test_data)):
    xa, ya = _raw_examples(data_a)
    xb, yb = _raw_examples(data_b)
    assert np.array_equal(xa, xb) and np.array_equal(ya, yb)


def test_element_spec(task):
  x_spec, y_spec = task.datasets.element_type_structure
  assert x_spec == tf.TensorSpec((None, 8, 8, 1), tf.float32)
  assert y_spec.shape.as_list() == [None]
  assert y_spec.dtype in (tf.int32, tf.int64)
  # The eval preprocessing gives the same structure.
  test_data = task.datasets.test_data.preprocess(
      task.datasets.eval_preprocess_fn)
  assert test_data.element_type_structure == (x_spec, y_spec)


def test_train_preprocess_respects_batch_size_and_epochs(task, raw):
  client_id = task.datasets.train_data.client_ids[0]
  raw_x = [x.numpy().tobytes() for x, _ in
           task.datasets.train_data.create_tf_dataset_for_client(client_id)]
  batches = list(task.datasets.train_preprocess_fn(
      task.datasets.train_data.create_tf_dataset_for_client(client_id)))
  # 14 examples * 3 epochs = 42 = 10 batches of 4 and one of 2.
  assert [int(y.shape[0]) for _, y in batches] == [4] * 10 + [2]
  seen = [x.tobytes() for xb, _ in batches for x in xb.numpy()]
  assert sorted(seen) == sorted(raw_x * 3)


def test_max_elements_and_default_eval_spec():
  task = tasks.create_task(
      'digits',
      train_client_spec=ClientSpec(num_epochs=2, batch_size=5,
                                   max_elements=7))
  train_data = task.datasets.train_data
  batches = list(task.datasets.train_preprocess_fn(
      train_data.create_tf_dataset_for_client(train_data.client_ids[0])))
  assert [int(y.shape[0]) for _, y in batches] == [5, 2]
  # Default eval: one unshuffled pass in batches of 64 (one batch of 18).
  test_data = task.datasets.test_data
  raw = list(test_data.create_tf_dataset_for_client('test_03'))
  batches = list(task.datasets.eval_preprocess_fn(
      test_data.create_tf_dataset_for_client('test_03')))
  assert len(batches) == 1
  np.testing.assert_array_equal(batches[0][1].numpy(),
                                [int(y) for _, y in raw])


def test_eval_client_spec_is_used():
  task = tasks.create_task(
      'digits', train_client_spec=ClientSpec(1, 8),
      eval_client_spec=ClientSpec(num_epochs=1, batch_size=5))
  batches = list(task.datasets.eval_preprocess_fn(
      task.datasets.test_data.create_tf_dataset_for_client('test_00')))
  assert [int(y.shape[0]) for _, y in batches] == [5, 5, 5, 3]


def test_model_fn_builds_the_cnn(task):
  with tf.Graph().as_default():
    model = task.model_fn()
    assert isinstance(model, tff.learning.models.VariableModel)
    num_params = sum(v.shape.num_elements()
                     for v in model.trainable_variables)
    assert num_params == _CNN_PARAMS == 93_962
    assert model.input_spec == task.datasets.element_type_structure
    assert set(model.metric_finalizers()) == {
        'accuracy', 'loss', 'num_examples', 'num_batches'}


def test_keras_model_is_deterministic_under_set_random_seed():
  tf.keras.utils.set_random_seed(3)
  first = models.create_digits_cnn().get_weights()
  tf.keras.utils.set_random_seed(3)
  again = models.create_digits_cnn().get_weights()
  tf.keras.utils.set_random_seed(4)
  other = models.create_digits_cnn().get_weights()
  assert all(np.array_equal(a, b) for a, b in zip(first, again))
  assert not np.array_equal(first[0], other[0])
  assert models.create_digits_cnn().output_shape == (None, 10)


def test_centralised_training_learns():
  split = digits.split_digits(seed=0)
  train_idx = np.concatenate(split.train_partition)
  test_idx = np.concatenate(split.test_partition)
  tf.keras.utils.set_random_seed(0)
  model = models.create_digits_cnn()
  model.compile(
      optimizer=tf.keras.optimizers.Adam(3e-3),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')])
  model.fit(split.train_images[train_idx], split.train_labels[train_idx],
            batch_size=32, epochs=8, verbose=0)
  _, accuracy = model.evaluate(split.test_images[test_idx],
                               split.test_labels[test_idx], verbose=0)
  assert accuracy > 0.9


def test_synthetic_data_has_the_same_shapes(task):
  synthetic = tasks.create_task(
      'digits', train_client_spec=ClientSpec(num_epochs=3, batch_size=4),
      use_synthetic_data=True)
  assert (synthetic.datasets.element_type_structure
          == task.datasets.element_type_structure)
  real = digits.split_digits(seed=0)
  fake = digits.split_digits(seed=0, use_synthetic_data=True)
  assert fake.train_images.shape == real.train_images.shape
  assert not np.array_equal(fake.train_images, real.train_images)


def test_unknown_task():
  with pytest.raises(ValueError) as error:
    tasks.create_task('foo', train_client_spec=ClientSpec(1, 8))
  assert str(error.value) == (
      f"Unknown task 'foo'; known tasks: {', '.join(tasks.TASK_NAMES)}")
  assert 'digits' in str(error.value)
  with pytest.raises(ValueError, match="Unknown task 'foo'"):
    tasks.task_defaults('foo')


def test_unknown_option():
  with pytest.raises(ValueError) as error:
    tasks.create_task('digits', train_client_spec=ClientSpec(1, 8),
                      num_clinets=10)
  assert str(error.value) == (
      "Unknown option 'num_clinets' for task 'digits'; known options: "
      'alpha, beta, classes_per_client, concept_shift, distinct_classes, '
      'empty_clients, imbalance_ratio, long_tail_fraction, model, '
      'num_clients, num_domains, num_test_clients, partition, test_fraction')


@pytest.mark.parametrize('options, message', [
    (dict(alpha=0.0), 'alpha must be positive, got 0.0.'),
    (dict(test_fraction=1.0), 'test_fraction must be in (0, 1), got 1.0.'),
    (dict(num_clients=0), 'num_clients must be between 1 and the number of '
     'train examples (1437), got 0.'),
    (dict(num_test_clients=361), 'num_test_clients must be between 1 and the '
     'number of held-out examples (360), got 361.'),
])
def test_invalid_option_values(options, message):
  with pytest.raises(ValueError) as error:
    tasks.create_task('digits', train_client_spec=ClientSpec(1, 8),
                      **options)
  assert str(error.value) == message


def test_registry_and_defaults():
  assert 'digits' in tasks.TASK_NAMES
  assert tasks.TASK_NAMES == tuple(sorted(tasks.TASK_NAMES))
  assert tasks.task_options('digits') == {
      'num_clients': 100, 'num_test_clients': 20, 'alpha': 0.5,
      'test_fraction': 0.2, 'model': 'cnn', 'partition': 'dirichlet',
      'beta': 10.0, 'classes_per_client': 2, 'distinct_classes': False,
      'empty_clients': 'keep', 'num_domains': None,
      'long_tail_fraction': 0.1, 'imbalance_ratio': 0.01,
      'concept_shift': 0.0}
  defaults = tasks.task_defaults('digits')
  assert dataclasses.asdict(defaults) == {
      'rounds': 150,
      'clients_per_round': 10,
      'client_epochs': 2,
      'client_batch_size': 10,
      'client_optimizer': 'sgd',
      'client_lr': 0.1,
      'server_optimizer': 'yogi',
      'server_lr': 0.01,
      'server_tau': 1e-3,
      'server_beta_1': 0.9,
      'server_beta_2': 0.99,
      'eval_every': 10,
  }
  with pytest.raises(dataclasses.FrozenInstanceError):
    defaults.rounds = 1  # pytype: disable=not-writable
