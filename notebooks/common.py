"""What every notebook repeats: the `digits` stand-in task and a short run.

The notebooks build their algorithms themselves (that is what they show);
this module only sets up the data, the seeded initial model and the
training loop, the way `binaries.train` does:

    setup = common.digits_setup(alpha=0.5, seed=0)
    rows = common.train(process, setup, rounds=20)   # metrics.csv-like rows
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

import tasks
from tff_opt.program import evaluation
from tff_opt.program import training_loop


@dataclasses.dataclass
class Setup:
  """A task ready to train on: data, model and evaluator."""
  task: tff.simulation.baselines.BaselineTask
  client_ids: list[str]
  client_dataset: Callable[[str], tf.data.Dataset]
  evaluate: Callable[[Any], dict[str, float]]
  seed: int

  @property
  def model_fn(self):
    return self.task.model_fn


def digits_setup(*, seed: int = 0, client_epochs: int = 2,
                 batch_size: int = 10, **options: Any) -> Setup:
  """The `digits` task (options: `alpha`, `num_clients`, ...; see tasks).

  Args:
    seed: Seeds the split, client sampling and the initial model.
    client_epochs: Local epochs per round.
    batch_size: Local batch size.
    **options: Options of `tasks.create_task('digits', ...)`.

  Returns:
    A `Setup`; evaluation is on the pooled held-out clients.
  """
  task = tasks.create_task(
      'digits',
      train_client_spec=tff.simulation.baselines.ClientSpec(
          num_epochs=client_epochs, batch_size=batch_size),
      seed=seed, **options)
  train_data = task.datasets.train_data

  def client_dataset(client_id):
    return task.datasets.train_preprocess_fn(
        train_data.create_tf_dataset_for_client(client_id))

  eval_data = tasks.pooled_test_data(task)
  return Setup(task=task, client_ids=sorted(train_data.client_ids),
               client_dataset=client_dataset,
               evaluate=evaluation.build_evaluator(task.model_fn, eval_data),
               seed=seed)


def train(process, setup: Setup, *, rounds: int, clients_per_round: int = 10,
          eval_every: int = 1, log=None) -> list[dict[str, Any]]:
  """Trains `process` from a seeded initial model; returns the round rows.

  The initial model is the same for every process given the same `setup`
  (Keras initializers seeded with `setup.seed`), so curves compare
  algorithms, not initializations.
  """
  tf.keras.utils.set_random_seed(setup.seed)
  weights = tff.learning.models.ModelWeights.from_model(setup.model_fn())
  state = process.initialize()
  state = process.set_model_weights(
      state, tf.nest.map_structure(lambda v: np.asarray(v.numpy()), weights))
  result = training_loop.run_training(
      process, client_ids=setup.client_ids,
      client_dataset_fn=setup.client_dataset,
      clients_per_round=clients_per_round, rounds=rounds, seed=setup.seed,
      evaluate_fn=setup.evaluate, eval_every=eval_every,
      initial_state=state, log=log)
  return result.rows
