"""Tests of tasks/partitioners.py (NumPy only, no TFF computations)."""

import json
import math

import numpy as np
import pytest

from tasks import partitioners


def _balanced_labels(num_classes, per_class, seed=0):
  labels = np.repeat(np.arange(num_classes), per_class)
  return np.random.default_rng(seed).permutation(labels)


def _class_shares(labels, partition, num_classes):
  return np.stack([
      np.bincount(labels[idx], minlength=num_classes) / len(idx)
      for idx in partition
  ])


def test_sizes_are_equal_and_default_to_len_over_num_clients():
  labels = _balanced_labels(10, 301)  # 3010 examples.
  partition = partitioners.dirichlet_label_partition(
      labels, 30, 0.5, seed=0)
  assert len(partition) == 30
  assert [len(idx) for idx in partition] == [3010 // 30] * 30
  assert sum(len(idx) for idx in partition) == 3000


def test_explicit_examples_per_client():
  labels = _balanced_labels(10, 300)
  partition = partitioners.dirichlet_label_partition(
      labels, 25, 0.5, seed=0, examples_per_client=40)
  assert [len(idx) for idx in partition] == [40] * 25
  assert all(idx.dtype == np.int64 for idx in partition)


def test_no_index_is_used_twice_even_when_every_example_is_used():
  # 20 * 150 == 3000: every pool runs dry, tiny alpha makes clients compete.
  labels = _balanced_labels(10, 300)
  partition = partitioners.dirichlet_label_partition(
      labels, 20, 0.01, seed=3)
  all_indices = np.concatenate(partition)
  assert all_indices.size == 3000
  assert np.unique(all_indices).size == 3000
  assert all_indices.min() >= 0 and all_indices.max() < 3000


def test_no_overlap_with_unused_examples():
  labels = _balanced_labels(10, 100)
  partition = partitioners.dirichlet_label_partition(
      labels, 7, 0.3, seed=1, examples_per_client=90)
  all_indices = np.concatenate(partition)
  assert np.unique(all_indices).size == 7 * 90


def test_same_seed_same_partition_different_seed_different():
  labels = _balanced_labels(10, 100)
  first = partitioners.dirichlet_label_partition(labels, 20, 0.5, seed=7)
  again = partitioners.dirichlet_label_partition(labels, 20, 0.5, seed=7)
  other = partitioners.dirichlet_label_partition(labels, 20, 0.5, seed=8)
  assert all(np.array_equal(a, b) for a, b in zip(first, again))
  assert not all(np.array_equal(a, b) for a, b in zip(first, other))


def test_tiny_alpha_gives_one_dominant_class_per_client():
  labels = _balanced_labels(10, 1000)
  partition = partitioners.dirichlet_label_partition(
      labels, 100, 0.01, seed=0, examples_per_client=50)
  shares = _class_shares(labels, partition, 10)
  assert shares.max(axis=1).mean() > 0.9
  summary = partitioners.partition_summary(labels, partition)
  assert summary['mean_max_class_share'] == pytest.approx(
      shares.max(axis=1).mean())
  assert summary['mean_label_entropy'] < 0.3


def test_huge_alpha_matches_the_prior():
  labels = _balanced_labels(10, 2000)
  partition = partitioners.dirichlet_label_partition(
      labels, 20, 1000.0, seed=0, examples_per_client=500)
  entropies = partitioners.label_entropy([labels[idx] for idx in partition])
  # Empirical entropy of 500 draws is biased low by about 9 / 1000.
  assert entropies.mean() == pytest.approx(math.log(10), abs=0.03)
  shares = _class_shares(labels, partition, 10)
  assert np.abs(shares - 0.1).max() < 0.06


def test_huge_alpha_follows_a_skewed_prior():
  # Class 0 holds 40% of the data: q ~ Dir(alpha * p) keeps that share;
  # Dir(alpha * ones) would pull every client towards 10%.
  labels = np.concatenate([np.zeros(4000, int), np.repeat(np.arange(1, 10),
                                                          666)])
  partition = partitioners.dirichlet_label_partition(
      labels, 10, 1000.0, seed=0, examples_per_client=500)
  shares = _class_shares(labels, partition, 10)
  prior = np.bincount(labels) / labels.size
  assert np.abs(shares.mean(axis=0) - prior).max() < 0.02
  assert shares[:, 0].min() > 0.33


def test_small_alpha_is_more_skewed_than_large_alpha():
  labels = _balanced_labels(10, 200)
  entropy = {
      alpha: partitioners.partition_summary(
          labels,
          partitioners.dirichlet_label_partition(labels, 40, alpha, seed=0),
      )['mean_label_entropy'] for alpha in (0.1, 1.0, 10.0)
  }
  assert entropy[0.1] < entropy[1.0] < entropy[10.0]


def test_string_labels_are_supported():
  labels = np.array(['cat', 'dog', 'eel'] * 20)
  partition = partitioners.dirichlet_label_partition(labels, 6, 1.0, seed=0)
  assert [len(idx) for idx in partition] == [10] * 6


@pytest.mark.parametrize('kwargs, message', [
    (dict(num_clients=5, alpha=0.0), 'alpha must be positive, got 0.0.'),
    (dict(num_clients=5, alpha=-1), 'alpha must be positive, got -1.'),
    (dict(num_clients=0, alpha=0.5),
     'num_clients must be at least 1, got 0.'),
    (dict(num_clients=101, alpha=0.5),
     'num_clients (101) exceeds the number of examples (100).'),
    (dict(num_clients=10, alpha=0.5, examples_per_client=11),
     'num_clients * examples_per_client (10 * 11 = 110) exceeds the number '
     'of examples (100).'),
    (dict(num_clients=10, alpha=0.5, examples_per_client=0),
     'examples_per_client must be at least 1, got 0.'),
])
def test_errors(kwargs, message):
  labels = _balanced_labels(10, 10)
  with pytest.raises(ValueError) as error:
    partitioners.dirichlet_label_partition(labels, seed=0, **kwargs)
  assert str(error.value) == message


def test_labels_must_be_one_dimensional():
  with pytest.raises(ValueError) as error:
    partitioners.dirichlet_label_partition(np.zeros((4, 2)), 2, 1.0, seed=0)
  assert str(error.value) == 'labels must be a 1-D array, got shape (4, 2).'


def test_label_entropy_exact_values():
  entropies = partitioners.label_entropy(
      [[0, 0, 1, 1], [3, 3, 3], [], [0, 1, 2, 3], [5, 5, 5, 7]])
  expected = [math.log(2), 0.0, 0.0, math.log(4),
              -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))]
  np.testing.assert_allclose(entropies, expected, rtol=1e-12)


def test_partition_summary_exact_values():
  labels = np.array([0, 0, 1, 1, 2, 2])
  summary = partitioners.partition_summary(
      labels, [np.array([0, 1]), np.array([2, 4]), np.array([], int)])
  assert summary == {
      'num_clients': 3,
      'num_examples': 4,
      'num_classes': 3,
      'size_min': 0,
      'size_mean': pytest.approx(4 / 3),
      'size_max': 2,
      'mean_label_entropy': pytest.approx(math.log(2) / 3),
      'label_entropy_min': 0.0,
      'label_entropy_median': 0.0,
      'label_entropy_max': pytest.approx(math.log(2)),
      'mean_max_class_share': pytest.approx(0.75),
      'classes_per_client_min': 0,
      'classes_per_client_mean': pytest.approx(1.0),
      'classes_per_client_max': 2,
      'num_empty_clients': 1,
      'empty_clients': [2],
  }
  json.dumps(summary)  # Must be JSON-ready (plain Python numbers).
