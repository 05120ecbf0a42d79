"""Every registered algorithm on two loopback TFF workers.

TFF 0.87's multi-worker context splits a round's clients into contiguous
slices, one per worker, and returns client-placed results in the order the
workers finish. `client_states.compose` therefore sends each client its
position in the round and gets it back with the client's new state, and
`ClientStatefulProcess.next` files each state under its position
(`tff_opt/round/client_states.py`). FedPTR's client cosine is computed in
one aggregation (`fed_ptr.ClientCosineFactory`), which the
multi-worker compiler accepts.

Each algorithm runs `ROUNDS` rounds of `training_loop.run_training` (3 of
6 clients a round, so the slices are 2 and 1 clients; shuffled datasets)
locally, then on two `binaries.worker` children; the server state and
every client state must agree. Measured (this file's settings, largest
|worker - local| over every leaf of the server state and of every client
state): 0, bit for bit, for scaffold, feddyn, fedbn (over FedOpt, a
batch-norm model), moon, feddc, fedptr_s and fedptr (client side), and for
the algorithms without client state: fedprox, fedfor, fedadc (Nesterov),
fedadc_plus (Algorithm 4 with distillation), slowmo, fedntd, fedrs,
fedgkd (FedOpt: tests/test_remote_workers.py), and for FedCurv, stateless
and with client state (Eq. 3), whose Fisher pass reads the reshuffling
dataset a second time. With
slices of 2 and 1 the workers' partial sums add in the order a local run
adds (c1+c2)+c3; other splits differ by float rounding (FedOpt: 3.0e-8
after one round of 5 clients, README's --workers section). The tolerance,
rtol=1e-5 and atol=1e-6, is the one tests/test_remote_workers.py uses for
FedOpt; a client state filed under another client is off by O(0.01-0.1).

The binary's own path, `--workers` with a client-stateful algorithm, is
tests/test_remote_workers.py's SCAFFOLD run, replayed there bit for bit;
the binary builds every algorithm through `registry.build_process`, so it
is not run again here for each.

A second test makes the last worker's results come back first (the order
TFF 0.87 returns when that worker finishes first), which would file states
under the wrong clients without the positions.

Local references are computed before any worker starts (a local context
stops TFF's workers); the module's fixture stops the workers it starts and
puts TFF's local context back.
"""

import collections
import functools

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.core.backends.native import mergeable_comp_compiler
from tensorflow_federated.python.core.impl.execution_contexts import mergeable_comp_execution_context

from tests import test_remote_workers
from tests import test_resume_stateful
from tests import tiny
from tff_opt import algorithms
from tff_opt.algorithms import fed_ptr
from tff_opt.program import runtime
from tff_opt.program import training_loop
from tff_opt.round import client_states

# TFF warns that BN statistics are not updated by *its* training loops;
# tff-opt's client work does update them (tests/test_fed_bn.py).
pytestmark = pytest.mark.filterwarnings(
    'ignore:Batch Normalization contains non-trainable')

ROUNDS = 3
RTOL, ATOL = 1e-5, 1e-6
CLIENTS = test_resume_stateful.CLIENTS


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


BUILDERS = {
    'scaffold': lambda: algorithms.build_scaffold(
        tiny.model_fn, client_optimizer_fn=_sgd(0.1),
        server_optimizer_fn=_sgd(1.0)),
    **{name: test_resume_stateful.BUILDERS[name] for name in (
        'feddyn', 'fedbn', 'moon', 'feddc', 'fedptr_s', 'fedptr_client',
        'slowmo')},
    # The algorithms without client state (FedOpt itself:
    # tests/test_remote_workers.py).
    'fedprox': lambda: algorithms.build_fed_prox(
        tiny.model_fn, mu=0.1, client_optimizer_fn=_sgd(0.1),
        server_optimizer_fn=_sgd(1.0)),
    'fedfor': lambda: algorithms.build_fed_for(
        tiny.model_fn, alpha=0.5, client_optimizer_fn=_sgd(0.1),
        server_optimizer_fn=_sgd(1.0)),
    'fedadc_nesterov': lambda: algorithms.build_fed_adc(
        tiny.model_fn, client_learning_rate=0.1, beta=0.9,
        variant='nesterov'),
    'fedadc_plus': lambda: algorithms.build_fed_adc(
        tiny.model_fn, client_learning_rate=0.1, beta=0.9,
        local_momentum=0.9, distillation=True),
    'fedntd': lambda: algorithms.build_fed_ntd(
        tiny.model_fn, client_optimizer_fn=_sgd(0.1),
        server_optimizer_fn=_sgd(1.0)),
    'fedrs': lambda: algorithms.build_fed_rs(
        tiny.model_fn, client_optimizer_fn=_sgd(0.1),
        server_optimizer_fn=_sgd(1.0)),
    'fedgkd': lambda: algorithms.build_fed_gkd(
        tiny.model_fn, client_optimizer_fn=_sgd(0.1),
        server_optimizer_fn=_sgd(1.0)),
    # FedCurv, stateless and Eq. 3 (client state); its Fisher pass re-reads
    # the reshuffling dataset (its first half: `client_epochs=2`).
    **{name: functools.partial(
        algorithms.build_fed_curv, tiny.model_fn, lam=1.0,
        client_optimizer_fn=_sgd(0.1), server_optimizer_fn=_sgd(1.0),
        client_epochs=2, cross_silo=cross_silo)
       for name, cross_silo in (('fedcurv', False), ('fedcurv_eq3', True))},
}


def _dataset(client_id):
  x, y = CLIENTS[client_id]
  return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(16).batch(4)


def _train(process):
  return training_loop.run_training(
      process, client_ids=sorted(CLIENTS), client_dataset_fn=_dataset,
      clients_per_round=3, rounds=ROUNDS, seed=7, output_dir=None,
      initial_state=process.initialize(), log=None)


def _leaves(structure):
  return [np.asarray(x) for x in tf.nest.flatten(structure)]


def _largest_difference(got, want):
  """max |got - want| over the server state and every client state."""
  pairs = list(zip(_leaves(got.state), _leaves(want.state)))
  for cid, state in (want.client_states or {}).items():
    pairs += zip(_leaves(got.client_states[cid]), _leaves(state))
  return max(float(np.max(np.abs(a.astype(np.float64) - b)))
             if a.size else 0.0 for a, b in pairs)


def _assert_same_run(got, want):
  assert got.start_round == want.start_round
  got_leaves, want_leaves = _leaves(got.state), _leaves(want.state)
  assert len(got_leaves) == len(want_leaves)
  for a, b in zip(got_leaves, want_leaves):
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
  if want.client_states is None:
    assert got.client_states is None
    return
  assert sorted(got.client_states) == sorted(want.client_states)
  for cid, want_state in want.client_states.items():
    got_state = _leaves(got.client_states[cid])
    assert len(got_state) == len(_leaves(want_state))
    for a, b in zip(got_state, _leaves(want_state)):
      np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=cid)


# --- Without workers ---------------------------------------------------------


def _tagged(position, value):
  return collections.OrderedDict([(client_states.POSITION_KEY, np.int32(
      position)), (client_states.STATE_KEY, value)])


def test_states_are_filed_by_position_whatever_their_order():
  def next_computation(state, data, states, positions):
    assert positions == [0, 1, 2]
    # The second worker's slice first, as TFF 0.87 returns it when that
    # worker finishes first.
    return 'output', [_tagged(2, states[2] + 1), _tagged(0, states[0] + 1),
                      _tagged(1, states[1] + 1)]

  process = client_states.ClientStatefulProcess(
      initialize=None, next_computation=next_computation,
      get_model_weights=None, set_model_weights=None, get_hparams=None,
      set_hparams=None, initial_client_state=np.float32(0),
      client_state_type=None, positions=True)
  assert process.next('state', ['d0', 'd1', 'd2'], [10, 20, 30]) == (
      'output', [11, 21, 31])


@pytest.mark.parametrize('positions', [[0, 0, 2], [0, 1], [0, 1, 3]])
def test_missing_or_repeated_positions_are_an_error(positions):
  tagged = [_tagged(p, p) for p in positions]
  with pytest.raises(ValueError) as error:
    client_states.in_position_order(tagged, 3)
  assert str(error.value) == (
      f'A round of 3 clients returned client states for positions '
      f'{sorted(positions)}; expected each of 0..2 once (a client\'s new '
      'state would be filed under another client).')


def test_client_cosine_is_one_aggregation_the_compiler_splits():
  value_type = tff.types.to_type([(np.float32, [3]), (np.float32, [2])])
  weight_type = tff.types.to_type(np.float32)
  process = fed_ptr.ClientCosineFactory().create(value_type, weight_type)
  # The broadcast-then-sum form of the same metric has two dependent
  # aggregates, which TFF's multi-worker compiler refuses.
  with pytest.raises(ValueError, match='Detected one aggregate dependent on '
                     'another'):
    mergeable_comp_compiler.compile_to_mergeable_comp_form(
        test_remote_workers.two_dependent_aggregates(value_type,
                                                     weight_type))
  mergeable_comp_compiler.compile_to_mergeable_comp_form(process.next)
  rng = np.random.default_rng(3)
  values = [[rng.normal(size=3).astype(np.float32),
             rng.normal(size=2).astype(np.float32)] for _ in range(4)]
  values[2] = [np.zeros(3, np.float32), np.zeros(2, np.float32)]
  weights = [np.float32(w) for w in (2.0, 1.0, 3.0, 0.0)]
  got = process.next(process.initialize(), values, weights)
  flat = [np.concatenate(v).astype(np.float64) for v in values]
  mean = sum(w * f for w, f in zip(weights, flat)) / sum(weights)
  # 3 clients took part (the zero update counts, with cosine 0).
  cosines = [0.0 if not f.any() else
             f @ mean / (np.linalg.norm(f) * np.linalg.norm(mean))
             for f, w in zip(flat, weights) if w > 0]
  assert len(cosines) == 3
  cosine = float(got.measurements[fed_ptr.CLIENT_COSINE_KEY])
  assert cosine == pytest.approx(np.mean(cosines), rel=1e-5)
  assert 0.0 < cosine < 1.0


# --- On two workers ----------------------------------------------------------


@pytest.fixture(scope='module')
def processes():
  return {name: build() for name, build in BUILDERS.items()}


@pytest.fixture(scope='module')
def local_runs(processes):
  runtime.set_local_execution_context()
  return {name: _train(process) for name, process in processes.items()}


@pytest.fixture(scope='module')
def workers(local_runs, tmp_path_factory):
  # Computed first: a local context stops TFF workers.
  del local_runs
  pool = test_remote_workers.Workers(str(tmp_path_factory.mktemp('workers')))
  try:
    pool.start('a')
    pool.start('b')
    pool.wait_ready('a', 'b')
    runtime.set_remote_execution_context(
        [('127.0.0.1', pool.ports['a']), ('127.0.0.1', pool.ports['b'])])
    yield pool
  finally:
    pool.stop_all()
    runtime.set_local_execution_context()


@pytest.mark.parametrize('name', sorted(BUILDERS))
def test_two_workers_give_the_local_states(name, processes, local_runs,
                                           workers):
  with workers.ran_on('a', 'b'):
    got = _train(processes[name])
  want = local_runs[name]
  _assert_same_run(got, want)
  if want.client_states is not None:
    assert len(want.client_states) >= 3  # Several clients kept a state.
  print(f'{name}: largest |worker - local| = '
        f'{_largest_difference(got, want):.2g}')


def test_states_come_home_when_the_last_worker_finishes_first(
    processes, local_runs, workers, monkeypatch):
  after_merge = mergeable_comp_execution_context._invoke_after_merge_in_async_pool  # pylint: disable=protected-access
  slices = []

  async def last_worker_first(*args, **kwargs):
    results = await after_merge(*args, **kwargs)
    slices.append(len(results))
    return list(reversed(results))

  monkeypatch.setattr(mergeable_comp_execution_context,
                      '_invoke_after_merge_in_async_pool', last_worker_first)
  with workers.ran_on('a', 'b'):
    got = _train(processes['scaffold'])
  assert slices == [2] * ROUNDS  # Two slices a round, reversed.
  _assert_same_run(got, local_runs['scaffold'])
