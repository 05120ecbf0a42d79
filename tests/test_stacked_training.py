"""Stacked local training equals training each client on its own.

Clients of 9, 5, 0 and 4 snippets (batch 4: 3, 2, 0 and 1 steps, two of them
ending on a smaller batch) of a small Shakespeare LSTM (the task's model,
8 x 16 units) start from one model and train together
(`build_local_training_fn`, `StackedCharLstm`); the reference trains each
client alone with the task's TFF model: `forward_pass`, `tf.GradientTape`
and the same TFF optimizer (SGD, SGD with momentum). Deltas, examples,
steps and metrics must agree (deltas to 1e-5 of their largest entry).
The client work's round (groups as TFF clients, against the per-client
client work) is checked in `tests/test_vectorized.py`.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tasks import shakespeare_functional
from tests import test_shakespeare_functional as functional_test
from tff_opt.round import stacked_training

SIZES = (9, 5, 0, 4)
LR = 0.5


def client_datasets(sizes=SIZES, seed=0, batch=4):
  """One `(x, y)` dataset per client, batched, of `sizes` snippets."""
  rng = np.random.default_rng(seed)
  datasets = []
  for n in sizes:
    ids = (functional_test.snippet_batch(rng, rows=n) if n else
           np.zeros((0, functional_test.SEQ + 1), np.int32))
    datasets.append(tf.data.Dataset.from_tensor_slices(
        (ids[:, :-1], ids[:, 1:])).batch(batch))
  return datasets


def reference(model, optimizer, start, dataset):
  """One client alone: (delta, examples, steps, unfinalized metrics)."""
  model.reset_metrics()
  for variable, value in zip(model.trainable_variables, start):
    variable.assign(value)
  weights = tuple(v.read_value() for v in model.trainable_variables)
  state = optimizer.initialize(
      tuple(tf.TensorSpec(w.shape, w.dtype) for w in weights))
  examples = steps = 0
  for batch in dataset:
    with tf.GradientTape() as tape:
      output = model.forward_pass(batch, training=True)
    grads = tape.gradient(output.loss, model.trainable_variables)
    state, weights = optimizer.next(state, weights, tuple(grads))
    for variable, value in zip(model.trainable_variables, weights):
      variable.assign(value)
    examples += int(output.num_examples)
    steps += 1
  delta = [s - w.numpy() for s, w in zip(start, weights)]
  return delta, examples, steps, model.report_local_unfinalized_metrics()


@pytest.fixture(scope='module')
def model():
  return functional_test.tff_model_fn(2)


@pytest.mark.parametrize('optimizer', [
    tff.learning.optimizers.build_sgdm(LR),
    tff.learning.optimizers.build_sgdm(LR, momentum=0.9),
], ids=['sgd', 'sgdm'])
def test_stacked_training_equals_each_client_alone(model, optimizer):
  rng = np.random.default_rng(1)
  start = functional_test.random_weights(model, rng)
  stacked_model = shakespeare_functional.StackedCharLstm.from_weight_shapes(
      [w.shape for w in start])
  datasets = client_datasets()
  (group,) = stacked_training.group_datasets(datasets, group_size=4)
  stats_dtypes = stacked_training.stats_dtypes_of(
      stacked_model, [tf.TensorSpec(w.shape, w.dtype) for w in start],
      functional_test.INPUT_SPEC)
  train = stacked_training.build_local_training_fn(
      stacked_model, optimizer, stats_dtypes)
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
    got_metrics = stacked_model.unfinalized_metrics(one)
    for name, values in metrics.items():
      for g, w in zip(got_metrics[name], values):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5,
                                   err_msg=name)


def test_stack_clients_pads_and_masks():
  batches = [[(np.ones((4, 2), np.int32), np.ones((4, 2), np.int32)),
              (np.full((1, 2), 2, np.int32), np.ones((1, 2), np.int32))],
             []]
  stacked = stacked_training.stack_clients(batches, x_shape=(2,),
                                           y_shape=(2,))
  assert stacked['x'].shape == (2, 2, 4, 2)
  assert stacked['mask'].tolist() == [
      [[True] * 4, [False] * 4], [[True, False, False, False], [False] * 4]]
  assert stacked['x'][1, 0].tolist() == [[2, 2], [0, 0], [0, 0], [0, 0]]
  empty = stacked_training.stack_clients([[]], x_shape=(2,), y_shape=(2,))
  assert empty['mask'].shape == (1, 1, 1) and not empty['mask'].any()


def test_group_sizes_are_balanced():
  assert stacked_training.group_sizes(10, 4) == [4, 3, 3]
  assert stacked_training.group_sizes(10, 10) == [10]
  assert stacked_training.group_sizes(10, 20) == [10]
  assert stacked_training.group_sizes(3, 1) == [1, 1, 1]
  with pytest.raises(ValueError, match='group_size'):
    stacked_training.group_sizes(3, 0)


def test_optimizer_with_shared_state_is_refused():
  specs = [tf.TensorSpec([2, 3], tf.float32)]
  assert stacked_training.per_client_state_keys(
      tff.learning.optimizers.build_sgdm(0.1), specs) == ()
  assert stacked_training.per_client_state_keys(
      tff.learning.optimizers.build_sgdm(0.1, momentum=0.9),
      specs) == ('accumulator',)
  with pytest.raises(ValueError, match='not one tensor per weight'):
    stacked_training.per_client_state_keys(
        tff.learning.optimizers.build_adam(0.1), specs)


def test_a_group_of_empty_clients_takes_no_step(model):
  optimizer = tff.learning.optimizers.build_sgdm(LR, momentum=0.9)
  start = functional_test.random_weights(model, np.random.default_rng(2))
  stacked_model = shakespeare_functional.StackedCharLstm.from_weight_shapes(
      [w.shape for w in start])
  (group,) = stacked_training.group_datasets(client_datasets(sizes=(0, 0)),
                                             group_size=2)
  train = stacked_training.build_local_training_fn(
      stacked_model, optimizer, stacked_training.stats_dtypes_of(
          stacked_model, [tf.TensorSpec(w.shape, w.dtype) for w in start],
          functional_test.INPUT_SPEC))
  hparams = optimizer.get_hparams(optimizer.initialize(
      tuple(tf.TensorSpec(w.shape, w.dtype) for w in start)))
  result = train(hparams, [np.stack([w] * 2) for w in start], group)
  assert result['num_examples'].numpy().tolist() == [0, 0]
  assert result['num_steps'].numpy().tolist() == [0, 0]
  assert all(float(np.abs(d).max()) == 0.0 for d in result['delta'])
  assert all(float(np.abs(v).max()) == 0 for v in result['stats'].values())
