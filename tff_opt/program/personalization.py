"""Personalization by classifier calibration (FedADC paper, Section IV-D).

After federated training, each client starts from the global model w and
fine-tunes only its classifier (the last layer, w_last) on its own training
split for E local epochs (E = 2 in the paper), the body staying frozen:

    for each of E epochs, for each batch b of the client's train split:
      loss(w_last) = (1 - lambda) * L_k(w; b)
                     + lambda * tau^2 * mean_b KL(p_hat || softmax(f(x|w)/tau))
                     + (mu / 2) * ||w_last - w_last,global||^2
      w_last <- optimizer.next(w_last, grad loss(w_last))

lambda = mu = 0 is plain calibration; mu > 0 adds FedProx's proximal term
(`fed_prox.proximal`, restricted to the fine-tuned variables); lambda > 0 the
FedADC+ self-confidence distillation (Eq. 7-9, `round/losses.py`), with
the global model as teacher and the client's label proportions from its
train split. The calibrated model and the global one are then evaluated on
the client's own test split; the paper reports the mean per-client accuracy
of both. This module collects, per client, accuracy and loss before
(`baseline_metrics`, the global model) and after (`calibrated`) calibration,
and summarizes their distribution over clients (`summarize`).
`calibrate_clients` does it all for a list of clients' datasets
(`choose_clients` picks them), `write_report` writes `personalization.json`.

The federated computation is TFF's own
`tff.learning.algorithms.build_personalization_eval_computation`: it fits
(model_fn, one personalization strategy named `calibrated`, a baseline
evaluation; client inputs `{'train_data', 'test_data'}` of unbatched
examples). Its reservoir sample is sized to the number of clients evaluated,
so every client's metrics are collected (no time-seeded sampling); within a
client, `baseline_metrics[i]` and `calibrated[i]` come from the same client,
but the position i is not tied to the order of the inputs.

Choices the paper leaves open (each written here, each tested):

- "The last layer" (`last_layer_indices`): the model's last trainable
  variable of rank >= 2 (the last kernel) and every trainable variable after
  it (its bias), by index in `model.trainable_variables`. For Keras models
  wrapped by `tff.learning.models.from_keras_model` these are exactly the
  trainable weights of the last layer that has a kernel: (6, 7) for the
  digits CNN (dense 128 -> 10 kernel and bias), (2, 3) for a two-Dense
  model, (0, 1) for a single linear layer. Callers may name other indices.
- Every trainable variable outside the selection is frozen (no gradient is
  taken for it) and non-trainable variables are untouched.
- Each client's own train and test splits (`split_examples`,
  `build_client_inputs`): the clients evaluated are the task's held-out
  (test) clients, which the global model never trained on; each client's
  examples are split per class, round(n_c * train_fraction) (half rounded
  up) of its n_c examples of class c to the train split and the rest to the
  test split, so both follow the client's own label distribution.
  train_fraction = 0.5 by default. The split, and the order in which the
  examples are visited, are a seeded permutation (`numpy` generator seeded
  by (seed, client position)). Clients whose train or test split is empty
  are left out (`build_client_inputs` reports them).
- The fine-tuning order: the train split in that seeded order, batched by
  `batch_size`, the same batches each epoch (no reshuffle): the result is a
  function of the seed.
- The optimizer: the caller's (the binary passes the client optimizer of
  the run, `--client_opt` / `--client_lr`; no schedule).
- Metrics (`evaluate_metrics`): accuracy = share of test labels equal to the
  argmax of the predictions (the model's predictions must be logits or
  scores over classes), loss = the model's loss averaged over test
  examples, plus the numbers of train and test examples.
- The summary statistics are over clients, each client counting once
  (unweighted): mean, median, 10th/25th/75th/90th percentiles (NumPy's
  linear interpolation), min, max; also the mean per-client gain.
- Distillation: as FedADC+ (`round/losses.py`'s `self_confidence_kl`):
  tau = 4 (CS-KD's, FedADC+'s) by default; the teacher is the global model
  the client started from.
"""

import collections
from collections.abc import Callable, Sequence
import json
import os
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import checks
from tff_opt.program import files
from tff_opt.round import ground
from tff_opt.round import losses
from tff_opt.algorithms import _common
from tff_opt.algorithms import fed_prox

STRATEGY_KEY = 'calibrated'
BASELINE_KEY = 'baseline_metrics'
TRAIN_DATA_KEY = 'train_data'
TEST_DATA_KEY = 'test_data'
DEFAULT_EPOCHS = 2
DEFAULT_TRAIN_FRACTION = 0.5
PERCENTILES = (10, 25, 75, 90)


# --- Which variables are fine-tuned -------------------------------------------


def last_layer_indices(model: tff.learning.models.VariableModel
                       ) -> tuple[int, ...]:
  """Indices, in `model.trainable_variables`, of the last layer's variables.

  The rule: the last trainable variable of rank >= 2 (the classifier's
  kernel) and every trainable variable after it (its bias).

  Args:
    model: A `tff.learning.models.VariableModel`.

  Returns:
    A tuple of increasing indices.

  Raises:
    ValueError: If the model has no trainable variable of rank >= 2.
  """
  ranks = [len(v.shape) for v in model.trainable_variables]
  kernels = [i for i, rank in enumerate(ranks) if rank >= 2]
  if not kernels:
    raise ValueError('the model has no trainable variable of rank >= 2 (no '
                     'last-layer kernel); pass variable_indices.')
  return tuple(range(kernels[-1], len(ranks)))


def _check_indices(indices: Sequence[int], num_variables: int
                   ) -> tuple[int, ...]:
  indices = tuple(int(i) for i in indices)
  if (not indices or len(set(indices)) != len(indices) or
      not all(0 <= i < num_variables for i in indices)):
    raise ValueError(
        'variable_indices must be distinct indices in [0, '
        f'{num_variables}), at least one, got {indices!r}.')
  return tuple(sorted(indices))


# --- Pieces run on a client (TensorFlow) -------------------------------------


def evaluate_metrics(model: tff.learning.models.VariableModel,
                     dataset: tf.data.Dataset) -> collections.OrderedDict:
  """Accuracy and mean loss of `model` on batched `dataset`.

  Args:
    model: A `VariableModel` whose predictions are class scores (logits).
    dataset: Batches `(x, y)` (or `{'x', 'y'}`) with integer labels.

  Returns:
    `{'accuracy', 'loss', 'num_test_examples'}` scalars (float32, float32,
    int64); accuracy and loss are 0 on an empty dataset.
  """
  totals = (tf.constant(0.0), tf.constant(0.0), tf.constant(0, tf.int64),
            tf.constant(0, tf.int64))
  for batch in iter(dataset):
    output = model.forward_pass(batch, training=False)
    _, y = ground.features_and_labels(batch)
    predicted = tf.argmax(output.predictions, axis=-1)
    labels = tf.cast(tf.reshape(y, tf.shape(predicted)), tf.int64)
    n = tf.shape(predicted, out_type=tf.int64)[0]
    correct, loss_sum, count, examples = totals
    totals = (
        correct + tf.reduce_sum(tf.cast(tf.equal(predicted, labels),
                                        tf.float32)),
        loss_sum + tf.cast(output.loss, tf.float32) * tf.cast(n, tf.float32),
        count + tf.size(labels, out_type=tf.int64),
        examples + n)
  correct, loss_sum, count, examples = totals
  return collections.OrderedDict(
      accuracy=tf.math.divide_no_nan(correct, tf.cast(count, tf.float32)),
      loss=tf.math.divide_no_nan(loss_sum, tf.cast(examples, tf.float32)),
      num_test_examples=examples)


def check_classifier(
    model_fn: Callable[[], tff.learning.models.VariableModel]) -> None:
  """Checks that the model takes one integer label per example.

  Raises:
    ValueError: If the label of the model's input spec is not an integer
      tensor of shape [batch].
  """
  with tf.Graph().as_default():
    _, y_spec = ground.features_and_labels(model_fn().input_spec)
  if y_spec.shape.rank != 1 or not y_spec.dtype.is_integer:
    raise ValueError(
        'personalization needs a classifier with one integer label per '
        f'example; the model takes labels {y_spec.dtype.name}'
        f'{y_spec.shape.as_list()}.')


def build_fine_tune_fn(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    optimizer: tff.learning.optimizers.Optimizer,
    epochs: int = DEFAULT_EPOCHS,
    batch_size: int,
    variable_indices: Optional[Sequence[int]] = None,
    mu: float = 0.0,
    distill_lambda: float = 0.0,
    distill_temperature: float = losses.SELF_CONFIDENCE_TEMPERATURE,
) -> Callable[[], Callable[..., tf.Tensor]]:
  """Returns a builder of `fine_tune(model, train_data) -> num_examples`.

  The builder (called where the variables may be created, e.g. inside a TFF
  computation) returns a `tf.function` that fine-tunes, in place, the
  selected trainable variables of `model` on the unbatched `train_data`, as
  in the module docstring, starting from the model's current weights (the
  global model: the proximal anchor and the distillation teacher). It
  returns the number of train examples (int64).

  Args:
    model_fn: The task's no-arg model builder.
    optimizer: A `tff.learning.optimizers.Optimizer` for the local steps.
    epochs: Local epochs E, a positive integer.
    batch_size: Local batch size, a positive integer.
    variable_indices: Indices in `model.trainable_variables` to fine-tune;
      `last_layer_indices` when `None`.
    mu: Proximal strength, >= 0 (0: none).
    distill_lambda: Self-confidence distillation weight lambda in [0, 1]
      (0: none).
    distill_temperature: Distillation temperature tau, positive.

  Raises:
    ValueError: If an argument is out of range; the message names it.
  """
  # Over 80 lines with its docstring: the fine-tuning step (its loss, the
  # proximal term and the distillation) is one tf.function read in one place.
  checks.check_int('epochs', epochs)
  checks.check_int('batch_size', batch_size)
  checks.check_non_negative('mu', mu)
  if not 0 <= distill_lambda <= 1:
    raise ValueError(
        f'distill_lambda must be in [0, 1], got {distill_lambda!r}.')
  checks.check_positive('distill_temperature', distill_temperature)
  with tf.Graph().as_default():
    probe = model_fn()
    num_variables = len(probe.trainable_variables)
    indices = (last_layer_indices(probe) if variable_indices is None else
               _check_indices(variable_indices, num_variables))
  num_classes = _common.num_classes_of(model_fn) if distill_lambda > 0 else None

  def builder():
    teacher = model_fn() if distill_lambda > 0 else None

    @tf.function
    def fine_tune(model, train_data):
      tuned = [model.trainable_variables[i] for i in indices]
      anchor = tff.learning.models.ModelWeights(
          trainable=[tf.identity(v) for v in tuned], non_trainable=[])
      batches = train_data.batch(batch_size)
      if teacher is not None:
        tf.nest.map_structure(
            lambda t, v: t.assign(v),
            tff.learning.models.ModelWeights.from_model(teacher),
            tff.learning.models.ModelWeights.from_model(model))
        rho = losses.confidences(
            losses.label_proportions(batches, num_classes))
      specs = tuple(tf.TensorSpec(v.shape, v.dtype) for v in tuned)
      state = optimizer.initialize(specs)
      for batch in iter(batches.repeat(epochs)):
        with tf.GradientTape() as tape:
          output = model.forward_pass(batch, training=True)
          loss = output.loss
          if teacher is not None:
            x, y = ground.features_and_labels(batch)
            kl = losses.self_confidence_kl(
                output.predictions,
                teacher.predict_on_batch(x, training=False), y, rho,
                distill_temperature)
            loss = ((1.0 - distill_lambda) * loss + distill_lambda *
                    distill_temperature**2 * kl)
          if mu > 0:
            loss += fed_prox.proximal(tuned, anchor, learning_rate=None,
                                      mu=mu)
        gradients = tape.gradient(loss, tuned)
        state, updated = optimizer.next(state, tuple(tuned), tuple(gradients))
        for variable, value in zip(tuned, updated):
          variable.assign(value)
      return train_data.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)

    return fine_tune

  return builder


# --- The federated computation ------------------------------------------------


def build_personalization_eval(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    optimizer: tff.learning.optimizers.Optimizer,
    batch_size: int,
    num_clients: int,
    epochs: int = DEFAULT_EPOCHS,
    variable_indices: Optional[Sequence[int]] = None,
    mu: float = 0.0,
    distill_lambda: float = 0.0,
    distill_temperature: float = losses.SELF_CONFIDENCE_TEMPERATURE,
    eval_batch_size: int = 128,
) -> tff.Computation:
  """Builds the calibration evaluation (TFF's personalization computation).

  Args:
    model_fn: The task's no-arg model builder (predictions = class scores).
    optimizer: Optimizer of the fine-tuning steps.
    batch_size: Fine-tuning batch size, a positive integer.
    num_clients: How many clients each call evaluates (all are collected).
    epochs: Fine-tuning epochs E (2 in the paper).
    variable_indices: Trainable-variable indices to fine-tune; the last
      layer's (`last_layer_indices`) when `None`.
    mu: Proximal strength toward the global last layer, >= 0.
    distill_lambda: FedADC+ distillation weight in [0, 1].
    distill_temperature: Distillation temperature, positive.
    eval_batch_size: Batch size of the test-split evaluation.

  Returns:
    A `tff.Computation` `(model_weights@SERVER, {train_data, test_data}@
    CLIENTS) -> {'baseline_metrics': m, 'calibrated': m}@SERVER`, each `m`
    mapping metric names to one value per client (see `evaluate`).

  Raises:
    ValueError: If an argument is out of range; the message names it.
  """
  checks.check_int('num_clients', num_clients)
  checks.check_int('eval_batch_size', eval_batch_size)
  fine_tune_builder = build_fine_tune_fn(
      model_fn, optimizer=optimizer, epochs=epochs, batch_size=batch_size,
      variable_indices=variable_indices, mu=mu,
      distill_lambda=distill_lambda, distill_temperature=distill_temperature)

  def calibrate_builder():
    fine_tune = fine_tune_builder()

    @tf.function
    def calibrate(model, train_data, test_data):
      num_train = fine_tune(model, train_data)
      metrics = evaluate_metrics(model, test_data.batch(eval_batch_size))
      metrics['num_train_examples'] = num_train
      return metrics

    return calibrate

  @tf.function
  def baseline(model, test_data):
    return evaluate_metrics(model, test_data.batch(eval_batch_size))

  return tff.learning.algorithms.build_personalization_eval_computation(
      model_fn,
      collections.OrderedDict([(STRATEGY_KEY, calibrate_builder)]),
      baseline,
      max_num_clients=num_clients)


def evaluate(computation: tff.Computation,
             model_weights: tff.learning.models.ModelWeights,
             client_inputs: Sequence[collections.OrderedDict]
             ) -> dict[str, dict[str, np.ndarray]]:
  """Runs `computation` on `client_inputs`; per-client metrics as arrays.

  Args:
    computation: From `build_personalization_eval` with `num_clients >=
      len(client_inputs)`.
    model_weights: The global model.
    client_inputs: `{'train_data', 'test_data'}` per client (unbatched).

  Returns:
    `{'baseline_metrics': {name: array}, 'calibrated': {name: array}}`;
    position i of every array is the same client. The baseline has
    `accuracy`, `loss`, `num_test_examples`; the calibrated model also
    `num_train_examples`.
  """
  result = computation(model_weights, list(client_inputs))
  return {
      group: {name: np.asarray(value)
              for name, value in result[group].items()}
      for group in (BASELINE_KEY, STRATEGY_KEY)
  }


# --- Per-client train / test splits --------------------------------------------


def split_examples(labels: np.ndarray, train_fraction: float,
                   rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray]:
  """Splits one client's examples per class into train and test indices.

  Of the n_c examples of class c, round(n_c * train_fraction) (half up) go
  to train, the rest to test; which ones, and the order of each split, come
  from `rng`.

  Args:
    labels: The client's integer labels, one per example.
    train_fraction: Share of each class put in the train split, in (0, 1).
    rng: A NumPy generator.

  Returns:
    (train indices, test indices), each in a seeded random order.

  Raises:
    ValueError: If `train_fraction` is not in (0, 1).
  """
  if not 0 < train_fraction < 1:
    raise ValueError(
        f'train_fraction must be in (0, 1), got {train_fraction!r}.')
  labels = np.asarray(labels).reshape(-1)
  order = rng.permutation(labels.size)
  train, test = [], []
  for c in np.unique(labels):
    members = order[labels[order] == c]
    n_train = int(np.floor(members.size * train_fraction + 0.5))
    train.append(members[:n_train])
    test.append(members[n_train:])
  train = np.concatenate(train) if train else np.zeros([0], np.int64)
  test = np.concatenate(test) if test else np.zeros([0], np.int64)
  return rng.permutation(train), rng.permutation(test)


def build_client_inputs(
    datasets: Sequence[tf.data.Dataset],
    *,
    train_fraction: float = DEFAULT_TRAIN_FRACTION,
    seed: int = 0,
) -> tuple[list[collections.OrderedDict], list[int]]:
  """Forms each client's own train and test splits (see `split_examples`).

  Args:
    datasets: One dataset per client of unbatched examples `(x, y)` (or
      `{'x', 'y'}`) in the model's input format, y an integer label.
    train_fraction: Share of each class put in the train split, in (0, 1).
    seed: Client i's split uses `np.random.default_rng([seed, i])`.

  Returns:
    (inputs, skipped): `{'train_data', 'test_data'}` (unbatched datasets)
    for each client whose two splits are both non-empty, and the positions
    of the clients left out.

  Raises:
    ValueError: If `train_fraction` is not in (0, 1) or a label is not a
      scalar integer.
  """
  inputs, skipped = [], []
  for i, dataset in enumerate(datasets):
    examples = list(dataset.as_numpy_iterator())
    if not examples:
      skipped.append(i)
      continue
    stacked = tf.nest.map_structure(lambda *t: np.stack(t), *examples)
    _, labels = ground.features_and_labels(stacked)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
      raise ValueError('personalization needs one integer label per '
                       f'example, got labels of shape {labels.shape[1:]} '
                       f'and dtype {labels.dtype}.')
    train, test = split_examples(labels, train_fraction,
                                 np.random.default_rng([seed, i]))
    if not train.size or not test.size:
      skipped.append(i)
      continue
    inputs.append(collections.OrderedDict([
        (TRAIN_DATA_KEY, tf.data.Dataset.from_tensor_slices(
            tf.nest.map_structure(lambda t, idx=train: t[idx], stacked))),
        (TEST_DATA_KEY, tf.data.Dataset.from_tensor_slices(
            tf.nest.map_structure(lambda t, idx=test: t[idx], stacked))),
    ]))
  return inputs, skipped


# --- Summaries -----------------------------------------------------------------


def summarize(values: Sequence[float]) -> dict[str, float]:
  """Distribution over clients (each counting once) of one metric.

  Args:
    values: One value per client, at least one.

  Returns:
    `{'mean', 'median', 'p10', 'p25', 'p75', 'p90', 'min', 'max',
    'num_clients'}` (percentiles by NumPy's linear interpolation).

  Raises:
    ValueError: If `values` is empty.
  """
  values = np.asarray(values, np.float64).reshape(-1)
  if not values.size:
    raise ValueError('values must hold at least one client, got none.')
  summary = {'mean': float(values.mean()), 'median': float(np.median(values))}
  for q in PERCENTILES:
    summary[f'p{q}'] = float(np.percentile(values, q))
  summary.update(min=float(values.min()), max=float(values.max()),
                 num_clients=int(values.size))
  return summary


def report(results: dict[str, dict[str, np.ndarray]]) -> dict[str, Any]:
  """JSON-ready summary of `evaluate`'s results.

  Returns:
    `{'global': {'accuracy': summary, 'loss': summary}, 'calibrated': {...},
    'accuracy_gain': summary of per-client (calibrated - global) accuracy,
    'per_client': [{'global_accuracy', 'calibrated_accuracy', 'global_loss',
    'calibrated_loss', 'num_train_examples', 'num_test_examples'}]}`.
  """
  base, tuned = results[BASELINE_KEY], results[STRATEGY_KEY]
  per_client = [{
      'global_accuracy': float(base['accuracy'][i]),
      'calibrated_accuracy': float(tuned['accuracy'][i]),
      'global_loss': float(base['loss'][i]),
      'calibrated_loss': float(tuned['loss'][i]),
      'num_train_examples': int(tuned['num_train_examples'][i]),
      'num_test_examples': int(tuned['num_test_examples'][i]),
  } for i in range(len(tuned['accuracy']))]
  return {
      'global': {m: summarize(base[m]) for m in ('accuracy', 'loss')},
      'calibrated': {m: summarize(tuned[m]) for m in ('accuracy', 'loss')},
      'accuracy_gain': summarize(tuned['accuracy'] - base['accuracy']),
      'per_client': per_client,
  }


# --- After training: the held-out clients, calibrated -------------------------

PERSONALIZATION_FILE = 'personalization.json'


def choose_clients(client_ids: Sequence[str], num_clients: Optional[int],
                   seed: int) -> list[str]:
  """The held-out clients to calibrate: all, or a seeded sample.

  Args:
    client_ids: The held-out (test) clients.
    num_clients: How many to calibrate; `None` means all.
    seed: Seeds the sample (`np.random.default_rng(seed)`).

  Returns:
    The chosen client ids, sorted.

  Raises:
    ValueError: If `num_clients` is not a positive integer or exceeds
      `len(client_ids)`.
  """
  client_ids = sorted(client_ids)
  if num_clients is None:
    return client_ids
  checks.check_int('num_clients', num_clients)
  if num_clients > len(client_ids):
    raise ValueError(f'num_clients={num_clients} is larger than the '
                     f'{len(client_ids)} held-out clients.')
  return sorted(np.random.default_rng(seed).choice(
      client_ids, num_clients, replace=False).tolist())


def calibrate_clients(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    model_weights: tff.learning.models.ModelWeights,
    client_datasets: Sequence[tf.data.Dataset],
    client_ids: Sequence[str],
    *,
    optimizer: tff.learning.optimizers.Optimizer,
    batch_size: int,
    epochs: int = DEFAULT_EPOCHS,
    train_fraction: float = DEFAULT_TRAIN_FRACTION,
    mu: float = 0.0,
    distill_lambda: float = 0.0,
    seed: int = 0,
) -> dict[str, Any]:
  """Calibrates the global model on each client; before / after metrics.

  Each client splits its examples per class into its own train and test
  splits (`build_client_inputs`), fine-tunes the last layer of the global
  model on its train split (`build_personalization_eval`) and is evaluated
  on its test split with the global and the calibrated model (`report`).

  Args:
    model_fn: The task's no-arg model builder (predictions = class scores).
    model_weights: The global model.
    client_datasets: One dataset per client of unbatched examples, in the
      order of `client_ids` (unshuffled: the splits are a function of
      `seed`).
    client_ids: The clients' ids, reported with the results.
    optimizer: Optimizer of the fine-tuning steps.
    batch_size: Fine-tuning batch size.
    epochs: Fine-tuning epochs E.
    train_fraction: Share of each class of a client in its train split.
    mu: Proximal strength toward the global last layer, >= 0.
    distill_lambda: FedADC+ distillation weight in [0, 1].
    seed: Seeds each client's split (`build_client_inputs`).

  Returns:
    `report`'s summary plus `'clients'` (the ids calibrated) and
    `'skipped_clients'` (those whose train or test split is empty).

  Raises:
    ValueError: If an argument is out of range, a label is not one integer
      per example, or no client has examples for both splits.
  """
  inputs, skipped = build_client_inputs(
      client_datasets, train_fraction=train_fraction, seed=seed)
  if not inputs:
    raise ValueError('no held-out client has examples for both its train '
                     'and its test split.')
  computation = build_personalization_eval(
      model_fn, optimizer=optimizer, batch_size=batch_size,
      num_clients=len(inputs), epochs=epochs, mu=mu,
      distill_lambda=distill_lambda)
  summary = report(evaluate(computation, model_weights, inputs))
  return {
      'clients': [c for i, c in enumerate(client_ids) if i not in skipped],
      'skipped_clients': [client_ids[i] for i in skipped],
      **summary,
  }


def write_report(output_dir: str, result: dict[str, Any], **extra: Any
                 ) -> str:
  """Writes `{**extra, **result}` to `output_dir/PERSONALIZATION_FILE`.

  Args:
    output_dir: The run's directory.
    result: `calibrate_clients`' result.
    **extra: What else to record (the binary: `rounds`, `settings`).

  Returns:
    The file's path; the file is replaced atomically.

  Raises:
    OSError: If the file cannot be written.
  """
  path = os.path.join(output_dir, PERSONALIZATION_FILE)
  with files.replaced_atomically(path) as f:
    json.dump({**extra, **result}, f, indent=2, sort_keys=True)
  return path


def summary_line(result: dict[str, Any]) -> str:
  """One line: mean and median accuracy, global -> calibrated, mean gain."""
  before, after = result['global']['accuracy'], result['calibrated'][
      'accuracy']
  return (f"personalization: {before['num_clients']} clients, accuracy "
          f"global mean={before['mean']:.4f} median={before['median']:.4f} "
          f"-> calibrated mean={after['mean']:.4f} "
          f"median={after['median']:.4f} (mean gain "
          f"{result['accuracy_gain']['mean']:+.4f})")
