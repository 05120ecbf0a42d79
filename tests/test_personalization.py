"""Classifier calibration (FedADC paper IV-D) against NumPy; the binary flag.

The NumPy reference fine-tunes the last layer by full-batch or mini-batch
SGD on the loss the paper describes (cross-entropy, optionally the FedADC+
self-confidence KL and a proximal term), written from the equations, not
from the library's code.
"""

import contextlib
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
from absl import flags

import tasks
from binaries import train
from tasks import models as task_models
from tests import binary
from tests import tiny
from tff_opt import algorithms
from tff_opt.program import personalization
from tff_opt.program import training_loop

LR = 0.5
EPOCHS = 3
SIZES = (10, 13, 7)


# --- NumPy reference ----------------------------------------------------------


def _softmax(z):
  z = z - z.max(axis=1, keepdims=True)
  e = np.exp(z)
  return e / e.sum(axis=1, keepdims=True)


def numpy_calibrate(w0, x, y, *, lr, steps, mu=0.0, lam=0.0, tau=1.0):
  """Full-batch SGD of a linear softmax layer on the calibration loss."""
  k0, b0 = [np.asarray(t, np.float64) for t in w0]
  k, b = k0.copy(), b0.copy()
  x = x.astype(np.float64)
  n, classes = x.shape[0], k.shape[1]
  onehot = np.eye(classes)[y]
  # FedADC+ target (Eq. 8-9) from the global model (teacher) and the
  # client's label proportions gamma, rho = gamma / max gamma.
  teacher = _softmax((x @ k0 + b0) / tau)
  gamma = np.bincount(y, minlength=classes) / n
  rho = gamma / gamma.max()
  off = (1 - onehot) * (1 - rho) * teacher
  target = off + onehot * (1 - off.sum(axis=1, keepdims=True))
  for _ in range(steps):
    z = x @ k + b
    # d/dz of (1-lam) CE + lam tau^2 KL(target || softmax(z / tau)).
    g = ((1 - lam) * (_softmax(z) - onehot) + lam * tau *
         (_softmax(z / tau) - target)) / n
    k, b = (k - lr * (x.T @ g + mu * (k - k0)),
            b - lr * (g.sum(axis=0) + mu * (b - b0)))
  return [k, b]


def numpy_metrics(w, x, y):
  k, b = w
  p = _softmax(x.astype(np.float64) @ k + b)
  loss = -np.mean(np.log(p[np.arange(len(y)), y]))
  return float(np.mean(p.argmax(axis=1) == y)), float(loss)


def _arrays(dataset):
  examples = list(dataset.as_numpy_iterator())
  return np.stack([e[0] for e in examples]), np.array([e[1] for e in examples])


# --- Tiny linear model: the whole model is the last layer ---------------------


@pytest.fixture(scope='module')
def tiny_inputs():
  clients = tiny.make_clients(3, seed=4, sizes=SIZES)
  inputs, skipped = personalization.build_client_inputs(
      [tf.data.Dataset.from_tensor_slices(c) for c in clients], seed=2)
  assert skipped == []
  return inputs


@pytest.fixture(scope='module')
def tiny_weights():
  return tff.learning.models.ModelWeights(
      trainable=tiny.initial_weights(), non_trainable=[])


def _check_against_numpy(results, inputs, **loss_args):
  base, tuned = (results[personalization.BASELINE_KEY],
                 results[personalization.STRATEGY_KEY])
  keys = list(zip(tuned['num_train_examples'], tuned['num_test_examples']))
  assert len(set(keys)) == len(inputs)  # Each client identified by sizes.
  for client in inputs:
    x_train, y_train = _arrays(client['train_data'])
    x_test, y_test = _arrays(client['test_data'])
    i = keys.index((len(y_train), len(y_test)))
    w = numpy_calibrate(tiny.initial_weights(), x_train, y_train, lr=LR,
                        steps=EPOCHS, **loss_args)
    accuracy, loss = numpy_metrics(w, x_test, y_test)
    assert tuned['accuracy'][i] == pytest.approx(accuracy, abs=1e-6)
    assert tuned['loss'][i] == pytest.approx(loss, rel=1e-5)
    accuracy, loss = numpy_metrics(tiny.initial_weights(), x_test, y_test)
    assert base['accuracy'][i] == pytest.approx(accuracy, abs=1e-6)
    assert base['loss'][i] == pytest.approx(loss, rel=1e-5)
    assert base['num_test_examples'][i] == len(y_test)


def test_plain_calibration_equals_numpy_sgd(tiny_inputs, tiny_weights):
  # Batch larger than any client: E epochs = E full-batch steps.
  computation = personalization.build_personalization_eval(
      tiny.model_fn, optimizer=tff.learning.optimizers.build_sgdm(LR),
      batch_size=100, num_clients=3, epochs=EPOCHS)
  results = personalization.evaluate(computation, tiny_weights, tiny_inputs)
  _check_against_numpy(results, tiny_inputs)
  # Calibration moved the model: the test loss changed for every client.
  assert np.all(results['calibrated']['loss'] !=
                results['baseline_metrics']['loss'])


def test_proximal_and_distillation_equal_numpy(tiny_inputs, tiny_weights):
  computation = personalization.build_personalization_eval(
      tiny.model_fn, optimizer=tff.learning.optimizers.build_sgdm(LR),
      batch_size=100, num_clients=3, epochs=EPOCHS, mu=0.7,
      distill_lambda=0.4, distill_temperature=2.0)
  results = personalization.evaluate(computation, tiny_weights, tiny_inputs)
  _check_against_numpy(results, tiny_inputs, mu=0.7, lam=0.4, tau=2.0)


# --- Which variables: a two-layer Keras model and the digits CNN --------------


def _two_layer(use_bias=True):
  tf.keras.utils.set_random_seed(5)
  keras_model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(tiny.NUM_FEATURES,)),
      tf.keras.layers.Dense(5, activation='relu'),
      tf.keras.layers.Dense(tiny.NUM_CLASSES, use_bias=use_bias),
  ])
  model = tff.learning.models.from_keras_model(
      keras_model,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=tiny.INPUT_SPEC)
  return keras_model, model


def _same_variables(got, want):
  return [v.ref() for v in got] == [v.ref() for v in want]


def test_last_layer_indices_are_the_last_keras_layer():
  keras_model, model = _two_layer()
  indices = personalization.last_layer_indices(model)
  assert indices == (2, 3)
  assert _same_variables([model.trainable_variables[i] for i in indices],
                         keras_model.layers[-1].trainable_weights)
  keras_model, model = _two_layer(use_bias=False)
  assert personalization.last_layer_indices(model) == (2,)
  assert _same_variables([model.trainable_variables[2]],
                         keras_model.layers[-1].trainable_weights)


def test_last_layer_of_the_digits_cnn_is_its_128_to_10_dense():
  keras_model = task_models.create_digits_cnn(10)
  model = tff.learning.models.from_keras_model(
      keras_model,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=(tf.TensorSpec([None, 8, 8, 1], tf.float32),
                  tf.TensorSpec([None], tf.int32)))
  indices = personalization.last_layer_indices(model)
  assert indices == (6, 7)
  assert [model.trainable_variables[i].shape.as_list() for i in indices] == [
      [128, 10], [10]]
  assert _same_variables([model.trainable_variables[i] for i in indices],
                         keras_model.layers[-1].trainable_weights)


def test_fine_tuning_changes_only_the_last_layer_and_equals_numpy():
  rng = np.random.default_rng(9)
  x = rng.normal(size=(8, tiny.NUM_FEATURES)).astype(np.float32)
  y = np.array([0, 2, 2, 1, 0, 2, 1, 2], np.int32)
  fine_tune = personalization.build_fine_tune_fn(
      lambda: _two_layer()[1],
      optimizer=tff.learning.optimizers.build_sgdm(0.3), epochs=2,
      batch_size=3)()
  _, model = _two_layer()
  before = [v.numpy().copy() for v in model.trainable_variables]
  n = fine_tune(model, tf.data.Dataset.from_tensor_slices((x, y)))
  after = [v.numpy() for v in model.trainable_variables]
  assert int(n) == 8
  np.testing.assert_array_equal(after[0], before[0])  # Bit-identical body.
  np.testing.assert_array_equal(after[1], before[1])
  # NumPy: the body's features are fixed; mini-batches [0:3], [3:6], [6:8]
  # in the same order each of the 2 epochs.
  h = np.maximum(x.astype(np.float64) @ before[0] + before[1], 0.0)
  w = [before[2], before[3]]
  for _ in range(2):
    for s in (slice(0, 3), slice(3, 6), slice(6, 8)):
      w = numpy_calibrate(w, h[s], y[s], lr=0.3, steps=1)
  np.testing.assert_allclose(after[2], w[0], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(after[3], w[1], rtol=1e-5, atol=1e-6)
  assert not np.allclose(after[2], before[2])


def test_explicit_variable_indices_fine_tune_those_only():
  fine_tune = personalization.build_fine_tune_fn(
      lambda: _two_layer()[1],
      optimizer=tff.learning.optimizers.build_sgdm(0.3), batch_size=4,
      variable_indices=[1])()
  _, model = _two_layer()
  before = [v.numpy().copy() for v in model.trainable_variables]
  x = np.random.default_rng(1).normal(size=(6, 4)).astype(np.float32)
  fine_tune(model, tf.data.Dataset.from_tensor_slices(
      (x, np.array([0, 1, 2, 0, 1, 2], np.int32))))
  after = [v.numpy() for v in model.trainable_variables]
  changed = [not np.array_equal(a, b) for a, b in zip(after, before)]
  assert changed == [False, True, False, False]


# --- Per-client splits and summaries ------------------------------------------


def test_split_is_per_class_half_up_disjoint_and_seeded():
  labels = np.array([0, 2, 0, 1, 2, 0, 0, 1, 2])
  train, test = personalization.split_examples(
      labels, 0.5, np.random.default_rng(3))
  assert sorted(np.concatenate([train, test]).tolist()) == list(range(9))
  # Class 0: 4 -> 2 + 2; class 1: 2 -> 1 + 1; class 2: 3 -> 2 + 1.
  assert np.bincount(labels[train], minlength=3).tolist() == [2, 1, 2]
  assert np.bincount(labels[test], minlength=3).tolist() == [2, 1, 1]
  again = personalization.split_examples(labels, 0.5,
                                         np.random.default_rng(3))
  assert train.tolist() == again[0].tolist()
  assert test.tolist() == again[1].tolist()
  train, _ = personalization.split_examples(labels, 0.25,
                                            np.random.default_rng(3))
  assert np.bincount(labels[train], minlength=3).tolist() == [1, 1, 1]


def test_split_rejects_fraction_outside_unit_interval():
  with pytest.raises(ValueError,
                     match=r'^train_fraction must be in \(0, 1\), got 1\.0\.$'):
    personalization.split_examples(np.array([0, 1]), 1.0,
                                   np.random.default_rng(0))


def test_client_without_a_test_example_is_skipped():
  x = np.zeros((3, 4), np.float32)
  datasets = [
      tf.data.Dataset.from_tensor_slices((x, np.array([0, 0, 1], np.int32))),
      tf.data.Dataset.from_tensor_slices((x[:1], np.array([2], np.int32))),
  ]
  inputs, skipped = personalization.build_client_inputs(datasets, seed=0)
  assert skipped == [1]
  assert len(inputs) == 1
  assert len(list(inputs[0]['train_data'])) == 2  # round(0.5 * 2) + 1
  assert len(list(inputs[0]['test_data'])) == 1


def test_summary_statistics_by_hand():
  summary = personalization.summarize([0.1, 0.5, 0.2, 0.9, 0.4])
  expected = {'mean': 0.42, 'median': 0.4, 'p10': 0.14, 'p25': 0.2,
              'p75': 0.5, 'p90': 0.74, 'min': 0.1, 'max': 0.9}
  assert summary.pop('num_clients') == 5
  assert summary == pytest.approx(expected)
  with pytest.raises(ValueError, match='^values must hold at least one'):
    personalization.summarize([])


@pytest.mark.parametrize('kwargs, message', [
    ({'epochs': 0}, r'epochs must be a positive integer, got 0\.'),
    ({'batch_size': 2.5}, r'batch_size must be a positive integer, got 2\.5\.'),
    ({'mu': -1.0}, r'mu must be a non-negative number, got -1\.0\.'),
    ({'distill_lambda': 1.5}, r'distill_lambda must be in \[0, 1\], got 1\.5\.'),
    ({'distill_temperature': 0.0},
     r'distill_temperature must be positive, got 0\.0\.'),
    ({'variable_indices': (1, 2)}, r'variable_indices must be distinct '
     r'indices in \[0, 2\), at least one, got \(1, 2\)\.'),
    ({'num_clients': 0}, r'num_clients must be a positive integer, got 0\.'),
])
def test_bad_arguments_are_named(kwargs, message):
  args = dict(optimizer=tff.learning.optimizers.build_sgdm(0.1),
              batch_size=4, num_clients=2)
  args.update(kwargs)
  with pytest.raises(ValueError, match='^' + message + '$'):
    personalization.build_personalization_eval(tiny.model_fn, **args)


def test_regression_model_is_refused():
  def model_fn():
    return tff.learning.models.from_keras_model(
        tiny.keras_model(), loss=tf.keras.losses.MeanSquaredError(),
        input_spec=(tf.TensorSpec([None, 4], tf.float32),
                    tf.TensorSpec([None, 3], tf.float32)))

  with pytest.raises(ValueError, match=r'one integer label per example; the '
                     r'model takes labels float32\[None, 3\]\.$'):
    personalization.check_classifier(model_fn)
  personalization.check_classifier(tiny.model_fn)  # A classifier passes.


# --- Digits with strong label skew: calibration helps -------------------------


def test_calibration_beats_the_global_model_on_skewed_digits():
  task = tasks.create_task(
      'digits', train_client_spec=tff.simulation.baselines.ClientSpec(2, 10),
      alpha=0.1, seed=0)
  process = algorithms.build_fed_opt(
      task.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))
  tf.keras.utils.set_random_seed(0)
  state = process.initialize()
  train_ids = sorted(task.datasets.train_data.client_ids)
  for r in range(1, 11):
    state = process.next(state, [
        task.datasets.train_preprocess_fn(
            task.datasets.train_data.create_tf_dataset_for_client(c))
        for c in training_loop.sample_clients(train_ids, 10, seed=0,
                                              round_num=r)
    ]).state
  test_data = task.datasets.test_data
  inputs, skipped = personalization.build_client_inputs(
      [test_data.create_tf_dataset_for_client(c)
       for c in sorted(test_data.client_ids)], seed=0)
  assert (len(inputs), skipped) == (20, [])
  computation = personalization.build_personalization_eval(
      task.model_fn, optimizer=tff.learning.optimizers.build_sgdm(0.1),
      batch_size=10, num_clients=20)
  summary = personalization.report(personalization.evaluate(
      computation, process.get_model_weights(state), inputs))
  before = summary['global']['accuracy']['mean']
  after = summary['calibrated']['accuracy']['mean']
  # Measured: 0.23 -> 0.90 (seed 0).
  assert after > before + 0.3
  assert summary['accuracy_gain']['median'] > 0


# --- After training: choose, calibrate, report (what the binary calls) -------


def test_choose_clients_all_sorted_or_a_seeded_sample():
  ids = ['c', 'a', 'e', 'b', 'd']
  assert personalization.choose_clients(ids, None, seed=0) == [
      'a', 'b', 'c', 'd', 'e']
  sample = personalization.choose_clients(ids, 3, seed=4)
  assert sample == sorted(sample) and len(set(sample)) == 3
  assert set(sample) <= set(ids)
  assert personalization.choose_clients(ids, 3, seed=4) == sample
  assert {tuple(personalization.choose_clients(ids, 3, seed=s))
          for s in range(10)} != {tuple(sample)}  # The seed matters.


def test_choose_clients_refuses_more_than_there_are():
  with pytest.raises(ValueError, match=r'^num_clients=6 is larger than the 5 '
                     r'held-out clients\.$'):
    personalization.choose_clients(['a', 'b', 'c', 'd', 'e'], 6, seed=0)


def test_calibrate_clients_equals_numpy_and_skips_empty_splits(tiny_weights):
  clients = tiny.make_clients(3, seed=4, sizes=SIZES)
  datasets = [tf.data.Dataset.from_tensor_slices(c) for c in clients]
  # A client with one example has no test split: skipped, reported by id.
  datasets.insert(1, datasets[0].take(1))
  result = personalization.calibrate_clients(
      tiny.model_fn, tiny_weights, datasets, ['a', 'one', 'b', 'c'],
      optimizer=tff.learning.optimizers.build_sgdm(LR), batch_size=100,
      epochs=EPOCHS, seed=2)
  assert result['clients'] == ['a', 'b', 'c']
  assert result['skipped_clients'] == ['one']
  inputs, _ = personalization.build_client_inputs(datasets, seed=2)
  want = []
  for client in inputs:
    x_train, y_train = _arrays(client['train_data'])
    x_test, y_test = _arrays(client['test_data'])
    w = numpy_calibrate(tiny.initial_weights(), x_train, y_train, lr=LR,
                        steps=EPOCHS)
    want.append(numpy_metrics(w, x_test, y_test)[0])
  assert sorted(c['calibrated_accuracy'] for c in result['per_client']) == (
      pytest.approx(sorted(want), abs=1e-6))
  assert result['calibrated']['accuracy']['mean'] == pytest.approx(
      np.mean(want), abs=1e-6)


def test_calibrate_clients_refuses_when_no_client_has_both_splits(
    tiny_weights):
  x = np.zeros((1, tiny.NUM_FEATURES), np.float32)
  one_example = tf.data.Dataset.from_tensor_slices((x, np.array([0],
                                                                np.int32)))
  with pytest.raises(ValueError, match=r'^no held-out client has examples '
                     r'for both its train and its test split\.$'):
    personalization.calibrate_clients(
        tiny.model_fn, tiny_weights, [one_example], ['a'],
        optimizer=tff.learning.optimizers.build_sgdm(LR), batch_size=4)


def test_write_report_and_summary_line(tmp_path):
  accuracy = lambda mean, median: {'mean': mean, 'median': median,
                                   'num_clients': 4}
  result = {'global': {'accuracy': accuracy(0.25, 0.2)},
            'calibrated': {'accuracy': accuracy(0.875, 0.9)},
            'accuracy_gain': {'mean': 0.625}, 'clients': ['a']}
  path = personalization.write_report(str(tmp_path), result, rounds=3,
                                      settings={'epochs': 2})
  assert path == str(tmp_path / personalization.PERSONALIZATION_FILE)
  with open(path) as f:
    assert json.load(f) == {'rounds': 3, 'settings': {'epochs': 2}, **result}
  assert os.listdir(tmp_path) == [personalization.PERSONALIZATION_FILE]
  assert personalization.summary_line(result) == (
      'personalization: 4 clients, accuracy global mean=0.2500 '
      'median=0.2000 -> calibrated mean=0.8750 median=0.9000 (mean gain '
      '+0.6250)')


# --- The binary ----------------------------------------------------------------

FAST = ['--task=digits', '--clients_per_round=3', '--client_epochs=1',
        '--rounds=2', '--eval_every=2', '--seed=1']
SUMMARY_KEYS = {'mean', 'median', 'p10', 'p25', 'p75', 'p90', 'min', 'max',
                'num_clients'}


_run = binary.run_train


def test_binary_writes_personalization_json(tmp_path):
  output_dir = str(tmp_path / 'run')
  # A real file, not capsys: TFF's worker process inherits sys.stdout.
  with open(tmp_path / 'stdout.txt', 'w') as out, \
      contextlib.redirect_stdout(out):
    code = _run(*FAST, '--personalize', '--personalize_clients=6',
                '--personalize_epochs=1', f'--output_dir={output_dir}')
  assert code == 0
  with open(os.path.join(output_dir, 'personalization.json')) as f:
    result = json.load(f)
  assert set(result) == {'rounds', 'settings', 'clients', 'skipped_clients',
                         'global', 'calibrated', 'accuracy_gain',
                         'per_client'}
  assert result['settings'] == {
      'epochs': 1, 'train_fraction': 0.5, 'mu': 0.0, 'distill_lambda': 0.0,
      'batch_size': 10, 'client_opt': 'sgd', 'client_lr': 0.1}
  assert len(result['clients']) == 6 and result['skipped_clients'] == []
  for group in ('global', 'calibrated'):
    for metric in ('accuracy', 'loss'):
      assert set(result[group][metric]) == SUMMARY_KEYS
      assert result[group][metric]['num_clients'] == 6
  per_client = result['per_client']
  assert len(per_client) == 6
  assert result['global']['accuracy']['mean'] == pytest.approx(
      np.mean([c['global_accuracy'] for c in per_client]))
  assert result['accuracy_gain']['mean'] == pytest.approx(
      np.mean([c['calibrated_accuracy'] - c['global_accuracy']
               for c in per_client]))
  # The digits test clients hold 18 examples: 9-ish per split.
  assert sum(c['num_train_examples'] + c['num_test_examples']
             for c in per_client) == 6 * 18
  lines = [l for l in (tmp_path / 'stdout.txt').read_text().splitlines()
           if l.startswith('personalization: ')]
  assert len(lines) == 1
  assert lines[0].startswith('personalization: 6 clients, accuracy global '
                             'mean=')


@pytest.mark.parametrize('argv, message', [
    (['--personalize_epochs=0'],
     'flag --personalize_epochs=0: 0 is not a positive integer'),
    (['--personalize_clients=0'],
     'flag --personalize_clients=0: 0 is not a positive integer'),
    (['--personalize_train_fraction=1'],
     'flag --personalize_train_fraction=1.0: must be in (0, 1)'),
    (['--personalize_mu=-1'],
     'flag --personalize_mu=-1: -1.0 is not a non-negative number'),
    (['--personalize_distill_lambda=2'],
     'flag --personalize_distill_lambda=2: 2.0 is not a number in the range '
     '[0.0, 1.0]'),
])
def test_bad_personalize_flags_name_the_flag(argv, message):
  train.FLAGS.unparse_flags()
  with pytest.raises(flags.IllegalFlagValueError) as error:
    train.FLAGS(['train', *argv])
  train.FLAGS.unparse_flags()
  assert str(error.value) == message


def test_too_many_personalize_clients_is_refused_before_training(
    tmp_path, capsys):
  output_dir = tmp_path / 'run'
  assert _run(*FAST, '--personalize', '--personalize_clients=21',
              f'--output_dir={output_dir}') == 2
  assert capsys.readouterr().err == (
      'train: error: --personalize_clients=21 is larger than the 20 '
      'held-out clients of task digits.\n')
  assert not (output_dir / 'metrics.csv').exists()
