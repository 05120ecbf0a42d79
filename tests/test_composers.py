"""The composer's finalizer-state route, through a momentum broadcast.

The server runs SGD with momentum; its momentum buffer m_t is broadcast with
the model and every local step adds lam * m_t to the gradient (the penalty
lam * <w, m_t>), a heavy-ball step like FedADC's. The process must equal a
NumPy implementation of exactly that.
"""

from typing import Any, NamedTuple

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny
from tff_opt.round import client_work as client_work_lib
from tff_opt.round import composers
from tff_opt.round import distributors

LAM = 0.3
CLIENT_LR = 0.1
SERVER_MOMENTUM = 0.5
LOCAL_STEPS = 2


class _MomentumBroadcast(NamedTuple):
  model_weights: Any
  server_momentum: Any


def _momentum_penalty(weights, broadcast, *, learning_rate):
  del learning_rate
  return LAM * tf.add_n([
      tf.reduce_sum(w * m)
      for w, m in zip(weights, broadcast.server_momentum)
  ])


@pytest.fixture(scope='module')
def process():

  @tff.tensorflow.computation
  def initial_weights_fn():
    return tff.learning.models.ModelWeights.from_model(tiny.model_fn())

  weights_type = initial_weights_fn.type_signature.result
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      tff.learning.optimizers.build_sgdm(1.0, momentum=SERVER_MOMENTUM),
      weights_type)
  distributor = distributors.with_finalizer_state(
      weights_type,
      finalizer.initialize.type_signature.result.member,
      lambda weights, state: _MomentumBroadcast(weights, state['accumulator']))
  client_work = client_work_lib.build_local_training(
      tiny.model_fn,
      tff.learning.optimizers.build_sgdm(CLIENT_LR),
      objective=client_work_lib.LocalObjective(penalty=_momentum_penalty),
      broadcast_type=distributor.next.type_signature.result.result.member)
  update_type = client_work.next.type_signature.result.result.member
  aggregator = tff.aggregators.MeanFactory().create(update_type.update,
                                                    update_type.update_weight)
  return composers.compose_learning_process(initial_weights_fn, distributor,
                                            client_work, aggregator,
                                            finalizer)


def test_momentum_broadcast_matches_numpy(process):
  clients = tiny.make_clients()
  state = tiny.set_weights(process, process.initialize(),
                           tiny.initial_weights())
  for _ in range(3):
    state = process.next(
        state, tiny.full_batch_datasets(clients, LOCAL_STEPS)).state

  w = [t.astype(np.float64) for t in tiny.initial_weights()]
  m = [np.zeros_like(t) for t in w]
  for _ in range(3):
    finals = [
        tiny.local_sgd(w, x, y, CLIENT_LR, LOCAL_STEPS,
                       extra_grad=lambda _, m=m: [LAM * t for t in m])
        for x, y in clients
    ]
    mean = tiny.weighted_mean(finals, [len(y) for _, y in clients])
    g = [a - b for a, b in zip(w, mean)]
    m = [SERVER_MOMENTUM * a + b for a, b in zip(m, g)]
    w = [a - b for a, b in zip(w, m)]
  assert np.abs(m[0]).max() > 1e-3  # the momentum did act
  for got, want in zip(tiny.trainable(process, state), w):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_model_weights_and_hparams_accessors(process):
  state = tiny.set_weights(process, process.initialize(),
                           tiny.initial_weights())
  for got, want in zip(tiny.trainable(process, state), tiny.initial_weights()):
    np.testing.assert_array_equal(got, want)
  hparams = process.get_hparams(state)
  assert hparams['client_work']['learning_rate'] == pytest.approx(CLIENT_LR)
  assert hparams['finalizer']['momentum'] == pytest.approx(SERVER_MOMENTUM)
  hparams['client_work']['learning_rate'] = np.float32(0.02)
  new_state = process.set_hparams(state, hparams)
  assert process.get_hparams(new_state)['client_work'][
      'learning_rate'] == pytest.approx(0.02)
