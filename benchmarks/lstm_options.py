r"""Milliseconds per local step of the Shakespeare LSTM under Keras' options.

    .venv/bin/python -m benchmarks.lstm_options                # all settings
    .venv/bin/python -m benchmarks.lstm_options --steps=8 --repeats=3
    .venv/bin/python -m benchmarks.lstm_options --onednn=1 --threads=2

The model is the paper's Shakespeare character LSTM of
`tasks/shakespeare.py` (embedding 90 x 8 with pad 0 masked, 2 x LSTM 256,
dense 90: 820,522 parameters); a local epoch is `--steps` SGD steps
(learning rate 0.1, as `benchmarks/round_time.py`) on batches of 4
sequences of 80 characters, looped over a `tf.data.Dataset` inside one
`tf.function`, as a client's local training is. Each sequence is [bos] +
40 to 79 random characters + [eos], padded with 0 to 81 (about the real
data's 76% characters).

Variants (the LSTM layers only; everything else is the same model):

  keras_eager  `tf.keras.layers.LSTM(256)` built eagerly: Keras calls its
               `lstm_with_backend_selection` function, which Grappler's
               implementation selector maps to `gpu_lstm` (cuDNN) on a GPU
               and to `standard_lstm` (a `while_loop` with one fused 4-gate
               matmul per step) on a CPU, as here.
  keras_tff    The same layer as TFF builds it: TFF calls `model_fn` in graph
               mode, where Keras can not use that function and runs its
               generic RNN loop over `LSTMCell` (implementation 2). This is
               what tff-opt trains today (the layer's
               `_could_use_gpu_kernel` set to False reproduces it eagerly).
  rnn_cell     `tf.keras.layers.RNN(tf.keras.layers.LSTMCell(256))`: the
               plain cell loop (should equal keras_tff).
  impl1        `LSTM(256, implementation=1)` as TFF builds it: four separate
               gate matmuls per step (implementation only matters off the
               fused path).
  unroll       `LSTM(256, unroll=True)`: the 80 steps unrolled in the graph
               (no fused path, eager or TFF alike).

Each kernel setting runs in its own subprocess (oneDNN must be chosen
before TensorFlow is imported): `TF_ENABLE_ONEDNN_OPTS` 1 (oneDNN kernels,
tff-opt's default) and 0 (Eigen), each with 1 and 2 TF intra-op threads.
Within a subprocess every variant is traced and run once untimed, then
the variants take `--repeats` timed epochs in turns; the parent runs the
settings one after the other, `--passes` times over. It prints, per
setting and variant, the median milliseconds per step over all timed
epochs, the lowest and highest epoch, the ratio to keras_tff of the same
setting, and the load average when each subprocess started and ended.

Equality: each variant also trains `--check_steps` SGD steps from the
same initial weights on the same batches, and its trained weights are
compared with keras_eager's and keras_tff's (`np.allclose`, rtol 1e-5,
atol 1e-6); the two oneDNN settings' keras_tff weights are compared too.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

VARIANTS = ('keras_eager', 'keras_tff', 'rnn_cell', 'impl1', 'unroll')
VOCAB_SIZE = 90  # tasks/shakespeare.py: 86 characters + pad, oov, bos, eos.
BOS, EOS = 88, 89
SEQUENCE_LENGTH = 80
BATCH = 4
UNITS = 256
LAYERS = 2
LEARNING_RATE = 0.1
RTOL, ATOL = 1e-5, 1e-6


def _load_average() -> str:
  one, five, fifteen = os.getloadavg()
  return f'{one:.2f} {five:.2f} {fifteen:.2f}'


def make_batches(steps: int, *, seed: int = 0):
  """`steps` batches `(x, y)` of int64 ids, `[BATCH, SEQUENCE_LENGTH]` each.

  Args:
    steps: Number of batches.
    seed: NumPy seed.

  Returns:
    (x, y) NumPy arrays of shape `[steps * BATCH, SEQUENCE_LENGTH]`.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  tokens = np.zeros((steps * BATCH, SEQUENCE_LENGTH + 1), np.int64)
  for row in tokens:
    n = rng.integers(40, 80)
    row[0] = BOS
    row[1:n + 1] = rng.integers(1, 87, size=n)
    row[n + 1] = EOS
  return tokens[:, :-1], tokens[:, 1:]


def build_model(variant: str):
  """The Shakespeare model with the LSTM layers of `variant`.

  Args:
    variant: One of `VARIANTS`.

  Returns:
    A built `tf.keras.Model` (weights in the same order for every variant).

  Raises:
    ValueError: If `variant` is unknown.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if variant not in VARIANTS:
    raise ValueError(f'unknown variant {variant!r}; known: '
                     f'{", ".join(VARIANTS)}')
  model = tf.keras.Sequential()
  model.add(tf.keras.layers.Embedding(
      VOCAB_SIZE, 8, input_length=SEQUENCE_LENGTH, mask_zero=True))
  for _ in range(LAYERS):
    kwargs = dict(kernel_initializer='he_normal', return_sequences=True)
    if variant == 'rnn_cell':
      layer = tf.keras.layers.RNN(
          tf.keras.layers.LSTMCell(UNITS, kernel_initializer='he_normal'),
          return_sequences=True)
    elif variant == 'impl1':
      layer = tf.keras.layers.LSTM(UNITS, implementation=1, **kwargs)
    elif variant == 'unroll':
      layer = tf.keras.layers.LSTM(UNITS, unroll=True, **kwargs)
    else:
      layer = tf.keras.layers.LSTM(UNITS, **kwargs)
    if variant in ('keras_tff', 'impl1'):
      # As in graph mode (TFF's model_fn): no fused function, the cell loop.
      layer._could_use_gpu_kernel = False  # pylint: disable=protected-access
    model.add(layer)
  model.add(tf.keras.layers.Dense(VOCAB_SIZE))
  model.build((None, SEQUENCE_LENGTH))
  return model


def epoch_fn(model):
  """A `tf.function` running one SGD epoch of `model` over a dataset."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  weights = model.trainable_variables

  @tf.function
  def run(dataset):
    for x, y in dataset:
      with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
      for variable, gradient in zip(weights, tape.gradient(loss, weights)):
        variable.assign_sub(LEARNING_RATE * tf.convert_to_tensor(gradient))

  return run


def _child(args) -> None:
  """Times the variants under this process's kernel setting; prints JSON."""
  start_load = _load_average()
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(args.threads)
  x, y = make_batches(max(args.steps, args.check_steps))
  dataset = tf.data.Dataset.from_tensor_slices(
      (x[:args.steps * BATCH], y[:args.steps * BATCH])).batch(BATCH)
  check = tf.data.Dataset.from_tensor_slices(
      (x[:args.check_steps * BATCH], y[:args.check_steps * BATCH])).batch(
          BATCH)
  tf.keras.utils.set_random_seed(0)
  initial = [w.numpy() for w in build_model('keras_eager').weights]
  models, runs, trained = {}, {}, {}
  for variant in args.variants:
    models[variant] = build_model(variant)
    runs[variant] = epoch_fn(models[variant])
    models[variant].set_weights(initial)
    runs[variant](check)  # Traces, and the equality check's steps.
    trained[variant] = [w.numpy() for w in models[variant].weights]
  times = {v: [] for v in args.variants}
  for _ in range(args.repeats):
    for variant in args.variants:
      begin = time.perf_counter()
      runs[variant](dataset)
      times[variant].append((time.perf_counter() - begin) * 1e3 / args.steps)
  equal = {}
  for reference in ('keras_eager', 'keras_tff'):
    if reference not in trained:
      continue
    for variant, weights in trained.items():
      worst = max(float(np.max(np.abs(a - b) / (ATOL + RTOL * np.abs(b))))
                  for a, b in zip(weights, trained[reference]))
      equal[f'{variant}~{reference}'] = worst  # <= 1: allclose.
  if args.save_weights and 'keras_tff' in trained:
    np.savez(args.save_weights, *trained['keras_tff'])
  print(json.dumps({'onednn': os.environ.get('TF_ENABLE_ONEDNN_OPTS'),
                    'threads': args.threads, 'times': times,
                    'equal': equal, 'load_start': start_load,
                    'load_end': _load_average()}), flush=True)


def _parse_args(argv):
  parser = argparse.ArgumentParser(
      prog='lstm_options', description=__doc__.split('\n')[0])
  parser.add_argument('--steps', type=int, default=13,
                      help='Steps per timed epoch (13: the real mean client, '
                      '52 sequences).')
  parser.add_argument('--repeats', type=int, default=5,
                      help='Timed epochs per variant in each subprocess.')
  parser.add_argument('--passes', type=int, default=1,
                      help='Times the parent runs every setting, in turns.')
  parser.add_argument('--check_steps', type=int, default=3,
                      help='SGD steps of the weight-equality check.')
  parser.add_argument('--variants', default=','.join(VARIANTS),
                      help='Comma-separated, from: ' + ', '.join(VARIANTS))
  parser.add_argument('--onednn', default='1,0',
                      help='TF_ENABLE_ONEDNN_OPTS values to run (1, 0).')
  parser.add_argument('--threads', default='1,2',
                      help='TF intra-op thread counts to run.')
  parser.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
  parser.add_argument('--save_weights', default='', help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  for flag in ('steps', 'repeats', 'passes', 'check_steps'):
    if getattr(args, flag) < 1:
      parser.error(f'--{flag}={getattr(args, flag)}: expected a positive '
                   'integer')
  args.variants = [v.strip() for v in args.variants.split(',') if v.strip()]
  unknown = [v for v in args.variants if v not in VARIANTS]
  if unknown or not args.variants:
    parser.error(f'--variants: unknown variant {(unknown or [""])[0]!r}; '
                 f'known: {", ".join(VARIANTS)}')
  args.onednn = [v.strip() for v in args.onednn.split(',')]
  if not args.onednn or any(v not in ('0', '1') for v in args.onednn):
    parser.error(f'--onednn={",".join(args.onednn)}: expected 0 and/or 1')
  if not args.child:
    try:
      args.threads = [int(t) for t in args.threads.split(',')]
    except ValueError:
      parser.error(f'--threads={args.threads}: expected positive integers')
    if not args.threads or min(args.threads) < 1:
      parser.error(f'--threads={args.threads}: expected positive integers')
  else:
    args.threads = int(args.threads)
  return args


def main(argv=None) -> None:
  args = _parse_args(argv)
  if args.child:
    _child(args)
    return
  print(f'lstm_options: Shakespeare LSTM ({LAYERS} x {UNITS}, batch {BATCH}'
        f' x {SEQUENCE_LENGTH}), {args.steps} steps per epoch, '
        f'{args.repeats} timed epochs per variant per subprocess, '
        f'{args.passes} pass(es); load average {_load_average()} on '
        f'{os.cpu_count()} cores', flush=True)
  results, weights = {}, {}
  with tempfile.TemporaryDirectory() as tmp:
    for _ in range(args.passes):
      for onednn in args.onednn:
        for threads in args.threads:
          path = os.path.join(tmp, f'w{onednn}.npz')
          command = [sys.executable, '-m', 'benchmarks.lstm_options',
                     '--child', f'--threads={threads}',
                     f'--steps={args.steps}', f'--repeats={args.repeats}',
                     f'--check_steps={args.check_steps}',
                     f'--variants={",".join(args.variants)}',
                     f'--save_weights={path}']
          env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn,
                     TF_CPP_MIN_LOG_LEVEL='3')
          done = subprocess.run(command, env=env, capture_output=True,
                                text=True, check=False)
          if done.returncode:
            sys.exit(f'lstm_options: the oneDNN={onednn} threads={threads} '
                     f'run failed:\n{done.stderr[-2000:]}')
          child = json.loads(done.stdout.strip().splitlines()[-1])
          key = (onednn, threads)
          entry = results.setdefault(key, {'times': {}, 'equal': {},
                                           'loads': []})
          for variant, ms in child['times'].items():
            entry['times'].setdefault(variant, []).extend(ms)
          for name, worst in child['equal'].items():
            entry['equal'][name] = max(worst,
                                       entry['equal'].get(name, 0.0))
          entry['loads'].append(f'{child["load_start"]} -> '
                                f'{child["load_end"]}')
          print(f'  ran oneDNN={onednn} threads={threads}: load average '
                f'{child["load_start"]} -> {child["load_end"]}', flush=True)
          if os.path.exists(path):
            import numpy as np  # pylint: disable=g-import-not-at-top
            with np.load(path) as saved:
              weights.setdefault(onednn, [saved[k] for k in saved.files])
    report(results, weights)


def report(results, weights) -> None:
  """Prints the table, the equality check and the oneDNN comparison."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  print(f'{"oneDNN":<6} {"threads":>7} {"variant":<12} {"ms/step":>8} '
        f'{"min":>7} {"max":>7} {"/keras_tff":>10} {"/keras_eager":>12}')
  for (onednn, threads), entry in results.items():
    medians = {v: float(np.median(ms)) for v, ms in entry['times'].items()}
    for variant, ms in entry['times'].items():
      tff_ratio = (f'{medians[variant] / medians["keras_tff"]:.3f}'
                   if 'keras_tff' in medians else '-')
      eager_ratio = (f'{medians[variant] / medians["keras_eager"]:.3f}'
                     if 'keras_eager' in medians else '-')
      print(f'{onednn:<6} {threads:>7} {variant:<12} {medians[variant]:8.1f} '
            f'{min(ms):7.1f} {max(ms):7.1f} {tff_ratio:>10} '
            f'{eager_ratio:>12}')
  print(f'weights after the check steps (max |a-b| / ({ATOL:g} + {RTOL:g}'
        '|b|); <= 1 means equal to float32 tolerance):')
  for (onednn, threads), entry in results.items():
    print(f'  oneDNN={onednn} threads={threads}: ' + ', '.join(
        f'{name} {worst:.3g}' for name, worst in sorted(entry['equal'].items())
        if not name.startswith(name.split('~')[1] + '~')))
  if len(weights) == 2:
    worst = max(float(np.max(np.abs(a - b) / (ATOL + RTOL * np.abs(b))))
                for a, b in zip(weights['1'], weights['0']))
    print(f'  keras_tff oneDNN=1 vs oneDNN=0: {worst:.3g}')
  print(f'load average at the end {_load_average()} on {os.cpu_count()} '
        'cores', flush=True)


if __name__ == '__main__':
  main()
