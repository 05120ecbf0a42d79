"""`partitioners.sort_and_partition`: the FedADC paper's s-class split."""

import numpy as np
import pytest

from tasks import partitioners


@pytest.mark.parametrize('s', [2, 3, 4])
def test_equal_sizes_disjoint_and_at_most_s_classes(s):
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 10, size=1437)  # unequal class sizes
  parts = partitioners.sort_and_partition(labels, 100, s, seed=1)
  assert len(parts) == 100
  sizes = {len(p) for p in parts}
  assert len(sizes) == 1
  size = sizes.pop()
  assert size % s == 0 and size >= s * (1437 // (100 * s) - 1)
  everything = np.concatenate(parts)
  assert len(np.unique(everything)) == everything.size  # disjoint
  distinct = [len(np.unique(labels[p])) for p in parts]
  assert max(distinct) <= s
  assert np.mean(distinct) > s - 1  # mostly s different classes


def test_shards_are_class_pure_with_the_largest_size_that_fits():
  # Classes of 7, 5 and 3 examples, 4 shards: q = 3 gives 2 + 1 + 1 = 4.
  labels = np.array([0] * 7 + [1] * 5 + [2] * 3)
  parts = partitioners.sort_and_partition(labels, 2, 2, seed=0)
  assert [len(p) for p in parts] == [6, 6]
  for p in parts:
    for half in np.unique(labels[p]):
      assert (labels[p] == half).sum() % 3 == 0


def test_deterministic_in_seed():
  labels = np.repeat(np.arange(5), 20)
  a = partitioners.sort_and_partition(labels, 10, 2, seed=3)
  b = partitioners.sort_and_partition(labels, 10, 2, seed=3)
  c = partitioners.sort_and_partition(labels, 10, 2, seed=4)
  assert all(np.array_equal(x, y) for x, y in zip(a, b))
  assert not all(np.array_equal(x, y) for x, y in zip(a, c))


@pytest.mark.parametrize('args, message', [
    ((np.zeros((2, 2)), 1, 1), r'labels must be a 1-D array, got shape '
     r'\(2, 2\).'),
    ((np.zeros(10), 0, 1), 'num_clients must be at least 1, got 0.'),
    ((np.zeros(10), 2, 0), 'classes_per_client must be at least 1, got 0.'),
    ((np.zeros(10), 4, 3), r'num_clients \* classes_per_client \(4 \* 3 = '
     r'12\) exceeds the number of examples \(10\).'),
])
def test_errors_name_the_argument(args, message):
  with pytest.raises(ValueError, match=f'^{message}$'):
    partitioners.sort_and_partition(*args, seed=0)
