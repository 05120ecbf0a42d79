r"""Milliseconds per SGD step of 10 EMNIST-CR clients, per convolution form.

    .venv/bin/python -m benchmarks.stacked_conv
    .venv/bin/python -m benchmarks.stacked_conv --repeats=9 --inner=3
    .venv/bin/python -m benchmarks.stacked_conv --variants=keras,grouped
    TF_ENABLE_ONEDNN_OPTS=0 .venv/bin/python -m benchmarks.stacked_conv

Results (2026-11-26, this 2-core Intel Xeon shared with other jobs, load
average 11-18 throughout; TF 2.14.1, oneDNN on; results/perf/stacked_conv.md
has the commands, the spreads and the full output). Per run: wall-clock ms
per step of the 10 clients (median over interleaved repetitions), the keras
median over the variant's, and CPU ms of this process per step (median).
Run 1: all variants, --repeats=7 --inner=1; run 2: --repeats=15 --inner=3;
run 3: --repeats=9 --inner=3 (runs 2, 3: the variants shown).

  variant       run 1: ms     x  cpu  run 2: ms     x  cpu  run 3: ms     x  cpu
  keras            734  1.00   224    276  1.00   193    514  1.00   201
  unrolled         883  0.83   209    317  0.87   186      -
  unrolled_bmm     598  1.23   181    222  1.24   174    449  1.15   178
  grouped         1067  0.69   233    721  0.38   230    869  0.59   240
  depthwise      12255  0.06  2326      -                  -
  vmap            1138  0.65   345      -                  -
  map_fn             -                  -                475  1.08   190
  im2col          4073  0.18   898      -                  -
  taps            5203  0.14   934      -                  -
  dense_keras      179  1.00    61     83  1.00    55      -
  dense_bmm        160  1.12    42     85  0.98    41      -

Conclusion: no form beats today's per-client floor by a clear 1.15x.
- Grouped convolution runs on the CPU only with oneDNN (Eigen: no
  gradient) and is slower than K separate convolutions (0.4-0.7x wall,
  0.84-0.96x CPU): oneDNN's grouped kernels do not pay for K=10 groups of
  32/64 channels. The depthwise form (exact for the first layer only) and the
  two matmul forms (im2col, taps) are 5-17x slower (memory-bound
  intermediates); `tf.vectorized_map` has no per-client-kernel Conv2D and
  falls back to a `while_loop` (0.65x).
- The best, `unrolled_bmm` (a Python loop of per-client convolutions in
  one graph, the dense layers as batched matmuls), is 1.15-1.24x by wall
  medians and 1.24, 1.11, 1.13x by CPU time, with overlapping quartiles
  and about equal minima in run 2 (142 vs 135 ms): within this machine's
  noise of the threshold, not clearly above it. Its gain is the batched
  dense layers (dense_bmm: 1.3-1.5x less CPU than dense_keras, no wall
  gain), not the convolutions (unrolled, per-client dense too: 0.83-0.87x
  wall).
- A Python loop needs K when the graph is built, and `stacked_training`
  gives the model a K known only at run time (the group's size is a TFF
  type dimension None, and each step gathers the clients that have a
  batch). The form that works with a run-time K, `map_fn` (a
  `tf.while_loop` over the clients for the convolutions, batched dense),
  is 1.06-1.08x: no clear gain. So EMNIST-CR gets no stacked model for
  now; its clients stay on the per-client path.

The model is the EMNIST-CR CNN of `tasks/emnist.py` (TFF's
`create_conv_dropout_model(only_digits=False)`): conv 3x3 32 relu, conv 3x3
64 relu, max-pool 2, dropout 0.25, dense 128 relu, dropout 0.5, dense 62
(softmax; the loss is taken from its logits, as Keras does). K clients
(`--clients`, 10), each with its own weights, each with its own batch of
`--batch` (20) random 28x28x1 images and labels; one step = forward,
backward and an SGD update (learning rate 0.1) of all K clients, in
training mode (both dropouts on) in every variant:

  keras         today's per-client floor: K Keras models, one `tf.function`
                step each, called one client after another (K calls).
  unrolled      one `tf.function`; a Python loop over the clients inside
                it, each client's model with `tf.nn.conv2d` and `tf.matmul`
                on its own slice of the stacked [K, ...] weights.
  unrolled_bmm  the convolutions as in `unrolled`, the dense layers as one
                batched `tf.matmul` over [K, ...] (as every variant below).
  grouped       grouped convolution: client k's images are channel k of one
                [B, 28, 28, K] input, its feature maps channels
                k*C..(k+1)*C; `tf.nn.conv2d` with the K kernels concatenated
                on the output axis ([3, 3, C_in, K*C_out]) runs K groups.
  depthwise     `tf.nn.depthwise_conv2d`: the first layer exactly (one
                input channel per client: channel multiplier 32); the second
                as a depthwise convolution with multiplier 64 over the
                K*32 channels and a sum over each client's 32 (a [B, 24,
                24, K*32*64] intermediate, 0.9 GB at K=10).
  vmap          `tf.vectorized_map` over the clients of a function running
                both convolutions of one client (its [B, ...] images, its
                kernels); pfor has no vectorized Conv2D for per-client
                kernels, so it falls back to a `while_loop` over clients.
  map_fn        both convolutions of each client inside `tf.map_fn` over
                the clients (a `while_loop`: K need not be known when the
                graph is built, as in `stacked_training`, where K is the
                number of clients with a batch at the step).
  im2col        both convolutions as one batched matmul each: the 9 shifted
                slices of the [K, B, H, W, C] input concatenated to
                [K, B*H'*W', 9C] patches, times the [K, 9C, C_out] kernels.
  taps          both convolutions as a sum over the 9 kernel taps of
                batched matmuls [K, B*H'*W', C] x [K, C, C_out].
  dense_keras   the dense part alone ([B, 12, 12, 64] pooled maps in:
                dropout, dense 128, dropout, dense 62, loss, SGD), K Keras
                models one after another (issue's item f, per-client side).
  dense_bmm     the same dense part for K clients as batched `tf.matmul`.

Before timing, each stacked variant's per-client losses and gradients with
dropout off are compared with the Keras models' (one client at a time).
Every variant then runs `--warmup` untimed steps, and the timed repetitions
go round the variants in turns (a, b, c, ..., a, b, c, ...; the starting
variant rotates), each repetition timing `--inner` consecutive steps.
Printed per variant: the median over `--repeats` repetitions of ms per step
of the K clients, the min-max and the interquartile range of the
repetitions, and the ratio of the `keras` median to the variant's.

TensorFlow's oneDNN kernels are on unless the environment says otherwise
(as tff-opt's binaries and tests set them). Only with oneDNN does the CPU
compute the gradient of a grouped convolution: without it (Eigen kernels)
`Conv2DBackpropInput` fails with "Gradients for grouped convolutions are
not supported on CPU"; the `grouped` row then prints the error.
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from tasks import emnist  # pylint: disable=g-import-not-at-top

tf.get_logger().setLevel('ERROR')  # Retracing notes: one step per variant.

LEARNING_RATE = 0.1
IMAGE = (28, 28, 1)
DROPOUT_CONV = 0.25
DROPOUT_DENSE = 0.5
STACKED = ('unrolled', 'unrolled_bmm', 'grouped', 'depthwise', 'vmap',
           'map_fn', 'im2col', 'taps')
VARIANTS = ('keras',) + STACKED + ('dense_keras', 'dense_bmm')


# --- Convolutions of K clients: x [K, B, H, W, C], w [K, 3, 3, C, O] ---------


def _bias_relu(y, b):
  """relu(y + b) for y [K, B, H, W, O] and b [K, O]."""
  return tf.nn.relu(y + b[:, tf.newaxis, tf.newaxis, tf.newaxis, :])


def _to_channels(x):
  """[K, B, H, W, C] -> [B, H, W, K*C] (client-major channels)."""
  k, b, h, w, c = x.shape
  return tf.reshape(tf.transpose(x, [1, 2, 3, 0, 4]), [b, h, w, k * c])


def _from_channels(y, k):
  """[B, H, W, K*C] -> [K, B, H, W, C]."""
  b, h, w, kc = y.shape
  return tf.transpose(tf.reshape(y, [b, h, w, k, kc // k]), [3, 0, 1, 2, 4])


def _group_kernels(w):
  """[K, 3, 3, C, O] -> [3, 3, C, K*O] (client k's kernels in group k)."""
  k, kh, kw, c, o = w.shape
  return tf.reshape(tf.transpose(w, [1, 2, 3, 0, 4]), [kh, kw, c, k * o])


def conv_grouped(x, w):
  """Grouped `tf.nn.conv2d`: K groups over client-major channels."""
  y = tf.nn.conv2d(_to_channels(x), _group_kernels(w), 1, 'VALID')
  return _from_channels(y, x.shape[0])


def conv_depthwise(x, w):
  """`tf.nn.depthwise_conv2d`, then a sum over each client's inputs."""
  k, b, _, _, c = x.shape
  o = w.shape[-1]
  # [3, 3, K*C, O]: input channel k*C + i has client k's kernel w[k, ..., i, :].
  kernels = tf.reshape(tf.transpose(w, [1, 2, 0, 3, 4]),
                       [3, 3, k * c, o])
  y = tf.nn.depthwise_conv2d(_to_channels(x), kernels, [1, 1, 1, 1], 'VALID')
  if c > 1:  # Output channel (k*C + i)*O + j: sum over i.
    h, wd = y.shape[1:3]
    y = tf.reduce_sum(tf.reshape(y, [b, h, wd, k, c, o]), axis=4)
    y = tf.reshape(y, [b, h, wd, k * o])
  return _from_channels(y, k)


def _patches(x):
  """[K, B, H, W, C] -> the 9 shifted [K, B, H-2, W-2, C] slices."""
  h, w = x.shape[2:4]
  return [x[:, :, i:i + h - 2, j:j + w - 2, :] for i in range(3)
          for j in range(3)]


def conv_im2col(x, w):
  """[K, B*H'*W', 9C] patches times [K, 9C, O] kernels."""
  k, b, h, wd, c = x.shape
  patches = tf.concat(_patches(x), axis=-1)
  y = tf.matmul(tf.reshape(patches, [k, -1, 9 * c]),
                tf.reshape(w, [k, 9 * c, -1]))
  return tf.reshape(y, [k, b, h - 2, wd - 2, -1])


def conv_taps(x, w):
  """Sum over the 9 taps of [K, B*H'*W', C] x [K, C, O] batched matmuls."""
  k, b, h, wd, c = x.shape
  y = 0.
  for tap, piece in enumerate(_patches(x)):
    y += tf.matmul(tf.reshape(piece, [k, -1, c]), w[:, tap // 3, tap % 3])
  return tf.reshape(y, [k, b, h - 2, wd - 2, -1])


def conv_vmap(x, w1, b1, w2, b2):
  """Both convolutions (and their relu) under `tf.vectorized_map`."""

  def one_client(args):
    xi, w1i, b1i, w2i, b2i = args
    h = tf.nn.relu(tf.nn.conv2d(xi, w1i, 1, 'VALID') + b1i)
    return tf.nn.relu(tf.nn.conv2d(h, w2i, 1, 'VALID') + b2i)

  return tf.vectorized_map(one_client, (x, w1, b1, w2, b2), warn=False)


def conv_map_fn(x, w1, b1, w2, b2):
  """Both convolutions (and their relu) of each client in `tf.map_fn`."""

  def one_client(args):
    xi, w1i, b1i, w2i, b2i = args
    h = tf.nn.relu(tf.nn.conv2d(xi, w1i, 1, 'VALID') + b1i)
    return tf.nn.relu(tf.nn.conv2d(h, w2i, 1, 'VALID') + b2i)

  return tf.map_fn(one_client, (x, w1, b1, w2, b2),
                   fn_output_signature=x.dtype)


CONVS = {'grouped': conv_grouped, 'depthwise': conv_depthwise,
         'im2col': conv_im2col, 'taps': conv_taps}


# --- The stacked model -------------------------------------------------------


def _dropout(x, rate, training):
  return tf.nn.dropout(x, rate) if training else x


def dense_logits(weights, pooled, training):
  """Dropout, dense 128 relu, dropout, dense 62: [K, B, 62] logits.

  Args:
    weights: Stacked dense kernel, bias, output kernel, bias.
    pooled: [K, B, 12, 12, 64] pooled feature maps.
    training: Dropout on.
  """
  w3, b3, w4, b4 = weights
  k, b = pooled.shape[:2]
  flat = tf.reshape(_dropout(pooled, DROPOUT_CONV, training), [k, b, -1])
  hidden = tf.nn.relu(tf.matmul(flat, w3) + b3[:, tf.newaxis, :])
  hidden = _dropout(hidden, DROPOUT_DENSE, training)
  return tf.matmul(hidden, w4) + b4[:, tf.newaxis, :]


def unrolled_logits(weights, x, training, *, dense_unrolled=True):
  """The K models one after another in one graph: [K, B, 62] logits.

  The stacked weights and images are split once (`tf.unstack`, whose
  gradient is a `tf.stack`: slicing w[k] instead would make every client's
  gradient a zero-padded [K, ...] tensor); each client then runs its own
  `tf.nn.conv2d`s, pool and (with `dense_unrolled`) `tf.matmul`s.

  Args:
    weights: The stacked weights.
    x: [K, B, 28, 28, 1] images.
    training: Dropout on.
    dense_unrolled: The dense layers per client too (else batched).
  """
  per_client = [tf.unstack(w) for w in weights]
  outputs = []
  for k, xk in enumerate(tf.unstack(x)):
    w1, b1, w2, b2, w3, b3, w4, b4 = [w[k] for w in per_client]
    h = tf.nn.relu(tf.nn.conv2d(xk, w1, 1, 'VALID') + b1)
    h = tf.nn.relu(tf.nn.conv2d(h, w2, 1, 'VALID') + b2)
    h = tf.nn.max_pool2d(h, 2, 2, 'VALID')
    if not dense_unrolled:
      outputs.append(h)
      continue
    h = tf.reshape(_dropout(h, DROPOUT_CONV, training), [xk.shape[0], -1])
    h = _dropout(tf.nn.relu(tf.matmul(h, w3) + b3), DROPOUT_DENSE, training)
    outputs.append(tf.matmul(h, w4) + b4)
  if dense_unrolled:
    return tf.stack(outputs)
  return dense_logits(weights[4:], tf.stack(outputs), training)


def _pool(h):
  """2x2 max-pool of [K, B, H, W, C] (the clients folded into the batch)."""
  k, b = h.shape[:2]
  pooled = tf.nn.max_pool2d(tf.reshape(h, [k * b] + h.shape[2:].as_list()),
                            2, 2, 'VALID')
  return tf.reshape(pooled, [k, b] + pooled.shape[1:].as_list())


def stacked_logits(variant, weights, x, training):
  """The K clients' logits [K, B, 62] by `variant`'s convolutions."""
  if variant in ('unrolled', 'unrolled_bmm'):
    return unrolled_logits(weights, x, training,
                           dense_unrolled=variant == 'unrolled')
  w1, b1, w2, b2 = weights[:4]
  if variant == 'vmap':
    h = conv_vmap(x, w1, b1, w2, b2)
  elif variant == 'map_fn':
    h = conv_map_fn(x, w1, b1, w2, b2)
  else:
    conv = CONVS[variant]
    h = _bias_relu(conv(x, w1), b1)
    h = _bias_relu(conv(h, w2), b2)
  return dense_logits(weights[4:], _pool(h), training)


def client_losses(logits, y):
  """[K]: each client's mean cross-entropy over its batch."""
  return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=y, logits=logits), axis=1)


def sgd(weights, gradients):
  return [w - LEARNING_RATE * g for w, g in zip(weights, gradients)]


def stacked_step_fn(variant):
  """A `tf.function` (weights, x, y) -> new weights: one step of K clients."""

  @tf.function
  def step(weights, x, y):
    with tf.GradientTape() as tape:
      tape.watch(weights)
      loss = tf.reduce_sum(client_losses(
          stacked_logits(variant, weights, x, True), y))
    return sgd(weights, tape.gradient(loss, weights))

  return step


def dense_bmm_step_fn():
  """One step of the dense part of K clients as batched matmuls."""

  @tf.function
  def step(weights, pooled, y):
    with tf.GradientTape() as tape:
      tape.watch(weights)
      loss = tf.reduce_sum(client_losses(
          dense_logits(weights, pooled, True), y))
    return sgd(weights, tape.gradient(loss, weights))

  return step


# --- Keras, one client after another -----------------------------------------


def keras_step_fn(model):
  """A `tf.function` (x, y) -> None: one SGD step of `model`, in place."""
  loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()

  @tf.function
  def step(x, y):
    with tf.GradientTape() as tape:
      loss = loss_fn(y, model(x, training=True))
    for v, g in zip(model.trainable_variables,
                    tape.gradient(loss, model.trainable_variables)):
      v.assign_sub(LEARNING_RATE * g)

  return step


def dense_model():
  """The CNN's layers after the max-pool, as a Keras model."""
  full = emnist.create_cr_model()
  return tf.keras.Sequential([tf.keras.Input((12, 12, 64))] + full.layers[3:])


# --- Checks and timing -------------------------------------------------------


def keras_reference(models, x, y):
  """Per-client losses and gradients of the Keras models, dropout off."""
  loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
  losses, grads = [], []
  for k, model in enumerate(models):
    with tf.GradientTape() as tape:
      loss = loss_fn(y[k], model(x[k], training=False))
    losses.append(float(loss))
    grads.append(tape.gradient(loss, model.trainable_variables))
  stacked = [np.stack([g[i] for g in grads]) for i in range(len(grads[0]))]
  return np.array(losses), stacked


def check_variant(variant, weights, x, y, reference):
  """Largest relative difference to the Keras losses and gradients."""

  @tf.function
  def losses_and_grads(weights, x, y):
    with tf.GradientTape() as tape:
      tape.watch(weights)
      losses = client_losses(stacked_logits(variant, weights, x, False), y)
      total = tf.reduce_sum(losses)
    return losses, tape.gradient(total, weights)

  losses, grads = losses_and_grads(weights, x, y)
  ref_losses, ref_grads = reference
  worst = [np.max(np.abs(losses.numpy() - ref_losses) / np.abs(ref_losses))]
  for g, r in zip(grads, ref_grads):
    worst.append(np.max(np.abs(g.numpy() - r)) / np.max(np.abs(r)))
  return worst


class Runner:
  """One variant's step, callable repeatedly (carrying its weights)."""

  def __init__(self, variant, models, weights, x, y, pooled):
    self.variant = variant
    if variant == 'keras':
      steps = [keras_step_fn(m) for m in models]
      self.run = lambda: [s(x[k], y[k]) for k, s in enumerate(steps)]
    elif variant == 'dense_keras':
      dense_models = [dense_model() for _ in models]
      steps = [keras_step_fn(m) for m in dense_models]
      self.run = lambda: [s(pooled[k], y[k]) for k, s in enumerate(steps)]
    elif variant == 'dense_bmm':
      step = dense_bmm_step_fn()
      self.weights = weights[4:]
      self.run = lambda: self._carry(step, pooled, y)
    else:
      step = stacked_step_fn(variant)
      self.weights = list(weights)
      self.run = lambda: self._carry(step, x, y)

  def _carry(self, step, x, y):
    self.weights = step(self.weights, x, y)
    # The step is done when its results are (TensorFlow runs eagerly
    # dispatched functions synchronously on the CPU; this makes it sure).
    _ = [w.numpy() for w in self.weights[-1:]]


def quartiles(values):
  if len(values) < 2:
    return values[0], values[0]
  q = statistics.quantiles(values, n=4, method='inclusive')
  return q[0], q[2]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--clients', type=int, default=10)
  parser.add_argument('--batch', type=int, default=20)
  parser.add_argument('--repeats', type=int, default=7)
  parser.add_argument('--inner', type=int, default=2,
                      help='Steps per timed repetition.')
  parser.add_argument('--warmup', type=int, default=2)
  parser.add_argument('--variants', default=','.join(VARIANTS))
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args(argv)
  variants = [v for v in args.variants.split(',') if v]
  unknown = sorted(set(variants) - set(VARIANTS))
  if unknown:
    parser.error(f'unknown variants {unknown}; known: {VARIANTS}')

  tf.keras.utils.set_random_seed(args.seed)
  k, b = args.clients, args.batch
  models = [emnist.create_cr_model() for _ in range(k)]
  weights = [tf.constant(np.stack([m.trainable_variables[i].numpy()
                                   for m in models]))
             for i in range(len(models[0].trainable_variables))]
  rng = np.random.default_rng(args.seed)
  x = tf.constant(rng.random((k, b) + IMAGE, dtype=np.float32))
  y = tf.constant(rng.integers(0, emnist.NUM_CLASSES, (k, b)), tf.int32)
  pooled = tf.constant(rng.random((k, b, 12, 12, 64), dtype=np.float32))
  print(f'stacked_conv: K={k} clients x batch {b} of {IMAGE}, SGD lr '
        f'{LEARNING_RATE}, dropout on; TF {tf.__version__}, '
        f'TF_ENABLE_ONEDNN_OPTS={os.environ.get("TF_ENABLE_ONEDNN_OPTS")}, '
        f'{args.repeats} repetitions x {args.inner} steps after '
        f'{args.warmup} warm-up steps', flush=True)

  reference = keras_reference(models, x, y)
  runners, failed = {}, {}
  for variant in variants:
    try:
      if variant in STACKED:
        worst = check_variant(variant, weights, x, y, reference)
        print(f'  check {variant:13s} largest relative difference to Keras '
              f'(dropout off): {max(worst):.1e} (loss {worst[0]:.1e}, '
              'gradients ' + ' '.join(f'{w:.0e}' for w in worst[1:]) + ')',
              flush=True)
      runner = Runner(variant, models, weights, x, y, pooled)
      for _ in range(args.warmup):
        runner.run()
      runners[variant] = runner
    except (tf.errors.OpError, ValueError, TypeError) as e:
      lines = [l.strip() for l in str(e).splitlines() if l.strip()]
      # Graph errors start with "Graph execution error:"; show the cause.
      cause = next((l for l in lines if 'support' in l), lines[-1])
      failed[variant] = f'{type(e).__name__}: {cause}'
      print(f'  {variant}: failed: {failed[variant]}', flush=True)
  print(f'  before timing: {load_average()}', flush=True)

  times = {v: [] for v in runners}
  cpu_times = {v: [] for v in runners}
  order = list(runners)
  for rep in range(args.repeats):
    shift = rep % len(order) if order else 0
    for variant in order[shift:] + order[:shift]:
      start, cpu_start = time.perf_counter(), time.process_time()
      for _ in range(args.inner):
        runners[variant].run()
      times[variant].append(
          1000 * (time.perf_counter() - start) / args.inner)
      cpu_times[variant].append(
          1000 * (time.process_time() - cpu_start) / args.inner)

  print(f'  after timing: {load_average()}')
  base = statistics.median(times['keras']) if 'keras' in times else None
  dense_base = (statistics.median(times['dense_keras'])
                if 'dense_keras' in times else None)
  cpu_base = (statistics.median(cpu_times['keras']) if 'keras' in times
              else None)
  dense_cpu_base = (statistics.median(cpu_times['dense_keras'])
                    if 'dense_keras' in times else None)
  print(f'{"variant":14s} {"ms/step":>9s} {"min":>8s} {"max":>8s} '
        f'{"q1":>8s} {"q3":>8s} {"speed-up":>9s} {"cpu ms":>8s} '
        f'{"cpu x":>6s}')
  for variant in variants:
    if variant in failed:
      print(f'{variant:14s} failed: {failed[variant]}')
      continue
    values = times[variant]
    med = statistics.median(values)
    q1, q3 = quartiles(values)
    dense = variant.startswith('dense')
    ref = dense_base if dense else base
    ratio = f'{ref / med:9.2f}' if ref else f'{"-":>9s}'
    cpu = statistics.median(cpu_times[variant])
    cpu_ref = dense_cpu_base if dense else cpu_base
    cpu_ratio = f'{cpu_ref / cpu:6.2f}' if cpu_ref else f'{"-":>6s}'
    print(f'{variant:14s} {med:9.1f} {min(values):8.1f} {max(values):8.1f} '
          f'{q1:8.1f} {q3:8.1f} {ratio} {cpu:8.1f} {cpu_ratio}')
  print('ms/step: wall-clock ms per step of all clients, median (min, max, '
        'quartiles) over the repetitions; speed-up: the keras median over '
        'the variant\'s (dense_*: over dense_keras\'s); cpu ms: median CPU '
        'seconds of this process per step (x 1000), cpu x: its ratio.')
  return 0


def load_average():
  one, five, fifteen = os.getloadavg()
  return (f'load average {one:.2f} {five:.2f} {fifteen:.2f} on '
          f'{os.cpu_count()} cores')


if __name__ == '__main__':
  sys.exit(main())
