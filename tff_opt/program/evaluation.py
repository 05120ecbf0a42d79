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
"""

from collections.abc import Callable
import json
import os

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.program import files
from tff_opt.round import ground

Evaluator = Callable[[tff.learning.models.ModelWeights], dict[str, object]]


def build_evaluator(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    dataset: tf.data.Dataset,
) -> Evaluator:
  """Returns `evaluate(model_weights) -> {metric name: float}`.

  Args:
    model_fn: The task's no-arg model builder.
    dataset: Batched evaluation data, iterated in full on each call.
  """
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

  def evaluate(model_weights: tff.learning.models.ModelWeights):
    tf.nest.map_structure(lambda v, t: v.assign(t), weights, model_weights)
    model.reset_metrics()
    finalized = finalize(run_pass())
    return {name: _to_float(value) for name, value in finalized.items()}

  return evaluate


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
