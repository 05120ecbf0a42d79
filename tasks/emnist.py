"""EMNIST tasks of Reddi et al. (Appendix C.2): `emnist_cr` and `emnist_ae`.

Data: TFF's federated EMNIST-62 (`tff.simulation.datasets.emnist.load_data(
only_digits=False)`): 3,400 writers, each writer's examples split into train
(671,585) and test (77,483); pixels in [0, 1] with 1 = background. Read from
`<data_dir>/emnist_all.sqlite` (TFF's file, uncompressed); no download is
attempted (`data_errors.MissingDataError` when it is missing).

`emnist_cr` (character recognition), TFF's
`baselines.emnist.create_character_recognition_task(model_id='cnn_dropout',
only_digits=False)` pieces, checked against the paper's Table 4:

    conv3x3 32 relu -> conv3x3 64 relu -> maxpool 2x2 -> dropout 0.25 ->
    flatten -> dense 128 relu -> dropout 0.5 -> dense 62 softmax
    parameters: 320 + 18,496 + 1,179,776 + 7,998 = 1,206,590

`emnist_ae` (autoencoder), TFF's `create_autoencoder_task` pieces, the
paper's Table 3: dense 784-1000-500-250-30-250-500-1000-784 (sigmoid, linear
at the 30-unit bottleneck), 2,837,314 parameters, input = target =
1 - pixels (flattened), mean squared error loss and metric.

Preprocessing (TFF's): shuffle (buffer 418, the largest client), repeat
`num_epochs`, take `max_elements`, batch, map to `(x, y)`.

Differences from TFF's baselines, corrected here:
* Metric names: TFF reports `sparse_categorical_accuracy`; ours is
  `accuracy` (the binary's `train_accuracy`/`eval_accuracy` columns). The AE
  reports `mean_squared_error` (the paper's metric) and drops TFF's extra
  mean absolute error.
* The dropout rates (lost in our copy of the paper's Table 4) are TFF's,
  0.25 and 0.5; its two `Dropout` layers become `tff_opt.layers.
  StatelessDropout`s (masks seeded by the layer's input, salts 0 and 1), so
  a run repeats bit for bit and resumes exactly.
`use_synthetic_data=True` uses TFF's `emnist.get_synthetic()` (digits only,
same shapes) for both splits.
"""

import os
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines.emnist import emnist_models
from tensorflow_federated.python.simulation.baselines.emnist import emnist_preprocessing

from tasks import data_errors
from tff_opt import layers

SQLITE_FILE = 'emnist_all.sqlite'
NUM_CLASSES = 62
DEFAULT_EVAL_CLIENT_SPEC = tff.simulation.baselines.ClientSpec(
    num_epochs=1, batch_size=64, shuffle_buffer_size=1)


def load_emnist(task: str, data_dir: str | None, use_synthetic_data: bool):
  """(train, test) `ClientData` of EMNIST-62, or synthetic ones.

  Raises:
    data_errors.MissingDataError: If `<data_dir>/emnist_all.sqlite` is
      missing (and `use_synthetic_data` is False).
  """
  if use_synthetic_data:
    synthetic = tff.simulation.datasets.emnist.get_synthetic()
    return synthetic, synthetic
  path = data_errors.require_file(
      task, data_dir, SQLITE_FILE,
      data_errors.tff_sqlite_instructions(SQLITE_FILE))
  return tff.simulation.datasets.emnist.load_data(
      only_digits=False, cache_dir=os.path.dirname(path))


def create_cr_model() -> tf.keras.Model:
  """The paper's EMNIST CR CNN (Table 4), 1,206,590 parameters; softmax."""
  return layers.with_stateless_dropout(
      emnist_models.create_conv_dropout_model(only_digits=False))


def create_ae_model() -> tf.keras.Model:
  """The paper's EMNIST AE (Table 3), 2,837,314 parameters; sigmoid output."""
  return emnist_models.create_autoencoder_model()


def _create_task(name, emnist_task, keras_model_fn, loss_fn, metrics_fn, *,
                 train_client_spec, eval_client_spec, data_dir,
                 use_synthetic_data, options):
  if options:
    raise ValueError(f'Unknown option {sorted(options)[0]!r} for task '
                     f'{name!r}; it takes none.')
  train_data, test_data = load_emnist(name, data_dir, use_synthetic_data)
  task_datasets = tff.simulation.baselines.BaselineTaskDatasets(
      train_data=train_data,
      test_data=test_data,
      validation_data=None,
      train_preprocess_fn=emnist_preprocessing.create_preprocess_fn(
          train_client_spec, emnist_task=emnist_task),
      eval_preprocess_fn=emnist_preprocessing.create_preprocess_fn(
          eval_client_spec or DEFAULT_EVAL_CLIENT_SPEC,
          emnist_task=emnist_task),
  )
  input_spec = task_datasets.element_type_structure

  def model_fn() -> tff.learning.models.VariableModel:
    return tff.learning.models.from_keras_model(
        keras_model=keras_model_fn(), loss=loss_fn(), input_spec=input_spec,
        metrics=metrics_fn())

  return tff.simulation.baselines.BaselineTask(task_datasets, model_fn)


def create_emnist_cr_task(
    *,
    train_client_spec: tff.simulation.baselines.ClientSpec,
    eval_client_spec: tff.simulation.baselines.ClientSpec | None = None,
    data_dir: str | None = None,
    use_synthetic_data: bool = False,
    seed: int = 0,
    **options: Any,
) -> tff.simulation.baselines.BaselineTask:
  """The `emnist_cr` task (see the module docstring).

  Args:
    train_client_spec: How train client data are preprocessed.
    eval_client_spec: How test data are preprocessed (default: one pass,
      batch 64, unshuffled).
    data_dir: Directory holding `emnist_all.sqlite`; default `data`
      (`data_errors.DEFAULT_DATA_DIR`).
    use_synthetic_data: Use TFF's synthetic EMNIST (no files).
    seed: Unused (the split is TFF's).
    **options: None accepted.

  Returns:
    A `BaselineTask` whose model reports `loss` and `accuracy`.

  Raises:
    ValueError: If an option is given.
    data_errors.MissingDataError: If the SQLite file is missing.
  """
  del seed
  return _create_task(
      'emnist_cr', 'character_recognition', create_cr_model,
      tf.keras.losses.SparseCategoricalCrossentropy,
      lambda: [tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')],
      train_client_spec=train_client_spec, eval_client_spec=eval_client_spec,
      data_dir=data_dir, use_synthetic_data=use_synthetic_data,
      options=options)


def create_emnist_ae_task(
    *,
    train_client_spec: tff.simulation.baselines.ClientSpec,
    eval_client_spec: tff.simulation.baselines.ClientSpec | None = None,
    data_dir: str | None = None,
    use_synthetic_data: bool = False,
    seed: int = 0,
    **options: Any,
) -> tff.simulation.baselines.BaselineTask:
  """The `emnist_ae` task (see the module docstring).

  Same arguments, returns and raises as `create_emnist_cr_task`; the model
  reports `loss` and `mean_squared_error`.
  """
  del seed
  return _create_task(
      'emnist_ae', 'autoencoder', create_ae_model,
      tf.keras.losses.MeanSquaredError,
      lambda: [tf.keras.metrics.MeanSquaredError(name='mean_squared_error')],
      train_client_spec=train_client_spec, eval_client_spec=eval_client_spec,
      data_dir=data_dir, use_synthetic_data=use_synthetic_data,
      options=options)
