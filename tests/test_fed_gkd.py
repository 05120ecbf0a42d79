"""FedGKD: the buffer of global models, the averaged teacher, vs NumPy."""

import collections
import inspect

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny
from tff_opt.algorithms import _common
from tff_opt.algorithms import fed_gkd
from tff_opt.round import finalizers
from tff_opt.round import ground

GAMMA = 0.4
TAU = 0.5
BUFFER = 3
CLIENT_LR = 0.2
SERVER_LR = 0.8  # Not 1: the buffer must hold the server's models.
LOCAL_STEPS = 3
ROUNDS = 4  # Round 3's teacher has dropped w_0 from the buffer.
MODEL_BYTES = (tiny.NUM_FEATURES * tiny.NUM_CLASSES + tiny.NUM_CLASSES) * 4


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


def _softmax(z):
  z = z - z.max(axis=-1, keepdims=True)
  e = np.exp(z)
  return e / e.sum(axis=-1, keepdims=True)


def numpy_fed_gkd(clients, *, gamma=GAMMA, tau=TAU, buffer_size=BUFFER,
                  rounds=ROUNDS, server_lr=SERVER_LR, authors_start=False):
  """FedGKD in NumPy from `tiny.initial_weights()`; returns [w_0, ..., w_R].

  Round t's teacher is the mean of the last `buffer_size` global models
  w_0..w_t; each client takes full-batch SGD steps on CE + (gamma/2) tau^2
  KL(q^tau(z_bar) || q^tau(z)), logit gradient (softmax(z) - onehot) / N +
  (gamma / 2) tau (q^tau(z) - q^tau(z_bar)) / N; the server steps SGD on
  the uniform mean delta. `authors_start`: the authors' code instead (no
  distillation in the first round, w_0 never in the buffer).
  """
  w = [t.astype(np.float64) for t in tiny.initial_weights()]
  models = [w]
  for t in range(rounds):
    # (The authors' round 0 has no teacher: w_0 stands in, unused.)
    history = models[1:] if authors_start and t > 0 else models
    teacher = [sum(m[i] for m in history[-buffer_size:]) /
               len(history[-buffer_size:]) for i in range(2)]
    g = 0.0 if authors_start and t == 0 else gamma
    deltas = []
    for x, y in clients:
      x = x.astype(np.float64)
      onehot = np.eye(tiny.NUM_CLASSES)[y]
      q_bar = _softmax((x @ teacher[0] + teacher[1]) / tau)
      wk = [a.copy() for a in w]
      for _ in range(LOCAL_STEPS):
        z = x @ wk[0] + wk[1]
        dz = ((_softmax(z) - onehot) +
              g / 2 * tau * (_softmax(z / tau) - q_bar)) / len(y)
        wk = [a - CLIENT_LR * d for a, d in zip(wk, [x.T @ dz,
                                                     dz.sum(axis=0)])]
      deltas.append([a - b for a, b in zip(w, wk)])
    mean = tiny.weighted_mean(deltas, [1.0] * len(clients))
    w = [a - server_lr * d for a, d in zip(w, mean)]
    models.append(w)
  return models


def _run(process, clients, rounds):
  """Runs `rounds` rounds; returns (state, outputs, [w_0, ..., w_R])."""
  state = tiny.set_weights(process, process.initialize(),
                           tiny.initial_weights())
  models = [tiny.trainable(process, state)]
  outputs = []
  for _ in range(rounds):
    outputs.append(process.next(
        state, tiny.full_batch_datasets(clients, LOCAL_STEPS)))
    state = outputs[-1].state
    models.append(tiny.trainable(process, state))
  return state, outputs, models


@pytest.fixture(scope='module')
def process():
  return fed_gkd.build_fed_gkd(
      tiny.model_fn, gamma=GAMMA, temperature=TAU, buffer_size=BUFFER,
      client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(SERVER_LR))


def test_matches_numpy_and_buffer_holds_the_last_models(process):
  clients = tiny.make_clients()
  state, outputs, models = _run(process, clients, ROUNDS)
  want = numpy_fed_gkd(clients)
  for got_model, want_model in zip(models, want):
    for got, w in zip(got_model, want_model):
      np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
  # After 4 rounds the ring of M - 1 = 2 slots holds w_2 (slot 0, pushed
  # third) and w_3 (slot 1): with w_4 they are round 4's teacher.
  extras = state.finalizer[finalizers.EXTRAS_KEY]
  assert extras[fed_gkd.PUSHED_KEY] == ROUNDS
  for i, history in enumerate(extras[fed_gkd.HISTORY_KEY]):
    np.testing.assert_array_equal(history[0], models[2][i])
    np.testing.assert_array_equal(history[1], models[3][i])
  # The distillation acted, and the buffer's start matters: FedAvg and the
  # authors' start (no w_0, no distillation in round 0) end elsewhere.
  fed_avg = numpy_fed_gkd(clients, gamma=0.0)[-1]
  authors = numpy_fed_gkd(clients, authors_start=True)[-1]
  assert np.abs(want[-1][0] - fed_avg[0]).max() > 1e-3
  assert np.abs(want[-1][0] - authors[0]).max() > 1e-4
  # One model more down (the buffered sum) and its count; the delta up.
  assert outputs[-1].metrics['communication'] == {
      'bytes_server_to_client': 2 * MODEL_BYTES + 4,
      'bytes_client_to_server': MODEL_BYTES}


def test_buffer_of_one_is_the_current_model_as_teacher():
  process = fed_gkd.build_fed_gkd(
      tiny.model_fn, gamma=GAMMA, temperature=TAU, buffer_size=1,
      client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(SERVER_LR))
  clients = tiny.make_clients(seed=2)
  state, _, models = _run(process, clients, 2)
  want = numpy_fed_gkd(clients, buffer_size=1, rounds=2)
  for got, w in zip(models[-1], want[-1]):
    np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
  assert np.abs(want[-1][0] - numpy_fed_gkd(
      clients, rounds=2)[-1][0]).max() > 1e-4
  assert state.finalizer[finalizers.EXTRAS_KEY][fed_gkd.PUSHED_KEY] == 0


def test_gamma_zero_is_fed_avg():
  process = fed_gkd.build_fed_gkd(
      tiny.model_fn, gamma=0.0, client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(1.0),
      client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES)
  clients = tiny.make_clients(seed=3)
  state, _, _ = _run(process, clients, 2)
  want = tiny.numpy_fed_prox(clients, 0.0, rounds=2, lr=CLIENT_LR,
                             local_steps=LOCAL_STEPS)
  for got, w in zip(tiny.trainable(process, state), want):
    np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def _weights_type():
  return _common.initial_model_weights_fn(tiny.model_fn).type_signature.result


def _model(scale):
  return tff.learning.models.ModelWeights(
      trainable=[np.full((tiny.NUM_FEATURES, tiny.NUM_CLASSES), scale,
                         np.float32),
                 np.full((tiny.NUM_CLASSES,), -scale, np.float32)],
      non_trainable=[])


def test_finalizer_pushes_accepted_rounds_only():
  finalizer = fed_gkd.build_history_finalizer(_sgd(1.0), _weights_type(), 3)
  state = finalizer.initialize()
  step = [np.full((tiny.NUM_FEATURES, tiny.NUM_CLASSES), 0.5, np.float32),
          np.full((tiny.NUM_CLASSES,), 0.5, np.float32)]
  output = finalizer.next(state, _model(1.0), step)
  assert output.measurements[ground.UPDATE_NON_FINITE_KEY] == 0
  extras = output.state[finalizers.EXTRAS_KEY]
  assert extras[fed_gkd.PUSHED_KEY] == 1
  np.testing.assert_array_equal(extras[fed_gkd.HISTORY_KEY][0][0], 1.0)
  np.testing.assert_array_equal(extras[fed_gkd.HISTORY_KEY][0][1], 0.0)
  np.testing.assert_array_equal(output.result.trainable[0], 0.5)
  # A non-finite mean delta: the model is kept and nothing is pushed.
  bad = [np.full_like(step[0], np.nan), step[1]]
  rejected = finalizer.next(output.state, output.result, bad)
  assert rejected.measurements[ground.UPDATE_NON_FINITE_KEY] == 1
  kept = rejected.state[finalizers.EXTRAS_KEY]
  assert kept[fed_gkd.PUSHED_KEY] == 1
  np.testing.assert_array_equal(kept[fed_gkd.HISTORY_KEY][0][1], 0.0)
  np.testing.assert_array_equal(rejected.result.trainable[0], 0.5)


def test_history_broadcast_sums_the_filled_slots():
  broadcast_fn = fed_gkd.history_broadcast(4)  # Three slots.
  history = [np.arange(3 * 2, dtype=np.float32).reshape(3, 2),
             np.array([1., 10., 100.], np.float32)]
  weights = tff.learning.models.ModelWeights(
      [tf.constant([0.5, -0.5]), tf.constant(7.)], [])

  def state(pushed):
    return {finalizers.EXTRAS_KEY: collections.OrderedDict([
        (fed_gkd.HISTORY_KEY, [tf.constant(h) for h in history]),
        (fed_gkd.PUSHED_KEY, tf.constant(pushed, tf.int32))])}

  got = broadcast_fn(weights, state(2))  # Slots 0 and 1 filled.
  assert isinstance(got, fed_gkd.ModelHistory)
  assert got.model_weights is weights
  np.testing.assert_array_equal(got.history_sum[0], [2., 4.])
  np.testing.assert_array_equal(got.history_sum[1], 11.)
  assert float(got.history_count) == 2.0
  got = broadcast_fn(weights, state(7))  # The ring is full.
  np.testing.assert_array_equal(got.history_sum[0], [6., 9.])
  np.testing.assert_array_equal(got.history_sum[1], 111.)
  assert float(got.history_count) == 3.0
  got = broadcast_fn(weights, state(0))
  np.testing.assert_array_equal(got.history_sum[1], 0.)
  assert float(got.history_count) == 0.0


def test_defaults():
  assert (fed_gkd.GKD_GAMMA.default, fed_gkd.GKD_TEMPERATURE.default,
          fed_gkd.GKD_BUFFER_SIZE.default) == (0.2, 0.5, 5)
  weighting = inspect.signature(fed_gkd.build_fed_gkd).parameters[
      'client_weighting'].default
  assert weighting == tff.learning.ClientWeighting.UNIFORM


@pytest.mark.parametrize('name,value,message', [
    ('gamma', -0.1, 'gamma must be a non-negative number, got -0.1.'),
    ('gamma', float('nan'), 'gamma must be a non-negative number, got nan.'),
    ('temperature', 0.0, 'temperature must be positive, got 0.0.'),
    ('temperature', 'hot', "temperature must be positive, got 'hot'."),
    ('buffer_size', 0, 'buffer_size must be a positive integer, got 0.'),
    ('buffer_size', 2.5, 'buffer_size must be a positive integer, got 2.5.'),
    ('buffer_size', True,
     'buffer_size must be a positive integer, got True.'),
])
def test_rejects_bad_hyper_parameters(name, value, message):
  kwargs = dict(gamma=GAMMA, temperature=TAU, buffer_size=BUFFER)
  kwargs[name] = value
  with pytest.raises(ValueError) as error:
    fed_gkd.build_fed_gkd(tiny.model_fn, client_optimizer_fn=_sgd(0.1),
                          server_optimizer_fn=_sgd(1.0), **kwargs)
  assert str(error.value) == message


def test_rejects_a_server_optimizer_that_is_not_one():
  with pytest.raises(TypeError, match='^server_optimizer_fn must be a '
                     'tff.learning.optimizers.Optimizer, got str.$'):
    fed_gkd.build_fed_gkd(tiny.model_fn, client_optimizer_fn=_sgd(0.1),
                          server_optimizer_fn='sgd')
