r"""Training steps per second of P processes at once, by TensorFlow threads.

    .venv/bin/python -m benchmarks.threads_per_run
    .venv/bin/python -m benchmarks.threads_per_run --workloads=conv \
        --configs=1:default,2:1,2:default --seconds=40

What `binaries.claims --parallel=P --threads_per_run=T` chooses between:
each configuration `P:T` starts P processes at once, each training one
workload for `--seconds` (after 5 untimed steps) with both of TensorFlow's
thread pools at T (`TF_NUM_INTRAOP_THREADS`, `TF_NUM_INTEROP_THREADS`;
`default` leaves TensorFlow's, one per core), and prints the steps per
second of all P together and of each. The workloads are the claims' own
local steps, on random inputs:

- `conv`: FedCurv's CNN (`fedcurv_cnn`), a batch of 16 28x28x1 images;
- `lstm`: Reddi et al.'s Shakespeare model (embedding 8, 2 x LSTM 256,
  90 characters), a batch of 4 sequences of 80.

Run it with the machine otherwise idle (pause the claims): the figures
are throughput, and anything else running takes its share.
"""

import argparse
import os
import subprocess
import sys
import time

_WARM_UP_STEPS = 5


def _child(workload: str, seconds: float) -> None:
  """Trains `workload` for `seconds`; prints its steps per second."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  from tasks import models_zoo  # pylint: disable=g-import-not-at-top
  if workload == 'conv':
    model = models_zoo.create_fedcurv_cnn()
    x = tf.random.stateless_uniform([16, 28, 28, 1], seed=(1, 2))
    y = tf.random.stateless_uniform([16], (3, 4), 0, 10, tf.int32)
  else:
    model = tf.keras.Sequential([
        tf.keras.layers.Embedding(90, 8),
        tf.keras.layers.LSTM(256, return_sequences=True),
        tf.keras.layers.LSTM(256, return_sequences=True),
        tf.keras.layers.Dense(90)])
    x = tf.random.stateless_uniform([4, 80], (1, 2), 0, 90, tf.int32)
    y = tf.random.stateless_uniform([4, 80], (3, 4), 0, 90, tf.int32)
  model(x)
  optimizer = tf.keras.optimizers.SGD(0.01)
  loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))

  for _ in range(_WARM_UP_STEPS):
    step()
  steps, start = 0, time.perf_counter()
  while time.perf_counter() - start < seconds:
    step()
    steps += 1
  print(steps / (time.perf_counter() - start), flush=True)


def _measure(workload: str, processes: int, threads: str,
             seconds: float) -> list[float]:
  """Steps per second of each of `processes` run at once."""
  env = dict(os.environ)
  env.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')  # As the binaries.
  if threads != 'default':
    env['TF_NUM_INTRAOP_THREADS'] = env['TF_NUM_INTEROP_THREADS'] = threads
  children = [subprocess.Popen(  # pylint: disable=consider-using-with
      [sys.executable, '-m', 'benchmarks.threads_per_run', '--child',
       f'--workloads={workload}', f'--seconds={seconds}'],
      stdout=subprocess.PIPE, text=True, env=env) for _ in range(processes)]
  return [float(child.communicate()[0]) for child in children]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--workloads', default='conv,lstm')
  parser.add_argument('--configs', default='1:default,2:default,2:1,3:default',
                      help='P:T pairs: P processes of T threads (or default)')
  parser.add_argument('--seconds', type=float, default=40.0)
  parser.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    _child(args.workloads, args.seconds)
    return
  for workload in args.workloads.split(','):
    if workload not in ('conv', 'lstm'):
      parser.error(f'--workloads: {workload!r} is not conv or lstm.')
    for config in args.configs.split(','):
      processes, _, threads = config.partition(':')
      rates = _measure(workload, int(processes), threads or 'default',
                       args.seconds)
      print(f'{workload}: {processes} processes x {threads} threads: '
            f'{sum(rates):.2f} steps/s in all ('
            + ', '.join(f'{r:.2f}' for r in rates) + f'); load '
            f'{os.getloadavg()[0]:.1f}', flush=True)


if __name__ == '__main__':
  main()
