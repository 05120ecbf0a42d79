"""FedFOR (Eq. 7): two-model broadcast + first-order penalty, vs NumPy."""

import numpy as np
import pytest
import tensorflow_federated as tff

from tests import tiny
from tff_opt import algorithms

ALPHA = 0.05
CLIENT_LR = 0.1
LOCAL_STEPS = 4
ROUNDS = 3
MODEL_BYTES = (tiny.NUM_FEATURES * tiny.NUM_CLASSES + tiny.NUM_CLASSES) * 4


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


def _build(alpha):
  return algorithms.build_fed_for(
      tiny.model_fn, alpha=alpha, client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(1.0))


@pytest.fixture(scope='module')
def fed_for():
  return _build(ALPHA)


def numpy_fed_for(clients, alpha, rounds=ROUNDS, grad_at_zero=0):
  """FedFOR in NumPy: gradient (alpha/eta) d_i where d_i (w_i - w_t,i) > 0.

  With `grad_at_zero=1` the gradient also holds where d_i (w_i - w_t,i) = 0
  (U'(0) = 1: every coordinate at the first local step).
  """
  w = [t.astype(np.float64) for t in tiny.initial_weights()]
  previous = None
  for _ in range(rounds):
    if previous is None:
      extra = None
    else:
      d = [p - c for p, c in zip(previous, w)]

      def extra(v, d=d, w=w):
        return [alpha / CLIENT_LR * di *
                ((di * (vi - wi) >= 0) if grad_at_zero else
                 (di * (vi - wi) > 0))
                for vi, wi, di in zip(v, w, d)]

    finals = [tiny.local_sgd(w, x, y, CLIENT_LR, LOCAL_STEPS, extra_grad=extra)
              for x, y in clients]
    previous = w
    # Algorithm 1's plain mean of the clients' models (the builder's
    # default, fed_for.SPEC.client_weighting).
    w = tiny.weighted_mean(finals, [1.0] * len(clients))
  return w


def test_matches_numpy_fed_for(fed_for):
  clients = tiny.make_clients()
  state, outputs = tiny.run_rounds(fed_for, clients,
      rounds=ROUNDS, local_steps=LOCAL_STEPS)
  expected = numpy_fed_for(clients, ALPHA)
  for got, want in zip(tiny.trainable(fed_for, state), expected):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  fed_avg = numpy_fed_for(clients, 0.0)
  assert np.abs(expected[0] - fed_avg[0]).max() > 1e-3  # the penalty acted
  # Two models and the has_previous byte down, one delta up (Table 1).
  assert outputs[-1].metrics['communication'] == {
      'bytes_server_to_client': 2 * MODEL_BYTES + 1,
      'bytes_client_to_server': MODEL_BYTES}


def test_first_round_is_fed_avg(fed_for):
  clients = tiny.make_clients(seed=2)
  state, _ = tiny.run_rounds(fed_for, clients,
      rounds=1, local_steps=LOCAL_STEPS)
  for got, want in zip(tiny.trainable(fed_for, state),
                       numpy_fed_for(clients, 0.0, rounds=1)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_alpha_zero_is_fed_avg():
  process = _build(0.0)
  clients = tiny.make_clients(seed=2)
  state, _ = tiny.run_rounds(process, clients,
      rounds=ROUNDS, local_steps=LOCAL_STEPS)
  for got, want in zip(tiny.trainable(process, state),
                       numpy_fed_for(clients, 0.0)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_rejects_negative_alpha():
  with pytest.raises(ValueError, match=r'^alpha must be a non-negative '
                     r'number, got -1\.0\.$'):
    _build(-1.0)


def test_grad_at_zero_one_matches_numpy_and_differs_from_relu():
  """U'(0) = 1: the first local step of round 2 already moves by -alpha d."""
  process = algorithms.build_fed_for(
      tiny.model_fn, alpha=ALPHA, client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(1.0), grad_at_zero=1)
  clients = tiny.make_clients()
  state, _ = tiny.run_rounds(process, clients, rounds=ROUNDS,
                             local_steps=LOCAL_STEPS)
  expected = numpy_fed_for(clients, ALPHA, grad_at_zero=1)
  for got, want in zip(tiny.trainable(process, state), expected):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  relu = numpy_fed_for(clients, ALPHA)
  assert np.abs(expected[0] - relu[0]).max() > 1e-4


def test_grad_at_zero_must_be_zero_or_one():
  with pytest.raises(ValueError, match=r'^grad_at_zero must be an integer '
                     r'in \[0, 1\], got 2\.$'):
    algorithms.build_fed_for(
        tiny.model_fn, alpha=ALPHA, client_optimizer_fn=_sgd(CLIENT_LR),
        server_optimizer_fn=_sgd(1.0), grad_at_zero=2)
