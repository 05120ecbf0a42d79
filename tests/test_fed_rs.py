"""FedRS: the restricted softmax through the shared client work, vs NumPy."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny
from tff_opt.algorithms import _common
from tff_opt.algorithms import fed_rs

ALPHA = 0.5
CLIENT_LR = 0.3
STEPS = (2, 3, 2)
ROUNDS = 3
MODEL_BYTES = (tiny.NUM_FEATURES * tiny.NUM_CLASSES + tiny.NUM_CLASSES) * 4


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


def _softmax(z):
  z = z - z.max(axis=-1, keepdims=True)
  e = np.exp(z)
  return e / e.sum(axis=-1, keepdims=True)


def _clients(label_sets, seed):
  rng = np.random.default_rng(seed)
  return [(rng.normal(size=(len(y), tiny.NUM_FEATURES)).astype(np.float32),
           np.asarray(y, np.int32)) for y in label_sets]


# Client 0 never sees class 2, client 1 sees all, client 2 only class 1.
PARTIAL = [[0, 1, 1, 0, 1], [0, 1, 2, 2, 2, 1, 0], [1, 1, 1]]
# Every client sees every class.
FULL = [[0, 1, 2, 2, 0], [2, 1, 0, 0, 1, 2, 2], [1, 0, 2]]


def numpy_fed_rs(clients, alpha, rounds=ROUNDS):
  """FedRS in NumPy from `tiny.initial_weights()`: client SGD on CE(s * z,
  y), s_c = 1 for the client's classes else alpha, example-weighted mean,
  server SGD lr 1 (client k takes STEPS[k] full-batch steps). Logit
  gradient: s * (softmax(s * z) - onehot) / N."""
  w = [t.astype(np.float64) for t in tiny.initial_weights()]
  for _ in range(rounds):
    finals = []
    for (x, y), steps in zip(clients, STEPS):
      x = x.astype(np.float64)
      onehot = np.eye(tiny.NUM_CLASSES)[y]
      s = np.where(np.bincount(y, minlength=tiny.NUM_CLASSES) > 0, 1.0, alpha)
      wk = [a.copy() for a in w]
      for _ in range(steps):
        z = x @ wk[0] + wk[1]
        dz = s * (_softmax(s * z) - onehot) / len(y)
        wk = [a - CLIENT_LR * g for a, g in zip(wk, [x.T @ dz,
                                                     dz.sum(axis=0)])]
      finals.append(wk)
    # NUM_EXAMPLES weighs a client by the examples it trained on (each of
    # its `steps` passes counts).
    w = tiny.weighted_mean(finals, [len(y) * h for (_, y), h in
                                    zip(clients, STEPS)])
  return w


def _run(process, clients, rounds=ROUNDS):
  state = tiny.set_weights(process, process.initialize(),
                           tiny.initial_weights())
  for _ in range(rounds):
    datasets = [tf.data.Dataset.from_tensors(c).repeat(h)
                for c, h in zip(clients, STEPS)]
    output = process.next(state, datasets)
    state = output.state
  return state, output


@pytest.fixture(scope='module')
def process():
  return fed_rs.build_fed_rs(
      tiny.model_fn, alpha=ALPHA, client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(1.0))


def test_matches_numpy_with_missing_classes(process):
  clients = _clients(PARTIAL, seed=4)
  state, output = _run(process, clients)
  want = numpy_fed_rs(clients, ALPHA)
  for got, w in zip(tiny.trainable(process, state), want):
    np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
  # The restriction acted: FedAvg (alpha = 1) ends elsewhere.
  assert np.abs(want[0] - numpy_fed_rs(clients, 1.0)[0]).max() > 1e-3
  assert output.metrics['communication'] == {
      'bytes_server_to_client': MODEL_BYTES,
      'bytes_client_to_server': MODEL_BYTES}


def test_clients_with_every_class_run_fed_avg(process):
  clients = _clients(FULL, seed=5)
  state, _ = _run(process, clients)
  fed_avg = numpy_fed_rs(clients, 1.0)
  for got, w in zip(tiny.trainable(process, state), fed_avg):
    np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_num_classes_and_default():
  assert _common.num_classes_of(tiny.model_fn) == tiny.NUM_CLASSES
  assert fed_rs.FEDRS_ALPHA.default == 0.5


@pytest.mark.parametrize('alpha,shown', [
    (-0.1, '-0.1'), (1.5, '1.5'), (float('nan'), 'nan'), ('big', "'big'"),
    (True, 'True')])
def test_rejects_bad_alpha(alpha, shown):
  with pytest.raises(ValueError) as error:
    fed_rs.build_fed_rs(tiny.model_fn, alpha=alpha,
                        client_optimizer_fn=_sgd(0.1),
                        server_optimizer_fn=_sgd(1.0))
  assert str(error.value) == f'alpha must be in [0, 1], got {shown}.'


def test_recipe_rejects_bad_num_classes():
  with pytest.raises(ValueError, match=r'^num_classes must be an integer '
                     r'>= 2, got 1\.$'):
    fed_rs.fed_rs_recipe(alpha=0.5, num_classes=1,
                         server_optimizer_fn=_sgd(1.0))
