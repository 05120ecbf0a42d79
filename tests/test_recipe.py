"""One assembly path: FedBN over other recipes, `recipe.assemble`.

SCAFFOLD's and FedADC's builders are `recipe.assemble` of their recipes and
their own test modules pin them to NumPy; here FedBN's recipe wraps other
base recipes (FedProx's, and SCAFFOLD's, which FedBN's builder does not
list), assembled directly and run for two rounds on `tests/tiny.py`'s model
and clients.

Every assembled algorithm averages the model's non-trainable variables
(`recipe.with_shared_non_trainables`): on `test_fed_bn`'s BN model the
global moving statistics after each round must be the clients' weighted
mean of theirs, computed in NumPy from the client data (FedProx's whole
round by hand; for the other algorithms the statistics' closed form, which
does not depend on the trainable weights since the BN layer normalises the
inputs).
"""

import numpy as np
import pytest
import tensorflow_federated as tff

from tests import test_fed_bn
from tests import tiny
from tff_opt import algorithms
from tff_opt.algorithms import fed_bn
from tff_opt.algorithms import fed_curv
from tff_opt.algorithms import fed_dyn
from tff_opt.algorithms import fed_for
from tff_opt.algorithms import fed_opt
from tff_opt.algorithms import fed_prox
from tff_opt.algorithms import recipe
from tff_opt.algorithms import scaffold
from tff_opt.round import client_states
from tff_opt.round import ground

ROUNDS = 2
UNIFORM = tff.learning.ClientWeighting.UNIFORM
NUM_EXAMPLES = tff.learning.ClientWeighting.NUM_EXAMPLES
# TFF warns that BN statistics are not updated by *its* training loops.
pytestmark = pytest.mark.filterwarnings(
    'ignore:Batch Normalization contains non-trainable')


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


def _assert_close(got, want):
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_fed_bn_over_fed_prox_recipe_assembled_matches_numpy():
  variables = fed_bn.find_batch_norm_variables(test_fed_bn.bn_model_fn)
  base = fed_prox.fed_prox_recipe(mu=test_fed_bn.MU,
                                  server_optimizer_fn=_sgd(1.0))
  process = recipe.assemble(
      test_fed_bn.bn_model_fn,
      lambda weights_type: fed_bn.with_local_batch_norm(
          base(weights_type), weights_type, variables),
      client_optimizer_fn=_sgd(test_fed_bn.CLIENT_LR),
      client_weighting=NUM_EXAMPLES, client_lr_schedule=None)
  clients = tiny.make_clients(len(test_fed_bn.SIZES),
                              sizes=test_fed_bn.SIZES)
  schedule = test_fed_bn.SCHEDULE[:ROUNDS]
  want = test_fed_bn.numpy_fed_bn_prox(clients, schedule)
  trainable, non_trainable = test_fed_bn.initial_weights()
  state = process.set_model_weights(
      process.initialize(),
      tff.learning.models.ModelWeights(trainable, non_trainable))
  store = {}
  for sampled in schedule:
    output, new_states = process.next(
        state, tiny.full_batch_datasets([clients[k] for k in sampled],
                                        test_fed_bn.LOCAL_STEPS),
        [store.get(k, process.initial_client_state()) for k in sampled])
    store.update(zip(sampled, new_states))
    state = output.state
  server, own = want[-1]
  weights = process.get_model_weights(state)
  for got, expected in zip(weights.trainable[2:], server[2:]):
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
  for got, expected in zip(weights.trainable[:2], trainable[:2]):
    np.testing.assert_array_equal(got, expected)  # The server's BN stays.
  for k, (bn_trainable, _) in own.items():
    mine = store[k][fed_bn.BATCH_NORM_KEY][fed_bn.TRAINABLE_KEY]
    for got, expected in zip(mine, bn_trainable):
      np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_fed_bn_wraps_any_recipe_even_scaffold():
  """A base FedBN's builder does not list still composes: its recipe is
  enough (SCAFFOLD's client state goes under 'base')."""
  variables = fed_bn.find_batch_norm_variables(test_fed_bn.bn_model_fn)
  base = scaffold.scaffold_recipe(server_optimizer_fn=_sgd(1.0))
  process = recipe.assemble(
      test_fed_bn.bn_model_fn,
      lambda weights_type: fed_bn.with_local_batch_norm(
          base(weights_type), weights_type, variables),
      client_optimizer_fn=_sgd(0.1),
      client_weighting=NUM_EXAMPLES, client_lr_schedule=None)
  clients = tiny.make_clients(2, sizes=(6, 10))
  trainable, non_trainable = test_fed_bn.initial_weights()
  state = process.set_model_weights(
      process.initialize(),
      tff.learning.models.ModelWeights(trainable, non_trainable))
  own = [process.initial_client_state() for _ in clients]
  for _ in range(ROUNDS):
    output, own = process.next(state, tiny.full_batch_datasets(clients, 2),
                               own)
    state = output.state
  weights = process.get_model_weights(state)
  for got, expected in zip(weights.trainable[:2], trainable[:2]):
    np.testing.assert_array_equal(got, expected)
  assert np.abs(weights.trainable[2] - trainable[2]).max() > 1e-3
  control = state.finalizer['extras']['control_variate']
  assert not np.any(control[0]) and np.any(control[2])  # No BN in c.
  assert bool(own[0][fed_bn.BASE_KEY][ground.INITIALIZED_KEY])


def test_fed_bn_hyper_parameters_are_the_base_recipes():
  assert {base.__name__: fed_bn.hparam_names(base)[0] for base in (
      fed_opt.fed_opt_recipe, fed_prox.fed_prox_recipe, fed_for.fed_for_recipe,
      fed_curv.stateless_recipe, fed_dyn.fed_dyn_recipe)} == {
          'fed_opt_recipe': (), 'fed_prox_recipe': ('mu',),
          'fed_for_recipe': ('alpha',), 'stateless_recipe': ('lam',),
          'fed_dyn_recipe': ('alpha', 'num_clients')}
  # FedCurv's optional arguments are FedCurv's builder's, so that FedBN is
  # given what FedCurv is.
  assert fed_bn.hparam_names(fed_curv.stateless_recipe)[1] == (
      'cross_silo', 'client_epochs', 'num_clients')


# --- Non-trainable variables (BN statistics) are averaged --------------------

BN_SIZES = (6, 10, 4, 7)
BN_SCHEDULE = ([0, 1, 2], [1, 3])
BN_WIDTH = 2 * tiny.NUM_FEATURES  # Moving mean and variance, float32 each.


def _start_bn(process):
  trainable, non_trainable = test_fed_bn.initial_weights()
  return process.set_model_weights(
      process.initialize(),
      tff.learning.models.ModelWeights(trainable, non_trainable))


def _run_bn(process, clients, schedule):
  """Runs `process` on `schedule`; returns the state after each round."""
  state = _start_bn(process)
  stateful = client_states.is_client_stateful(process)
  store = {}
  states = []
  for sampled in schedule:
    datasets = tiny.full_batch_datasets([clients[k] for k in sampled],
                                        test_fed_bn.LOCAL_STEPS)
    if stateful:
      output, new_states = process.next(
          state, datasets,
          [store.get(k, process.initial_client_state()) for k in sampled])
      store.update(zip(sampled, new_states))
    else:
      output = process.next(state, datasets)
    state = output.state
    states.append((state, output.metrics))
  return states


def numpy_bn_statistics(start, x, steps=test_fed_bn.LOCAL_STEPS):
  """A client's moving mean and variance after `steps` full-batch steps.

  Keras's update, moving <- m * moving + (1 - m) * batch statistic, with the
  batch's mean and (biased) variance of the inputs: the same batch at every
  step, whatever the trainable weights are.
  """
  m = test_fed_bn.MOMENTUM
  batch = [x.astype(np.float64).mean(axis=0), x.astype(np.float64).var(axis=0)]
  return [m**steps * s + (1 - m**steps) * b for s, b in zip(start, batch)]


def numpy_global_statistics(clients, schedule, weight_of):
  """The global moving statistics after each round: weighted means."""
  stats = [np.asarray(t, np.float64)
           for t in test_fed_bn.initial_weights()[1]]
  history = []
  for sampled in schedule:
    stats = tiny.weighted_mean(
        [numpy_bn_statistics(stats, clients[k][0]) for k in sampled],
        [weight_of(k) for k in sampled])
    history.append(stats)
  return history


@pytest.fixture(scope='module')
def bn_clients():
  return tiny.make_clients(len(BN_SIZES), sizes=BN_SIZES)


@pytest.fixture(scope='module')
def prox_with_bn():
  return algorithms.build_fed_prox(
      test_fed_bn.bn_model_fn, mu=test_fed_bn.MU,
      client_optimizer_fn=_sgd(test_fed_bn.CLIENT_LR),
      server_optimizer_fn=_sgd(1.0))


def numpy_fed_prox_with_bn(clients, schedule):
  """FedProx on the BN model in NumPy, the statistics averaged like the
  weights (example weighting); the server's (trainables, statistics) after
  each round."""
  server = [[np.array(t, np.float64) for t in part]
            for part in test_fed_bn.initial_weights()]
  history = []
  for sampled in schedule:
    finals = [test_fed_bn.numpy_local_training(server, server[0],
                                               *clients[k])
              for k in sampled]
    weights = [BN_SIZES[k] for k in sampled]
    server = [tiny.weighted_mean([w for w, _ in finals], weights),
              tiny.weighted_mean([s for _, s in finals], weights)]
    history.append(server)
  return history


def test_fed_prox_averages_bn_statistics_like_numpy(prox_with_bn, bn_clients):
  want = numpy_fed_prox_with_bn(bn_clients, BN_SCHEDULE)
  initial_stats = test_fed_bn.initial_weights()[1]
  for (state, metrics), (trainable, stats) in zip(
      _run_bn(prox_with_bn, bn_clients, BN_SCHEDULE), want):
    weights = prox_with_bn.get_model_weights(state)
    for got, expected in zip(weights.trainable, trainable):
      np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    for got, expected, initial in zip(weights.non_trainable, stats,
                                      initial_stats):
      np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
      assert np.abs(got - initial).max() > 1e-4
  # Each client sends its statistics with its delta.
  model_bytes = 4 * (2 * tiny.NUM_FEATURES + tiny.NUM_FEATURES *
                     tiny.NUM_CLASSES + tiny.NUM_CLASSES)
  assert metrics['communication']['bytes_client_to_server'] == (
      model_bytes + 4 * BN_WIDTH)


def test_non_finite_clients_do_not_count_and_no_client_keeps_the_stats(
    prox_with_bn, bn_clients):
  broken = (np.full_like(bn_clients[1][0], np.nan), bn_clients[1][1])
  clients = [bn_clients[0], broken, bn_clients[2]]
  (state, metrics), = _run_bn(prox_with_bn, clients, ([0, 1, 2],))
  assert metrics['client_work']['non_finite_clients'] == 1
  want = tiny.weighted_mean(
      [numpy_bn_statistics(test_fed_bn.initial_weights()[1], clients[k][0])
       for k in (0, 2)], [BN_SIZES[0], BN_SIZES[2]])
  for got, expected in zip(
      prox_with_bn.get_model_weights(state).non_trainable, want):
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
  # Every client dropped: nothing to average, the global statistics stay.
  (state, metrics), = _run_bn(prox_with_bn, [broken, broken], ([0, 1],))
  assert metrics['client_work']['non_finite_clients'] == 2
  for got, expected in zip(
      prox_with_bn.get_model_weights(state).non_trainable,
      test_fed_bn.initial_weights()[1]):
    np.testing.assert_array_equal(got, expected)


def _fed_opt_adam(weighting):
  return algorithms.build_fed_opt(
      test_fed_bn.bn_model_fn,
      client_optimizer_fn=_sgd(test_fed_bn.CLIENT_LR),
      server_optimizer_fn=tff.learning.optimizers.build_adam(0.05),
      client_weighting=weighting)


# Each builder with its own default client weighting, but FedOpt's.
BN_ALGORITHMS = {
    'fedopt_adam_uniform': (lambda: _fed_opt_adam(UNIFORM), UNIFORM),
    'fedadc': (lambda: algorithms.build_fed_adc(
        test_fed_bn.bn_model_fn, client_learning_rate=0.1, beta=0.5),
               UNIFORM),
    'scaffold': (lambda: algorithms.build_scaffold(
        test_fed_bn.bn_model_fn, client_optimizer_fn=_sgd(0.1),
        server_optimizer_fn=_sgd(1.0)), NUM_EXAMPLES),
    'feddyn': (lambda: algorithms.build_fed_dyn(
        test_fed_bn.bn_model_fn, alpha=0.1, num_clients=len(BN_SIZES),
        client_optimizer_fn=_sgd(0.1), server_optimizer_fn=_sgd(1.0)),
               UNIFORM),
    'fedcurv': (lambda: algorithms.build_fed_curv(
        test_fed_bn.bn_model_fn, lam=0.1, client_optimizer_fn=_sgd(0.1),
        server_optimizer_fn=_sgd(1.0)), UNIFORM),
}


@pytest.mark.parametrize('name', sorted(BN_ALGORITHMS))
def test_every_algorithm_averages_bn_statistics_with_its_weights(
    name, bn_clients):
  """The other finalizers (Adam's, FedADC's momentum rule, with extras),
  aggregators (FedDyn's, `mean_delta_sum_rest`) and client states."""
  build, weighting = BN_ALGORITHMS[name]
  process = build()
  weight_of = ((lambda k: BN_SIZES[k]) if weighting == NUM_EXAMPLES else
               (lambda k: 1.0))
  want = numpy_global_statistics(bn_clients, BN_SCHEDULE, weight_of)
  for (state, metrics), stats in zip(
      _run_bn(process, bn_clients, BN_SCHEDULE), want):
    assert metrics['finalizer']['update_non_finite'] == 0
    weights = process.get_model_weights(state)
    for got, expected in zip(weights.non_trainable, stats):
      np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
  # Not the example-weighted mean when the algorithm weighs uniformly.
  other = numpy_global_statistics(
      bn_clients, BN_SCHEDULE,
      (lambda k: 1.0) if weighting == NUM_EXAMPLES else
      (lambda k: BN_SIZES[k]))[-1]
  assert np.abs(weights.non_trainable[0] - other[0]).max() > 1e-5


def test_fed_bn_keeps_its_statistics_out_of_the_average():
  variables = fed_bn.find_batch_norm_variables(test_fed_bn.bn_model_fn)
  weights_type = tff.learning.models.weights_type_from_model(
      test_fed_bn.bn_model_fn)
  base = fed_opt.fed_opt_recipe(server_optimizer_fn=_sgd(1.0))(weights_type)
  assert recipe.shared_non_trainables(weights_type) == (0, 1)
  wrapped = fed_bn.with_local_batch_norm(base, weights_type, variables)
  assert wrapped.local_non_trainables == (0, 1)
  assert recipe.with_shared_non_trainables(wrapped, weights_type) is wrapped


def test_a_model_without_non_trainables_is_assembled_as_before():
  weights_type = tff.learning.models.weights_type_from_model(tiny.model_fn)
  base = fed_opt.fed_opt_recipe(server_optimizer_fn=_sgd(1.0))(weights_type)
  assert recipe.shared_non_trainables(weights_type) == ()
  assert recipe.with_shared_non_trainables(base, weights_type) is base
