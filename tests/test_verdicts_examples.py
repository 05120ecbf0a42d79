"""Per-example correctness: logged by the evaluator, read for paired checks.

`tff_opt.program.evaluation` records which test examples each evaluation
got right (`CORRECT_FILE`); `binaries.claims.examples_of` turns a run's
record into what each measure reads, for `binaries.verdicts`' paired
test-set term.
"""

import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from binaries import claims
from binaries import reproduce
from binaries import tables
from tests import tiny
from tff_opt.program import evaluation

Measure = tables.Measure


def test_correctness_round_trips_bit_for_bit_and_a_round_is_replaced(
    tmp_path):
  path = str(tmp_path / evaluation.CORRECT_FILE)
  rng = np.random.default_rng(1)
  first, second, again = (rng.random(13) < 0.5 for _ in range(3))
  evaluation.write_correct(path, 5, second)
  evaluation.write_correct(path, 2, first)
  got = evaluation.read_correct(path)
  assert sorted(got) == [2, 5]
  np.testing.assert_array_equal(got[2], first)
  np.testing.assert_array_equal(got[5], second)
  evaluation.write_correct(path, 5, again)  # A resumed run's round again.
  np.testing.assert_array_equal(evaluation.read_correct(path)[5], again)
  # 13 examples take 2 bytes a round.
  with np.load(path) as data:
    assert data['bits'].shape == (2, 2)
  with pytest.raises(ValueError, match=r'12 examples at round 6, 13 before'):
    evaluation.write_correct(path, 6, np.ones(12, bool))
  assert evaluation.read_correct(str(tmp_path / 'absent.npz')) == {}


def test_the_evaluator_logs_which_examples_it_got_right(tmp_path):
  clients = tiny.make_clients(3, seed=6, sizes=(7, 12, 5))
  x = np.concatenate([c[0] for c in clients])
  y = np.concatenate([c[1] for c in clients])
  path = str(tmp_path / evaluation.CORRECT_FILE)
  evaluate = evaluation.build_evaluator(
      tiny.model_fn, tf.data.Dataset.from_tensor_slices((x, y)).batch(5),
      correct_path=path)
  for r, seed in ((1, 1), (2, 2)):
    kernel, bias = tiny.initial_weights(seed)
    expected = (x.astype(np.float64) @ kernel + bias).argmax(axis=1) == y
    metrics = evaluate(tff.learning.models.ModelWeights(
        trainable=tiny.initial_weights(seed), non_trainable=[]),
                       round_num=r)
    got = evaluation.read_correct(path)[r]
    np.testing.assert_array_equal(got, expected)
    assert metrics['accuracy'] == pytest.approx(expected.mean(), abs=1e-6)
  evaluate(tff.learning.models.ModelWeights(
      trainable=tiny.initial_weights(3), non_trainable=[]))
  assert sorted(evaluation.read_correct(path)) == [1, 2]  # No round: none.


def _run(tmp_path, setting, accuracies, correct):
  method = tables.Method('A', ())
  out = str(tmp_path / 'run')
  os.makedirs(out)
  with open(os.path.join(out, 'metrics.csv'), 'w') as f:
    f.write('round,train_loss,eval_accuracy\n')
    f.writelines(f'{r},1.0,{a}\n' for r, a in enumerate(accuracies, 1))
  for r, c in correct.items():
    evaluation.write_correct(os.path.join(out, evaluation.CORRECT_FILE), r,
                             np.array(c, bool))
  point = reproduce.Point(method, setting, 0, 'a', (), out)
  return claims.read_logs([point])


def test_examples_of_averages_the_evaluations_each_measure_reads(tmp_path):
  setting = tables.Setting('S', (), 4, (
      Measure('last 2', 'last_mean', 2), Measure('best', 'best_up_to', 4),
      Measure('final', 'final'), Measure('to 50%', 'rounds_to', 0.5,
                                         scale=1.0)))
  correct = {1: [0, 0, 0, 1], 2: [1, 1, 1, 0], 3: [1, 0, 1, 0],
             4: [0, 1, 1, 0]}
  logs = _run(tmp_path, setting, [0.25, 0.75, 0.5, 0.5], correct)
  got = claims.examples_of(logs)
  np.testing.assert_allclose(got[('A', 'S', 'last 2')][0],
                             [0.5, 0.5, 1.0, 0.0])  # Rounds 3-4.
  np.testing.assert_allclose(got[('A', 'S', 'best')][0], [1, 1, 1, 0])
  np.testing.assert_allclose(got[('A', 'S', 'final')][0], [0, 1, 1, 0])
  assert ('A', 'S', 'to 50%') not in got
  # The means are the run's values (in %).
  values = claims.values_of(logs)
  for m in ('last 2', 'best', 'final'):
    assert 100 * got[('A', 'S', m)][0].mean() == pytest.approx(
        values[('A', 'S', m)][0])


def test_a_run_missing_an_evaluation_has_no_examples(tmp_path):
  setting = tables.Setting('S', (), 2, (Measure('last 2', 'last_mean', 2),))
  logs = _run(tmp_path, setting, [0.5, 0.5], {2: [1, 0]})
  assert claims.examples_of(logs) == {}


def test_a_sequence_models_evaluation_logs_nothing(tmp_path):
  # Predictions (batch, time, vocabulary): no per-example record, and the
  # metrics are those of the plain pass.
  x = np.array([[1, 2, 3], [3, 2, 1], [2, 2, 2], [1, 1, 1]], np.int32)
  y = np.array([[2, 3, 0], [2, 1, 0], [2, 2, 0], [1, 1, 0]], np.int32)
  data = tf.data.Dataset.from_tensor_slices((x, y)).batch(2)

  def model_fn():
    keras_model = tf.keras.Sequential([
        tf.keras.layers.Embedding(4, 2, input_length=3),
        tf.keras.layers.Dense(4)])
    return tff.learning.models.from_keras_model(
        keras_model, loss=tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True), input_spec=data.element_spec,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])

  path = str(tmp_path / evaluation.CORRECT_FILE)
  weights = tff.learning.models.ModelWeights.from_model(model_fn())
  logged = evaluation.build_evaluator(model_fn, data, correct_path=path)(
      weights, round_num=1)
  plain = evaluation.build_evaluator(model_fn, data)(weights)
  assert logged == plain
  assert not os.path.exists(path)


def test_an_autoencoders_evaluation_logs_nothing(tmp_path):
  # Predictions (batch, pixels) like a classifier's, but float targets: no
  # argmax to compare, so no record, and the plain pass's metrics.
  x = np.random.default_rng(0).random((6, 4)).astype(np.float32)
  data = tf.data.Dataset.from_tensor_slices((x, x)).batch(4)

  def model_fn():
    keras_model = tf.keras.Sequential([tf.keras.layers.Dense(4,
                                                             input_shape=(4,))])
    return tff.learning.models.from_keras_model(
        keras_model, loss=tf.keras.losses.MeanSquaredError(),
        input_spec=data.element_spec,
        metrics=[tf.keras.metrics.MeanSquaredError()])

  path = str(tmp_path / evaluation.CORRECT_FILE)
  weights = tff.learning.models.ModelWeights.from_model(model_fn())
  logged = evaluation.build_evaluator(model_fn, data, correct_path=path)(
      weights, round_num=1)
  assert logged == evaluation.build_evaluator(model_fn, data)(weights)
  assert not os.path.exists(path)
