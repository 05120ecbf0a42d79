"""FedCurv: per-example Fisher diagonal, u/v sums and the elastic penalty."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny
from tff_opt import algorithms
from tff_opt.algorithms import fed_curv

LAM = 0.5
CLIENT_LR = 0.1
LOCAL_STEPS = 3
ROUNDS = 3
MODEL_BYTES = (tiny.NUM_FEATURES * tiny.NUM_CLASSES + tiny.NUM_CLASSES) * 4


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


def _build(**kwargs):
  return algorithms.build_fed_curv(
      tiny.model_fn, lam=LAM, client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(1.0), **kwargs)


@pytest.fixture(scope='module')
def fed_curv_process():
  return _build()


def numpy_fisher(w, x, y):
  """Mean over examples of the squared per-example gradient of -log p."""
  grads = [tiny.softmax_ce_grad(w, x[i:i + 1].astype(np.float64), y[i:i + 1])
           for i in range(len(y))]
  return [np.mean([g[j]**2 for g in grads], axis=0) for j in range(len(w))]


def numpy_fed_curv(clients, rounds=ROUNDS, cross_silo=False, lam=LAM):
  """FedCurv in NumPy (Sec. 3.1): gradient 2 lam (u w - v), u, v sums."""
  w = [t.astype(np.float64) for t in tiny.initial_weights()]
  u = [np.zeros_like(t) for t in w]
  v = [np.zeros_like(t) for t in w]
  own = [None] * len(clients)
  for _ in range(rounds):
    finals, reports = [], []
    for k, (x, y) in enumerate(clients):
      uk, vk = u, v
      if cross_silo and own[k] is not None:
        uk = [a - b for a, b in zip(u, own[k][0])]
        vk = [a - b for a, b in zip(v, own[k][1])]
      final = tiny.local_sgd(
          w, x, y, CLIENT_LR, LOCAL_STEPS,
          extra_grad=lambda z, uk=uk, vk=vk: [
              2 * lam * (a * zi - b) for zi, a, b in zip(z, uk, vk)])
      fisher = numpy_fisher(final, x, y)
      finals.append(final)
      reports.append((fisher, [f * t for f, t in zip(fisher, final)]))
    own = reports
    u = [sum(r[0][j] for r in reports) for j in range(len(w))]
    v = [sum(r[1][j] for r in reports) for j in range(len(w))]
    # The paper's plain mean of the participants' models (the builder's
    # default, fed_curv.SPEC.client_weighting).
    w = tiny.weighted_mean(finals, [1.0] * len(clients))
  return w, u, v


def _model_at_initial_weights():
  """A tiny model holding `tiny.initial_weights()`, and those weights."""
  model = tiny.model_fn()
  weights = tiny.initial_weights()
  for variable, value in zip(model.trainable_variables, weights):
    variable.assign(value)
  return model, weights


def _assert_all_close(got, want):
  for g, e in zip(got, want, strict=True):
    np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-7)


def test_fisher_diagonal_is_mean_of_per_example_squared_gradients():
  x, y = tiny.make_clients(num_clients=1, sizes=(7,), seed=6)[0]
  model, weights = _model_at_initial_weights()
  # Batches of 3 (7 = 3 + 3 + 1), two epochs: the mean is the one-epoch mean.
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(3).repeat(2)
  got = fed_curv.empirical_fisher_diagonal(model, dataset)
  want = numpy_fisher([t.astype(np.float64) for t in weights], x, y)
  for g, e in zip(got, want):
    np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-7)
  # Per-example, not per-batch: the squared mean gradient is smaller.
  batch_grad = tiny.softmax_ce_grad(weights, x.astype(np.float64), y)
  assert np.all(want[0] >= batch_grad[0]**2 - 1e-12)
  assert np.abs(want[0] - batch_grad[0]**2).max() > 1e-3


@pytest.mark.parametrize('num_examples', [14, 13])
def test_fisher_report_reads_one_of_the_epochs(num_examples):
  """With E = 2 epochs in the dataset only its first ceil(n_E / 2) count.

  The dataset's second "epoch" holds other examples, so reading it would
  change the result; 13 examples trained on (a `take` that cut the last
  epoch) still means the first ceil(13 / 2) = 7.
  """
  (x, y), (x2, y2) = tiny.make_clients(num_clients=2, sizes=(7, 7), seed=8)
  model, weights = _model_at_initial_weights()
  dataset = tf.data.Dataset.from_tensor_slices(
      (np.concatenate([x, x2]), np.concatenate([y, y2]))).batch(4)
  report = fed_curv._fisher_report(  # pylint: disable=protected-access
      model, dataset, None, delta=None, num_steps=tf.constant(4, tf.int64),
      learning_rate=CLIENT_LR,
      num_examples=tf.constant(num_examples, tf.int64), client_epochs=2)
  want = numpy_fisher([t.astype(np.float64) for t in weights], x, y)
  _assert_all_close(report[fed_curv.FISHER_KEY], want)
  _assert_all_close(report[fed_curv.FISHER_WEIGHTS_KEY],
                    [e * w for e, w in zip(want, weights)])
  # One epoch: every example counts, as before.
  whole = fed_curv._fisher_report(  # pylint: disable=protected-access
      model, dataset, None, delta=None, num_steps=tf.constant(4, tf.int64),
      learning_rate=CLIENT_LR, num_examples=tf.constant(14, tf.int64),
      client_epochs=1)
  both = numpy_fisher([t.astype(np.float64) for t in weights],
                      np.concatenate([x, x2]), np.concatenate([y, y2]))
  _assert_all_close(whole[fed_curv.FISHER_KEY], both)


def test_one_epoch_of_a_shuffled_repeated_dataset_is_the_full_mean():
  """The tasks' shuffle -> repeat(E) -> batch: the first 1/E is one epoch."""
  x, y = tiny.make_clients(num_clients=1, sizes=(9,), seed=12)[0]
  model, weights = _model_at_initial_weights()
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
      9, seed=3).repeat(3).batch(4)
  got = fed_curv.empirical_fisher_diagonal(model, dataset, max_examples=9)
  _assert_all_close(got, numpy_fisher([t.astype(np.float64) for t in weights],
                                      x, y))


def test_process_takes_the_fisher_over_the_first_epoch():
  """build_fed_curv(client_epochs=2): trained on both, Fisher on the first.

  One client whose two "epochs" are different full batches (x, then x2):
  round 1 (u = v = 0) is two plain SGD steps; u is then F at the final
  weights over x alone.
  """
  (x, y), (x2, y2) = tiny.make_clients(num_clients=2, sizes=(6, 6), seed=21)
  process = _build(client_epochs=2)
  state = tiny.set_weights(process, process.initialize(),
                           tiny.initial_weights())
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(6).concatenate(
      tf.data.Dataset.from_tensor_slices((x2, y2)).batch(6))
  state = process.next(state, [dataset]).state
  w = tiny.local_sgd(tiny.initial_weights(), x, y, CLIENT_LR, 1)
  w = tiny.local_sgd(w, x2, y2, CLIENT_LR, 1)
  for got, want in zip(state.finalizer['extras']['fisher_sum'],
                       numpy_fisher(w, x, y)):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-7)


def test_rejects_bad_client_epochs():
  with pytest.raises(ValueError, match=r'^client_epochs must be a positive '
                     r'integer, got 0\.$'):
    _build(client_epochs=0)


def test_matches_numpy_fed_curv(fed_curv_process):
  clients = tiny.make_clients()
  process = fed_curv_process
  state = tiny.set_weights(process, process.initialize(),
                           tiny.initial_weights())
  for _ in range(ROUNDS):
    output = process.next(state, tiny.full_batch_datasets(clients,
                                                          LOCAL_STEPS))
    state = output.state
  w, u, v = numpy_fed_curv(clients)
  for got, want in zip(tiny.trainable(process, state), w):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  extras = state.finalizer['extras']
  for got, want in zip(extras['fisher_sum'], u):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-7)
  for got, want in zip(extras['fisher_weight_sum'], v):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-7)
  # The penalty acted: against the same uniform mean with lam = 0 the kernel
  # moved by 0.0128, so a penalty a tenth as strong fails this.
  no_penalty, _, _ = numpy_fed_curv(clients, lam=0.0)
  got_kernel = np.asarray(tiny.trainable(process, state)[0])
  assert np.abs(got_kernel - no_penalty[0]).max() > 5e-3
  # Three vectors each way: (w, u, v) down, (delta, F, F * w) up.
  assert output.metrics['communication'] == {
      'bytes_server_to_client': 3 * MODEL_BYTES,
      'bytes_client_to_server': 3 * MODEL_BYTES}
  # The Fisher passes did not count as training examples.
  assert output.metrics['client_work']['train']['num_examples'] == (
      sum(len(y) for _, y in clients) * LOCAL_STEPS)


def test_first_round_is_fed_avg(fed_curv_process):
  clients = tiny.make_clients(seed=8)
  process = fed_curv_process
  state = tiny.set_weights(process, process.initialize(),
                           tiny.initial_weights())
  state = process.next(state, tiny.full_batch_datasets(clients,
                                                       LOCAL_STEPS)).state
  w = [t.astype(np.float64) for t in tiny.initial_weights()]
  expected = tiny.weighted_mean(  # FedAvg with the paper's plain mean.
      [tiny.local_sgd(w, x, y, CLIENT_LR, LOCAL_STEPS) for x, y in clients],
      [1.0] * len(clients))
  for got, want in zip(tiny.trainable(process, state), expected):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_cross_silo_variant_subtracts_own_contribution():
  process = _build(cross_silo=True)
  clients = tiny.make_clients()
  state = tiny.set_weights(process, process.initialize(),
                           tiny.initial_weights())
  client_states = [process.initial_client_state() for _ in clients]
  for _ in range(ROUNDS):
    output, client_states = process.next(
        state, tiny.full_batch_datasets(clients, LOCAL_STEPS), client_states)
    state = output.state
  w, _, _ = numpy_fed_curv(clients, cross_silo=True)
  for got, want in zip(tiny.trainable(process, state), w):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  stateless, _, _ = numpy_fed_curv(clients)
  assert np.abs(np.asarray(w[0]) - stateless[0]).max() > 1e-5
  assert [int(s['round']) for s in client_states] == [ROUNDS - 1] * 3
  # Two int32 round counters ride with (w, u, v).
  assert output.metrics['communication']['bytes_server_to_client'] == (
      3 * MODEL_BYTES + 8)


def test_rejects_negative_lam():
  with pytest.raises(ValueError, match=r'^lam must be a non-negative number, '
                     r'got -0\.5\.$'):
    algorithms.build_fed_curv(
        tiny.model_fn, lam=-0.5, client_optimizer_fn=_sgd(0.1),
        server_optimizer_fn=_sgd(1.0))


# --- --fedcurv_exact: Eq. 3 wherever the client state fits ------------------
TINY_PARAMS = tiny.NUM_FEATURES * tiny.NUM_CLASSES + tiny.NUM_CLASSES


def test_exact_state_bytes_is_two_float32_vectors_per_client():
  assert fed_curv.exact_state_bytes(tiny.model_fn, 96) == (
      2 * 4 * TINY_PARAMS * 96)


@pytest.mark.parametrize('exact,num_clients,want', [
    ('on', None, True), ('off', 10, False), ('auto', 96, True),
    # 2 GiB / (8 bytes x TINY_PARAMS) clients fit; one more does not.
    ('auto', fed_curv.EXACT_STATE_BYTES // (8 * TINY_PARAMS), True),
    ('auto', fed_curv.EXACT_STATE_BYTES // (8 * TINY_PARAMS) + 1, False),
])
def test_resolve_exact(exact, num_clients, want):
  assert fed_curv.resolve_exact(exact, tiny.model_fn, num_clients) is want


def test_resolve_exact_rejects_unknown_choice():
  with pytest.raises(ValueError, match=r"^fedcurv_exact must be one of auto, "
                     r"on, off, got 'yes'\.$"):
    fed_curv.resolve_exact('yes', tiny.model_fn, 10)


def test_registry_runs_eq3_by_default():
  """`--algorithm=fedcurv` (auto) builds the stateful Eq. 3 process."""
  from tff_opt.program import registry  # pylint: disable=g-import-not-at-top
  from tff_opt.round import client_states  # pylint: disable=g-import-not-at-top
  common = dict(client_optimizer_fn=_sgd(CLIENT_LR),
                server_optimizer_fn=_sgd(1.0),
                client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
                client_lr_schedule=None, num_clients=3, lam=LAM)
  exact = registry.build_process('fedcurv', tiny.model_fn, **common)
  assert isinstance(exact, client_states.ClientStatefulProcess)
  stateless = registry.build_process('fedcurv', tiny.model_fn,
                                     fedcurv_exact='off', **common)
  assert not isinstance(stateless, client_states.ClientStatefulProcess)

