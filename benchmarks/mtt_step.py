r"""Seconds per MTT outer step of FedPTR-S's server, and where they go.

FedPTR-S's claim runs (`binaries.claims --claims=fedptr`) spend ~180 s a
round here, almost all in the server's trajectory matching: 20 outer steps,
each one second-order gradient through 10 unrolled full-batch SGD steps of
the paper's ConvNet (`mtt_convnet`) on 100 synthetic 28x28 images. This
script times one outer step (`tff_opt.round.mtt.matching_gradients`, the
function the server's `distill` loops over) as a `tf.function`, with the
model the runs use and with two variants that show what the time is spent
on:

    .venv/bin/python -m benchmarks.mtt_step                    # as the runs
    .venv/bin/python -m benchmarks.mtt_step --jit              # XLA
    .venv/bin/python -m benchmarks.mtt_step --variant=no_norm  # no norm

`--variant=no_norm` drops the instance norm (the convolutions' share of the
time); `--jit` compiles the step with XLA (`jit_compile=True`; numerics
differ in the last bits, so it could only serve runs that have not started).
Prints the median of `--repeats` timed calls after one warm-up call (which
includes tracing and, with `--jit`, compilation, printed separately), with
the machine's load: the claims' runs use one TensorFlow thread, as this
script does by default.
"""

import argparse
import os
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')

import tensorflow as tf  # pylint: disable=g-import-not-at-top
import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

from benchmarks import common  # pylint: disable=g-import-not-at-top
from tasks import models  # pylint: disable=g-import-not-at-top
from tff_opt.round import mtt  # pylint: disable=g-import-not-at-top

_SHAPE = (28, 28, 1)  # MNIST-5k, the claim's data
_CLASSES = 10


def _keras_model(variant: str) -> tf.keras.Model:
  if variant == 'mtt_convnet':
    return models.create_mtt_convnet(_SHAPE, _CLASSES)
  layers = [tf.keras.Input(shape=_SHAPE)]
  for _ in range(3):
    layers += [tf.keras.layers.Conv2D(128, 3, padding='same'),
               tf.keras.layers.ReLU(),
               tf.keras.layers.AveragePooling2D(pool_size=2)]
  layers += [tf.keras.layers.Flatten(), tf.keras.layers.Dense(_CLASSES)]
  return tf.keras.Sequential(layers)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--variant', choices=('mtt_convnet', 'no_norm'),
                      default='mtt_convnet')
  parser.add_argument('--jit', action='store_true')
  parser.add_argument('--inner_steps', type=int, default=10)
  parser.add_argument('--images_per_class', type=int, default=10)
  parser.add_argument('--threads', type=int, default=1)
  parser.add_argument('--repeats', type=int, default=3)
  args = parser.parse_args()
  tf.config.threading.set_intra_op_parallelism_threads(args.threads)
  tf.config.threading.set_inter_op_parallelism_threads(args.threads)

  input_spec = (tf.TensorSpec([None, *_SHAPE], tf.float32),
                tf.TensorSpec([None], tf.int32))

  def model_fn():
    return tff.learning.models.from_keras_model(
        _keras_model(args.variant), loss=tf.keras.losses.
        SparseCategoricalCrossentropy(from_logits=True), input_spec=input_spec)

  forward = mtt.forward_from_model_fn(model_fn)
  tf.keras.utils.set_random_seed(0)
  start = [tf.constant(v) for v in _keras_model(args.variant).get_weights()]
  target = [w + 0.01 * tf.random.normal(w.shape) for w in start]
  x = tf.random.normal([_CLASSES * args.images_per_class, *_SHAPE])
  y = mtt.synthetic_labels(_CLASSES, args.images_per_class)

  @tf.function(jit_compile=args.jit)
  def step(x, lr):
    return mtt.matching_gradients(forward, start, target, x, y, lr,
                                  args.inner_steps)

  lr = tf.constant(0.01)
  began = time.perf_counter()
  step(x, lr)[1].numpy()
  first = time.perf_counter() - began
  times = []
  for _ in range(args.repeats):
    began = time.perf_counter()
    step(x, lr)[1].numpy()
    times.append(time.perf_counter() - began)
  print(f'{args.variant}{" (XLA)" if args.jit else ""}, '
        f'{args.inner_steps} inner steps, {len(y)} images, '
        f'{args.threads} thread(s): first call {first:.1f} s, then a median '
        f'{common.median(times):.2f} s per outer step '
        f'({common.load_average()})')


if __name__ == '__main__':
  main()
