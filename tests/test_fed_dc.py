"""FedDC: weights, g, H and client states against NumPy; reductions; resume."""


import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import test_resume_stateful
from tests import tiny
from tff_opt import algorithms
from tff_opt.algorithms import fed_dc
from tff_opt.round import client_states

ALPHA = 0.3
CLIENT_LR = 0.1
LOCAL_STEPS = 3
SIZES = (6, 10, 4, 8)
# N: the population of clients 0..3 (h_j summed over all of them).
NUM_CLIENTS = len(SIZES)
# Clients 1, 2 and 3 come back: their h_i and g_i are used. Three of the
# four clients a round: client 0 is absent in round 2, client 1 in round 3,
# and their h_j still count in (3).
SCHEDULE = ([0, 1, 2], [1, 2, 3], [3, 0, 2])
MODEL_BYTES = (tiny.NUM_FEATURES * tiny.NUM_CLASSES + tiny.NUM_CLASSES) * 4


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


def _build(**kwargs):
  return fed_dc.build_fed_dc(
      tiny.model_fn, **dict(dict(
          alpha=ALPHA, num_clients=NUM_CLIENTS,
          client_optimizer_fn=_sgd(CLIENT_LR),
          server_optimizer_fn=_sgd(1.0)), **kwargs))


@pytest.fixture(scope='module')
def process():
  return _build()


@pytest.fixture(scope='module')
def clients():
  return tiny.make_clients(len(SIZES), seed=3, sizes=SIZES)


def _copy(ws):
  return [np.array(t) for t in ws]


def numpy_fed_dc(clients, schedule, *, alpha=ALPHA, correction=True,
                 weights=None, steps=None, num_clients=NUM_CLIENTS,
                 rule='authors'):
  """Gao et al.'s (1)-(3) in NumPy (module docstring of fed_dc).

  Args:
    clients: [(x, y)].
    schedule: Each round's client ids.
    alpha: The penalized term's strength.
    correction: False drops the gradient correction term (a check that it
      matters).
    weights: Optional id -> weight of the server's means (uniform if None).
    steps: Optional (round index, id) -> K (LOCAL_STEPS if None).
    num_clients: N of (3).
    rule: The server's model: 'authors' (3), mean_S theta_i + (1/N) sum over
      all clients seen of h_j; 'round_drifts', the same sum over the round's
      clients only (absent clients' drifts dropped); 'round_mean', the former
      mean_S (theta_i + h_i) (checks that (3) matters).

  Returns:
    Per round `(w, g, {id: (h_i, g_i)}, H)`, H = sum_j h_j.
  """
  w = [t.astype(np.float64) for t in tiny.initial_weights()]
  g = [np.zeros_like(t) for t in w]
  own = {}
  history = []
  for r, sampled in enumerate(schedule):
    models, drifts, updates = [], [], []
    for k in sampled:
      x, y = clients[k]
      num_steps = LOCAL_STEPS if steps is None else steps(r, k)
      h_k, g_k = own.get(k, ([np.zeros_like(t) for t in w],) * 2)
      scale = (1.0 / (CLIENT_LR * num_steps)
               if correction and num_steps else 0.0)
      theta = tiny.local_sgd(
          w, x, y, CLIENT_LR, num_steps,
          extra_grad=lambda v, h_k=h_k, g_k=g_k, w=w, g=g, s=scale: [
              alpha * (a + b - c) + s * (d - e)
              for a, b, c, d, e in zip(v, h_k, w, g_k, g)])
      h_k = [b + t - c for b, t, c in zip(h_k, theta, w)]
      if num_steps:
        g_k = [t - c for t, c in zip(theta, w)]
      own[k] = (h_k, g_k)
      models.append(theta)
      drifts.append(h_k)
      updates.append(g_k)
    wts = [1.0 if weights is None else weights(k) for k in sampled]
    total = [sum(h[j] for h, _ in own.values()) for j in range(len(w))]
    mean_theta = tiny.weighted_mean(models, wts)
    if rule == 'authors':
      w = [a + b / num_clients for a, b in zip(mean_theta, total)]
    elif rule == 'round_drifts':
      w = [a + sum(h[j] for h in drifts) / num_clients
           for j, a in enumerate(mean_theta)]
    else:
      assert rule == 'round_mean'
      w = tiny.weighted_mean(
          [[t + h for t, h in zip(m, d)] for m, d in zip(models, drifts)],
          wts)
    g = tiny.weighted_mean(updates, wts)
    history.append((_copy(w), _copy(g),
                    {k: (_copy(a), _copy(b)) for k, (a, b) in own.items()},
                    _copy(total)))
  return history


def _datasets(clients, sampled):
  return tiny.full_batch_datasets([clients[k] for k in sampled], LOCAL_STEPS)


def _assert_close(got, want, rtol=1e-5, atol=1e-6):
  assert len(got) == len(want)
  for a, b in zip(got, want):
    np.testing.assert_allclose(np.asarray(a), b, rtol=rtol, atol=atol)


def _max_diff(a, b):
  return max(np.abs(np.asarray(x) - y).max() for x, y in zip(a, b))


def _global_update(state):
  return state.finalizer['extras'][fed_dc.GLOBAL_UPDATE_KEY]


def _drift_sum(state):
  return state.finalizer['extras'][fed_dc.DRIFT_SUM_KEY]


def _sum_of_drifts(client_states_):
  drifts = [s[fed_dc.DRIFT_KEY] for s in client_states_]
  return [np.sum([np.asarray(h[j]) for h in drifts], axis=0)
          for j in range(len(drifts[0]))]


def _start(process):
  return tiny.set_weights(process, process.initialize(),
                          tiny.initial_weights())


def test_matches_numpy_over_rounds_with_returning_clients(process, clients):
  assert client_states.is_client_stateful(process)
  assert sorted(process.initial_client_state()) == sorted(
      [fed_dc.DRIFT_KEY, fed_dc.LOCAL_UPDATE_KEY])
  want = numpy_fed_dc(clients, SCHEDULE)
  state = _start(process)
  for value in (_global_update(state), _drift_sum(state)):
    assert all(not np.any(v) for v in value)
  store = {}
  for sampled, (w, g, own, total) in zip(SCHEDULE, want):
    output, new_states = process.next(
        state, _datasets(clients, sampled),
        [store.get(k, process.initial_client_state()) for k in sampled])
    store.update(zip(sampled, new_states))
    state = output.state
    _assert_close(tiny.trainable(process, state), w)
    _assert_close(_global_update(state), g)
    # H is the sum of every client's h_j, the absent ones' included.
    _assert_close(_drift_sum(state), total)
    _assert_close(_drift_sum(state), _sum_of_drifts(store.values()))
    assert sorted(store) == sorted(own)
    for k, (h_k, g_k) in own.items():
      _assert_close(store[k][fed_dc.DRIFT_KEY], h_k)
      _assert_close(store[k][fed_dc.LOCAL_UPDATE_KEY], g_k)
  # The drift and correction terms matter: without either, another model;
  # so do N, the absent clients' h_j and the rule of (3) itself.
  final = want[-1][0]
  for other in (numpy_fed_dc(clients, SCHEDULE, correction=False),
                numpy_fed_dc(clients, SCHEDULE, alpha=0.0),
                numpy_fed_dc(clients, SCHEDULE, num_clients=2 * NUM_CLIENTS),
                numpy_fed_dc(clients, SCHEDULE, rule='round_drifts'),
                numpy_fed_dc(clients, SCHEDULE, rule='round_mean')):
    assert _max_diff(final, other[-1][0]) > 1e-3
  # (w, g) down, (Delta_i, g_i) up: twice FedAvg's each way.
  assert output.metrics['communication'] == {
      'bytes_server_to_client': 2 * MODEL_BYTES,
      'bytes_client_to_server': 2 * MODEL_BYTES}


def test_full_participation_is_the_mean_of_drift_corrected_models(clients):
  # With every one of the N clients in every round (uniform weights),
  # mean theta_i + H / N = mean (theta_i + h_i): the former rule.
  schedule = [list(range(NUM_CLIENTS))] * 3
  authors = numpy_fed_dc(clients, schedule)
  former = numpy_fed_dc(clients, schedule, rule='round_mean')
  for (w, g, _, _), (w_old, g_old, _, _) in zip(authors, former):
    _assert_close(w, w_old, rtol=1e-12, atol=1e-12)
    _assert_close(g, g_old, rtol=1e-12, atol=1e-12)
  # Not so under partial participation (the main test) nor example weights.
  assert _max_diff(
      numpy_fed_dc(clients, schedule, weights=lambda k: SIZES[k])[-1][0],
      numpy_fed_dc(clients, schedule, weights=lambda k: SIZES[k],
                   rule='round_mean')[-1][0]) > 1e-3


def test_example_weighted_means(clients):
  process = _build(
      client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES)
  schedule = SCHEDULE[:2]
  want = numpy_fed_dc(clients, schedule, weights=lambda k: SIZES[k])
  uniform = numpy_fed_dc(clients, schedule)
  state = _start(process)
  store = {}
  for sampled in schedule:
    output, new_states = process.next(
        state, _datasets(clients, sampled),
        [store.get(k, process.initial_client_state()) for k in sampled])
    store.update(zip(sampled, new_states))
    state = output.state
  _assert_close(tiny.trainable(process, state), want[-1][0])
  _assert_close(_global_update(state), want[-1][1])
  # The drift sum is a plain sum whatever the weighting.
  _assert_close(_drift_sum(state), want[-1][3])
  assert _max_diff(want[-1][0], uniform[-1][0]) > 1e-3


@pytest.mark.parametrize('num_clients', [NUM_CLIENTS, 2 * NUM_CLIENTS])
def test_first_round_is_fed_prox_with_a_server_step_of_one_plus_m_over_n(
    clients, num_clients):
  # h_i = g_i = g = H = 0: the local objective is FedProx's with
  # mu = alpha, and with m clients mean(theta_i) + (1/N) sum(theta_i - w) =
  # w - (1 + m/N) mean(Delta_i): a server step of 2 under full
  # participation (N = m = 4), 1.5 with N = 8.
  process = _build(num_clients=num_clients)
  sampled = [0, 1, 2, 3]
  server_lr = 1.0 + len(sampled) / num_clients
  fed_prox = algorithms.build_fed_prox(
      tiny.model_fn, mu=ALPHA, client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(server_lr),
      client_weighting=tff.learning.ClientWeighting.UNIFORM)
  prox_output = fed_prox.next(_start(fed_prox), _datasets(clients, sampled))
  output, new_states = process.next(
      _start(process), _datasets(clients, sampled),
      [process.initial_client_state() for _ in sampled])
  got = tiny.trainable(process, output.state)
  _assert_close(got, tiny.trainable(fed_prox, prox_output.state), atol=1e-7)
  # Each h_i is its local update, g their mean and H their sum.
  w0 = tiny.initial_weights()
  for s in new_states:
    _assert_close(s[fed_dc.DRIFT_KEY], s[fed_dc.LOCAL_UPDATE_KEY], atol=0)
  mean_h = [np.mean([s[fed_dc.DRIFT_KEY][j] for s in new_states], axis=0)
            for j in range(2)]
  _assert_close(_global_update(output.state), mean_h, atol=1e-7)
  _assert_close(_drift_sum(output.state), _sum_of_drifts(new_states),
                atol=1e-7)
  _assert_close(got, [a + server_lr * b for a, b in zip(w0, mean_h)],
                atol=1e-6)


def test_zero_step_and_non_finite_clients_keep_their_state(process, clients):
  # Round 1: clients 0, 1, 2 train. Round 2: client 0 has no batch, client
  # 1's data are NaN (dropped, weight 0), client 3 trains; client 2 is
  # absent.
  state = _start(process)
  output, first = process.next(
      state, _datasets(clients, [0, 1, 2]),
      [process.initial_client_state() for _ in range(3)])
  x1, y1 = clients[1]

  def nan_dataset():
    return tf.data.Dataset.from_tensors(
        (np.full_like(x1, np.nan), y1)).repeat(LOCAL_STEPS)

  datasets = [
      tf.data.Dataset.from_tensors(clients[0]).repeat(LOCAL_STEPS).take(0),
      nan_dataset(),
      tiny.full_batch_datasets([clients[3]], LOCAL_STEPS)[0],
  ]
  output, second = process.next(
      output.state, datasets, [first[0], first[1],
                               process.initial_client_state()])
  assert output.metrics['client_work']['non_finite_clients'] == 1
  for k in (0, 1):
    for key in (fed_dc.DRIFT_KEY, fed_dc.LOCAL_UPDATE_KEY):
      _assert_close(second[k][key], first[k][key], atol=0)
  # Client 0 still counts (uniform weight) with theta_0 = w and its kept
  # g_0; client 1 does not, but its h_1 stays in H, as does client 2's.
  want = numpy_fed_dc(clients, [[0, 1, 2], [0, 3]],
                      steps=lambda r, k: 0 if (r, k) == (1, 0) else
                      LOCAL_STEPS)
  _assert_close(tiny.trainable(process, output.state), want[-1][0])
  _assert_close(_global_update(output.state), want[-1][1])
  _assert_close(second[2][fed_dc.DRIFT_KEY], want[-1][2][3][0])
  _assert_close(_drift_sum(output.state), want[-1][3])
  _assert_close(_drift_sum(output.state),
                _sum_of_drifts([second[0], second[1], first[2], second[2]]))
  # A round with no finite client is rejected: model, g and H kept, and the
  # client keeps its state.
  rejected, third = process.next(output.state, [nan_dataset()], [second[1]])
  assert rejected.metrics['finalizer']['update_non_finite'] == 1
  for key in (fed_dc.DRIFT_KEY, fed_dc.LOCAL_UPDATE_KEY):
    _assert_close(third[0][key], second[1][key], atol=0)
  for get in (lambda s: tiny.trainable(process, s), _global_update,
              _drift_sum):
    _assert_close(get(rejected.state), get(output.state), atol=0)


# --- The drift sum over the training loop -----------------------------------
# (Kill and resume, bit for bit, is in tests/test_resume_stateful.py.)


def test_the_server_drift_sum_is_every_clients_drift_over_the_loop(tmp_path):
  # 3 of the 6 clients a round: N = 6, the absent clients' h_j in H.
  process = _build(num_clients=len(test_resume_stateful.CLIENTS))
  result = test_resume_stateful.train(process, _start(process),
                                      str(tmp_path / 'run'), rounds=5)
  assert np.abs(_global_update(result.state)[0]).max() > 1e-4
  assert np.abs(_drift_sum(result.state)[0]).max() > 1e-4
  _assert_close(_drift_sum(result.state),
                _sum_of_drifts(result.client_states.values()))
