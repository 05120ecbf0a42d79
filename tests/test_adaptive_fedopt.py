"""FedAdagrad, FedAdam and FedYogi, whole processes, against NumPy.

`build_fed_opt` with the paper's server optimizers runs a few rounds on the
tiny model; the weights and the server optimizer's moments must be those of
Reddi et al.'s Algorithm 2 written in NumPy here: client SGD, the
example-weighted mean Delta_t of the clients' `final - initial`, no bias
correction, v_{-1} = tau**2, and x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau).
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny
from tff_opt import algorithms
from tff_opt.round import optimizers

CLIENT_LR = 0.1
SERVER_LR = 0.05
TAU = 0.01
BETA_1 = 0.9
BETA_2 = 0.99
LOCAL_STEPS = 3
ROUNDS = 3

BUILDERS = {
    'adagrad': lambda: optimizers.build_fed_adagrad(SERVER_LR, tau=TAU),
    'adam': lambda: optimizers.build_fed_adam(
        SERVER_LR, tau=TAU, beta_1=BETA_1, beta_2=BETA_2),
    'yogi': lambda: optimizers.build_fed_yogi(
        SERVER_LR, tau=TAU, beta_1=BETA_1, beta_2=BETA_2),
}


def numpy_algorithm_2(clients, rule, *, rounds=ROUNDS, v_start=TAU**2,
                      bias_correction=False):
  """Reddi et al. Algorithm 2 in float64: the weights, m and v.

  `v_start` (v_{-1}) and `bias_correction` (Adam's, which the paper drops)
  are there to show the test tells those choices apart.
  """
  beta_1 = 0.0 if rule == 'adagrad' else BETA_1  # Appendix D: FedAdagrad.
  x = [t.astype(np.float64) for t in tiny.initial_weights()]
  m = [np.zeros_like(t) for t in x]
  v = [np.full_like(t, v_start) for t in x]
  for t in range(1, rounds + 1):
    finals = [tiny.local_sgd(x, cx, cy, CLIENT_LR, LOCAL_STEPS)
              for cx, cy in clients]
    delta = tiny.weighted_mean([[f - w for f, w in zip(final, x)]
                                for final in finals],
                               [len(cy) for _, cy in clients])
    m = [beta_1 * a + (1 - beta_1) * d for a, d in zip(m, delta)]
    if rule == 'adagrad':
      v = [a + d**2 for a, d in zip(v, delta)]
    elif rule == 'adam':
      v = [BETA_2 * a + (1 - BETA_2) * d**2 for a, d in zip(v, delta)]
    else:
      v = [a - (1 - BETA_2) * d**2 * np.sign(a - d**2)
           for a, d in zip(v, delta)]
    if bias_correction:
      steps = [(a / (1 - beta_1**t)) / (np.sqrt(b / (1 - BETA_2**t)) + TAU)
               for a, b in zip(m, v)]
    else:
      steps = [a / (np.sqrt(b) + TAU) for a, b in zip(m, v)]
    x = [w + SERVER_LR * s for w, s in zip(x, steps)]
  return x, m, v


def _moments(state):
  """(m, v) from the finalizer's optimizer state, as lists of arrays."""
  found = {}

  def visit(value):
    if isinstance(value, dict) or hasattr(value, 'items'):
      for key, item in value.items():
        if key in (optimizers.FIRST_MOMENT_KEY, optimizers.SECOND_MOMENT_KEY):
          found[key] = [np.asarray(t) for t in tf.nest.flatten(item)]
        else:
          visit(item)
    elif isinstance(value, (list, tuple)):
      for item in value:
        visit(item)

  visit(state.finalizer)
  return found[optimizers.FIRST_MOMENT_KEY], found[
      optimizers.SECOND_MOMENT_KEY]


@pytest.mark.parametrize('rule', sorted(BUILDERS))
def test_process_matches_numpy_algorithm_2(rule):
  process = algorithms.build_fed_opt(
      tiny.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(CLIENT_LR),
      server_optimizer_fn=BUILDERS[rule]())
  clients = tiny.make_clients(seed=9)
  state, _ = tiny.run_rounds(process, clients, rounds=ROUNDS,
                             local_steps=LOCAL_STEPS)
  x, m, v = numpy_algorithm_2(clients, rule)
  for got, want in zip(tiny.trainable(process, state), x, strict=True):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  got_m, got_v = _moments(state)
  # TFF hands the optimizer g = -Delta_t (gradient form): m flips sign.
  for got, want in zip(got_m, m, strict=True):
    np.testing.assert_allclose(got, -want, rtol=1e-4, atol=1e-7)
  for got, want in zip(got_v, v, strict=True):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-9)
  # The checks tell the rule's choices apart: v_{-1} = 0 instead of tau**2,
  # Adam's bias correction, or FedAvg (x + Delta) ends elsewhere.
  others = [numpy_algorithm_2(clients, rule, v_start=0.0)[0],
            tiny.numpy_fed_prox(clients, 0.0, rounds=ROUNDS, lr=CLIENT_LR,
                                local_steps=LOCAL_STEPS)]
  if rule != 'adagrad':
    others.append(numpy_algorithm_2(clients, rule, bias_correction=True)[0])
  for other in others:
    assert np.abs(other[0] - x[0]).max() > 1e-3
