"""FedDyn: client states g_k, server h and weights against NumPy; errors."""

import numpy as np
import pytest
import tensorflow_federated as tff

from tests import tiny
from tff_opt import algorithms
from tff_opt.algorithms import fed_dyn as fed_dyn_lib
from tff_opt.program import registry
from tff_opt.round import client_states

ALPHA = 0.3
CLIENT_LR = 0.1
LOCAL_STEPS = 3
NUM_CLIENTS = 5
SIZES = (6, 10, 4, 7, 5)
# Each round's clients: a changing sample, clients seen again and new ones.
SCHEDULE = ([0, 1, 2], [1, 3], [0, 1, 4], [2, 3], [4, 0])


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


@pytest.fixture(scope='module')
def fed_dyn():
  return algorithms.build_fed_dyn(
      tiny.model_fn, alpha=ALPHA, num_clients=NUM_CLIENTS,
      client_optimizer_fn=_sgd(CLIENT_LR), server_optimizer_fn=_sgd(1.0))


def numpy_fed_dyn(clients, schedule, weights=None):
  """Acar et al. Algorithm 1 in NumPy, per round: (theta, h, {k: g_k})."""
  theta = [t.astype(np.float64) for t in tiny.initial_weights()]
  h = [np.zeros_like(t) for t in theta]
  g = {}
  history = []
  for sampled in schedule:
    finals = []
    for k in sampled:
      x, y = clients[k]
      g_k = g.get(k, [np.zeros_like(t) for t in theta])
      final = tiny.local_sgd(
          theta, x, y, CLIENT_LR, LOCAL_STEPS,
          extra_grad=lambda v, g_k=g_k, theta=theta: [
              -a + ALPHA * (b - c) for a, b, c in zip(g_k, v, theta)])
      g[k] = [a - ALPHA * (f - c) for a, f, c in zip(g_k, final, theta)]
      finals.append(final)
    h = [a - ALPHA / NUM_CLIENTS * sum(f[j] - theta[j] for f in finals)
         for j, a in enumerate(h)]
    mean = tiny.weighted_mean(
        finals, [1.0] * len(sampled) if weights is None else
        [weights(k) for k in sampled])
    theta = [m - a / ALPHA for m, a in zip(mean, h)]
    history.append(([t.copy() for t in theta], [t.copy() for t in h],
                    {k: [t.copy() for t in v] for k, v in g.items()}))
  return history


def test_matches_numpy_over_rounds_with_changing_clients(fed_dyn):
  assert client_states.is_client_stateful(fed_dyn)
  clients = tiny.make_clients(NUM_CLIENTS, sizes=SIZES)
  want = numpy_fed_dyn(clients, SCHEDULE)
  state = tiny.set_weights(fed_dyn, fed_dyn.initialize(),
                           tiny.initial_weights())
  store = {}
  for sampled, (theta, h, g) in zip(SCHEDULE, want):
    output, new_states = fed_dyn.next(
        state, tiny.full_batch_datasets([clients[k] for k in sampled],
                                        LOCAL_STEPS),
        [store.get(k, fed_dyn.initial_client_state()) for k in sampled])
    store.update(zip(sampled, new_states))
    state = output.state
    np.testing.assert_allclose(
        np.concatenate([t.ravel() for t in tiny.trainable(fed_dyn, state)]),
        np.concatenate([t.ravel() for t in theta]), rtol=1e-4, atol=1e-5)
    got_h = state.aggregator['h']
    for a, b in zip(got_h, h):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert sorted(store) == sorted(g)
    for k, g_k in g.items():
      for a, b in zip(store[k][fed_dyn_lib.LOCAL_GRADIENT_KEY], g_k):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
  # Something happened: h and every g_k moved away from zero.
  assert max(np.abs(t).max() for t in h) > 1e-3
  assert all(max(np.abs(t).max() for t in g_k) > 1e-3 for g_k in g.values())


def test_example_weighted_mean():
  process = algorithms.build_fed_dyn(
      tiny.model_fn, alpha=ALPHA, num_clients=NUM_CLIENTS,
      client_optimizer_fn=_sgd(CLIENT_LR), server_optimizer_fn=_sgd(1.0),
      client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES)
  clients = tiny.make_clients(NUM_CLIENTS, sizes=SIZES)
  schedule = SCHEDULE[:2]
  want = numpy_fed_dyn(clients, schedule, weights=lambda k: SIZES[k])
  state = tiny.set_weights(process, process.initialize(),
                           tiny.initial_weights())
  store = {}
  for sampled in schedule:
    output, new_states = process.next(
        state, tiny.full_batch_datasets([clients[k] for k in sampled],
                                        LOCAL_STEPS),
        [store.get(k, process.initial_client_state()) for k in sampled])
    store.update(zip(sampled, new_states))
    state = output.state
  for a, b in zip(tiny.trainable(process, state), want[-1][0]):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('alpha', [0, -0.5, float('nan')])
def test_alpha_must_be_positive(alpha):
  with pytest.raises(ValueError) as e:
    algorithms.build_fed_dyn(
        tiny.model_fn, alpha=alpha, num_clients=3,
        client_optimizer_fn=_sgd(0.1), server_optimizer_fn=_sgd(1.0))
  assert str(e.value) == f'alpha must be positive, got {alpha}.'


def test_num_clients_must_be_positive():
  with pytest.raises(ValueError, match=r'^num_clients must be a positive '
                     r'integer \(the number of clients in the population\), '
                     r'got 0\.$'):
    algorithms.build_fed_dyn(
        tiny.model_fn, alpha=0.1, num_clients=0,
        client_optimizer_fn=_sgd(0.1), server_optimizer_fn=_sgd(1.0))


def test_registered_with_its_flag():
  algorithm = registry.ALGORITHMS['feddyn']
  assert algorithm.flags == ('feddyn_alpha',)
