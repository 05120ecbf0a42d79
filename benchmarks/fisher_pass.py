r"""CPU seconds of FedCurv's Fisher pass alone: per-example loop vs one pass.

    .venv/bin/python -m benchmarks.fisher_pass
    .venv/bin/python -m benchmarks.fisher_pass --examples=200 --repeats=7 \
        --batch_sizes=16,32,64

On the EMNIST-CR CNN of `tasks/emnist.py` (1,206,590 parameters) and
`--examples` seeded random 28x28x1 examples in batches of 20, it times
`fed_curv.empirical_fisher_diagonal` in a plain `tf.function`: the
per-example loop (one gradient pass per example, the fallback) and the
fast path (`tff_opt/algorithms/fed_curv_fisher.py`) at each of
`--batch_sizes`. TF runs with
one intra-op and one inter-op thread; each figure is the median over
`--repeats` calls (after one untimed warm-up call) of this process's CPU
seconds (`time.process_time`), printed with the machine's load average.
It also prints the largest relative difference between the two results
(they compute the same numbers).
"""

import argparse
import os
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
# TensorFlow's oneDNN kernels unless the environment says otherwise (see
# tff_opt/program/worker_env.py), as in the binaries.
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top


def _parse_args(argv):
  parser = argparse.ArgumentParser(prog='fisher_pass',
                                   description=__doc__.split('\n')[0])
  parser.add_argument('--examples', type=int, default=200)
  parser.add_argument('--repeats', type=int, default=5)
  parser.add_argument('--batch_sizes', default='32',
                      help='comma-separated batch sizes of the fast path.')
  args = parser.parse_args(argv)
  if args.examples < 1:
    parser.error(f'--examples={args.examples}: expected a positive integer')
  if args.repeats < 1:
    parser.error(f'--repeats={args.repeats}: expected a positive integer')
  try:
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(',')]
  except ValueError:
    args.batch_sizes = []
  if not args.batch_sizes or min(args.batch_sizes) < 1:
    parser.error(f'--batch_sizes={args.batch_sizes}: expected positive '
                 'integers separated by commas')
  return args


def main(argv=None):
  args = _parse_args(argv)
  tf.config.threading.set_intra_op_parallelism_threads(1)
  tf.config.threading.set_inter_op_parallelism_threads(1)
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  from tasks import emnist  # pylint: disable=g-import-not-at-top
  from tff_opt.algorithms import fed_curv  # pylint: disable=g-import-not-at-top
  from tff_opt.algorithms import fed_curv_fisher  # pylint: disable=g-import-not-at-top

  tf.keras.utils.set_random_seed(0)
  model = tff.learning.models.from_keras_model(
      emnist.create_cr_model(),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(),
      input_spec=(tf.TensorSpec([None, 28, 28, 1], tf.float32),
                  tf.TensorSpec([None], tf.int32)))
  rng = np.random.default_rng(0)
  x = rng.uniform(size=(args.examples, 28, 28, 1)).astype(np.float32)
  y = rng.integers(0, 62, size=args.examples).astype(np.int32)
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(20)
  print(f'fast path supported: {fed_curv_fisher.is_supported(model)}')

  variants = [('per-example loop', tf.function(
      lambda: fed_curv._per_example_fisher(model, dataset)))]  # pylint: disable=protected-access
  for batch_size in args.batch_sizes:
    variants.append((f'one pass, batch {batch_size}', tf.function(
        lambda b=batch_size: fed_curv.empirical_fisher_diagonal(
            model, dataset, batch_size=b))))
  results = {}
  for name, fn in variants:
    results[name] = [t.numpy() for t in fn()]  # Warm-up (traces).
    seconds = []
    for _ in range(args.repeats):
      start = time.process_time()
      fn()
      seconds.append(time.process_time() - start)
    print(f'{name:24s} {common.median(seconds):7.3f} CPU s '
          f'({args.examples} examples; min {min(seconds):.3f}, max '
          f'{max(seconds):.3f}); {common.load_average()}', flush=True)
  reference = results[variants[0][0]]
  for name, _ in variants[1:]:
    worst = max(
        float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
        for a, b in zip(results[name], reference))
    print(f'{name}: largest |difference| / max |loop| = {worst:.2e}')


if __name__ == '__main__':
  main()
