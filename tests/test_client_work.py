"""The shared client work's typed hooks: `LocalObjective` and `ClientPasses`.

One client through `client_work.build_local_training`, against NumPy SGD on
the local objective; the passes before and after local training; the errors
a bad hook gets, with their exact messages; the number of batches H that
`count_steps` gives; and the client loop with `PrecomputedHook`s (FedFOR's
penalty, FedADC's embedded momentum and Nesterov look-ahead, whose
per-client constants are computed once per client) against the papers'
local steps in NumPy.
"""

import collections
import dataclasses
import functools
from typing import Any, NamedTuple

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny
from tff_opt import layers as tff_layers
from tff_opt.algorithms import fed_adc_momentum
from tff_opt.algorithms import fed_for
from tff_opt.algorithms import fed_prox
from tff_opt.algorithms import scaffold
from tff_opt.round import client_work
from tff_opt.round import ground

CLIENT_LR = 0.1
LOCAL_STEPS = 3
MU = 0.5


def _sgd():
  return tff.learning.optimizers.build_sgdm(learning_rate=CLIENT_LR)


def _client():
  (x, y), = tiny.make_clients(num_clients=1, seed=5, sizes=(7,))
  return x, y


def _weights(arrays):
  return tff.learning.models.ModelWeights(list(arrays), [])


def _one_round(process, broadcast):
  """`process.next` for one full-batch client; (client result, metrics)."""
  dataset, = tiny.full_batch_datasets([_client()], LOCAL_STEPS)
  output = process.next(process.initialize(), [broadcast], [dataset])
  return output.result[0], output.measurements


@pytest.fixture(scope='module')
def proximal_work():
  return client_work.build_local_training(
      tiny.model_fn, _sgd(),
      objective=client_work.LocalObjective(
          penalty=functools.partial(fed_prox.proximal, mu=MU)))


def test_penalty_gives_numpy_sgd_on_loss_plus_penalty(proximal_work):
  anchor = tiny.initial_weights()
  result, measurements = _one_round(proximal_work, _weights(anchor))
  x, y = _client()
  final = tiny.local_sgd(
      anchor, x, y, CLIENT_LR, LOCAL_STEPS,
      extra_grad=lambda w: [MU * (a - b) for a, b in zip(w, anchor)])
  for got, a, f in zip(result.update, anchor, final):
    np.testing.assert_allclose(got, a - f, rtol=1e-5, atol=1e-6)
  # Weighted by the examples trained on (every local epoch's).
  assert float(result.update_weight) == LOCAL_STEPS * len(y)
  assert measurements['non_finite_clients'] == 0
  # The penalty acts: FedAvg's client moves elsewhere.
  plain = tiny.local_sgd(anchor, x, y, CLIENT_LR, LOCAL_STEPS)
  assert np.abs(plain[0] - final[0]).max() > 1e-4


def test_defaults_are_fed_avg_client():
  work = client_work.build_local_training(tiny.model_fn, _sgd())
  start = tiny.initial_weights()
  result, measurements = _one_round(work, _weights(start))
  final = tiny.local_sgd(start, *_client(), CLIENT_LR, LOCAL_STEPS)
  for got, a, f in zip(result.update, start, final):
    np.testing.assert_allclose(got, a - f, rtol=1e-5, atol=1e-6)
  assert 'prepare' not in measurements


def test_count_steps_gives_hooks_the_number_of_batches():
  seen = []

  def penalty(weights, broadcast, *, learning_rate, num_steps):
    del broadcast, learning_rate
    seen.append(num_steps)
    return tf.cast(num_steps, tf.float32) * tf.add_n(
        [tf.reduce_sum(w) for w in weights])

  work = client_work.build_local_training(
      tiny.model_fn, _sgd(),
      objective=client_work.LocalObjective(penalty=penalty, count_steps=True))
  start = tiny.initial_weights()
  result, _ = _one_round(work, _weights(start))
  assert seen  # Traced with num_steps.
  # Gradient of H * sum(w) is H = 3 everywhere.
  final = tiny.local_sgd(start, *_client(), CLIENT_LR, LOCAL_STEPS,
                         extra_grad=lambda w: [np.full_like(t, 3.0)
                                               for t in w])
  for got, a, f in zip(result.update, start, final):
    np.testing.assert_allclose(got, a - f, rtol=1e-5, atol=1e-6)


class Anchored(NamedTuple):
  """What the pre-pass below hands the loop: w_t and the penalty's anchor."""
  model_weights: Any
  anchor: Any


def test_passes_before_and_after_local_training():
  start = tiny.initial_weights()
  shift = np.float32(0.25)

  def prepare_fn(broadcast, dataset):
    # The pre-pass adds an anchor for the penalty and reports a diagnostic.
    count = dataset.reduce(tf.constant(0.0), lambda n, _: n + 1.0)
    extended = Anchored(broadcast,
                        [t + shift for t in broadcast.trainable])
    return extended, collections.OrderedDict(batches=count)

  def penalty(weights, broadcast, *, learning_rate):
    del learning_rate
    return MU * tf.add_n([tf.nn.l2_loss(w - a)
                          for w, a in zip(weights, broadcast.anchor)])

  def report_fn(model, dataset, broadcast, *, delta, num_steps,
                learning_rate, num_examples):
    del model, dataset, broadcast, delta
    return collections.OrderedDict(
        steps=tf.cast(num_steps, tf.float32),
        lr=tf.cast(learning_rate, tf.float32),
        examples=tf.cast(num_examples, tf.float32))

  work = client_work.build_local_training(
      tiny.model_fn, _sgd(),
      objective=client_work.LocalObjective(penalty=penalty),
      passes=client_work.ClientPasses(prepare_fn=prepare_fn,
                                      report_fn=report_fn))
  result, measurements = _one_round(work, _weights(start))
  anchor = [t + shift for t in start]
  final = tiny.local_sgd(
      start, *_client(), CLIENT_LR, LOCAL_STEPS,
      extra_grad=lambda w: [MU * (a - b) for a, b in zip(w, anchor)])
  assert list(result.update) == [ground.DELTA_KEY, 'steps', 'lr',
                                 'examples']
  for got, a, f in zip(result.update[ground.DELTA_KEY], start, final):
    np.testing.assert_allclose(got, a - f, rtol=1e-5, atol=1e-6)
  assert float(result.update['steps']) == LOCAL_STEPS
  assert float(result.update['lr']) == pytest.approx(CLIENT_LR)
  # Every epoch counts: 3 full batches of the 7 examples.
  assert float(result.update['examples']) == LOCAL_STEPS * len(_client()[1])
  assert float(measurements[client_work.PREPARE_KEY]['batches']) == (
      LOCAL_STEPS)


def test_hook_objects_are_frozen():
  objective = client_work.LocalObjective()
  with pytest.raises(dataclasses.FrozenInstanceError):
    objective.penalty = scaffold.linear_correction
  with pytest.raises(dataclasses.FrozenInstanceError):
    client_work.ClientPasses().report_fn = None


@pytest.mark.parametrize('make, message', [
    (lambda: client_work.LocalObjective(penalty=0.1),
     'LocalObjective.penalty must be callable or None, got float 0.1.'),
    (lambda: client_work.LocalObjective(look_ahead='nesterov'),
     "LocalObjective.look_ahead must be callable or None, got str "
     "'nesterov'."),
    (lambda: client_work.LocalObjective(count_steps=1),
     'LocalObjective.count_steps must be a bool, got int 1.'),
    (lambda: client_work.ClientPasses(report_fn=[]),
     'ClientPasses.report_fn must be callable or None, got list [].'),
    (lambda: client_work.build_local_training(
        tiny.model_fn, _sgd(), objective=scaffold.linear_correction),
     'objective must be a client_work.LocalObjective, got function.'),
    (lambda: client_work.build_local_training(
        tiny.model_fn, _sgd(), passes=client_work.LocalObjective()),
     'passes must be a client_work.ClientPasses, got LocalObjective.'),
])
def test_bad_hook_is_a_type_error_naming_it(make, message):
  with pytest.raises(TypeError) as error:
    make()
  assert str(error.value) == message


@pytest.mark.parametrize('dataset, want', [
    (tf.data.Dataset.range(7).batch(3), 3),  # Cardinality known.
    (tf.data.Dataset.range(7).repeat(2).batch(2), 7),
    (tf.data.Dataset.range(9).filter(lambda x: x % 2 == 0), 5),  # Unknown.
])
def test_count_batches_with_and_without_known_cardinality(dataset, want):
  assert int(client_work._count_batches(dataset)) == want  # pylint: disable=protected-access


# --- Per-client constants (`PrecomputedHook`) in the client loop --------------

RNG = np.random.default_rng(7)
BATCH = 2


def _client_data():
  (x, y), = tiny.make_clients(num_clients=1, seed=3, sizes=(8,))
  return x, y


def _client_delta(penalty, broadcast, *, look_ahead=None, count_steps=False):
  """One client's delta through the shared loop (eagerly built, tiny model)."""
  update = client_work._build_client_update(  # pylint: disable=protected-access
      tiny.model_fn, tff.learning.optimizers.build_sgdm(CLIENT_LR),
      client_work.LocalObjective(penalty=penalty, look_ahead=look_ahead,
                                 count_steps=count_steps),
      tff.learning.ClientWeighting.NUM_EXAMPLES)
  x, y = _client_data()
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
  result, _, _ = update({'learning_rate': tf.constant(CLIENT_LR)}, broadcast,
                        dataset)
  return [t.numpy() for t in result.update]


def _numpy_delta(start, extra_grad, shift=None):
  """The same client in NumPy: SGD over batches of 2, loss + penalty.

  `extra_grad(w)` is the penalty's gradient at w; `shift`, the look-ahead
  offsets, moves the point where both gradients are taken (the step is
  from the unshifted weights).
  """
  x, y = _client_data()
  w = [np.asarray(t, np.float64) for t in start]
  for i in range(0, len(y), BATCH):
    at = w if shift is None else [a + s for a, s in zip(w, shift)]
    g = tiny.softmax_ce_grad(at, x[i:i + BATCH].astype(np.float64),
                             y[i:i + BATCH])
    w = [a - CLIENT_LR * (b + c) for a, b, c in zip(w, g, extra_grad(at))]
  return [s - a for s, a in zip(start, w)]


def _model(arrays):
  return tff.learning.models.ModelWeights([tf.constant(a) for a in arrays],
                                          [])


def test_client_loop_with_fed_for_hook_matches_numpy_eq_7():
  start = tiny.initial_weights()
  previous = [a + np.float32(0.05 * RNG.standard_normal(a.shape))
              for a in start]
  broadcast = ground.TwoModels(_model(start), _model(previous),
                               tf.constant(True))
  hooked = _client_delta(fed_for.first_order_positive_hook(0.5), broadcast)
  # Eq. 7's gradient: (alpha/eta) d_i where d_i (w_i - w_t,i) > 0, else 0.
  d = [p - c for p, c in zip(previous, start)]
  plain = _numpy_delta(start, lambda w: [
      np.where(e * (a - c) > 0, (0.5 / CLIENT_LR) * e, 0.0)
      for a, c, e in zip(w, start, d)])
  unpenalized = _client_delta(None, broadcast)
  for a, b in zip(hooked, plain):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  assert np.abs(hooked[0] - unpenalized[0]).max() > 1e-4  # The penalty acts.


def test_client_loop_with_fed_adc_hooks_matches_numpy_nesterov():
  start = tiny.initial_weights()
  m = [np.float32(RNG.standard_normal(a.shape)) for a in start]
  broadcast = fed_adc_momentum.Broadcast(_model(start),
                                         [tf.constant(a) for a in m])
  hooked = _client_delta(
      fed_adc_momentum.embedded_momentum_hook(0.9), broadcast,
      look_ahead=fed_adc_momentum.nesterov_look_ahead_hook(0.9),
      count_steps=True)
  # Algorithm 3 (red), H = 4 batches: w <- w - eta (g(w - eta m_bar) + m_bar).
  m_bar = [0.9 * a / 4 for a in m]
  plain = _numpy_delta(start, lambda _: m_bar,
                       shift=[-CLIENT_LR * a for a in m_bar])
  for a, b in zip(hooked, plain):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _lstm_bn_model_fn(read_unlisted=False):
  """An LSTM (orthogonal recurrent initializer: a QR) and a batch norm.

  With `read_unlisted`, the output is scaled by a trainable variable that
  is not among the model's variables (a `Lambda` does not track it).
  """

  def model_fn():
    layers = [tf.keras.layers.LSTM(4, input_shape=(3, 2)),
              tf.keras.layers.BatchNormalization(),
              tf.keras.layers.Dense(2)]
    if read_unlisted:
      unlisted = tf.Variable(lambda: tf.ones([2]), shape=[2],
                             dtype=tf.float32, trainable=True,
                             name='unlisted')
      layers.append(tf.keras.layers.Lambda(lambda x: x * unlisted))
    keras_model = tf.keras.Sequential(layers)
    return tff.learning.models.from_keras_model(
        keras_model, loss=tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True),
        input_spec=(tf.TensorSpec([None, 3, 2], tf.float32),
                    tf.TensorSpec([None], tf.int32)))

  return model_fn


def _initial_values(build):
  """(op types in the graph, {variable name: initial value}) of `build()`."""
  graph = tf.Graph()
  with graph.as_default():
    model = build()
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      values = {v.name: session.run(v) for v in tf.compat.v1.global_variables()}
  return {op.type for op in graph.get_operations()}, model, values


def test_model_to_overwrite_skips_trainable_initializers_only():
  plain_ops, _, plain = _initial_values(_lstm_bn_model_fn())
  ops, model, values = _initial_values(
      lambda: ground.model_to_overwrite(_lstm_bn_model_fn()))
  assert 'Qr' in plain_ops
  assert not {o for o in ops if o == 'Qr' or 'Random' in o}
  trainable = {v.name for v in model.trainable_variables}
  assert len(trainable) == 3 + 2 + 2  # LSTM, batch norm's scale/offset, dense.
  assert set(values) == set(plain)
  for name, value in values.items():
    if name in trainable:
      np.testing.assert_array_equal(value, np.zeros_like(plain[name]))
    else:  # Batch-norm statistics keep their initializers (variance: ones).
      np.testing.assert_array_equal(value, plain[name])
  assert any(np.all(v == 1) and v.size for n, v in values.items()
             if 'moving_variance' in n)


def test_model_to_overwrite_rebuilds_when_an_unlisted_trainable_is_read():
  ops, model, values = _initial_values(
      lambda: ground.model_to_overwrite(_lstm_bn_model_fn(True)))
  # The first, zeroed build is dropped; the model returned is built as is.
  assert 'Qr' in ops
  kernels = [values[v.name] for v in model.trainable_variables
             if 'kernel' in v.name]
  assert kernels and all(np.any(k != 0) for k in kernels)
  unlisted = [value for name, value in values.items() if 'unlisted' in name]
  assert len(unlisted) == 2 and any(np.all(v == 1) for v in unlisted)


def _dropout_clone_model_fn():
  """A model as `layers.with_stateless_dropout` builds EMNIST-CR's: a clone
  of a Keras model, whose own variables stay in the graph, unlisted and
  never read."""

  def model_fn():
    keras_model = tff_layers.with_stateless_dropout(tf.keras.Sequential([
        tf.keras.layers.Dense(5, activation='relu',
                              input_shape=(tiny.NUM_FEATURES,)),
        tf.keras.layers.Dropout(0.5),
        tf.keras.layers.Dense(tiny.NUM_CLASSES)]))
    return tff.learning.models.from_keras_model(
        keras_model, loss=tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True),
        input_spec=(tf.TensorSpec([None, tiny.NUM_FEATURES], tf.float32),
                    tf.TensorSpec([None], tf.int32)))

  return model_fn


def test_model_to_overwrite_builds_a_clone_once_and_draws_nothing():
  plain_ops, _, plain = _initial_values(_dropout_clone_model_fn())
  ops, model, values = _initial_values(
      lambda: ground.model_to_overwrite(_dropout_clone_model_fn()))
  assert {o for o in plain_ops if 'Random' in o}
  assert not {o for o in ops if 'Random' in o}
  # One build: the clone and its original (4 + 4 weights), no second pair.
  assert len(values) == len(plain) == 8
  assert len(model.trainable_variables) == 4
  for name, value in values.items():
    np.testing.assert_array_equal(value, np.zeros_like(plain[name]), name)


def test_a_kept_zeroed_clone_trains_bit_for_bit_as_the_built_model(
    monkeypatch):
  model_fn = _dropout_clone_model_fn()
  with tf.Graph().as_default():
    start = tff.learning.models.ModelWeights.from_model(model_fn())
    start = tf.nest.map_structure(
        lambda v: np.random.default_rng(2).normal(
            scale=0.5, size=v.shape).astype(np.float32), start)
  kept, _ = _one_round(client_work.build_local_training(model_fn, _sgd()),
                       start)
  monkeypatch.setattr(ground, 'model_to_overwrite', lambda fn: fn())
  built, _ = _one_round(client_work.build_local_training(model_fn, _sgd()),
                        start)
  assert all(np.any(d) for d in kept.update)
  for a, b in zip(kept.update, built.update):
    np.testing.assert_array_equal(a, b)
