"""MOON: a NumPy reference of its rounds, FedAvg at mu = 0, client state,
kill-and-resume, argument checks.

The model is small enough to differentiate by hand: 4 features -> the
'projection' dense layer (z, 5 wide, no activation) -> dense 3 logits.
"""


import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny
from tff_opt.algorithms import fed_opt
from tff_opt.algorithms import moon

PROJECTION_DIM = 5
CLIENT_LR = 0.1
LOCAL_STEPS = 3
MU = 2.0
TEMPERATURE = 0.5
SHAPES = [(tiny.NUM_FEATURES, PROJECTION_DIM), (PROJECTION_DIM,),
          (PROJECTION_DIM, tiny.NUM_CLASSES), (tiny.NUM_CLASSES,)]
MODEL_BYTES = sum(int(np.prod(s)) for s in SHAPES) * 4


def model_fn():
  keras_model = tf.keras.Sequential([
      tf.keras.Input(shape=(tiny.NUM_FEATURES,)),
      tf.keras.layers.Dense(PROJECTION_DIM, name='projection'),
      tf.keras.layers.Dense(tiny.NUM_CLASSES),
  ])
  return tff.learning.models.from_keras_model(
      keras_model,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=tiny.INPUT_SPEC)


def initial_weights(seed=1):
  rng = np.random.default_rng(seed)
  return [rng.normal(scale=0.5, size=s).astype(np.float32) for s in SHAPES]


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


def _build(mu):
  return moon.build_moon(model_fn, mu=mu, temperature=TEMPERATURE,
                         client_optimizer_fn=_sgd(CLIENT_LR),
                         server_optimizer_fn=_sgd(1.0))


@pytest.fixture(scope='module')
def moon_process():
  return _build(MU)


@pytest.fixture(scope='module')
def moon_mu_zero():
  return _build(0.0)


# --- The NumPy reference ------------------------------------------------------


def _representation(w, x):
  return x @ w[0] + w[1]


def _cosine(u, v):
  return (u * v).sum(-1) / (np.linalg.norm(u, axis=-1) *
                            np.linalg.norm(v, axis=-1))


def numpy_loss(w, x, y, w_glob, w_prev, mu, tau):
  """CE + mu * l_con (MOON's local loss as printed), float64."""
  z = _representation(w, x)
  logits = z @ w[2] + w[3]
  logits = logits - logits.max(axis=1, keepdims=True)
  log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
  ce = -log_p[np.arange(len(y)), y].mean()
  positive = np.exp(_cosine(z, _representation(w_glob, x)) / tau)
  negative = np.exp(_cosine(z, _representation(w_prev, x)) / tau)
  return ce + mu * np.mean(-np.log(positive / (positive + negative)))


def numpy_grad(w, x, y, w_glob, w_prev, mu, tau):
  """The gradient of `numpy_loss` with respect to w, by hand."""
  n = len(y)
  z = _representation(w, x)
  logits = z @ w[2] + w[3]
  p = np.exp(logits - logits.max(axis=1, keepdims=True))
  p /= p.sum(axis=1, keepdims=True)
  p[np.arange(n), y] -= 1.0
  p /= n  # d CE / d logits
  dz = p @ w[2].T
  z_norm = np.linalg.norm(z, axis=-1, keepdims=True)

  def d_cos(c):  # d cos(z, c) / dz = (c/|c| - cos(z, c) z/|z|) / |z|
    c_hat = c / np.linalg.norm(c, axis=-1, keepdims=True)
    return (c_hat - _cosine(z, c)[:, None] * z / z_norm) / z_norm

  z_glob, z_prev = _representation(w_glob, x), _representation(w_prev, x)
  s_g, s_p = _cosine(z, z_glob), _cosine(z, z_prev)
  # d/dz softplus((s_p - s_g)/tau) = sigmoid((s_p - s_g)/tau)/tau (ds_p - ds_g)
  weight = 1.0 / (1.0 + np.exp(-(s_p - s_g) / tau)) / tau
  dz += mu * weight[:, None] * (d_cos(z_prev) - d_cos(z_glob)) / n
  return [x.T @ dz, dz.sum(0), z.T @ p, p.sum(0)]


def numpy_moon(clients, schedule, mu, *, tau=TEMPERATURE):
  """MOON in NumPy (float64), full-batch local SGD, example weighting.

  Returns:
    (final global weights, {client: its last local model}).
  """
  w = [t.astype(np.float64) for t in initial_weights()]
  previous = {}
  for sampled in schedule:
    finals = []
    for k in sampled:
      x, y = clients[k]
      x = x.astype(np.float64)
      w_prev = previous.get(k, w)  # A new client: the global model.
      local = [t.copy() for t in w]
      for _ in range(LOCAL_STEPS):
        g = numpy_grad(local, x, y, w, w_prev, mu, tau)
        local = [a - CLIENT_LR * b for a, b in zip(local, g)]
      previous[k] = local
      finals.append(local)
    w = tiny.weighted_mean(finals, [len(clients[k][1]) for k in sampled])
  return w, previous


def test_the_reference_gradient_matches_finite_differences():
  rng = np.random.default_rng(0)
  x, y = tiny.make_clients(1, seed=2, sizes=(6,))[0]
  x = x.astype(np.float64)
  w, w_glob, w_prev = ([rng.normal(scale=0.5, size=s) for s in SHAPES]
                       for _ in range(3))
  args = (x, y, w_glob, w_prev, MU, TEMPERATURE)
  analytic = numpy_grad(w, *args)
  eps = 1e-6
  for i, tensor in enumerate(w):
    numeric = np.zeros_like(tensor)
    for j in np.ndindex(tensor.shape):
      plus = [t.copy() for t in w]
      minus = [t.copy() for t in w]
      plus[i][j] += eps
      minus[i][j] -= eps
      numeric[j] = (numpy_loss(plus, *args) -
                    numpy_loss(minus, *args)) / (2 * eps)
    np.testing.assert_allclose(analytic[i], numeric, rtol=1e-5, atol=1e-8)


# --- The process against the reference -------------------------------------


def _run(process, clients, schedule):
  state = process.set_model_weights(
      process.initialize(),
      tff.learning.models.ModelWeights(trainable=initial_weights(),
                                       non_trainable=[]))
  store = {}
  output = None
  for sampled in schedule:
    output, new_states = process.next(
        state, tiny.full_batch_datasets([clients[k] for k in sampled],
                                        LOCAL_STEPS),
        [store.get(k, process.initial_client_state()) for k in sampled])
    store.update(zip(sampled, new_states))
    state = output.state
  return state, store, output


def _trainable(process, state):
  return [np.asarray(w) for w in process.get_model_weights(state).trainable]


RETURNING = [[0, 1, 2], [1, 2, 3], [3, 0, 2]]  # Clients 0-3 come back.


def test_matches_numpy_moon_with_returning_clients(moon_process):
  clients = tiny.make_clients(num_clients=4, seed=9, sizes=(6, 10, 4, 8))
  state, store, output = _run(moon_process, clients, RETURNING)
  w, previous = numpy_moon(clients, RETURNING, MU)
  for got, want in zip(_trainable(moon_process, state), w):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  for k in range(4):
    assert bool(store[k]['initialized'])
    for got, want in zip(store[k]['previous_model'], previous[k]):
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  # The contrastive term moved the model: it is not FedAvg's.
  fed_avg, _ = numpy_moon(clients, RETURNING, 0.0)
  assert max(np.abs(a - b).max() for a, b in zip(w, fed_avg)) > 1e-3
  # The client's state never travels: FedAvg's communication.
  assert output.metrics['communication'] == {
      'bytes_server_to_client': MODEL_BYTES,
      'bytes_client_to_server': MODEL_BYTES}


def test_equals_fed_avg_when_every_client_is_new(moon_process):
  clients = tiny.make_clients(num_clients=6, seed=10, sizes=(6, 10, 4))
  schedule = [[0, 1, 2], [3, 4, 5]]
  state, store, _ = _run(moon_process, clients, schedule)
  fed_avg, previous = numpy_moon(clients, schedule, 0.0)
  for got, want in zip(_trainable(moon_process, state), fed_avg):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  for got, want in zip(store[4]['previous_model'], previous[4]):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_mu_zero_equals_fed_avg(moon_mu_zero):
  clients = tiny.make_clients(num_clients=4, seed=9, sizes=(6, 10, 4, 8))
  state, store, _ = _run(moon_mu_zero, clients, RETURNING)
  fed_avg, _ = numpy_moon(clients, RETURNING, 0.0)
  got = _trainable(moon_mu_zero, state)
  for a, b in zip(got, fed_avg):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  assert bool(store[3]['initialized'])
  # The same as TFF-opt's own FedAvg (FedOpt, server SGD at 1), to float
  # rounding.
  fed_opt_process = fed_opt.build_fed_opt(
      model_fn, client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(1.0))
  fed_state = fed_opt_process.set_model_weights(
      fed_opt_process.initialize(),
      tff.learning.models.ModelWeights(trainable=initial_weights(),
                                       non_trainable=[]))
  for sampled in RETURNING:
    fed_state = fed_opt_process.next(
        fed_state, tiny.full_batch_datasets([clients[k] for k in sampled],
                                            LOCAL_STEPS)).state
  for a, b in zip(got, _trainable(fed_opt_process, fed_state)):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


# --- Argument checks ---------------------------------------------------------


@pytest.mark.parametrize('kwargs, message', [
    (dict(mu=-1.0), r'^mu must be a non-negative number, got -1\.0\.$'),
    (dict(mu=float('nan')), r'^mu must be a non-negative number, got nan\.$'),
    (dict(mu=True), r'^mu must be a non-negative number, got True\.$'),
    (dict(mu=1.0, temperature=0.0),
     r'^temperature must be positive, got 0\.0\.$'),
    (dict(mu=1.0, temperature=-0.5),
     r'^temperature must be positive, got -0\.5\.$'),
    (dict(mu=1.0, temperature=float('inf')),
     r'^temperature must be positive, got inf\.$'),
], ids=['mu_negative', 'mu_nan', 'mu_bool', 'temperature_zero',
        'temperature_negative', 'temperature_inf'])
def test_bad_hyper_parameters_raise_naming_them(kwargs, message):
  with pytest.raises(ValueError, match=message):
    moon.build_moon(model_fn, client_optimizer_fn=_sgd(0.1),
                    server_optimizer_fn=_sgd(1.0), **kwargs)
  with pytest.raises(ValueError, match=message):
    moon.moon_recipe(server_optimizer_fn=_sgd(1.0), **kwargs)


def test_a_model_without_projection_layer_is_refused():
  with pytest.raises(ValueError, match=(
      r"^MOON needs the model to have a Keras layer named 'projection'")):
    moon.build_moon(tiny.model_fn, mu=1.0, client_optimizer_fn=_sgd(0.1),
                    server_optimizer_fn=_sgd(1.0))


@pytest.mark.parametrize('which', ['client_optimizer_fn',
                                   'server_optimizer_fn'])
def test_an_optimizer_that_is_not_one_is_refused(which):
  kwargs = dict(client_optimizer_fn=_sgd(0.1), server_optimizer_fn=_sgd(1.0))
  kwargs[which] = tf.keras.optimizers.SGD(0.1)
  with pytest.raises(TypeError, match=f'^{which} must be a '):
    moon.build_moon(model_fn, mu=1.0, **kwargs)
