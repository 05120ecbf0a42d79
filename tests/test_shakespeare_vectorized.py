"""`VectorizedCharLstm` computes what the task's Keras/TFF model computes.

K = 3 models with different random weights (biases too), each on its own
batch of snippets with padded tails (and one all-padding row), for 1 and 2
LSTM layers of a small width: logits against the Keras model of
`tasks.shakespeare.create_model` run on each model's weights; loss and
unfinalized metrics against TFF's `from_keras_model` wrapper (the task's
own `model_fn`), including a client whose batch has fewer real rows than
the padded batch and one whose batch is empty.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines import keras_metrics

from tasks import shakespeare
from tasks import shakespeare_vectorized

SEQ = 80
UNITS = 16
K = 3
BATCH = 4
INPUT_SPEC = (tf.TensorSpec([None, SEQ], tf.int32),
              tf.TensorSpec([None, SEQ], tf.int32))


def tff_model_fn(layers):
  """The task's model (`create_shakespeare_task`'s model_fn), small."""
  return tff.learning.models.from_keras_model(
      keras_model=shakespeare.create_model(
          SEQ, embedding_dim=8, lstm_units=UNITS, lstm_layers=layers),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=INPUT_SPEC,
      metrics=[
          keras_metrics.NumTokensCounter(masked_tokens=[shakespeare.PAD]),
          keras_metrics.MaskedCategoricalAccuracy(
              masked_tokens=[shakespeare.PAD], name='accuracy'),
      ])


def random_weights(model, rng):
  """Random values for every trainable variable (biases included)."""
  return [rng.normal(0.0, 0.5, v.shape).astype(np.float32)
          for v in model.trainable_variables]


def snippet_batch(rng, rows=BATCH):
  """[rows, 81] ids: random characters with padded tails, one row all pad."""
  ids = rng.integers(1, shakespeare.VOCAB_SIZE, size=(rows, SEQ + 1))
  for r in range(rows):
    ids[r, rng.integers(5, SEQ + 1):] = shakespeare.PAD
  ids[-1, :] = shakespeare.PAD
  ids[0, :] = rng.integers(1, shakespeare.VOCAB_SIZE, size=SEQ + 1)
  return ids.astype(np.int32)


@pytest.mark.parametrize('layers', [1, 2])
def test_logits_equal_the_keras_model(layers):
  rng = np.random.default_rng(layers)
  keras_model = shakespeare.create_model(SEQ, embedding_dim=8,
                                         lstm_units=UNITS, lstm_layers=layers)
  per_client = [random_weights(keras_model, rng) for _ in range(K)]
  xs = np.stack([snippet_batch(rng)[:, :SEQ] for _ in range(K)])
  vectorized_model = (
      shakespeare_vectorized.VectorizedCharLstm.from_weight_shapes(
          [v.shape for v in keras_model.trainable_variables]))
  assert vectorized_model.lstm_layers == layers
  stacked = [np.stack(ws) for ws in zip(*per_client)]
  got = vectorized_model.logits([tf.constant(w) for w in stacked],
                                tf.constant(xs))
  for k in range(K):
    keras_model.set_weights(per_client[k])
    want = keras_model(xs[k]).numpy()
    np.testing.assert_allclose(got[k].numpy(), want, rtol=0, atol=1e-5)


def test_unrolled_recurrence_equals_the_scan():
  rng = np.random.default_rng(7)
  vectorized_model = shakespeare_vectorized.VectorizedCharLstm(
      embedding_dim=8, lstm_units=UNITS, lstm_layers=2)
  unrolled = shakespeare_vectorized.VectorizedCharLstm(
      embedding_dim=8, lstm_units=UNITS, lstm_layers=2, unroll=True)
  weights = [tf.constant(rng.normal(0, 0.5, (K,) + s).astype(np.float32))
             for s in vectorized_model.weight_shapes()]
  xs = tf.constant(np.stack([snippet_batch(rng)[:, :SEQ] for _ in range(K)]))
  np.testing.assert_allclose(unrolled.logits(weights, xs).numpy(),
                             vectorized_model.logits(weights, xs).numpy(),
                             rtol=0, atol=1e-6)


@pytest.mark.parametrize('layers', [1, 2])
def test_loss_and_metrics_equal_tff_model(layers):
  rng = np.random.default_rng(10 + layers)
  model = tff_model_fn(layers)
  per_client = [random_weights(model, rng) for _ in range(K)]
  ids = [snippet_batch(rng) for _ in range(K)]
  real_rows = [BATCH, 3, 0]  # A full batch, a smaller last batch, none.
  vectorized_model = (
      shakespeare_vectorized.VectorizedCharLstm.from_weight_shapes(
          [v.shape for v in model.trainable_variables]))
  stacked = [tf.constant(np.stack(ws)) for ws in zip(*per_client)]
  x = np.stack([i[:, :SEQ] for i in ids])
  y = np.stack([i[:, 1:] for i in ids])
  example_mask = np.arange(BATCH)[None, :] < np.array(real_rows)[:, None]
  loss, stats = vectorized_model.batch_loss(
      stacked, (tf.constant(x), tf.constant(y)), tf.constant(example_mask))
  for k in range(K):
    if real_rows[k] == 0:
      assert float(loss[k]) == 0.0
      for value in stats.values():
        assert float(value[k]) == 0
      continue
    model.reset_metrics()
    for variable, value in zip(model.trainable_variables, per_client[k]):
      variable.assign(value)
    rows = slice(0, real_rows[k])
    output = model.forward_pass((x[k, rows], y[k, rows]), training=True)
    np.testing.assert_allclose(float(loss[k]), float(output.loss),
                               rtol=1e-6, atol=1e-6)
    want = model.report_local_unfinalized_metrics()
    one = collections.OrderedDict((name, value[k])
                                  for name, value in stats.items())
    got = vectorized_model.unfinalized_metrics(one)
    assert list(got) == list(want)
    for name in want:
      assert len(got[name]) == len(want[name]), name
      for g, w in zip(got[name], want[name]):
        assert g.dtype == w.dtype, name
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6,
                                   err_msg=name)


def test_gradient_of_summed_losses_is_each_clients_own():
  rng = np.random.default_rng(3)
  model = tff_model_fn(1)
  per_client = [random_weights(model, rng) for _ in range(2)]
  ids = [snippet_batch(rng) for _ in range(2)]
  vectorized_model = (
      shakespeare_vectorized.VectorizedCharLstm.from_weight_shapes(
          [v.shape for v in model.trainable_variables]))
  stacked = [tf.Variable(np.stack(ws)) for ws in zip(*per_client)]
  x = tf.constant(np.stack([i[:, :SEQ] for i in ids]))
  y = tf.constant(np.stack([i[:, 1:] for i in ids]))
  with tf.GradientTape() as tape:
    loss, _ = vectorized_model.batch_loss(stacked, (x, y),
                                          tf.ones([2, BATCH], tf.bool))
    total = tf.reduce_sum(loss)
  vectorized_grads = [tf.convert_to_tensor(g)
                      for g in tape.gradient(total, stacked)]
  for k in range(2):
    for variable, value in zip(model.trainable_variables, per_client[k]):
      variable.assign(value)
    with tf.GradientTape() as tape:
      output = model.forward_pass((x[k], y[k]), training=True)
    grads = tape.gradient(output.loss, model.trainable_variables)
    for got, want in zip(vectorized_grads, grads):
      np.testing.assert_allclose(got[k].numpy(),
                                 tf.convert_to_tensor(want).numpy(),
                                 rtol=1e-4, atol=1e-6)


def test_shapes_that_are_not_the_char_lstm_are_refused():
  with pytest.raises(ValueError, match='trainable weight shapes'):
    shakespeare_vectorized.VectorizedCharLstm.from_weight_shapes(
        [(90, 8), (8, 64), (16, 64), (64,), (16, 90)])
  with pytest.raises(ValueError, match='lstm_units'):
    shakespeare_vectorized.VectorizedCharLstm(lstm_units=0)
