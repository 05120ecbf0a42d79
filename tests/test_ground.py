"""The ground floor of `round/` (`tff_opt/round/ground.py`).

Its keys are the strings every structure of a round has always used (a
checkpoint or a metrics.csv written before the keys moved here reads the
same); its helpers unpack a broadcast and a batch, split a hook in two and
leave a function to AutoGraph as written. `model_to_overwrite` is tested
with the client loop that relies on it (`test_client_work.py`), the import
rule in `test_layout.py`.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.round import ground


def test_the_keys_are_the_strings_rounds_have_always_used():
  assert {name: getattr(ground, name) for name in dir(ground)
          if name.endswith('_KEY')} == {
              'ROUND_NUM_KEY': 'round_num',
              'OPTIMIZER_HPARAMS_KEY': 'optimizer_hparams',
              'LEARNING_RATE_KEY': 'learning_rate',
              'NUM_STEPS_KEY': 'num_steps',
              'CLIENT_STATS_KEY': 'client_stats',
              'MODEL_WEIGHTS_KEY': 'model_weights',
              'PREVIOUS_MODEL_KEY': 'previous_model_weights',
              'HAS_PREVIOUS_KEY': 'has_previous',
              'INITIALIZED_KEY': 'initialized',
              'DELTA_KEY': 'delta',
              'UPDATE_KEY': 'update',
              'NON_TRAINABLE_KEY': 'non_trainable',
              'MEAN_KEY': 'mean',
              'TOTAL_WEIGHT_KEY': 'total_weight',
              'UPDATE_NON_FINITE_KEY': 'update_non_finite',
          }


def test_model_weights_of_a_model_a_broadcast_and_a_client_input():
  weights = tff.learning.models.ModelWeights(
      trainable=[np.float32(1.0)], non_trainable=[])
  previous = tff.learning.models.ModelWeights(
      trainable=[np.float32(0.5)], non_trainable=[])
  assert ground.model_weights_of(weights) is weights
  broadcast = ground.TwoModels(weights, previous, np.bool_(True))
  assert ground.model_weights_of(broadcast) is weights
  state = collections.OrderedDict([(ground.INITIALIZED_KEY, np.bool_(False))])
  client_input = ground.ClientInput(broadcast, state)
  assert ground.model_weights_of(client_input) is weights
  # FedDyn's and MOON's clients get the bare model with their state.
  assert ground.model_weights_of(ground.ClientInput(weights, state)) is weights


def test_model_weights_of_no_longer_reads_a_mapping():
  weights = tff.learning.models.ModelWeights(
      trainable=[np.float32(1.0)], non_trainable=[])
  with pytest.raises(AttributeError):
    ground.model_weights_of(
        collections.OrderedDict([(ground.MODEL_WEIGHTS_KEY, weights)]))


def test_features_and_labels_of_a_mapping_and_of_a_tuple():
  assert ground.features_and_labels({'y': 2, 'x': 1}) == (1, 2)
  assert ground.features_and_labels((1, 2, 3)) == (1, 2)


def test_a_precomputed_hook_called_plainly_runs_both_parts():
  calls = []

  def precompute(broadcast, *, learning_rate):
    calls.append('precompute')
    return broadcast * learning_rate

  def step(weights, constants):
    calls.append('step')
    return weights + constants

  hook = ground.PrecomputedHook(precompute, step)
  assert hook(1.0, 3.0, learning_rate=0.5) == 2.5
  assert calls == ['precompute', 'step']


def test_unconverted_computes_what_the_function_computes():
  double = tf.function(lambda x: 2.0 * x)
  assert float(ground.unconverted(double)(tf.constant(3.0))) == 6.0
  assert ground.unconverted(len)([1, 2]) == 2


def test_server_state_is_the_named_pair_a_distributor_reads():
  state = ground.ServerState(model_weights='w', finalizer_state='f')
  assert ground.ServerState._fields == ('model_weights', 'finalizer_state')
  assert (state.model_weights, state.finalizer_state) == ('w', 'f')


def test_the_broadcast_tuples_lead_with_the_model():
  assert ground.TwoModels._fields == (
      ground.MODEL_WEIGHTS_KEY, ground.PREVIOUS_MODEL_KEY,
      ground.HAS_PREVIOUS_KEY)
  assert ground.ClientInput._fields == ('broadcast', 'client_state')


def test_check_client_weighting_names_the_argument_and_the_value():
  ground.check_client_weighting(tff.learning.ClientWeighting.UNIFORM)
  with pytest.raises(TypeError, match=(
      r"^client_weighting must be a tff.learning.ClientWeighting, got "
      r"'uniform'\.$")):
    ground.check_client_weighting('uniform')
