"""The aggregators of `tff_opt/round/aggregators.py`, against NumPy.

`mean_delta_sum_rest` (FedCurv's and SCAFFOLD's: weighted mean of the delta,
plain sums of the other entries, the number of clients that took part) and
`fed_ptr.ClientCosineFactory` (FedPTR's client-vs-aggregate cosine, which
lives with FedPTR in `tff_opt/algorithms/fed_ptr.py`) and
`with_non_trainable_mean` (the model's non-trainables beside any
aggregator), each run as an `AggregationProcess` on hand-made client
values, one of them dropped (weight 0, its update zeroed as the client work
sends it).
"""

import collections

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_opt.algorithms import fed_ptr
from tff_opt.round import aggregators


def test_cosine_aggregator_against_numpy_with_a_dropped_client():
  value_type = tff.types.to_type([np.float32, (np.float32, [2])])
  process = fed_ptr.ClientCosineFactory().create(
      value_type, tff.TensorType(np.float32))
  rng = np.random.default_rng(3)
  values = [[np.float32(rng.normal()), rng.normal(size=2).astype(np.float32)]
            for _ in range(4)]
  weights = [2.0, 1.0, 0.0, 5.0]  # The third client dropped out.
  output = process.next(process.initialize(), values, weights)
  flat = [np.concatenate([[v[0]], v[1]]).astype(np.float64) for v in values]
  mean = sum(w * f for w, f in zip(weights, flat)) / sum(weights)
  np.testing.assert_allclose(np.concatenate([[output.result[0]],
                                             output.result[1]]), mean,
                             rtol=1e-6)
  cosines = [f @ mean / (np.linalg.norm(f) * np.linalg.norm(mean))
             for f, w in zip(flat, weights) if w > 0]
  assert float(output.measurements['client_global_cosine']) == (
      pytest.approx(np.mean(cosines), rel=1e-5))


def test_cosine_of_no_client_is_zero():
  process = fed_ptr.ClientCosineFactory().create(
      tff.TensorType(np.float32, [2]), tff.TensorType(np.float32))
  output = process.next(process.initialize(),
                        [np.float32([1.0, 2.0]), np.float32([0.0, 0.0])],
                        [0.0, 0.0])
  assert float(output.measurements['client_global_cosine']) == 0.0


UPDATE_TYPE = tff.types.to_type(collections.OrderedDict(
    delta=[(np.float32, [2]), np.float32],
    fisher=(np.float32, [3])))


def test_mean_delta_sum_rest_against_numpy():
  process = aggregators.mean_delta_sum_rest(UPDATE_TYPE)
  rng = np.random.default_rng(5)

  def update(scale):
    return collections.OrderedDict(
        delta=[np.float32(scale * rng.normal(size=2)),
               np.float32(scale * rng.normal())],
        fisher=np.float32(scale * np.abs(rng.normal(size=3))))

  # The second client was dropped: weight 0 and a zeroed update.
  updates = [update(1.0), update(0.0), update(1.0)]
  weights = [3.0, 0.0, 1.0]
  output = process.next(process.initialize(), updates, weights)
  result = output.result
  for i in range(2):
    want = sum(w * u['delta'][i] for u, w in zip(updates, weights)) / 4.0
    np.testing.assert_allclose(result['delta'][i], want, rtol=1e-6)
  np.testing.assert_allclose(result['sums']['fisher'],
                             updates[0]['fisher'] + updates[2]['fisher'],
                             rtol=1e-6)
  assert int(result['num_clients']) == 2


def test_mean_delta_sum_rest_needs_a_delta_and_something_else():
  with pytest.raises(ValueError, match=r"^update_type must be a struct with "
                     r"a 'delta' entry and at least one other; got entries "
                     r"\['delta'\]\.$"):
    aggregators.mean_delta_sum_rest(tff.types.to_type(
        collections.OrderedDict(delta=(np.float32, [2]))))


SENT_TYPE = tff.types.to_type(collections.OrderedDict(
    delta=[(np.float32, [2])],
    model_non_trainable=[(np.float32, [3]), np.int64]))


def _non_trainable_mean_process():
  return aggregators.with_non_trainable_mean(
      tff.aggregators.MeanFactory().create, SENT_TYPE,
      tff.TensorType(np.float32),
      update_of=lambda sent: sent['delta'],
      non_trainable_of=lambda sent: sent['model_non_trainable'])


def test_non_trainable_mean_uses_the_update_weights():
  process = _non_trainable_mean_process()
  rng = np.random.default_rng(7)
  sent = [collections.OrderedDict(
      delta=[rng.normal(size=2).astype(np.float32)],
      model_non_trainable=[rng.normal(size=3).astype(np.float32),
                           np.int64(steps)]) for steps in (4, 0, 10)]
  weights = [3.0, 0.0, 1.0]  # The second client dropped out.
  output = process.next(process.initialize(), sent, weights)
  # The inner aggregator sees the update alone: MeanFactory's own result.
  inner = tff.aggregators.MeanFactory().create(
      SENT_TYPE['delta'], tff.TensorType(np.float32))
  want = inner.next(inner.initialize(), [s['delta'] for s in sent], weights)
  np.testing.assert_array_equal(output.result['update'][0], want.result[0])
  assert output.measurements == want.measurements
  non_trainable = output.result['non_trainable']
  assert float(non_trainable['total_weight']) == 4.0
  np.testing.assert_allclose(
      non_trainable['mean'][0],
      (3.0 * sent[0]['model_non_trainable'][0] +
       sent[2]['model_non_trainable'][0]) / 4.0, rtol=1e-6)
  # An integer variable: the weighted mean (5.5), rounded, in its dtype.
  assert non_trainable['mean'][1].dtype == np.int64
  assert int(non_trainable['mean'][1]) == 6


def test_non_trainable_mean_of_no_client_has_zero_weight():
  process = _non_trainable_mean_process()
  sent = collections.OrderedDict(
      delta=[np.float32([1.0, 2.0])],
      model_non_trainable=[np.float32([1.0, 1.0, 1.0]), np.int64(3)])
  output = process.next(process.initialize(), [sent, sent], [0.0, 0.0])
  assert float(output.result['non_trainable']['total_weight']) == 0.0
  np.testing.assert_array_equal(output.result['non_trainable']['mean'][0],
                                [0.0, 0.0, 0.0])
