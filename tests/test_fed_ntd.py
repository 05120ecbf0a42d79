"""FedNTD: not-true distillation through the shared client work, vs NumPy."""

import numpy as np
import pytest
import tensorflow_federated as tff

from tests import tiny
from tff_opt.algorithms import fed_ntd

BETA = 0.3
TAU = 2.0  # Not the paper's 1, so that the tau^2 and 1/tau factors show.
CLIENT_LR = 0.1
LOCAL_STEPS = 3
ROUNDS = 3
MODEL_BYTES = (tiny.NUM_FEATURES * tiny.NUM_CLASSES + tiny.NUM_CLASSES) * 4


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


def _softmax(z):
  z = z - z.max(axis=-1, keepdims=True)
  e = np.exp(z)
  return e / e.sum(axis=-1, keepdims=True)


def _not_true_softmax(z, y, tau):
  """q~^tau: softmax over the not-true classes, 0 at the true one."""
  z = z / tau
  z = np.where(np.eye(z.shape[1], dtype=bool)[y], -np.inf, z)
  return _softmax(z)


def numpy_fed_ntd(clients, beta, tau=TAU, rounds=ROUNDS):
  """FedNTD in NumPy from `tiny.initial_weights()`: full-batch client SGD on
  CE + beta tau^2 KL(q~_g || q~), example-weighted mean, server SGD lr 1.

  The loss's logit gradient (pinned in `test_losses.py`):
  (softmax(z) - onehot) / N + beta * tau * (q~^tau(z) - q~^tau(z_g)) / N.
  """
  w = [t.astype(np.float64) for t in tiny.initial_weights()]
  for _ in range(rounds):
    finals = []
    for x, y in clients:
      x = x.astype(np.float64)
      onehot = np.eye(tiny.NUM_CLASSES)[y]
      q_g = _not_true_softmax(x @ w[0] + w[1], y, tau)
      wk = [a.copy() for a in w]
      for _ in range(LOCAL_STEPS):
        z = x @ wk[0] + wk[1]
        dz = ((_softmax(z) - onehot) +
              beta * tau * (_not_true_softmax(z, y, tau) - q_g)) / len(y)
        wk = [a - CLIENT_LR * g for a, g in zip(wk, [x.T @ dz,
                                                     dz.sum(axis=0)])]
      finals.append(wk)
    w = tiny.weighted_mean(finals, [len(y) for _, y in clients])
  return w


@pytest.fixture(scope='module')
def process():
  return fed_ntd.build_fed_ntd(
      tiny.model_fn, beta=BETA, temperature=TAU,
      client_optimizer_fn=_sgd(CLIENT_LR), server_optimizer_fn=_sgd(1.0))


def test_matches_numpy(process):
  clients = tiny.make_clients()
  state, outputs = tiny.run_rounds(process, clients, rounds=ROUNDS,
                                   local_steps=LOCAL_STEPS)
  want = numpy_fed_ntd(clients, BETA)
  for got, w in zip(tiny.trainable(process, state), want):
    np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
  # The distillation acted: FedAvg (beta = 0) ends elsewhere, and so does
  # the term without its tau factors (tau = 1 in the reference).
  fed_avg = tiny.numpy_fed_prox(clients, 0.0, rounds=ROUNDS, lr=CLIENT_LR,
                                local_steps=LOCAL_STEPS)
  np.testing.assert_allclose(numpy_fed_ntd(clients, 0.0)[0], fed_avg[0],
                             rtol=1e-12)
  assert np.abs(want[0] - fed_avg[0]).max() > 1e-3
  assert np.abs(want[0] - numpy_fed_ntd(clients, BETA, tau=1.0)[0]).max() > (
      1e-4)
  # The model alone each way, as FedAvg.
  assert outputs[-1].metrics['communication'] == {
      'bytes_server_to_client': MODEL_BYTES,
      'bytes_client_to_server': MODEL_BYTES}


def test_beta_zero_is_fed_avg():
  process = fed_ntd.build_fed_ntd(
      tiny.model_fn, beta=0.0, temperature=TAU,
      client_optimizer_fn=_sgd(CLIENT_LR), server_optimizer_fn=_sgd(1.0))
  clients = tiny.make_clients(seed=3)
  state, _ = tiny.run_rounds(process, clients, rounds=2,
                             local_steps=LOCAL_STEPS)
  want = tiny.numpy_fed_prox(clients, 0.0, rounds=2, lr=CLIENT_LR,
                             local_steps=LOCAL_STEPS)
  for got, w in zip(tiny.trainable(process, state), want):
    np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_defaults_are_the_fedadc_papers():
  assert (fed_ntd.NTD_BETA.default, fed_ntd.NTD_TEMPERATURE.default) == (
      0.3, 1.0)


@pytest.mark.parametrize('name,value,message', [
    ('beta', -0.1, 'beta must be a non-negative number, got -0.1.'),
    ('beta', float('nan'), 'beta must be a non-negative number, got nan.'),
    ('beta', 'big', "beta must be a non-negative number, got 'big'."),
    ('temperature', 0.0, 'temperature must be positive, got 0.0.'),
    ('temperature', float('inf'), 'temperature must be positive, got inf.'),
])
def test_rejects_bad_hyper_parameters(name, value, message):
  kwargs = dict(beta=BETA, temperature=TAU)
  kwargs[name] = value
  with pytest.raises(ValueError) as error:
    fed_ntd.build_fed_ntd(
        tiny.model_fn, client_optimizer_fn=_sgd(0.1),
        server_optimizer_fn=_sgd(1.0), **kwargs)
  assert str(error.value) == message
