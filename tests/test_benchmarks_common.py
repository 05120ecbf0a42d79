"""Tests of `benchmarks/common.py`, the benchmark scripts' shared helpers."""

import numpy as np
import pytest

from benchmarks import common
from tests import tiny


def test_table_formats_numbers_strings_and_missing():
  table = common.Table([('name', 6, ''), ('acc', 7, '.3f'), ('n', 4, '')])
  assert table.format_header() == 'name       acc    n'
  assert table.format_row(['fedavg', 0.91234, None]) == 'fedavg   0.912    -'
  assert table.format_row(['x', 'never', 7]) == 'x        never    7'


def test_table_rejects_wrong_number_of_values():
  table = common.Table([('a', 3, ''), ('b', 3, '')])
  with pytest.raises(ValueError, match='Expected 2 values, got 1.'):
    table.format_row([1])


def test_median_and_its_error():
  assert common.median([3.0, 1.0, 2.0]) == 2.0
  assert common.median([4.0, 1.0, 2.0, 3.0]) == 2.5
  with pytest.raises(ValueError, match='median of no values'):
    common.median([])


def test_time_calls_runs_warmup_then_times_each_call():
  calls = []
  seconds = common.time_calls(lambda: calls.append(1), warmup=2, repeats=3)
  assert len(calls) == 5
  assert len(seconds) == 3 and all(s >= 0 for s in seconds)
  with pytest.raises(ValueError, match='repeats must be >= 1, got 0.'):
    common.time_calls(lambda: None, warmup=0, repeats=0)
  with pytest.raises(ValueError, match='warmup must be >= 0, got -1.'):
    common.time_calls(lambda: None, warmup=-1, repeats=1)


def test_synthetic_clients_are_seeded_batched_and_shaped():
  first = common.synthetic_clients(3, 5, x_shape=(2, 2), num_classes=4,
                                   batch_size=2, seed=7)
  again = common.synthetic_clients(3, 5, x_shape=(2, 2), num_classes=4,
                                   batch_size=2, seed=7)
  assert len(first) == 3
  batches = list(first[1].as_numpy_iterator())
  assert [b[0].shape for b in batches] == [(2, 2, 2), (2, 2, 2), (1, 2, 2)]
  ys = np.concatenate([b[1] for b in batches])
  assert ys.dtype == np.int32 and ys.min() >= 0 and ys.max() < 4
  for a, b in zip(first, again):
    for (xa, ya), (xb, yb) in zip(a.as_numpy_iterator(),
                                  b.as_numpy_iterator()):
      np.testing.assert_array_equal(xa, xb)
      np.testing.assert_array_equal(ya, yb)
  with pytest.raises(ValueError, match='batch_size must be at least 1'):
    common.synthetic_clients(1, 1, x_shape=(1,), num_classes=2, batch_size=0)


def test_initial_weights_are_seeded_numpy():
  tiny_model_fn = tiny.model_fn
  first = common.initial_weights(tiny_model_fn, 3)
  again = common.initial_weights(tiny_model_fn, 3)
  assert all(isinstance(w, np.ndarray) for w in first.trainable)
  for a, b in zip(first.trainable, again.trainable):
    np.testing.assert_array_equal(a, b)


def test_rss_mb_reports_this_process():
  own, workers = common.rss_mb()
  assert own > 10  # TensorFlow alone takes far more than 10 MiB.
  assert workers >= 0
