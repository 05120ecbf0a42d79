"""FedProx: the proximal penalty through the shared client work, vs NumPy."""

import numpy as np
import pytest
import tensorflow_federated as tff

from tests import tiny
from tff_opt import algorithms

MU = 0.5
CLIENT_LR = 0.1
LOCAL_STEPS = 3
ROUNDS = 3


def _numpy_fed_prox(clients, mu):
  return tiny.numpy_fed_prox(clients, mu, rounds=ROUNDS, lr=CLIENT_LR,
                             local_steps=LOCAL_STEPS)
MODEL_BYTES = (tiny.NUM_FEATURES * tiny.NUM_CLASSES + tiny.NUM_CLASSES) * 4


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


@pytest.fixture(scope='module')
def fed_prox():
  return algorithms.build_fed_prox(
      tiny.model_fn, mu=MU, client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(1.0))


def test_matches_numpy_fed_prox(fed_prox):
  clients = tiny.make_clients()
  state, outputs = tiny.run_rounds(fed_prox, clients,
      rounds=ROUNDS, local_steps=LOCAL_STEPS)
  expected = _numpy_fed_prox(clients, MU)
  for got, want in zip(tiny.trainable(fed_prox, state), expected):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  # The proximal term did act: FedAvg (mu = 0) ends elsewhere.
  fed_avg = _numpy_fed_prox(clients, 0.0)
  assert np.abs(expected[0] - fed_avg[0]).max() > 1e-3
  assert outputs[-1].metrics['communication'] == {
      'bytes_server_to_client': MODEL_BYTES,
      'bytes_client_to_server': MODEL_BYTES}


def test_sign_of_proximal_term_is_textbook_not_tff_0_87(fed_prox):
  """TFF 0.87's build_weighted_fed_prox equals textbook FedProx with -mu.

  Ours must pull towards w_t: it equals NumPy with +mu (checked above) and
  differs from TFF's, which this test pins to -mu.
  """
  clients = tiny.make_clients(num_clients=3, seed=4)
  tff_process = tff.learning.algorithms.build_weighted_fed_prox(
      tiny.model_fn, proximal_strength=MU,
      client_optimizer_fn=_sgd(CLIENT_LR), server_optimizer_fn=_sgd(1.0))
  theirs, _ = tiny.run_rounds(tff_process, clients,
      rounds=ROUNDS, local_steps=LOCAL_STEPS)
  ours, _ = tiny.run_rounds(fed_prox, clients,
      rounds=ROUNDS, local_steps=LOCAL_STEPS)
  plus, minus = _numpy_fed_prox(clients, MU), _numpy_fed_prox(clients, -MU)
  for got, want in zip(tiny.trainable(fed_prox, ours), plus):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  for got, want in zip(tiny.trainable(tff_process, theirs), minus):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  assert np.abs(plus[0] - minus[0]).max() > 1e-3


@pytest.mark.parametrize('mu', [-0.1, float('nan'), 'big'])
def test_rejects_bad_mu(mu):
  with pytest.raises(ValueError, match=r'^mu must be a non-negative number, '
                     rf'got {mu!r}\.$'.replace('(', r'\(')):
    algorithms.build_fed_prox(
        tiny.model_fn, mu=mu, client_optimizer_fn=_sgd(0.1),
        server_optimizer_fn=_sgd(1.0))
