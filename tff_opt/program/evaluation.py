"""Evaluation of the global model on held-out data, outside TFF.

The global model is evaluated on the pooled data of the held-out (test)
clients with plain TensorFlow: one Keras-backed `VariableModel` built once,
its weights assigned before each evaluation, its metrics reset, one
`tf.function` pass over the data, and the model's own metric finalizers.
Metrics are therefore example-weighted over all held-out examples (what the
papers report as test accuracy). The pass over the data runs in this
process; TFF is called once per evaluation, to finalize the few metric
values (Keras-backed finalizers need a graph), never with the data.

Repeatability: an evaluation repeats bit for bit from run to run (and a
resumed run logs an uninterrupted one's `eval_loss`) when its dataset does:
`binaries.train` pools the held-out clients in sorted id order
(`tasks.pooled_test_data`, via `tasks.sqlite_data.pooled_examples`). TFF's
own pooling, `create_tf_dataset_from_all_clients()`, shuffles the clients
unseeded; the per-batch losses were then summed in another order in every
run, and `eval_loss` differed in its last float32 bit (the claim ConvNet's
loss on MNIST-5k's 1,000 test images, the same weights: 3 values in 24
processes with TFF's order, one in 8 with the sorted one). Counts
(`eval_accuracy`) are sums of whole numbers and never varied.

`final_full_eval` evaluates the final model once on the whole test set (where
the rounds' evaluations used a sample) and writes `final_eval.json`.

Per-example correctness (`correct_path`): an evaluator given a path also
records, for each evaluated round, which test examples the model
classified correctly, one bit each (`CORRECT_FILE`, beside metrics.csv:
~125 bytes a round for 1,000 examples). It is what a paired comparison of
two runs over the same test examples needs (`binaries.verdicts`). Its cost
is within noise: 0.53-0.65 s an evaluation of `small_cnn` on 1,000 images
with it against 0.60-0.73 s without (20 of each, this loaded 2-core
machine), and 3.5 KB of file after 21 rounds. Only an evaluation on a
fixed test set (the same examples every round, every run) should log it
(`binaries.train` does, unless `--eval_examples` samples). A resumed run
that evaluates a round again replaces that round's record.
"""

from collections.abc import Callable, Mapping
import json
import os
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.program import files
from tff_opt.round import ground

Evaluator = Callable[[tff.learning.models.ModelWeights], dict[str, object]]


def build_evaluator(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    dataset: tf.data.Dataset,
    *,
    correct_path: Optional[str] = None,
) -> Evaluator:
  """Returns `evaluate(model_weights, round_num=None) -> {name: float}`.

  Args:
    model_fn: The task's no-arg model builder.
    dataset: Batched evaluation data, iterated in full on each call.
    correct_path: Where to record each evaluated round's per-example
      correctness (`write_correct`), for a classifier: integer labels and
      (batch, classes) scores. Any other model (an autoencoder's float
      targets, a language model's sequences, multi-label scores) records
      nothing. `None`: not recorded. A call without `round_num` records
      nothing.
  """
  if not _labels(dataset.element_spec).dtype.is_integer:
    correct_path = None  # Not a classifier: no argmax to compare.
  model = model_fn()
  weights = tff.learning.models.ModelWeights.from_model(model)
  finalizers = ground.unconverted_finalizers(model)
  unfinalized_type = tff.types.tensorflow_to_type(
      tf.nest.map_structure(lambda t: tf.TensorSpec.from_tensor(
          tf.convert_to_tensor(t)), model.report_local_unfinalized_metrics()))

  # Keras-backed finalizers build a metric object per call, which only a
  # graph allows: finalize in a (tiny) TF computation.
  @tff.tensorflow.computation(unfinalized_type)
  def finalize(unfinalized):
    return {name: f(unfinalized[name]) for name, f in finalizers.items()}

  # AutoGraph converts the loop, not Keras' forward pass (see client_work).
  forward_pass = ground.unconverted(model.forward_pass)

  @tf.function
  def run_pass():
    for batch in iter(dataset):
      forward_pass(batch, training=False)
    return ground.unconverted(model.report_local_unfinalized_metrics)()

  @tf.function
  def run_pass_correct():
    # The same pass, keeping argmax(prediction) == label per example.
    flags = tf.TensorArray(tf.bool, size=0, dynamic_size=True,
                           infer_shape=False,
                           element_shape=tf.TensorShape([None]))
    i = tf.constant(0)
    for batch in iter(dataset):
      output = forward_pass(batch, training=False)
      if output.predictions.shape.rank == 2:  # Else not a classifier's.
        labels = tf.reshape(_labels(batch), [-1])
        predicted = tf.argmax(output.predictions, axis=-1,
                              output_type=labels.dtype)
        flags = flags.write(i, tf.equal(predicted, labels))
        i += 1
    return (ground.unconverted(model.report_local_unfinalized_metrics)(),
            flags.concat())

  def evaluate(model_weights: tff.learning.models.ModelWeights,
               round_num: Optional[int] = None):
    tf.nest.map_structure(lambda v, t: v.assign(t), weights, model_weights)
    model.reset_metrics()
    if correct_path is not None and round_num is not None:
      unfinalized, correct = run_pass_correct()
      if correct.shape[0]:
        write_correct(correct_path, round_num, correct.numpy())
    else:
      unfinalized = run_pass()
    finalized = finalize(unfinalized)
    return {name: _to_float(value) for name, value in finalized.items()}

  return evaluate


def _labels(batch):
  """The labels of a batch: `batch['y']`, or `batch[1]` of an (x, y) pair."""
  if isinstance(batch, Mapping):
    return batch['y']
  return batch[1]


# --- Per-example correctness --------------------------------------------------

CORRECT_FILE = 'eval_correct.npz'


def write_correct(path: str, round_num: int, correct: np.ndarray) -> None:
  """Records round `round_num`'s per-example correctness in `path`.

  The file (NumPy's npz) holds `rounds` (the evaluated rounds, ascending),
  `bits` (one `np.packbits` row per round) and `size` (examples per
  round); a round already there is replaced. The file is replaced
  atomically.

  Raises:
    ValueError: If `correct` is not 1-D, or its size differs from the
      rounds already recorded.
  """
  correct = np.asarray(correct, dtype=bool)
  if correct.ndim != 1:
    raise ValueError(f'{path}: correctness must be 1-D, got shape '
                     f'{correct.shape}.')
  rounds = read_correct(path)
  if rounds and next(iter(rounds.values())).size != correct.size:
    raise ValueError(f'{path}: {correct.size} examples at round {round_num}, '
                     f'{next(iter(rounds.values())).size} before.')
  rounds[int(round_num)] = correct
  order = sorted(rounds)
  with files.replaced_atomically(path, 'wb') as f:
    np.savez(f, rounds=np.asarray(order, dtype=np.int64),
             bits=np.stack([np.packbits(rounds[r]) for r in order]),
             size=np.int64(correct.size))


def read_correct(path: str) -> dict[int, np.ndarray]:
  """{round: per-example correctness (bool)} from `path`; {} if absent."""
  if not os.path.exists(path):
    return {}
  with np.load(path) as data:
    size = int(data['size'])
    return {int(r): np.unpackbits(row, count=size).astype(bool)
            for r, row in zip(data['rounds'], data['bits'])}


def _to_float(value):
  value = np.asarray(value)
  return float(value) if value.size == 1 else value.tolist()


# --- The final evaluation on the whole test set -------------------------------

FINAL_EVAL_FILE = 'final_eval.json'


def final_full_eval(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    dataset: tf.data.Dataset,
    model_weights: tff.learning.models.ModelWeights,
    *,
    output_dir: str,
    rounds: int,
) -> dict[str, object]:
  """Evaluates the final model on the whole test set; writes final_eval.json.

  The file, `output_dir/FINAL_EVAL_FILE`, holds `{'rounds': rounds,
  **metrics}` and is replaced atomically.

  Args:
    model_fn: The task's no-arg model builder.
    dataset: Every held-out example, batched (not a sample).
    model_weights: The global model after the last round.
    output_dir: The run's directory.
    rounds: The number of rounds trained, recorded in the file.

  Returns:
    The metrics, `{name: float}` (a list for a metric with several values).

  Raises:
    OSError: If the file cannot be written.
  """
  metrics = build_evaluator(model_fn, dataset)(model_weights)
  path = os.path.join(output_dir, FINAL_EVAL_FILE)
  with files.replaced_atomically(path) as f:
    json.dump({'rounds': rounds, **metrics}, f, indent=2, sort_keys=True)
  return metrics


def format_metrics(metrics: dict[str, object]) -> str:
  """`name=value` of each scalar metric, by name, 4 decimals, two spaces."""
  return '  '.join(f'{k}={v:.4f}' for k, v in sorted(metrics.items())
                   if isinstance(v, float))
