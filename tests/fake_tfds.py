"""Writes genuine prepared TFDS image data sets from small arrays, offline.

TFDS cannot download here, and `tfds.testing.mock_data` replaces the reading
code itself (and, in TFDS 4.9.3, aborts the process on `batch_size=-1`, which
the loaders use). Instead `store` has TFDS write a real prepared data set
(`<data_dir>/<name>/<version>/`: TFRecord shards, `dataset_info.json`,
`features.json`) with `tfds.dataset_builders.store_as_tfds_dataset`, under the
registered builder's name, version and features; the loaders then read it
with TFDS's own registered builder (`tfds.load(..., download=False)`), as
they would a copy prepared on a machine with internet access.
"""

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds


def random_images(name: str, n: int, seed: int):
  """(uint8 images, int64 labels) of the registered TFDS `name`'s shape.

  Labels cycle through the classes, so every class is present.
  """
  features = tfds.builder_cls(name)(data_dir='/nonexistent').info.features
  rng = np.random.default_rng(seed)
  images = rng.integers(0, 256, (n,) + features['image'].shape,
                        dtype=np.uint8)
  return images, np.arange(n, dtype=np.int64) % features['label'].num_classes


def store(name: str, data_dir: str,
          splits: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
  """Writes `splits` (split -> (images, labels)) as TFDS's prepared `name`.

  Features other than `image` and `label` (CIFAR's `id`, CIFAR-100's
  `coarse_label`) get placeholder values of their type.
  """
  builder_cls = tfds.builder_cls(name)
  features = builder_cls(data_dir='/nonexistent').info.features
  datasets = {}
  for split, (images, labels) in splits.items():
    n = len(labels)
    columns = {'image': images, 'label': labels}
    for key, feature in features.items():
      if key in columns:
        continue
      if isinstance(feature, tfds.features.Text):
        columns[key] = [f'{split}_{i}' for i in range(n)]
      elif isinstance(feature, tfds.features.ClassLabel):
        columns[key] = np.zeros(n, dtype=np.int64)
      else:
        raise ValueError(f'No placeholder for feature {key!r} of {name!r}.')
    datasets[split] = tf.data.Dataset.from_tensor_slices(columns)
  tfds.dataset_builders.store_as_tfds_dataset(
      name=name, version=str(builder_cls.VERSION), features=features,
      split_datasets=datasets, data_dir=data_dir)
