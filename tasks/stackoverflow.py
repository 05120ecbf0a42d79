"""Stack Overflow tasks of Reddi et al. (Appendix C.4).

Data: TFF's federated Stack Overflow (`tff.simulation.datasets.stackoverflow.
load_data`): 342,477 train users, 204,088 test users (the `test` split; the
`heldout` split is not used). Read lazily from `<data_dir>/stackoverflow.sqlite`
(TFF's `SqlClientData`: a client's examples are read only when its dataset is
built, so the 135 M train examples are never materialised). The vocabularies
come from the two files TFF's `load_word_counts`/`load_tag_counts` extract
into `<data_dir>/datasets/`: `stackoverflow.word_count` (lines `word count`,
most frequent first) and `stackoverflow.tag_count` (JSON tag -> count). No
download is attempted: a missing file raises `data_errors.MissingDataError`.

`stackoverflow_nwp` (next word; TFF 0.87 exports no such baseline, so it is
assembled here from TFF's preprocessing and model pieces):
* Vocabulary: the `vocab_size` (10,000) most frequent words; ids: pad 0,
  words 1..10,000, oov 10,001 (one bucket), bos 10,002, eos 10,003: 10,004.
* Each train client keeps its first `max_client_sentences` (1,000) sentences
  (the paper: "the first 1000 sentences in their dataset") — taken *before*
  shuffling, so it is the first 1,000 as stored; then shuffle (buffer 1,000),
  repeat, take `max_elements`.
* A sentence -> [bos] + first 20 word ids (+ [eos] if it had < 20 words),
  padded with 0 to 21; input = first 20, target = last 20.
* Model (the paper's Table 6): embedding 10,004x96 (960,384) -> LSTM 670
  (2,055,560) -> dense 96 (64,416) -> dense 10,004 (970,388) = 4,050,748.
* Metric `accuracy`: top-1 accuracy over targets that are proper words, i.e.
  pad, oov, bos and eos targets are masked (the paper's metric); also
  `num_tokens` (non-pad targets).

`stackoverflow_lr` (tag prediction), TFF's `create_tag_prediction_task`
pieces: bag of words of title + body over the 10,000 words (oov words
dropped), normalised to sum 1 -> multi-hot of the 500 most frequent tags;
logistic regression (dense 500, sigmoid): 10,000 x 500 + 500 = 5,000,500
parameters; loss binary cross-entropy (TFF's: mean over tags, summed over the
batch); metrics `recall_at_5` (the paper's) and `precision`.

Differences from TFF corrected here: TFF's `create_tag_prediction_task`
loads its vocabularies without `cache_dir` (from `~/.keras`), ours come from
`data_dir`; TFF's word preprocessing shuffles before `take`, ours keeps the
first 1,000 sentences of each client as the paper says; metric names.
Evaluation sampling (10,000 test examples, full test set at the end) is done
by the binary (`TaskDefaults.eval_examples`, `final_full_eval`).
`use_synthetic_data=True` uses TFF's synthetic Stack Overflow and vocabularies.
"""

import json
import os
from typing import Any

import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines import keras_metrics
from tensorflow_federated.python.simulation.baselines.stackoverflow import tag_prediction_preprocessing
from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_models
from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_preprocessing

from tasks import data_errors

SQLITE_FILE = 'stackoverflow.sqlite'
WORD_COUNT_FILE = os.path.join('datasets', 'stackoverflow.word_count')
TAG_COUNT_FILE = os.path.join('datasets', 'stackoverflow.tag_count')
SEQUENCE_LENGTH = 20
NWP_OPTIONS = {'vocab_size': 10000, 'max_client_sentences': 1000}
LR_OPTIONS = {'vocab_size': 10000, 'tag_vocab_size': 500}
DEFAULT_EVAL_CLIENT_SPEC = tff.simulation.baselines.ClientSpec(
    num_epochs=1, batch_size=128, shuffle_buffer_size=1)
_SHUFFLE_BUFFER = 1000


def special_tokens(vocab_size: int) -> tuple[int, int, int, int]:
  """(pad, oov, bos, eos) ids for a word vocabulary of `vocab_size` words."""
  tokens = word_prediction_preprocessing.get_special_tokens(vocab_size, 1)
  return (tokens.padding, tokens.out_of_vocab[0],
          tokens.beginning_of_sentence, tokens.end_of_sentence)


def create_nwp_model(vocab_size: int = 10000) -> tf.keras.Model:
  """The paper's NWP LSTM (Table 6); 4,050,748 parameters at 10,000 words."""
  return word_prediction_models.create_recurrent_model(
      vocab_size=vocab_size + 4, embedding_size=96, num_lstm_layers=1,
      lstm_size=670)


def create_lr_model(vocab_size: int = 10000,
                    tag_vocab_size: int = 500) -> tf.keras.Model:
  """One-vs-rest logistic regression: dense `tag_vocab_size`, sigmoid."""
  return tf.keras.Sequential([
      tf.keras.Input(shape=(vocab_size,)),
      tf.keras.layers.Dense(tag_vocab_size, activation='sigmoid'),
  ], name='stackoverflow_lr')


def nwp_metrics(vocab_size: int) -> list[tf.keras.metrics.Metric]:
  """`num_tokens` (non-pad) and `accuracy` over proper words only."""
  pad, oov, bos, eos = special_tokens(vocab_size)
  return [
      keras_metrics.NumTokensCounter(masked_tokens=[pad]),
      keras_metrics.MaskedCategoricalAccuracy(
          masked_tokens=[pad, oov, bos, eos], name='accuracy'),
  ]


def create_nwp_preprocess_fn(spec: tff.simulation.baselines.ClientSpec,
                             vocab: list[str], *,
                             max_client_sentences: int | None = None):
  """Sentences -> (input ids [B, 20], target ids [B, 20]) batches.

  Args:
    spec: Epochs, batch size, max elements, shuffle buffer (default 1,000).
    vocab: The word vocabulary (ids 1..len(vocab)).
    max_client_sentences: Keep only a client's first this many sentences
      (before shuffling); None keeps all.

  Returns:
    A function from a client's raw dataset to its batches.
  """
  buffer = spec.shuffle_buffer_size or _SHUFFLE_BUFFER
  to_ids = word_prediction_preprocessing.build_to_ids_fn(
      vocab=vocab, max_sequence_length=SEQUENCE_LENGTH,
      num_out_of_vocab_buckets=1)

  def preprocess_fn(dataset: tf.data.Dataset) -> tf.data.Dataset:
    if max_client_sentences is not None:
      dataset = dataset.take(max_client_sentences)
    if buffer > 1:
      dataset = dataset.shuffle(buffer)
    if spec.num_epochs > 1:
      dataset = dataset.repeat(spec.num_epochs)
    if spec.max_elements is not None:
      dataset = dataset.take(spec.max_elements)
    dataset = dataset.map(to_ids, num_parallel_calls=tf.data.AUTOTUNE)
    return word_prediction_preprocessing.batch_and_split(
        dataset, SEQUENCE_LENGTH, spec.batch_size)

  return preprocess_fn


def _load(task: str, data_dir: str | None, use_synthetic_data: bool,
          vocab_size: int, tag_vocab_size: int | None):
  """(train, test, word vocab, tag vocab or None)."""
  if use_synthetic_data:
    synthetic = tff.simulation.datasets.stackoverflow.get_synthetic()
    words = list(tff.simulation.datasets.stackoverflow
                 .get_synthetic_word_counts())[:vocab_size]
    tags = list(tff.simulation.datasets.stackoverflow
                .get_synthetic_tag_counts())[:tag_vocab_size or 0]
    return synthetic, synthetic, words, tags
  how = data_errors.tff_sqlite_instructions(SQLITE_FILE)
  path = data_errors.require_file(task, data_dir, SQLITE_FILE, how)
  word_path = data_errors.require_file(
      task, data_dir, WORD_COUNT_FILE,
      'Download https://storage.googleapis.com/tff-datasets-public/'
      'stackoverflow.word_count.tar.bz2 and extract it into '
      '<data_dir>/datasets/.')
  words = []
  with open(word_path) as f:
    for line in f:
      if len(words) >= vocab_size:
        break
      if line.strip():
        words.append(line.split()[0])
  tags = None
  if tag_vocab_size is not None:
    tag_path = data_errors.require_file(
        task, data_dir, TAG_COUNT_FILE,
        'Download https://storage.googleapis.com/tff-datasets-public/'
        'stackoverflow.tag_count.tar.bz2 and extract it into '
        '<data_dir>/datasets/.')
    with open(tag_path) as f:
      counts = json.load(f)
    # Most frequent first; ties keep the file's order (as TFF's sort).
    tags = [t for t, _ in sorted(counts.items(), key=lambda kv: kv[1],
                                 reverse=True)][:tag_vocab_size]
  with data_errors.reading_sqlite(task, path):
    train, _, test = tff.simulation.datasets.stackoverflow.load_data(
        cache_dir=os.path.dirname(path))
  return train, test, words, tags


def _check_options(name, options, defaults):
  unknown = sorted(set(options) - set(defaults))
  if unknown:
    raise ValueError(f'Unknown option {unknown[0]!r} for task {name!r}; '
                     f'known options: {", ".join(sorted(defaults))}')
  resolved = {**defaults, **options}
  for key, value in resolved.items():
    if value is not None and value < 1:
      raise ValueError(f'{key} must be at least 1, got {value!r}.')
  return resolved


def create_stackoverflow_nwp_task(
    *,
    train_client_spec: tff.simulation.baselines.ClientSpec,
    eval_client_spec: tff.simulation.baselines.ClientSpec | None = None,
    data_dir: str | None = None,
    use_synthetic_data: bool = False,
    seed: int = 0,
    **options: Any,
) -> tff.simulation.baselines.BaselineTask:
  """The `stackoverflow_nwp` task (see the module docstring).

  Args:
    train_client_spec: How train client data are preprocessed.
    eval_client_spec: How test data are preprocessed (default: one pass,
      batch 128, unshuffled; no sentence limit).
    data_dir: Directory with `stackoverflow.sqlite` and `datasets/`.
    use_synthetic_data: Use TFF's synthetic Stack Overflow (no files).
    seed: Unused.
    **options: `vocab_size` (10,000), `max_client_sentences` (1,000).

  Returns:
    A `BaselineTask` whose model reports `loss`, `accuracy`, `num_tokens`.

  Raises:
    ValueError: If an option is unknown or below 1.
    data_errors.MissingDataError: If a data file is missing.
  """
  del seed
  opts = _check_options('stackoverflow_nwp', options, NWP_OPTIONS)
  train, test, words, _ = _load('stackoverflow_nwp', data_dir,
                                use_synthetic_data, opts['vocab_size'], None)
  vocab_size = len(words)
  task_datasets = tff.simulation.baselines.BaselineTaskDatasets(
      train_data=train, test_data=test, validation_data=None,
      train_preprocess_fn=create_nwp_preprocess_fn(
          train_client_spec, words,
          max_client_sentences=opts['max_client_sentences']),
      eval_preprocess_fn=create_nwp_preprocess_fn(
          eval_client_spec or DEFAULT_EVAL_CLIENT_SPEC, words),
  )
  input_spec = task_datasets.element_type_structure

  def model_fn() -> tff.learning.models.VariableModel:
    return tff.learning.models.from_keras_model(
        keras_model=create_nwp_model(vocab_size),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=input_spec, metrics=nwp_metrics(vocab_size))

  return tff.simulation.baselines.BaselineTask(task_datasets, model_fn)


def create_stackoverflow_lr_task(
    *,
    train_client_spec: tff.simulation.baselines.ClientSpec,
    eval_client_spec: tff.simulation.baselines.ClientSpec | None = None,
    data_dir: str | None = None,
    use_synthetic_data: bool = False,
    seed: int = 0,
    **options: Any,
) -> tff.simulation.baselines.BaselineTask:
  """The `stackoverflow_lr` task (see the module docstring).

  Args:
    train_client_spec: How train client data are preprocessed (TFF's
      default shuffle buffer 1,000).
    eval_client_spec: How test data are preprocessed (default: one pass,
      batch 128, unshuffled).
    data_dir: Directory with `stackoverflow.sqlite` and `datasets/`.
    use_synthetic_data: Use TFF's synthetic Stack Overflow (no files).
    seed: Unused.
    **options: `vocab_size` (10,000), `tag_vocab_size` (500).

  Returns:
    A `BaselineTask` whose model reports `loss`, `precision`, `recall_at_5`.

  Raises:
    ValueError: If an option is unknown or below 1.
    data_errors.MissingDataError: If a data file is missing.
  """
  del seed
  opts = _check_options('stackoverflow_lr', options, LR_OPTIONS)
  train, test, words, tags = _load(
      'stackoverflow_lr', data_dir, use_synthetic_data, opts['vocab_size'],
      opts['tag_vocab_size'])
  task_datasets = tff.simulation.baselines.BaselineTaskDatasets(
      train_data=train, test_data=test, validation_data=None,
      train_preprocess_fn=tag_prediction_preprocessing.create_preprocess_fn(
          train_client_spec, words, tags),
      eval_preprocess_fn=tag_prediction_preprocessing.create_preprocess_fn(
          eval_client_spec or DEFAULT_EVAL_CLIENT_SPEC, words, tags),
  )
  input_spec = task_datasets.element_type_structure

  def model_fn() -> tff.learning.models.VariableModel:
    return tff.learning.models.from_keras_model(
        keras_model=create_lr_model(len(words), len(tags)),
        loss=tf.keras.losses.BinaryCrossentropy(
            from_logits=False, reduction=tf.keras.losses.Reduction.SUM),
        input_spec=input_spec,
        metrics=[tf.keras.metrics.Precision(name='precision'),
                 tf.keras.metrics.Recall(top_k=5, name='recall_at_5')])

  return tff.simulation.baselines.BaselineTask(task_datasets, model_fn)
