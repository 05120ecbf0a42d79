"""One assembly path: SCAFFOLD, FedADC and FedBN as recipes, `recipe.assemble`.

Each recipe is assembled directly (as its builder does) and run for two
rounds on `tests/tiny.py`'s model and clients, against the NumPy references
the algorithms' own test modules pin their builders to. FedBN wraps any
base recipe, SCAFFOLD's included.
"""

import numpy as np
import pytest
import tensorflow_federated as tff

from tests import test_fed_adc
from tests import test_fed_bn
from tests import test_scaffold
from tests import tiny
from tff_opt.algorithms import fed_adc
from tff_opt.algorithms import fed_bn
from tff_opt.algorithms import fed_prox
from tff_opt.algorithms import recipe
from tff_opt.algorithms import scaffold
from tff_opt.round import client_states

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


def test_scaffold_recipe_assembled_matches_numpy():
  process = recipe.assemble(
      tiny.model_fn,
      scaffold.scaffold_recipe(server_optimizer_fn=_sgd(1.0)),
      client_optimizer_fn=_sgd(test_scaffold.CLIENT_LR),
      client_weighting=NUM_EXAMPLES, client_lr_schedule=None)
  assert client_states.is_client_stateful(process)
  clients = tiny.make_clients(num_clients=3, seed=9)
  schedule = [[0, 1, 2]] * ROUNDS
  state = tiny.set_weights(process, process.initialize(),
                           tiny.initial_weights())
  own = [process.initial_client_state() for _ in clients]
  for sampled in schedule:
    output, own = process.next(
        state, tiny.full_batch_datasets(clients, test_scaffold.LOCAL_STEPS),
        own)
    state = output.state
  w, c, c_own = test_scaffold.numpy_scaffold(clients, schedule)
  _assert_close(tiny.trainable(process, state), w)
  _assert_close(state.finalizer['extras']['control_variate'], c)
  for k in sampled:
    _assert_close(own[k]['control_variate'], c_own[k])
  assert np.abs(c[0]).max() > 1e-3  # The control variate is really there.


@pytest.mark.parametrize('variant', ['heavy_ball', 'nesterov'])
def test_fed_adc_recipe_assembled_matches_numpy(variant):
  process = recipe.assemble(
      tiny.model_fn,
      fed_adc.fed_adc_recipe(client_learning_rate=0.2, beta=0.8,
                             beta_local=0.5, alpha=0.9, variant=variant),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.2),
      client_weighting=UNIFORM, client_lr_schedule=None)
  clients = tiny.make_clients()
  state = test_fed_adc._run(  # pylint: disable=protected-access
      process, clients, rounds=ROUNDS)
  w, m = test_fed_adc.numpy_fed_adc(
      clients, lr_of_round=lambda t: 0.2, beta_global=0.8, beta_local=0.5,
      alpha=0.9, variant=variant, rounds=ROUNDS)
  _assert_close(tiny.trainable(process, state), w)
  _assert_close(state.finalizer['momentum'], m)
  assert np.abs(m[0]).max() > 1e-2


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
  assert bool(own[0][fed_bn.BASE_KEY][client_states.INITIALIZED_KEY])


def test_fed_bn_hyper_parameters_are_the_base_recipes():
  assert {name: fed_bn.hparam_names(base)
          for name, base in fed_bn.BASES.items()} == {
              'fedopt': (), 'fedprox': ('mu',), 'fedfor': ('alpha',),
              'fedcurv': ('lam',), 'feddyn': ('alpha', 'num_clients')}
