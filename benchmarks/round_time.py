r"""Seconds per round: tff-opt's processes against TFF's FedAvg and the floor.

    .venv/bin/python -m benchmarks.round_time                      # EMNIST-CR
    .venv/bin/python -m benchmarks.round_time --workload=so_nwp
    .venv/bin/python -m benchmarks.round_time --workload=shakespeare \
        --data_dir=~/.tff --algorithms=fedopt
    .venv/bin/python -m benchmarks.round_time --algorithms=fedopt \
        --max_concurrent_clients=none,1,2,2:1
    .venv/bin/python -m benchmarks.round_time --quick              # smoke run

In one run, on the same model, the same client data and the same local
steps (client SGD, learning rate 0.1, one epoch, server SGD with learning
rate 1, clients weighted by their number of examples), it times:

  (a) tff-opt's process for each of `--algorithms` (registry names; FedOpt
      first, every other algorithm is also reported as a ratio to FedOpt);
  (b) TFF's own `tff.learning.algorithms.build_weighted_fed_avg`, with its
      default `DATASET_REDUCE` loop (`tff_reduce`, the "b" of the ratios) and
      with `DATASET_ITERATOR` (`tff_iterator`);
  (c) the floor: the same local SGD steps of the same Keras model in one
      plain `tf.function` per round (each client: reset to the global model,
      one pass over its batches, delta weighted by its examples; the
      weighted mean applied to the global model, all in TF) — no federated
      machinery, no metrics. `floor xN` runs the same steps with N clients
      at once (`--floor_concurrency`, default 2: one thread and model copy
      each), as TFF does; for the LSTM workloads `floor xN gen` does too
      with Keras' generic RNN loop, the kernels TFF's graph-mode model
      runs. `floor worker` runs the same steps on TFF's worker, under each
      setting below: broadcast, the plain-TF client steps as a
      `tff.tensorflow.computation`, an example-weighted `federated_mean` of
      the deltas, nothing of tff.learning (`build_worker_floor`). a/c is to
      the fastest of these floors, a/w to the worker floor of the same
      setting: what tff-opt adds on the same runtime.

(a), (b) and the worker floor run under TFF's local C++ execution
context, once for each setting of `--max_concurrent_clients` (`none` =
TFF's default, no limit; `1` runs the clients one after the other; `2:1`
two at a time with one TF intra-op thread each), each setting with its own
`worker_binary`. The other floors run in this Python process. After the warm-up, every (setting, process)
pair takes its timed rounds in turns (a, b, c, a, b, c, ...), so that a
change in the machine's load falls on all of them alike.

It prints, per row, the median seconds per round over `--rounds` timed
rounds (after `--warmup` untimed ones), examples per second, tokens per
second (for the language workloads), the ratio to
tff-opt's FedOpt under the same setting, for FedOpt a/c (to the floor), a/b
(to TFF's default FedAvg, DATASET_REDUCE) and a/b_it (to TFF's
DATASET_ITERATOR FedAvg), and the median CPU seconds per round of this
process and its TFF workers (`cpu s`: the work done, steadier than wall
time on a loaded machine; cpu s above s/round means more than one core was
busy), with the machine's load average.

Workloads (synthetic data, uniform random, except Shakespeare's; only
speed is measured):
  emnist_cr  the EMNIST-CR CNN of `tasks/emnist.py` (1,206,590 parameters),
             10 clients x 200 examples of 28x28x1, batch 20, one epoch:
             100 local steps per round.
  so_nwp     the Stack Overflow NWP LSTM of `tasks/stackoverflow.py`
             (4,050,748 parameters, vocabulary 10,000), 50 clients x 32
             sequences of 20 token ids (uniform over the 10,004 ids), batch
             16, one epoch: 100 local steps per round. 32 sequences is far
             below the paper's cap of 1,000 per client, chosen to keep a
             round to seconds; the per-step cost is the real model's.
             Tokens: all 20 positions of every sequence. Its floor (c)
             applies the embedding's gradient to the rows a batch touches
             (`scatter_sub`, what a plain-TF trainer does: 16 x 20 of the
             10,004 rows per step) and `floor dense` densifies it first,
             as TFF's SGD does (the same weights, more work); a/c is to
             the sparse floor.
  shakespeare
             the paper's Shakespeare character LSTM of `tasks/shakespeare.py`
             (embedding 8, 2 x LSTM 256, 820,522 parameters; `--lstm_layers`
             and `--lstm_units` resize it), 10 clients, TFF's preprocessing
             (80-character sequences, batch 4, one epoch, shuffle buffer 50),
             as `python -m binaries.train --task=shakespeare` runs it. With
             `<--data_dir>/shakespeare.sqlite` the clients are 10 train
             clients drawn without replacement (NumPy seed `--seed`) from
             the file, each through the task's own preprocessing. Without it
             they are synthetic, sized like the real ones: the 10 clients
             hold `SYNTHETIC_SEQUENCES` = 1, 3, 6, 9, 15, 24, 37, 66, 108,
             214 sequences (483 in all, 125 local steps per round), the
             5th, 15th, ..., 95th percentiles of the sequences per train
             client of the Gutenberg-built `shakespeare.sqlite` (1,111
             train clients, 57,895 sequences; per client: median 19, 25th
             percentile 6, 75th 65.5, 90th 152, mean 52.1, max 833; 75.1%
             of the target positions are characters, the rest padding).
             Each synthetic sequence is one snippet of 40 to 79 characters
             drawn uniformly from TFF's vocabulary (75.6% characters on
             average), preprocessed by the task like a real snippet.
             Tokens: characters, i.e. target positions that are not padding
             (the task's `num_tokens`).
`--quick` shrinks everything (4 clients, 2 timed rounds; Shakespeare: the
first 4 of its clients, at most 3 batches each) to check the script runs;
its figures mean little.

TF threads: a setting `N:T` starts its `worker_binary` with T intra-op
threads (`TF_NUM_INTRAOP_THREADS`, which TF reads when the worker starts);
`--floor_threads` sets this process's (the floor's). Without them TF uses
one thread per core.

Kernels: TensorFlow's oneDNN kernels are on (`TF_ENABLE_ONEDNN_OPTS=1`, as
in tff-opt's binaries) unless the environment says otherwise; the floor and
every worker use the same setting. `TF_ENABLE_ONEDNN_OPTS=0 python -m
benchmarks.round_time ...` measures TensorFlow's Eigen kernels instead.

LSTMs: TFF builds the model in graph mode, where Keras' `LSTM` runs its
generic RNN loop over `LSTMCell`; the floor builds it eagerly, where
Keras runs its `standard_lstm` function (the one a GPU would swap for
cuDNN). No other Keras option is faster with equal weights
(docs/performance.md, closed investigations).
"""

import argparse
import concurrent.futures
import math
import os
import queue
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
# TensorFlow's oneDNN kernels unless the environment says otherwise (see
# tff_opt/program/worker_env.py); TFF's worker inherits the setting.
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

from benchmarks import common  # pylint: disable=g-import-not-at-top
import tasks  # pylint: disable=g-import-not-at-top
from tasks import emnist  # pylint: disable=g-import-not-at-top
from tasks import shakespeare  # pylint: disable=g-import-not-at-top
from tasks import stackoverflow  # pylint: disable=g-import-not-at-top
from tff_opt.program import registry  # pylint: disable=g-import-not-at-top
from tff_opt.program import runtime  # pylint: disable=g-import-not-at-top
from tff_opt.round import ground  # pylint: disable=g-import-not-at-top

CLIENT_LR = 0.1
ALGORITHMS = ('fedopt', 'fedprox', 'fedfor', 'fedcurv', 'fedadc', 'scaffold',
              'slowmo')
# Hyper-parameters of the registered algorithms (their binary defaults or
# their papers' values); they change the work per step, not the step count.
HPARAMS = dict(mu=0.01, alpha=5.0, lam=0.1, beta=0.9,
               fedadc_variant='heavy_ball', local_momentum=0.0,
               beta_local=None)
WORKLOADS = ('emnist_cr', 'so_nwp', 'shakespeare')
# Whose floor applies the embedding's gradient sparsely (see the docstring).
SPARSE_FLOOR_WORKLOADS = ('so_nwp',)

# Shakespeare (see the module docstring): the paper's batch and clients per
# round, and the synthetic clients' sequences (percentiles of the real
# file's sequences per train client).
SHAKESPEARE_BATCH = 4
SHAKESPEARE_CLIENTS = 10
SYNTHETIC_SEQUENCES = (1, 3, 6, 9, 15, 24, 37, 66, 108, 214)
SYNTHETIC_SNIPPET_CHARS = (40, 79)  # Inclusive: one sequence per snippet.
QUICK_CLIENTS = 4
QUICK_BATCHES = 3


def synthetic_snippets(sizes, *, seed: int = 0) -> list[tf.data.Dataset]:
  """Raw Shakespeare-format clients of one snippet per wanted sequence.

  Args:
    sizes: Snippets (hence preprocessed sequences) of each client.
    seed: NumPy seed of the snippets' lengths and characters.

  Returns:
    One dataset per client of `{'snippets': tf.string}` elements, as TFF's
    Shakespeare `ClientData` holds them; each snippet has 40 to 79 one-byte
    characters of TFF's vocabulary, so that with [bos] and [eos] it fills
    one 81-token sequence.

  Raises:
    ValueError: If a size is below 1.
  """
  if any(n < 1 for n in sizes):
    raise ValueError(f'every client needs at least one snippet, got {sizes}.')
  rng = np.random.default_rng(seed)
  alphabet = np.array(shakespeare.CHAR_VOCAB)
  low, high = SYNTHETIC_SNIPPET_CHARS
  datasets = []
  for n in sizes:
    snippets = [''.join(rng.choice(alphabet, size=rng.integers(low, high + 1)))
                for _ in range(n)]
    datasets.append(tf.data.Dataset.from_tensor_slices(
        {'snippets': np.array(snippets, dtype=object)}))
  return datasets


class Workload:
  """A model and its synthetic clients.

  Attributes:
    name: Workload name.
    keras_model_fn: No-arg callable returning the Keras model.
    loss_fn: No-arg callable returning the Keras loss.
    metrics_fn: No-arg callable returning the Keras metrics list.
    input_spec: `(x, y)` `tf.TensorSpec`s of one batch.
    datasets: The clients' datasets (the same every round).
    examples: Examples (sequences, for the language models) per round.
    tokens: Tokens per round (see the module docstring), or None.
    steps: Local steps (batches) per round, all clients together.
    client_ids: Shakespeare's real clients, in the order drawn; else None.
    describe: One line saying what the workload is.
    sparse_floor: Whether the floor applies embedding gradients sparsely
      (`SPARSE_FLOOR_WORKLOADS`).
    has_lstm: Whether the model has Keras `LSTM` layers.
  """

  def __init__(self, name: str, *, quick: bool,
               data_dir: str | None = None, seed: int = 0,
               lstm_layers: int | None = None,
               lstm_units: int | None = None):
    """Builds the workload's model functions and client datasets.

    Args:
      name: One of `WORKLOADS`.
      quick: Tiny clients (a smoke run).
      data_dir: Shakespeare only: where `shakespeare.sqlite` may be; real
        clients when it is there, synthetic ones otherwise.
      seed: Shakespeare only: NumPy seed of the real clients drawn.
      lstm_layers: Shakespeare only: LSTM layers (default: the paper's 2).
      lstm_units: Shakespeare only: units per LSTM layer (default 256).

    Raises:
      ValueError: If `name` is unknown, or an LSTM size is given for
        another workload or is below 1.
    """
    self.name = name
    self.sparse_floor = name in SPARSE_FLOOR_WORKLOADS
    self.has_lstm = name in ('so_nwp', 'shakespeare')
    self.tokens = None
    self.client_ids = None
    self._model_fn = None
    sizes = {k: v for k, v in (('lstm_layers', lstm_layers),
                               ('lstm_units', lstm_units)) if v is not None}
    if sizes and name != 'shakespeare':
      raise ValueError(f'{", ".join(sizes)} only size the shakespeare '
                       f'workload, not {name!r}.')
    if name == 'emnist_cr':
      clients, per_client, batch = (4, 40, 20) if quick else (10, 200, 20)
      self.keras_model_fn = emnist.create_cr_model
      self.loss_fn = tf.keras.losses.SparseCategoricalCrossentropy
      self.metrics_fn = lambda: [
          tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')]
      self.datasets = common.synthetic_clients(
          clients, per_client, x_shape=(28, 28, 1),
          num_classes=emnist.NUM_CLASSES, batch_size=batch)
      self.describe = (f'EMNIST-CR CNN, {clients} clients x {per_client} '
                       f'examples, batch {batch}, 1 epoch')
    elif name == 'so_nwp':
      clients, per_client, batch = (4, 16, 16) if quick else (50, 32, 16)
      vocab = stackoverflow.NWP_OPTIONS['vocab_size']
      self.keras_model_fn = lambda: stackoverflow.create_nwp_model(vocab)
      self.loss_fn = lambda: tf.keras.losses.SparseCategoricalCrossentropy(
          from_logits=True)
      self.metrics_fn = lambda: stackoverflow.nwp_metrics(vocab)
      seq = stackoverflow.SEQUENCE_LENGTH
      rng = np.random.default_rng(0)
      self.datasets = []
      for _ in range(clients):
        ids = rng.integers(0, vocab + 4, size=(per_client, seq + 1))
        self.datasets.append(tf.data.Dataset.from_tensor_slices(
            (ids[:, :-1], ids[:, 1:])).batch(batch))
      self.describe = (f'Stack Overflow NWP LSTM, {clients} clients x '
                       f'{per_client} sequences of {seq} tokens, batch '
                       f'{batch}, 1 epoch')
      self.tokens = clients * per_client * seq
    elif name == 'shakespeare':
      self._init_shakespeare(quick=quick, data_dir=data_dir, seed=seed,
                             **sizes)
    else:
      raise ValueError(f'Unknown workload {name!r}; known: '
                       f'{", ".join(WORKLOADS)}.')
    self.input_spec = self.datasets[0].element_spec
    if name != 'shakespeare':
      self.examples = clients * per_client
      self.steps = clients * math.ceil(per_client / batch)

  def _init_shakespeare(self, *, quick, data_dir, seed, **sizes):
    """The Shakespeare workload (see the module docstring)."""
    for option, value in sizes.items():
      if value < 1:
        raise ValueError(f'{option} must be at least 1, got {value}.')
    real = bool(data_dir) and os.path.isfile(
        os.path.join(data_dir, shakespeare.SQLITE_FILE))
    spec = tff.simulation.baselines.ClientSpec(
        num_epochs=1, batch_size=SHAKESPEARE_BATCH)
    task = tasks.create_task('shakespeare', train_client_spec=spec,
                             data_dir=data_dir if real else None,
                             use_synthetic_data=not real, **sizes)
    options = {**shakespeare.DEFAULT_OPTIONS, **sizes}
    if real:
      train = task.datasets.train_data
      ids = sorted(train.client_ids)
      if len(ids) < SHAKESPEARE_CLIENTS:
        raise ValueError(f'{data_dir}/{shakespeare.SQLITE_FILE} has '
                         f'{len(ids)} train clients; the workload needs '
                         f'{SHAKESPEARE_CLIENTS}.')
      drawn = np.random.default_rng(seed).choice(
          len(ids), SHAKESPEARE_CLIENTS, replace=False)
      self.client_ids = [ids[i] for i in drawn]
      raw = [train.create_tf_dataset_for_client(c) for c in self.client_ids]
      source = (f'real clients of {data_dir}/{shakespeare.SQLITE_FILE} '
                f'(seed {seed})')
    else:
      sequences = SYNTHETIC_SEQUENCES[:QUICK_CLIENTS if quick else None]
      raw = synthetic_snippets(sequences, seed=seed)
      source = ('synthetic clients of ' + ', '.join(map(str, sequences)) +
                ' sequences')
    if quick:
      raw = raw[:QUICK_CLIENTS]
      if self.client_ids:
        self.client_ids = self.client_ids[:QUICK_CLIENTS]
    preprocess = task.datasets.train_preprocess_fn
    self.datasets = [preprocess(d) for d in raw]
    if quick:
      self.datasets = [d.take(QUICK_BATCHES) for d in self.datasets]
    # One pass to count (the shuffle changes the order, not the counts).
    self.examples = self.tokens = self.steps = 0
    for dataset in self.datasets:
      for _, y in dataset.as_numpy_iterator():
        self.steps += 1
        self.examples += y.shape[0]
        self.tokens += int(np.count_nonzero(y != shakespeare.PAD))
    self._model_fn = task.model_fn
    self.keras_model_fn = lambda: shakespeare.create_model(
        options['sequence_length'], embedding_dim=options['embedding_dim'],
        lstm_units=options['lstm_units'], lstm_layers=options['lstm_layers'])
    self.loss_fn = lambda: tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True)
    self.metrics_fn = None  # The task's model_fn has its metrics.
    self.describe = (
        f'Shakespeare char LSTM (embedding {options["embedding_dim"]}, '
        f'{options["lstm_layers"]} x LSTM {options["lstm_units"]}), '
        f'{len(self.datasets)} {source}'
        f'{f", at most {QUICK_BATCHES} batches each" if quick else ""}, '
        f'{options["sequence_length"]} characters per sequence, batch '
        f'{SHAKESPEARE_BATCH}, 1 epoch, {self.steps} steps, {self.tokens} '
        f'characters')

  def model_fn(self) -> tff.learning.models.VariableModel:
    if self._model_fn is not None:
      return self._model_fn()
    return tff.learning.models.from_keras_model(
        self.keras_model_fn(), loss=self.loss_fn(),
        input_spec=self.input_spec, metrics=self.metrics_fn())


FLOOR_LABELS = {'floor': 'floor (c)', 'floor_dense': 'floor dense',
                'floor_concurrent': 'floor xN', 'floor_generic': 'floor xN gen',
                'floor_worker': 'floor worker'}


def _sgd():
  return tff.learning.optimizers.build_sgdm(CLIENT_LR)


def build_tff_opt(workload: Workload, name: str):
  """tff-opt's registered algorithm `name` on the benchmark's settings."""
  return registry.build_process(
      name, workload.model_fn,
      client_optimizer_fn=_sgd(),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
      client_lr_schedule=None, client_learning_rate=CLIENT_LR, **HPARAMS)


def build_tff_fed_avg(workload: Workload, loop: str):
  """TFF's `build_weighted_fed_avg` with the given loop implementation."""
  implementation = {
      'reduce': tff.learning.LoopImplementation.DATASET_REDUCE,
      'iterator': tff.learning.LoopImplementation.DATASET_ITERATOR,
  }[loop]
  return tff.learning.algorithms.build_weighted_fed_avg(
      workload.model_fn,
      client_optimizer_fn=_sgd(),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      loop_implementation=implementation)


def _local_sgd(model, loss_fn, weights, dataset, sparse):
  """One client's pass of plain SGD (inside a `tf.function`); its examples.

  `sparse`: an embedding's gradient (`tf.IndexedSlices`) updates only the
  rows it touches (`scatter_sub`), else it is densified first.

  The loop runs over `iter(dataset)`, which AutoGraph makes a while loop,
  as tff-opt's client loop is. A plain `for ... in dataset` becomes a
  `dataset.reduce` whose body, the forward and backward pass, is a
  dataset function that TensorFlow instantiates every time the op runs:
  on the worker that cost 0.59 CPU-s per call of the Shakespeare LSTM
  client on an empty dataset, against 0.15 s with the while loop.
  """
  examples = tf.constant(0.0)
  for x, y in iter(dataset):
    with tf.GradientTape() as tape:
      loss = loss_fn(y, model(x, training=True))
    gradients = tape.gradient(loss, weights)
    for variable, gradient in zip(weights, gradients):
      if sparse and isinstance(gradient, tf.IndexedSlices):
        variable.scatter_sub(tf.IndexedSlices(
            CLIENT_LR * gradient.values, gradient.indices,
            gradient.dense_shape))
      else:
        variable.assign_sub(CLIENT_LR * tf.convert_to_tensor(gradient))
    examples += tf.cast(tf.shape(y)[0], tf.float32)
  return examples


def floor_round_fn(workload: Workload, initial, *, sparse: bool = False):
  """The floor (c): one round of local SGD + weighted delta mean in TF.

  Args:
    workload: The model, loss and client datasets.
    initial: The global model's starting weights.
    sparse: Apply an embedding's gradient (a `tf.IndexedSlices`) to the
      rows it touches only (`scatter_sub`), as a plain-TF trainer would;
      otherwise densified first, as TFF's SGD applies it. The two give the
      same weights (rows a batch does not touch get a zero gradient).

  Returns:
    A no-argument callable running one round; its `global_weights` are the
    global model's trainable variables after the rounds run so far.
  """
  model = workload.keras_model_fn()
  loss_fn = workload.loss_fn()
  weights = model.trainable_variables
  global_weights = [tf.Variable(v) for v in initial.trainable]
  for variable, value in zip(weights, initial.trainable):
    variable.assign(value)

  @tf.function
  def round_fn(datasets):
    sums = [tf.zeros_like(v) for v in global_weights]
    total = tf.constant(0.0)
    for dataset in datasets:  # Unrolled: one loop per client.
      for variable, value in zip(weights, global_weights):
        variable.assign(value)
      examples = _local_sgd(model, loss_fn, weights, dataset, sparse)
      sums = [s + examples * (g - v)
              for s, g, v in zip(sums, global_weights, weights)]
      total += examples
    for variable, s in zip(global_weights, sums):
      variable.assign_sub(s / total)

  def run():
    round_fn(workload.datasets)

  run.global_weights = global_weights
  return run


def concurrent_floor_round_fn(workload: Workload, initial, *,
                              concurrency: int, sparse: bool = False,
                              generic_lstm: bool = False):
  """The floor with clients `concurrency` at a time, as TFF runs them.

  Each of `concurrency` Python threads owns a copy of the Keras model and a
  `tf.function` that trains it on one client from the global weights and
  returns (examples * delta, examples); TensorFlow releases the GIL while a
  graph runs, so the copies train side by side, each on TF's shared
  intra-op pool. The threads' sums are added and applied to the global
  model in this process. The steps and the weights are those of
  `floor_round_fn` (a test checks it); what differs is only how the
  clients' work is spread over the cores. Small-batch models (Shakespeare's
  LSTM at batch 4) use one core badly per client, so this is the floor TFF
  should be held to at 2 concurrent clients.

  Args:
    workload: The model, loss and client datasets.
    initial: The global model's starting weights.
    concurrency: Clients trained at once (threads), >= 1.
    sparse: As `floor_round_fn`'s.
    generic_lstm: Run each Keras `LSTM` layer by its generic RNN loop over
      `LSTMCell`, the path TFF's graph-mode build takes, instead of the
      fused `standard_lstm` function Keras picks for an eagerly built
      model (the same weights; only the kernels differ).

  Returns:
    A no-argument callable running one round, with `global_weights` as
    `floor_round_fn`'s.
  """
  if concurrency < 1:
    raise ValueError(f'concurrency must be >= 1, got {concurrency}')
  global_weights = [tf.Variable(v) for v in initial.trainable]
  loss_fn = workload.loss_fn()

  def build_client():
    model = workload.keras_model_fn()
    if generic_lstm:
      for layer in model.layers:
        if isinstance(layer, tf.keras.layers.LSTM):
          layer._could_use_gpu_kernel = False  # pylint: disable=protected-access
    weights = model.trainable_variables

    @tf.function
    def client(dataset, start):
      for variable, value in zip(weights, start):
        variable.assign(value)
      examples = _local_sgd(model, loss_fn, weights, dataset, sparse)
      return [examples * (s - v) for s, v in zip(start, weights)], examples

    return client

  free = queue.SimpleQueue()
  for _ in range(concurrency):
    free.put(build_client())
  pool = concurrent.futures.ThreadPoolExecutor(concurrency)

  def train(dataset, start):
    client = free.get()
    try:
      return client(dataset, start)
    finally:
      free.put(client)

  def run():
    start = [tf.convert_to_tensor(v) for v in global_weights]
    results = list(pool.map(lambda d: train(d, start), workload.datasets))
    total = tf.add_n([examples for _, examples in results])
    for i, variable in enumerate(global_weights):
      variable.assign_sub(tf.add_n([sums[i] for sums, _ in results]) / total)

  run.global_weights = global_weights
  return run


def build_worker_floor(workload: Workload, initial, *, sparse: bool = False):
  """The floor run by TFF's worker: plain-TF steps, nothing of tff.learning.

  One `tff.federated_computation` per round: the global weights are
  broadcast, each client runs the floor's steps (`_local_sgd`) in a
  `tff.tensorflow.computation` from them and returns its delta and its
  examples, the server takes the example-weighted `federated_mean` of the
  deltas and subtracts it. No model wrapper, no metrics, no optimizer state,
  no aggregation process: what any algorithm on TFF's C++ runtime must pay
  for the same local steps, run under the same setting (client concurrency
  and worker threads) as the processes it is compared with. TFF traces the
  client in graph mode, so Keras' `LSTM` runs its generic RNN loop here, as
  it does in every TFF process (see the module docstring). Against this
  floor, a/w isolates what tff-opt's process adds (model wrapper, metrics,
  optimizer, aggregation) from what the runtime costs.

  Keras models built in a graph invalidate those built eagerly before, so
  build this (like the processes) before the in-process floors.

  Args:
    workload: The model, loss and client datasets.
    initial: The global model's starting weights (their shapes).
    sparse: As `floor_round_fn`'s.

  Returns:
    The federated computation (global weights at the server, client
    datasets) -> new global weights at the server.
  """
  weights_type = tff.StructWithPythonType(
      [tff.TensorType(np.float32, v.shape) for v in initial.trainable], list)
  data_type = tff.SequenceType(tff.types.tensorflow_to_type(
      workload.input_spec))

  @tff.tensorflow.computation(weights_type, data_type)
  def client(start, dataset):
    # Assigned `start` first: no initializer work (as tff-opt's clients).
    model = ground.model_to_overwrite(workload.keras_model_fn)
    loss_fn = workload.loss_fn()
    weights = model.trainable_variables

    @tf.function
    def train(start, dataset):  # Ordered: assign, train, read.
      for variable, value in zip(weights, start):
        variable.assign(value)
      examples = _local_sgd(model, loss_fn, weights, dataset, sparse)
      return [s - v for s, v in zip(start, weights)], examples

    return train(start, dataset)

  @tff.tensorflow.computation(weights_type, weights_type)
  def apply(global_weights, mean_delta):
    return [w - d for w, d in zip(global_weights, mean_delta)]

  @tff.federated_computation(tff.FederatedType(weights_type, tff.SERVER),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def federated_round(global_weights, datasets):
    deltas, examples = tff.federated_map(
        client, (tff.federated_broadcast(global_weights), datasets))
    mean = tff.federated_mean(deltas, weight=examples)
    return tff.federated_map(apply, (global_weights, mean))

  return federated_round


def worker_floor_round_fn(federated_round, workload: Workload, initial):
  """A no-argument callable running one round of `build_worker_floor`'s.

  It runs under the TFF context current when it is called (wrap it in a
  `Setting`); its `global_weights` (a list of arrays) are the global
  model's trainable weights after the rounds it has run, from `initial`.
  """

  def run():
    run.global_weights = list(federated_round(run.global_weights,
                                              workload.datasets))

  run.global_weights = [np.asarray(v) for v in initial.trainable]
  return run


def interleaved_times(round_fns, *, warmup: int, repeats: int):
  """{name: ([wall seconds], [CPU seconds]) of each timed round}.

  Every round function first runs `warmup` untimed rounds; then each timed
  round of each function runs in turn (a, b, c, a, b, c, ...), so that a
  change of the machine's load falls on all of them alike. CPU seconds are
  those of this process and its TFF workers during the round.
  """
  for fn in round_fns.values():
    for _ in range(warmup):
      fn()
  times = {name: ([], []) for name in round_fns}
  for _ in range(repeats):
    for name, fn in round_fns.items():
      cpu = common.cpu_seconds()
      wall = time.perf_counter()
      fn()
      times[name][0].append(time.perf_counter() - wall)
      times[name][1].append(common.cpu_seconds() - cpu)
  return times


class Setting:
  """One execution setting: TFF's client concurrency and worker threads.

  Attributes:
    concurrency: `max_concurrent_clients` (None: TFF's default, no limit).
    threads: TF intra-op threads of the setting's `worker_binary` (0: TF's
      default, one per core).
    label: How the setting is written on the command line and printed.
  """

  def __init__(self, text: str):
    """Parses `N`, `none`, `N:T` or `none:T`.

    Raises:
      ValueError: If the text is not of that form with N, T >= 1.
    """
    concurrency, _, threads = text.strip().lower().partition(':')
    try:
      self.concurrency = (None if concurrency == 'none' else
                          int(concurrency))
      self.threads = int(threads) if threads else 0
    except ValueError:
      self.concurrency, self.threads = 0, 0
    if (self.concurrency is not None and self.concurrency < 1) or (
        threads and self.threads < 1):
      raise ValueError(f'expected "N", "none", "N:T" or "none:T" with '
                       f'positive integers N, T; got {text.strip()!r}')
    self.label = text.strip().lower()
    self.context = None

  def start(self) -> None:
    """Creates the setting's context and starts its worker."""
    self.context = runtime.create_local_execution_context(
        self.concurrency, intra_op_threads=self.threads or None)
    runtime.start_worker(self.context)  # Up before any round is timed.

  def wrap(self, round_fn):
    """`round_fn` run under this setting's context."""

    def run():
      with tff.framework.get_context_stack().install(self.context):
        round_fn()

    return run


def _parse_args(argv):
  # Over 80 lines with its docstring: a declaration of the benchmark's flags,
  # one after another.
  parser = argparse.ArgumentParser(
      prog='round_time', description=__doc__.split('\n')[0])
  parser.add_argument('--workload', default='emnist_cr',
                      choices=list(WORKLOADS))
  parser.add_argument('--data_dir', default=None,
                      help='shakespeare: directory of shakespeare.sqlite '
                      '(real clients); synthetic clients without it.')
  parser.add_argument('--seed', type=int, default=0,
                      help='shakespeare: seed of the real clients drawn and '
                      'of the synthetic snippets.')
  parser.add_argument('--lstm_layers', type=int, default=None,
                      help='shakespeare: LSTM layers (default 2).')
  parser.add_argument('--lstm_units', type=int, default=None,
                      help='shakespeare: units per LSTM layer (default 256).')
  parser.add_argument('--rounds', type=int, default=10,
                      help='Timed rounds per process (median reported).')
  parser.add_argument('--warmup', type=int, default=2,
                      help='Untimed rounds first (tracing, worker start).')
  parser.add_argument('--algorithms', default=','.join(ALGORITHMS),
                      help='tff-opt registry names, comma-separated.')
  parser.add_argument('--max_concurrent_clients', default='none',
                      help='Comma-separated settings to compare, each N or '
                      '"none" (no limit, TFF\'s default), optionally with '
                      ':T, the worker\'s TF intra-op threads (e.g. 2:1).')
  parser.add_argument('--floor_threads', type=int, default=0,
                      help='TF intra-op threads of this process (the floor);'
                      ' 0: TF\'s default.')
  parser.add_argument('--no_tff', action='store_true',
                      help='Skip (b), TFF\'s FedAvg.')
  parser.add_argument('--no_floor', action='store_true',
                      help='Skip (c), the plain-TF floor.')
  parser.add_argument('--floor_concurrency', type=int, default=2,
                      help='Also time the floor with this many clients at '
                      'once (threads; LSTM workloads also with the generic '
                      'RNN loop); 0 or 1: the sequential floor only.')
  parser.add_argument('--quick', action='store_true',
                      help='Tiny clients, 1 warm-up and 2 timed rounds.')
  args = parser.parse_args(argv)
  if args.rounds < 1:
    parser.error(f'--rounds={args.rounds}: expected a positive integer')
  if args.warmup < 0:
    parser.error(f'--warmup={args.warmup}: expected a non-negative integer')
  if args.floor_threads < 0:
    parser.error(f'--floor_threads={args.floor_threads}: expected >= 0')
  if args.floor_concurrency < 0:
    parser.error(f'--floor_concurrency={args.floor_concurrency}: expected '
                 '>= 0')
  for flag in ('lstm_layers', 'lstm_units'):
    value = getattr(args, flag)
    if value is not None and args.workload != 'shakespeare':
      parser.error(f'--{flag}: only for --workload=shakespeare')
    if value is not None and value < 1:
      parser.error(f'--{flag}={value}: expected a positive integer')
  if args.data_dir is not None and args.workload != 'shakespeare':
    parser.error('--data_dir: only for --workload=shakespeare')
  if args.data_dir is not None:
    args.data_dir = os.path.expanduser(args.data_dir)
    if not os.path.isdir(args.data_dir):
      parser.error(f'--data_dir={args.data_dir}: no such directory')
  names = [n.strip() for n in args.algorithms.split(',') if n.strip()]
  unknown = [n for n in names if n not in registry.ALGORITHMS]
  if unknown or not names:
    parser.error(f'--algorithms={args.algorithms}: unknown algorithm '
                 f'{(unknown or [""])[0]!r}; known: '
                 f'{", ".join(registry.ALGORITHMS)}')
  for name in names:
    missing = [h for h in registry.ALGORITHMS[name].needed
               if HPARAMS.get(h) is None]
    if missing:
      parser.error(f'--algorithms={args.algorithms}: {name!r} needs '
                   f'hyper-parameters this benchmark does not set: '
                   f'{", ".join(missing)}')
  if 'fedopt' in names:  # FedOpt first: the others are ratios to it.
    names = ['fedopt'] + [n for n in names if n != 'fedopt']
  args.algorithms = names
  try:
    args.max_concurrent_clients = [
        Setting(t) for t in args.max_concurrent_clients.split(',')]
  except ValueError as e:
    parser.error(f'--max_concurrent_clients={args.max_concurrent_clients}: '
                 f'{e}')
  if args.quick:
    args.rounds, args.warmup = min(args.rounds, 2), min(args.warmup, 1)
  return args


def main(argv=None):
  args = _parse_args(argv)
  if args.floor_threads:
    tf.config.threading.set_intra_op_parallelism_threads(args.floor_threads)
  workload = Workload(args.workload, quick=args.quick,
                      data_dir=args.data_dir, seed=args.seed,
                      lstm_layers=args.lstm_layers,
                      lstm_units=args.lstm_units)
  settings = args.max_concurrent_clients
  print(f'round_time: {workload.describe} ({workload.examples} examples, '
        f'{workload.steps} local steps per round); client SGD lr '
        f'{CLIENT_LR}, server SGD lr 1; median of '
        f'{args.rounds} rounds after {args.warmup} warm-up, taken in turns; '
        f'settings (max_concurrent_clients[:worker threads]) '
        f'{", ".join(s.label for s in settings)}; floor threads '
        f'{args.floor_threads or "default"}; TF_ENABLE_ONEDNN_OPTS='
        f'{os.environ.get("TF_ENABLE_ONEDNN_OPTS", "unset")}; '
        f'{common.load_average()}',
        flush=True)
  initial = common.initial_weights(workload.model_fn, 0)
  processes = [(name, build_tff_opt(workload, name))
               for name in args.algorithms]
  if not args.no_tff:
    processes += [(f'tff_{loop}', build_tff_fed_avg(workload, loop))
                  for loop in ('reduce', 'iterator')]
  # Installs tff-opt's worker clean-up; every setting's worker is a child of
  # this process and is stopped by `runtime.shutdown`.
  runtime.set_local_execution_context()
  try:
    round_fns = {}
    # Graph-built Keras models first (see `build_worker_floor`).
    worker_floor = None if args.no_floor else build_worker_floor(
        workload, initial, sparse=workload.sparse_floor)
    if not args.no_floor:
      round_fns[('python', 'floor')] = floor_round_fn(
          workload, initial, sparse=workload.sparse_floor)
      if workload.sparse_floor:
        round_fns[('python', 'floor_dense')] = floor_round_fn(workload,
                                                              initial)
      if args.floor_concurrency > 1:
        round_fns[('python', 'floor_concurrent')] = concurrent_floor_round_fn(
            workload, initial, concurrency=args.floor_concurrency,
            sparse=workload.sparse_floor)
        if workload.has_lstm:
          round_fns[('python', 'floor_generic')] = concurrent_floor_round_fn(
              workload, initial, concurrency=args.floor_concurrency,
              sparse=workload.sparse_floor, generic_lstm=True)
    for setting in settings:
      setting.start()
      for name, process in processes:
        round_fns[(setting.label, name)] = setting.wrap(
            common.process_round_fn(process, workload.datasets, initial))
      if worker_floor is not None:
        round_fns[(setting.label, 'floor_worker')] = setting.wrap(
            worker_floor_round_fn(worker_floor, workload, initial))
    times = interleaved_times(round_fns, warmup=args.warmup,
                              repeats=args.rounds)
  finally:
    runtime.shutdown()
  report(times, workload, args.algorithms)
  sys.stdout.flush()


def report(times, workload: Workload, algorithms) -> None:
  """Prints the table and the a/b, a/c and concurrency ratios."""
  wall = {key: common.median(w) for key, (w, _) in times.items()}
  cpu = {key: common.median(c) for key, (_, c) in times.items()}
  # a/c is to the fastest floor: the floor is the best plain TF can do.
  floors = {key: s for key, s in wall.items()
            if key[1] in FLOOR_LABELS and key[1] != 'floor_dense'}
  floor = min(floors.values()) if floors else None
  table = common.Table([
      ('setting', 8, ''), ('process', 13, ''), ('s/round', 8, '.3f'),
      ('examples/s', 10, '.0f'), ('tokens/s', 9, '.0f'),
      ('/fedopt', 7, '.3f'), ('a/c', 6, '.3f'), ('a/w', 6, '.3f'),
      ('a/b', 6, '.3f'), ('a/b_it', 6, '.3f'), ('cpu s', 6, '.2f')])
  table.print_header()
  for (label, name), seconds in wall.items():
    fedopt = wall.get((label, 'fedopt'))
    is_fedopt = name == 'fedopt'
    b = wall.get((label, 'tff_reduce'))
    b_iterator = wall.get((label, 'tff_iterator'))
    w = wall.get((label, 'floor_worker'))
    table.print_row(
        label, FLOOR_LABELS.get(name, name), seconds,
        workload.examples / seconds,
        workload.tokens / seconds if workload.tokens else None,
        seconds / fedopt if fedopt and name in algorithms else None,
        seconds / floor if is_fedopt and floor else None,
        seconds / w if is_fedopt and w else None,
        seconds / b if is_fedopt and b else None,
        seconds / b_iterator if is_fedopt and b_iterator else None,
        cpu[(label, name)])
  fedopt_by_setting = {label: s for (label, name), s in wall.items()
                       if name == 'fedopt'}
  if len(fedopt_by_setting) > 1:
    slowest = max(fedopt_by_setting.values())
    print('FedOpt speed-up over the slowest setting: ' + ', '.join(
        f'{label} x{slowest / s:.2f}' for label, s in
        fedopt_by_setting.items()))
  if floors:
    label, best = min(floors, key=floors.get)
    print(f'a/c is to the fastest floor, {FLOOR_LABELS[best]} '
          f'{"" if label == "python" else f"under {label} "}'
          f'({floor:.3f} s per round); a/w to the worker floor under the '
          f'same setting.')
  print(f'after the run: {common.load_average()}', flush=True)

if __name__ == '__main__':
  main()
