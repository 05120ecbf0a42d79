"""Evaluation of the global model outside TFF; the final full evaluation."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny
from tff_opt.program import evaluation


def _numpy_metrics(weights, x, y):
  kernel, bias = weights
  z = x.astype(np.float64) @ kernel + bias
  z -= z.max(axis=1, keepdims=True)
  log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
  return (float(np.mean(log_p.argmax(axis=1) == y)),
          float(-np.mean(log_p[np.arange(len(y)), y])))


@pytest.fixture(name='data', scope='module')
def fixture_data():
  clients = tiny.make_clients(3, seed=6, sizes=(7, 12, 5))
  x = np.concatenate([c[0] for c in clients])
  y = np.concatenate([c[1] for c in clients])
  return x, y


def _weights(seed):
  return tff.learning.models.ModelWeights(
      trainable=tiny.initial_weights(seed), non_trainable=[])


def test_evaluator_equals_numpy_over_every_example(data):
  x, y = data
  evaluate = evaluation.build_evaluator(
      tiny.model_fn, tf.data.Dataset.from_tensor_slices((x, y)).batch(5))
  for seed in (1, 2):  # Weights assigned and metrics reset on each call.
    accuracy, loss = _numpy_metrics(tiny.initial_weights(seed), x, y)
    metrics = evaluate(_weights(seed))
    assert metrics['accuracy'] == pytest.approx(accuracy, abs=1e-6)
    assert metrics['loss'] == pytest.approx(loss, rel=1e-5)
    assert metrics['num_examples'] == len(y)


def test_final_full_eval_writes_rounds_and_metrics(data, tmp_path):
  x, y = data
  metrics = evaluation.final_full_eval(
      tiny.model_fn, tf.data.Dataset.from_tensor_slices((x, y)).batch(4),
      _weights(3), output_dir=str(tmp_path), rounds=7)
  accuracy, loss = _numpy_metrics(tiny.initial_weights(3), x, y)
  assert metrics['accuracy'] == pytest.approx(accuracy, abs=1e-6)
  assert metrics['loss'] == pytest.approx(loss, rel=1e-5)
  assert os.listdir(tmp_path) == [evaluation.FINAL_EVAL_FILE]
  with open(tmp_path / evaluation.FINAL_EVAL_FILE) as f:
    assert json.load(f) == {'rounds': 7, **metrics}


def test_final_full_eval_into_a_missing_directory_raises(data, tmp_path):
  x, y = data
  with pytest.raises(OSError):
    evaluation.final_full_eval(
        tiny.model_fn, tf.data.Dataset.from_tensor_slices((x, y)).batch(4),
        _weights(3), output_dir=str(tmp_path / 'missing'), rounds=1)


def test_format_metrics_shows_scalars_by_name():
  assert evaluation.format_metrics(
      {'loss': 1.23456, 'accuracy': 0.5, 'num_examples': 30,
       'per_class': [0.1, 0.2]}) == 'accuracy=0.5000  loss=1.2346'
