"""Per-client communication in bytes (`tff_opt/round/communication.py`).

`bytes_per_client` counts one value of the broadcast type down and one of
the update type up; on the tiny model (4 x 3 kernel, 3 biases, float32) a
model is (12 + 3) x 4 = 60 bytes, worked out by hand here.
`with_communication_metrics` adds those numbers to a process's metrics and
changes nothing else. Each algorithm's own numbers (FedFOR's Table 1, ...)
are checked in its file.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny
from tff_opt.round import client_work
from tff_opt.round import communication
from tff_opt.round import distributors

MODEL_BYTES = (tiny.NUM_FEATURES * tiny.NUM_CLASSES + tiny.NUM_CLASSES) * 4


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


@pytest.fixture(scope='module')
def weights_type():
  with tf.Graph().as_default():
    return tff.learning.models.weights_type_from_model(tiny.model_fn())


@pytest.fixture(scope='module')
def local_training():
  return client_work.build_local_training(tiny.model_fn, _sgd(0.1))


def test_one_model_each_way(weights_type, local_training):
  assert MODEL_BYTES == 60
  counted = communication.bytes_per_client(
      tff.learning.templates.build_broadcast_process(weights_type),
      local_training)
  assert dict(counted) == {'bytes_server_to_client': MODEL_BYTES,
                           'bytes_client_to_server': MODEL_BYTES}
  assert all(isinstance(v, np.int64) for v in counted.values())


def test_two_models_and_a_bool_down(weights_type, local_training):
  counted = communication.bytes_per_client(
      distributors.with_previous_model(weights_type), local_training)
  assert counted['bytes_server_to_client'] == 2 * MODEL_BYTES + 1
  assert counted['bytes_client_to_server'] == MODEL_BYTES


def test_metrics_gain_the_bytes_and_nothing_else_changes():
  process = tff.learning.algorithms.build_weighted_fed_avg(
      tiny.model_fn, client_optimizer_fn=_sgd(0.1),
      server_optimizer_fn=_sgd(1.0))
  bytes_metrics = {'bytes_server_to_client': np.int64(7),
                   'bytes_client_to_server': np.int64(11)}
  wrapped = communication.with_communication_metrics(process, bytes_metrics)
  clients = tiny.make_clients()
  state = tiny.set_weights(process, process.initialize(),
                           tiny.initial_weights())
  plain = process.next(state, tiny.full_batch_datasets(clients, 2))
  ours = wrapped.next(state, tiny.full_batch_datasets(clients, 2))
  assert dict(ours.metrics[communication.COMMUNICATION_KEY]) == {
      'bytes_server_to_client': 7, 'bytes_client_to_server': 11}
  assert [k for k in ours.metrics if k != communication.COMMUNICATION_KEY
          ] == list(plain.metrics)
  assert ours.metrics['client_work'] == plain.metrics['client_work']
  for got, want in zip(tiny.trainable(wrapped, ours.state),
                       tiny.trainable(process, plain.state)):
    np.testing.assert_array_equal(got, want)
  assert wrapped.get_hparams(ours.state).keys() == process.get_hparams(
      plain.state).keys()
