"""Vectorized local training equals training each client on its own.

Clients of 9, 5, 0 and 4 snippets (batch 4: 3, 2, 0 and 1 steps, two of them
ending on a smaller batch) of a small Shakespeare LSTM (the task's model,
8 x 16 units) start from one model and train together
(`build_local_training_fn`, `VectorizedCharLstm`); the reference trains each
client alone with the task's TFF model: `forward_pass`, `tf.GradientTape`
and the same TFF optimizer (SGD, SGD with momentum). Deltas, examples,
steps and metrics must agree (deltas to 1e-5 of their largest entry).
The client work's round (groups as TFF clients, against the per-client
client work) is checked in `tests/test_vectorized.py`.

An objective runs per client: a penalty that is not a sum of coordinate-wise
terms (so that evaluating it once on the stacked weights would be wrong),
with per-client constants from each client's number of batches, and FedADC's
Nesterov look-ahead, against the same loop with the penalty added to each
client's loss. FedCurv's vectorized Fisher (`per_example_fisher`) equals
`fed_curv.empirical_fisher_diagonal` on the TFF model, per client, with and
without a limit on the examples. `group_datasets(by_steps=True)` groups
clients by their numbers of batches. A non-finite client drops out of its
group's update, weight, report and metrics, as in the per-client work.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tasks import shakespeare_vectorized
from tests import test_shakespeare_vectorized as shakespeare_test
from tff_opt.algorithms import fed_adc_momentum
from tff_opt.algorithms import fed_curv
from tff_opt.round import client_work
from tff_opt.round import ground
from tff_opt.round import vectorized_training

SIZES = (9, 5, 0, 4)
LR = 0.5


def client_datasets(sizes=SIZES, seed=0, batch=4):
  """One `(x, y)` dataset per client, batched, of `sizes` snippets."""
  rng = np.random.default_rng(seed)
  datasets = []
  for n in sizes:
    ids = (shakespeare_test.snippet_batch(rng, rows=n) if n else
           np.zeros((0, shakespeare_test.SEQ + 1), np.int32))
    datasets.append(tf.data.Dataset.from_tensor_slices(
        (ids[:, :-1], ids[:, 1:])).batch(batch))
  return datasets


def reference(model, optimizer, start, dataset, objective=None,
              broadcast=None):
  """One client alone: (delta, examples, steps, unfinalized metrics).

  With an `objective`, its penalty is added to the loss and its look-ahead
  shifts the weights the gradient is taken at, as `client_work` does.
  """
  model.reset_metrics()
  for variable, value in zip(model.trainable_variables, start):
    variable.assign(value)
  weights = tuple(v.read_value() for v in model.trainable_variables)
  state = optimizer.initialize(
      tuple(tf.TensorSpec(w.shape, w.dtype) for w in weights))
  kwargs = {'learning_rate': LR}
  if objective is not None and objective.count_steps:
    kwargs['num_steps'] = tf.constant(len(list(dataset)), tf.int32)
  examples = steps = 0
  for batch in dataset:
    if objective is not None and objective.look_ahead is not None:
      offsets = objective.look_ahead(list(weights), broadcast, **kwargs)
      for variable, w, o in zip(model.trainable_variables, weights, offsets):
        variable.assign(w + o)
    with tf.GradientTape() as tape:
      output = model.forward_pass(batch, training=True)
      loss = output.loss
      if objective is not None and objective.penalty is not None:
        loss += objective.penalty(model.trainable_variables, broadcast,
                                  **kwargs)
    grads = tape.gradient(loss, model.trainable_variables)
    state, weights = optimizer.next(state, weights, tuple(grads))
    for variable, value in zip(model.trainable_variables, weights):
      variable.assign(value)
    examples += int(output.num_examples)
    steps += 1
  delta = [s - np.asarray(w) for s, w in zip(start, weights)]
  return delta, examples, steps, model.report_local_unfinalized_metrics()


def vectorized_model_of(weights):
  """The `VectorizedCharLstm` of one client's `weights` (their shapes)."""
  return shakespeare_vectorized.VectorizedCharLstm.from_weight_shapes(
      [w.shape for w in weights])


@pytest.fixture(scope='module')
def model():
  return shakespeare_test.tff_model_fn(2)


@pytest.mark.parametrize('optimizer', [
    tff.learning.optimizers.build_sgdm(LR),
    tff.learning.optimizers.build_sgdm(LR, momentum=0.9),
], ids=['sgd', 'sgdm'])
def test_vectorized_training_equals_each_client_alone(model, optimizer):
  rng = np.random.default_rng(1)
  start = shakespeare_test.random_weights(model, rng)
  vectorized_model = vectorized_model_of(start)
  datasets = client_datasets()
  (group,) = vectorized_training.group_datasets(datasets, group_size=4)
  stats_dtypes = vectorized_training.stats_dtypes_of(
      vectorized_model, [tf.TensorSpec(w.shape, w.dtype) for w in start],
      shakespeare_test.INPUT_SPEC)
  train = vectorized_training.build_local_training_fn(
      vectorized_model, optimizer, stats_dtypes)
  hparams = optimizer.get_hparams(optimizer.initialize(
      tuple(tf.TensorSpec(w.shape, w.dtype) for w in start)))
  k = len(SIZES)
  result = train(hparams, [np.stack([w] * k) for w in start], group)
  for c, dataset in enumerate(datasets):
    delta, examples, steps, metrics = reference(model, optimizer, start,
                                                dataset)
    assert int(result['num_examples'][c]) == examples == SIZES[c]
    assert int(result['num_steps'][c]) == steps
    for got, want in zip(result['delta'], delta):
      scale = max(np.abs(want).max(), 1e-12)
      assert np.abs(got[c].numpy() - want).max() <= 1e-5 * scale
    if steps == 0:
      assert all(float(np.abs(d[c]).max()) == 0.0 for d in result['delta'])
    one = collections.OrderedDict(
        (name, value[c]) for name, value in result['stats'].items())
    got_metrics = vectorized_model.unfinalized_metrics(one)
    for name, values in metrics.items():
      for g, w in zip(got_metrics[name], values):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5,
                                   err_msg=name)


def test_vectorize_clients_pads_and_masks():
  batches = [[(np.ones((4, 2), np.int32), np.ones((4, 2), np.int32)),
              (np.full((1, 2), 2, np.int32), np.ones((1, 2), np.int32))],
             []]
  stacked = vectorized_training.vectorize_clients(batches, x_shape=(2,),
                                                  y_shape=(2,))
  assert stacked['x'].shape == (2, 2, 4, 2)
  assert stacked['mask'].tolist() == [
      [[True] * 4, [False] * 4], [[True, False, False, False], [False] * 4]]
  assert stacked['x'][1, 0].tolist() == [[2, 2], [0, 0], [0, 0], [0, 0]]
  empty = vectorized_training.vectorize_clients([[]], x_shape=(2,),
                                                y_shape=(2,))
  assert empty['mask'].shape == (1, 1, 1) and not empty['mask'].any()


def test_group_sizes_are_balanced():
  assert vectorized_training.group_sizes(10, 4) == [4, 3, 3]
  assert vectorized_training.group_sizes(10, 10) == [10]
  assert vectorized_training.group_sizes(10, 20) == [10]
  assert vectorized_training.group_sizes(3, 1) == [1, 1, 1]
  with pytest.raises(ValueError, match='group_size'):
    vectorized_training.group_sizes(3, 0)


def test_optimizer_with_shared_state_is_refused():
  specs = [tf.TensorSpec([2, 3], tf.float32)]
  assert vectorized_training.per_client_state_keys(
      tff.learning.optimizers.build_sgdm(0.1), specs) == ()
  assert vectorized_training.per_client_state_keys(
      tff.learning.optimizers.build_sgdm(0.1, momentum=0.9),
      specs) == ('accumulator',)
  with pytest.raises(ValueError, match='not one tensor per weight'):
    vectorized_training.per_client_state_keys(
        tff.learning.optimizers.build_adam(0.1), specs)


@pytest.mark.parametrize('hooks', [False, True], ids=['plain', 'hooks'])
def test_a_group_of_empty_clients_takes_no_step(model, hooks):
  """Also with a penalty, a look-ahead and FedCurv's Fisher report."""
  optimizer = tff.learning.optimizers.build_sgdm(LR, momentum=0.9)
  start = shakespeare_test.random_weights(model, np.random.default_rng(2))
  vectorized_model = vectorized_model_of(start)
  (group,) = vectorized_training.group_datasets(
      client_datasets(sizes=(0, 0)), group_size=2)
  kwargs, args = {}, ()
  if hooks:
    kwargs = dict(objective=_entangled_objective(), report_fn=_fisher_report)
    args = (_broadcast(start, np.random.default_rng(3)),)
  train = vectorized_training.build_local_training_fn(
      vectorized_model, optimizer, vectorized_training.stats_dtypes_of(
          vectorized_model, [tf.TensorSpec(w.shape, w.dtype) for w in start],
          shakespeare_test.INPUT_SPEC), **kwargs)
  hparams = optimizer.get_hparams(optimizer.initialize(
      tuple(tf.TensorSpec(w.shape, w.dtype) for w in start)))
  result = train(hparams, [np.stack([w] * 2) for w in start], group, *args)
  assert result['num_examples'].numpy().tolist() == [0, 0]
  assert result['num_steps'].numpy().tolist() == [0, 0]
  assert all(float(np.abs(d).max()) == 0.0 for d in result['delta'])
  assert all(float(np.abs(v).max()) == 0 for v in result['stats'].values())
  if hooks:
    assert all(float(np.abs(f).max()) == 0.0
               for f in result['extras']['fisher'])


# --- The objective per client ------------------------------------------------


def _entangled_constants(broadcast, *, learning_rate, num_steps):
  """Per-client constants: the momentum over the client's batches."""
  del learning_rate
  scale = 1.0 / tf.maximum(tf.cast(num_steps, tf.float32), 1.0)
  anchor = ground.model_weights_of(broadcast).trainable
  return list(anchor), [scale * m for m in broadcast.momentum], 0.7


def _entangled_step(weights, constants):
  """Not a sum of coordinate-wise terms: sqrt of a sum, square of a sum."""
  anchor, m_bar, mu = constants
  distance = tf.add_n([tf.reduce_sum(tf.square(w - a))
                       for w, a in zip(weights, anchor)])
  linear = tf.add_n([tf.reduce_sum(w * m) for w, m in zip(weights, m_bar)])
  return mu * tf.sqrt(1.0 + distance) + 0.5 * tf.square(linear)


def _entangled_objective():
  return client_work.LocalObjective(
      penalty=ground.PrecomputedHook(_entangled_constants,
                                          _entangled_step),
      look_ahead=fed_adc_momentum.nesterov_look_ahead_hook(0.9),
      count_steps=True)


def _broadcast(start, rng):
  return fed_adc_momentum.Broadcast(
      model_weights=tff.learning.models.ModelWeights(
          trainable=[tf.constant(w) for w in start], non_trainable=[]),
      momentum=[tf.constant(rng.normal(0.0, 0.05, w.shape), tf.float32)
                for w in start])


def _fisher_report(model, weights, dataset, broadcast, **kwargs):
  del broadcast, kwargs
  return {'fisher': vectorized_training.per_example_fisher(model, weights,
                                                           dataset)}


def test_penalty_and_look_ahead_run_per_client(model):
  """Each client's own penalty (with constants from its own number of
  batches) and look-ahead, not one penalty of the stacked weights."""
  rng = np.random.default_rng(3)
  start = shakespeare_test.random_weights(model, rng)
  broadcast = _broadcast(start, rng)
  objective = _entangled_objective()
  optimizer = tff.learning.optimizers.build_sgdm(LR, momentum=0.5)
  vectorized_model = vectorized_model_of(start)
  datasets = client_datasets()
  (group,) = vectorized_training.group_datasets(datasets, group_size=4)
  train = vectorized_training.build_local_training_fn(
      vectorized_model, optimizer, vectorized_training.stats_dtypes_of(
          vectorized_model, [tf.TensorSpec(w.shape, w.dtype) for w in start],
          shakespeare_test.INPUT_SPEC), objective=objective)
  hparams = optimizer.get_hparams(optimizer.initialize(
      tuple(tf.TensorSpec(w.shape, w.dtype) for w in start)))
  k = len(SIZES)
  result = train(hparams, [np.stack([w] * k) for w in start], group,
                 broadcast)
  moved = False
  for c, dataset in enumerate(datasets):
    delta, _, steps, _ = reference(model, optimizer, start, dataset,
                                   objective, broadcast)
    plain, *_ = reference(model, optimizer, start, dataset)
    assert int(result['num_steps'][c]) == steps
    for got, want, without in zip(result['delta'], delta, plain):
      scale = max(np.abs(want).max(), 1e-12)
      assert np.abs(got[c].numpy() - want).max() <= 1e-5 * scale
      moved = moved or np.abs(want - without).max() > 1e-2 * scale
  assert moved  # The objective changed the clients' deltas.


def test_loss_hooks_are_refused():
  with pytest.raises(ValueError, match='no vectorized form of a loss hook'):
    vectorized_training.check_objective(client_work.LocalObjective(
        client_stats_fn=lambda dataset: 0))


# --- FedCurv's Fisher --------------------------------------------------------


@pytest.mark.parametrize('limit', [None, (2, 5, 0, 1)], ids=['all', 'first'])
def test_per_example_fisher_equals_fed_curv_per_client(model, limit):
  rng = np.random.default_rng(4)
  per_client = [shakespeare_test.random_weights(model, rng)
                for _ in range(len(SIZES))]
  stacked = [tf.constant(np.stack(ws)) for ws in zip(*per_client)]
  vectorized_model = vectorized_model_of(per_client[0])
  datasets = client_datasets()
  (group,) = vectorized_training.group_datasets(datasets, group_size=4)
  got = vectorized_training.per_example_fisher(
      vectorized_model, stacked, group,
      max_examples=None if limit is None else tf.constant(limit))
  for c, dataset in enumerate(datasets):
    for variable, value in zip(model.trainable_variables, per_client[c]):
      variable.assign(value)
    want = fed_curv.empirical_fisher_diagonal(
        model, dataset, max_examples=None if limit is None else limit[c])
    for g, w in zip(got, want):
      w = w.numpy()
      assert np.abs(g[c].numpy() - w).max() <= 1e-5 * max(
          np.abs(w).max(), 1e-30)
      if SIZES[c] == 0 or (limit is not None and limit[c] == 0):
        assert not np.any(g[c].numpy())
      else:
        assert np.abs(w).max() > 0


def test_group_datasets_by_steps():
  sizes = (1, 9, 0, 13, 5)  # Batches of 4: 1, 3, 0, 4, 2.
  assert vectorized_training.step_order([1, 3, 0, 4, 2]) == [3, 1, 4, 0, 2]
  groups = vectorized_training.group_datasets(client_datasets(sizes), 2,
                                              by_steps=True)
  masks = [np.stack([e['mask'] for e in g.as_numpy_iterator()])
           for g in groups]
  # Groups (13, 9), (5, 1), (0): 4, 2 and 1 (all-padding) steps.
  assert [m.shape[:2] for m in masks] == [(4, 2), (2, 2), (1, 1)]
  assert [m.sum(axis=(0, 2)).tolist() for m in masks] == [[13, 9], [5, 1],
                                                          [0]]


@pytest.mark.parametrize('weighting', [
    tff.learning.ClientWeighting.NUM_EXAMPLES,
    tff.learning.ClientWeighting.UNIFORM,
], ids=['examples', 'uniform'])
def test_non_finite_clients_drop_out_of_their_group(weighting):
  """As in the per-client client work (`client_work`: a non-finite update
  is zeroed with weight 0, its metrics reset): a client with a non-finite
  delta (client 1) or a non-finite report (client 3) adds nothing to the
  group's mean, weight, report sums or metrics, and counts once in
  `non_finite_clients`."""
  nan, inf = np.float32(np.nan), np.float32(np.inf)
  local_result = collections.OrderedDict([
      (ground.DELTA_KEY, [
          tf.constant([[1.0, 2.0], [nan, 0.0], [3.0, 4.0], [5.0, 6.0]]),
          tf.constant([1.0, 5.0, 2.0, 7.0])]),
      (vectorized_training.NUM_EXAMPLES_KEY,
       tf.constant([2, 3, 5, 4], tf.int64)),
      (ground.NUM_STEPS_KEY, tf.constant([1, 1, 2, 1], tf.int64)),
      (vectorized_training.STATS_KEY, collections.OrderedDict(
          loss=tf.constant([0.5, 7.0, 1.5, 3.0]))),
      (vectorized_training.EXTRAS_KEY, collections.OrderedDict(
          fisher=[tf.constant([[1.0], [9.0], [2.0], [inf]])])),
  ])
  update, total, extras, stats, non_finite = (
      vectorized_training._group_update(  # pylint: disable=protected-access
          local_result, weighting))
  by_examples = weighting == tff.learning.ClientWeighting.NUM_EXAMPLES
  w0, w2 = (2.0, 5.0) if by_examples else (1.0, 1.0)
  assert float(total) == w0 + w2
  np.testing.assert_allclose(
      update[0].numpy(),
      (w0 * np.array([1.0, 2.0]) + w2 * np.array([3.0, 4.0])) / (w0 + w2),
      rtol=1e-6)
  np.testing.assert_allclose(float(update[1]),
                             (w0 * 1.0 + w2 * 2.0) / (w0 + w2), rtol=1e-6)
  np.testing.assert_array_equal(extras['fisher'][0].numpy(), [3.0])
  assert float(stats['loss']) == 2.0
  assert int(non_finite) == 2
