"""One-domain-per-client tasks read from the documented `.npz` layout."""

import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

import tasks
from tasks import data_errors
from tasks import domains

SPEC = tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=100,
                                           shuffle_buffer_size=1)
# domain -> (image shape, train size, test size); USPS is the smallest.
DIGITS = {
    'mnist': ((28, 28, 1), 30, 7),
    'svhn': ((32, 32, 3), 40, 8),
    'usps': ((16, 16, 1), 20, 5),
    'synth_digits': ((32, 32, 3), 25, 6),
    'mnist_m': ((28, 28, 3), 30, 4),
}


def _write(root, folder, domain, split, x, y):
  path = os.path.join(root, folder, domain)
  os.makedirs(path, exist_ok=True)
  np.savez(os.path.join(path, f'{split}.npz'), x=x, y=y)


def _arrays(shape, n, seed):
  rng = np.random.default_rng(seed)
  return (rng.integers(0, 256, (n,) + shape, dtype=np.uint8),
          rng.integers(0, 10, n))


@pytest.fixture(scope='module')
def digits_dir(tmp_path_factory):
  root = str(tmp_path_factory.mktemp('domains'))
  arrays = {}
  for i, (domain, (shape, n_train, n_test)) in enumerate(DIGITS.items()):
    arrays[domain] = {'train': _arrays(shape, n_train, 2 * i),
                      'test': _arrays(shape, n_test, 2 * i + 1)}
    for split, (x, y) in arrays[domain].items():
      _write(root, 'digits_domains', domain, split, x, y)
  return root, arrays


@pytest.fixture(scope='module')
def digits_task(digits_dir):
  root, _ = digits_dir
  return tasks.create_task('digits_domains', train_client_spec=SPEC,
                           eval_client_spec=SPEC, data_dir=root, seed=1,
                           train_fraction=0.5)


def _batch(data, preprocess, cid):
  x, y = next(iter(preprocess(data.create_tf_dataset_for_client(cid))))
  return x.numpy(), y.numpy()


def test_each_client_holds_one_domain_truncated_to_the_smallest(
    digits_dir, digits_task):
  _, arrays = digits_dir
  datasets = digits_task.datasets
  assert datasets.train_data.client_ids == [
      'train_mnist', 'train_svhn', 'train_usps', 'train_synth_digits',
      'train_mnist_m']
  for domain in ('mnist', 'mnist_m'):  # Already 28x28: no resizing.
    x, y = _batch(datasets.train_data, datasets.train_preprocess_fn,
                  f'train_{domain}')
    # floor(0.5 * 20) = 10 examples, the smallest domain (USPS) halved.
    assert x.shape == (10, 28, 28, 3)
    raw = np.round((x * 0.5 + 0.5) * 255).astype(np.uint8)
    images, labels = arrays[domain]['train']
    rows = {np.broadcast_to(im, (28, 28, 3)).tobytes(): int(lab)
            for im, lab in zip(images, labels)}
    assert len({r.tobytes() for r in raw}) == 10
    for r, label in zip(raw, y):
      assert rows[r.tobytes()] == label  # A row of this domain, its label.
  x, _ = _batch(datasets.train_data, datasets.train_preprocess_fn,
                'train_usps')
  assert x.shape == (10, 28, 28, 3)  # 16x16 grey resized, three channels.
  np.testing.assert_array_equal(x[..., 0], x[..., 2])
  sizes = {cid: len(list(datasets.test_data.create_tf_dataset_for_client(
      cid))) for cid in datasets.test_data.client_ids}
  assert sizes == {f'test_{d}': n for d, (_, _, n) in DIGITS.items()}


def test_model_takes_the_task_batches(digits_task):
  datasets = digits_task.datasets
  batch = next(iter(datasets.train_preprocess_fn(
      datasets.train_data.create_tf_dataset_for_client('train_svhn'))))
  model = digits_task.model_fn()
  output = model.forward_pass(batch, training=False)
  assert output.predictions.shape == (10, 10)
  assert int(output.num_examples) == 10


def test_to_rgb_size_keeps_constant_images_and_repeats_grey():
  grey = np.full((2, 16, 16, 1), 77, np.uint8)
  out = domains.to_rgb_size(grey, 28)
  assert out.shape == (2, 28, 28, 3) and out.dtype == np.uint8
  assert np.all(out == 77)


def test_domain_clients_hold_one_domain_each():
  parts = [(np.full((4, 1, 1, 3), d, np.uint8), np.arange(4) + 10 * d)
           for d in range(3)]
  images, labels, partition, domain_of = domains.domain_clients(parts, 2,
                                                                seed=0)
  assert domain_of == [0, 1, 2, 0, 1, 2]  # Client k holds domain k mod 3.
  assert [p.size for p in partition] == [2] * 6
  for idx, d in zip(partition, domain_of):
    assert np.all(images[idx] == d) and np.all(labels[idx] // 10 == d)
  assert sorted(np.concatenate(partition).tolist()) == list(range(12))


def test_clients_per_domain_splits_each_domain(digits_dir):
  root, _ = digits_dir
  task = tasks.create_task('digits_domains', train_client_spec=SPEC,
                           data_dir=root, train_fraction=0.5,
                           clients_per_domain=2, domains='usps,svhn')
  train = task.datasets.train_data
  assert train.client_ids == ['train_usps_0', 'train_svhn_0', 'train_usps_1',
                              'train_svhn_1']
  assert [len(list(train.create_tf_dataset_for_client(c)))
          for c in train.client_ids] == [5, 5, 5, 5]


def test_domainnet_scales_without_normalising_and_augments_training(tmp_path):
  root = str(tmp_path)
  for i, domain in enumerate(('clipart', 'sketch')):
    for split, n in (('train', 12), ('test', 3)):
      _write(root, 'domainnet', domain, split,
             *_arrays((64, 64, 3), n, 10 * i + n))
  task = tasks.create_task(
      'domainnet', train_client_spec=SPEC, eval_client_spec=SPEC,
      data_dir=root, domains='clipart,sketch', image_size=64,
      train_fraction=0.5, model='resnet20_gn')
  datasets = task.datasets
  assert datasets.test_data.client_ids == ['test_clipart', 'test_sketch']
  x, _ = _batch(datasets.test_data, datasets.eval_preprocess_fn,
                'test_sketch')
  test_x = _arrays((64, 64, 3), 3, 13)[0]
  np.testing.assert_allclose(  # The test images in some order.
      np.sort(x.reshape(3, -1), axis=0),
      np.sort(test_x.reshape(3, -1) / 255.0, axis=0), atol=1e-6)
  tf.random.set_seed(0)
  x, _ = _batch(datasets.train_data, datasets.train_preprocess_fn,
                'train_clipart')
  assert x.shape == (6, 64, 64, 3)
  assert 0.0 <= x.min() and x.max() <= 1.0
  # Rotation with zero fill blacks out corners of some training images.
  assert (x[:, 0, 0, :] == 0).all(axis=-1).any()


def test_missing_domain_file_names_it(digits_dir, tmp_path):
  root = str(tmp_path)
  for domain, (shape, n_train, _) in DIGITS.items():
    _write(root, 'digits_domains', domain, 'train', *_arrays(shape, n_train,
                                                              0))
  folder = f'{root}/digits_domains/mnist'
  expected = (
      f"task 'digits_domains' needs {folder}/test.npz, which does not exist "
      f'(no download is attempted). Write {folder}/train.npz and test.npz '
      'with numpy.savez(path, x=uint8 images [N, H, W, C], y=labels [N] in '
      "0..9); the layout is described in tasks/domains.py (task "
      "'digits_domains').")
  with pytest.raises(data_errors.MissingDataError) as error:
    tasks.create_task('digits_domains', train_client_spec=SPEC,
                      data_dir=root)
  assert str(error.value) == expected


def test_malformed_arrays_name_the_file(tmp_path):
  root = str(tmp_path)
  _write(root, 'digits_domains', 'usps', 'train',
         np.zeros((4, 16, 16), np.float32), np.zeros(4, np.int64))
  path = f'{root}/digits_domains/usps/train.npz'
  with pytest.raises(ValueError) as error:
    domains.load_domain('digits_domains', 'usps', 'train', root)
  assert str(error.value) == (
      f'{path}: expected x uint8 [N, H, W, 1 or 3] and y integer [N], got x '
      'float32 [4, 16, 16] and y int64 [4].')


@pytest.mark.parametrize('options, message', [
    ({'domains': 'mnist,kmnist'},
     "domains must be distinct names from mnist, svhn, usps, synth_digits, "
     "mnist_m, comma-separated, got 'mnist,kmnist'."),
    ({'train_fraction': 0.0}, 'train_fraction must be in (0, 1], got 0.0.'),
    ({'concept_shift': -0.1},
     'concept_shift must be a probability in [0, 1], got -0.1.'),
    ({'model': 'alexnet_bn'},
     'model must be one of fedadc_cnn, fedbn_cnn, fedcurv_cnn, mtt_convnet, '
     "resnet20, resnet20_gn for task 'digits_domains', got 'alexnet_bn'."),
])
def test_bad_options_raise_one_line_errors(options, message):
  with pytest.raises(ValueError) as error:
    tasks.create_task('digits_domains', train_client_spec=SPEC,
                      use_synthetic_data=True, **options)
  assert str(error.value) == message


def test_concept_shift_relabels_every_domain_client_persistently():
  """FedFOR 4.4 on the domains: the round's map relabels the sampled data."""
  options = dict(concept_shift=0.5, domains='mnist,svhn')
  task = tasks.create_task('digits_domains', train_client_spec=SPEC,
                           use_synthetic_data=True, seed=4, **options)
  rounds = tasks.create_round_data('digits_domains', task,
                                   use_synthetic_data=True, seed=4, **options)
  shift = rounds.concept_shift
  shifts = shift.shift_rounds(30)
  assert shifts  # p = 0.5 over 30 rounds.
  label_map = np.arange(10)
  for r in range(1, 31):  # Persistent: each shift is one class's new
    if r in shifts:  # label, kept by every later round.
      c, old, new = shift.shift_at(r)
      assert label_map[c] == old and new != old
      label_map = label_map.copy()
      label_map[c] = new
    np.testing.assert_array_equal(rounds.label_map(r), label_map)
  r = shifts[0]
  after = rounds.label_map(r)
  raw = task.datasets.train_data
  ids, datasets = rounds.clients_for_round(r, raw.client_ids)
  assert ids == ['train_mnist', 'train_svhn']
  for cid, dataset in zip(ids, datasets):
    original = np.concatenate([y.numpy() for _, y in
                               task.datasets.train_preprocess_fn(
                                   raw.create_tf_dataset_for_client(cid))])
    relabelled = np.concatenate([y.numpy() for _, y in dataset])
    np.testing.assert_array_equal(np.sort(relabelled),
                                  np.sort(after[original]))
  assert tasks.create_round_data('digits_domains', task,
                                 use_synthetic_data=True) is None
