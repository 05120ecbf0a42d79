"""The `shakespeare` workload of `benchmarks/round_time.py` (no timing).

Its client datasets must be what training sees: TFF's preprocessed
`(x, y)` batches of 80 int64 ids, with the local steps and characters
that the raw snippets give when counted here independently of TFF's
preprocessing (81-token pieces per snippet, batches of 4).
Not a timing test.
"""

import math
import os

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import common
from benchmarks import round_time
from tasks import shakespeare
from tasks import sqlite_data
from tff_opt.program import runtime

SPEC = (tf.TensorSpec([None, 80], tf.int64), tf.TensorSpec([None, 80],
                                                           tf.int64))


def _sequences(snippet: str) -> int:
  return math.ceil((len(snippet.encode()) + 2) / 81)  # [bos] + ... + [eos].


def _targets(snippet: str) -> int:
  # Every 81-token piece's first token is only an input.
  return len(snippet.encode()) + 2 - _sequences(snippet)


def _counts(datasets):
  """(batches, sequences, non-pad targets) of each dataset."""
  counts = []
  for dataset in datasets:
    batches = list(dataset.as_numpy_iterator())
    counts.append((len(batches), sum(y.shape[0] for _, y in batches),
                   sum(int(np.count_nonzero(y)) for _, y in batches)))
  return counts


def test_synthetic_clients_have_the_documented_sizes():
  workload = round_time.Workload('shakespeare', quick=False)
  assert len(workload.datasets) == round_time.SHAKESPEARE_CLIENTS
  assert workload.client_ids is None
  for dataset in workload.datasets:
    assert dataset.element_spec == SPEC
  counts = _counts(workload.datasets)
  sizes = round_time.SYNTHETIC_SEQUENCES
  assert [c[1] for c in counts] == list(sizes)
  assert [c[0] for c in counts] == [math.ceil(n / 4) for n in sizes]
  assert workload.steps == 125 and workload.examples == 483
  low, high = round_time.SYNTHETIC_SNIPPET_CHARS
  # Each sequence is one snippet of `low`..`high` characters plus [eos].
  assert sum(c[2] for c in counts) == workload.tokens
  assert workload.examples * (low + 1) <= workload.tokens
  assert workload.tokens <= workload.examples * (high + 1)


def test_quick_is_four_clients_of_at_most_three_batches():
  workload = round_time.Workload('shakespeare', quick=True)
  counts = _counts(workload.datasets)
  expected = [min(math.ceil(n / 4), round_time.QUICK_BATCHES)
              for n in round_time.SYNTHETIC_SEQUENCES[:4]]
  assert [c[0] for c in counts] == expected == [1, 1, 2, 3]
  assert workload.steps == sum(expected)


def test_real_clients_are_drawn_and_preprocessed_by_the_task(tmp_path):
  rng = np.random.default_rng(5)
  alphabet = list(shakespeare.CHAR_VOCAB)
  clients = {f'ROLE_{i}': [''.join(rng.choice(alphabet, size=n))
                           for n in rng.integers(1, 300, size=i % 4 + 1)]
             for i in range(12)}
  sqlite_data.write_sqlite(os.path.join(tmp_path, 'shakespeare.sqlite'), {
      'train': {c: [{'snippets': s} for s in v] for c, v in clients.items()},
      'test': {c: [{'snippets': v[0]}] for c, v in clients.items()}})
  workload = round_time.Workload('shakespeare', quick=False,
                                 data_dir=str(tmp_path), seed=3,
                                 lstm_units=8, lstm_layers=1)
  again = round_time.Workload('shakespeare', quick=False,
                              data_dir=str(tmp_path), seed=3)
  assert workload.client_ids == again.client_ids
  assert len(set(workload.client_ids)) == 10
  assert set(workload.client_ids) <= set(clients)
  counts = _counts(workload.datasets)
  sequences = [sum(_sequences(s) for s in clients[c])
               for c in workload.client_ids]
  assert [c[1] for c in counts] == sequences
  assert [c[0] for c in counts] == [math.ceil(n / 4) for n in sequences]
  tokens = sum(_targets(s) for c in workload.client_ids for s in clients[c])
  assert workload.tokens == sum(c[2] for c in counts) == tokens
  assert workload.input_spec == SPEC
  model = workload.keras_model_fn()
  assert model.count_params() == 90 * 8 + 4 * 8 * (8 + 8 + 1) + 9 * 90


@pytest.mark.parametrize('argv, message', [
    (['--workload=emnist_cr', '--lstm_units=8'],
     '--lstm_units: only for --workload=shakespeare'),
    (['--workload=shakespeare', '--lstm_layers=0'],
     '--lstm_layers=0: expected a positive integer'),
    (['--workload=shakespeare', '--data_dir=/no/such/dir'],
     '--data_dir=/no/such/dir: no such directory'),
    (['--floor_concurrency=-1'], '--floor_concurrency=-1: expected >= 0'),
])
def test_bad_flags_are_one_line_errors(argv, message, capsys):
  with pytest.raises(SystemExit):
    round_time._parse_args(argv)
  assert message in capsys.readouterr().err


def test_sparse_floor_trains_the_same_weights_as_the_dense_floor():
  """SO NWP's floor applies the embedding's gradient to touched rows only.

  It must be the same SGD: after one round, every weight (the embedding's
  untouched rows included) equals the densified floor's, and the embedding
  did train (its touched rows moved).
  """
  workload = round_time.Workload('so_nwp', quick=True)
  assert workload.sparse_floor
  initial = common.initial_weights(workload.model_fn, 0)
  sparse = round_time.floor_round_fn(workload, initial, sparse=True)
  dense = round_time.floor_round_fn(workload, initial)
  sparse()
  dense()
  for a, b in zip(sparse.global_weights, dense.global_weights):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)
  embedding = sparse.global_weights[0].numpy()
  moved = np.any(embedding != initial.trainable[0], axis=1)
  touched = set()
  for dataset in workload.datasets:
    for x, _ in dataset.as_numpy_iterator():
      touched.update(x.ravel().tolist())
  assert set(np.flatnonzero(moved)) == touched


def test_concurrent_floors_train_the_sequential_floors_weights():
  """`floor xN` (and its generic-LSTM variant) only spreads the clients.

  Two rounds of Shakespeare's LSTM (one layer of 16 units: 24 s, against
  42 s with the task's two) with 2 clients at once, fused and generic
  kernels, end at the sequential floor's weights (float32 sums in another
  order), on the same batches in the same order.
  """
  workload = round_time.Workload('shakespeare', quick=True, lstm_units=16,
                                 lstm_layers=1)
  assert workload.has_lstm
  # The task shuffles each pass anew; cached, every pass is the first's.
  workload.datasets = [d.cache() for d in workload.datasets]
  initial = common.initial_weights(workload.model_fn, 0)
  floors = [round_time.floor_round_fn(workload, initial)] + [
      round_time.concurrent_floor_round_fn(
          workload, initial, concurrency=2, generic_lstm=generic)
      for generic in (False, True)]
  for run in floors:
    run()
    run()
  reference = [v.numpy() for v in floors[0].global_weights]
  assert not np.allclose(reference[-1], initial.trainable[-1])
  for run in floors[1:]:
    for a, b in zip(run.global_weights, reference):
      np.testing.assert_allclose(a.numpy(), b, rtol=1e-4, atol=1e-6)


def test_concurrency_below_one_is_refused():
  workload = round_time.Workload('emnist_cr', quick=True)
  initial = common.initial_weights(workload.model_fn, 0)
  with pytest.raises(ValueError, match='^concurrency must be >= 1, got 0$'):
    round_time.concurrent_floor_round_fn(workload, initial, concurrency=0)


def _in_fixed_order(dataset, batch):
  """`dataset`'s first pass, replayed in the same order on any worker."""
  xs, ys = zip(*dataset.unbatch().as_numpy_iterator())
  return tf.data.Dataset.from_tensor_slices(
      (np.stack(xs), np.stack(ys))).batch(batch)


def test_worker_floor_trains_the_sequential_floors_weights():
  """`floor worker` runs the floor's steps on TFF's worker, nothing else.

  Two rounds of a small Shakespeare LSTM on 4 clients (2 at a time on the
  worker) end at the in-process sequential floor's weights: the same SGD
  steps from the broadcast weights and the same example-weighted mean of
  the deltas, within float32 summation order. The batches are fixed
  tensors, since a shuffle (or a `cache`) would start anew on the worker.
  """
  workload = round_time.Workload('shakespeare', quick=True, lstm_units=8,
                                 lstm_layers=1)
  workload.datasets = [_in_fixed_order(d, round_time.SHAKESPEARE_BATCH)
                       for d in workload.datasets]
  initial = common.initial_weights(workload.model_fn, 0)
  federated_round = round_time.build_worker_floor(workload, initial)
  floor = round_time.floor_round_fn(workload, initial)
  worker = round_time.worker_floor_round_fn(federated_round, workload,
                                            initial)
  setting = round_time.Setting('2')
  runtime.set_local_execution_context()
  try:
    setting.start()
    for _ in range(2):
      floor()
      setting.wrap(worker)()
  finally:
    # Stops this setting's workers and gives the later tests of this
    # process a default context again (conftest's; `runtime.shutdown()`
    # would leave none: "No default context installed").
    runtime.set_local_execution_context()
  reference = [v.numpy() for v in floor.global_weights]
  assert not np.allclose(reference[-1], initial.trainable[-1])
  assert len(worker.global_weights) == len(reference)
  for a, b in zip(worker.global_weights, reference):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
