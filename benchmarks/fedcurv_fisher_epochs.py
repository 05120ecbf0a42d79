r"""Seconds per FedCurv round: the Fisher over all E epochs vs over one.

    .venv/bin/python -m benchmarks.fedcurv_fisher_epochs --data_dir=data \
        --rounds=4

The claims' FedCurv setting (`binaries/claims.py`, claim `fedcurv`):
MNIST-5k, 24 devices of two one-label blocks, all 24 every round, E = 5,
batch 256, client SGD lr 0.05, small_cnn (114,314 parameters), lam 1,
Eq. 3 (cross_silo); clients unshuffled here, so that every process trains
alike. Processes on the same clients and weights: `client_epochs=1` (the
Fisher over every element of the E-epoch dataset), `client_epochs=5` (over
its first epoch, as the claims run it), the same stateless, and FedOpt
(no Fisher). After one untimed round each, their rounds alternate (a, b,
c, d, a, ...) so that the machine's load falls on all alike; it prints
each round's seconds, the medians and the ratio of the first two, and the
largest relative difference between the first two processes' u after the
first round (the same numbers up to float rounding).
"""

import argparse
import os
import statistics
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

import tasks  # pylint: disable=g-import-not-at-top
from tff_opt import algorithms  # pylint: disable=g-import-not-at-top
from tff_opt.program import runtime  # pylint: disable=g-import-not-at-top

EPOCHS = 5


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--data_dir', default='data')
  parser.add_argument('--rounds', type=int, default=4)
  args = parser.parse_args()
  runtime.set_local_execution_context()
  task = tasks.create_task(
      'mnist5k', train_client_spec=tff.simulation.baselines.ClientSpec(
          num_epochs=EPOCHS, batch_size=256, shuffle_buffer_size=1),
      data_dir=args.data_dir, seed=0, partition='fedcurv', num_clients=24,
      model='small_cnn')
  data = task.datasets.train_data
  ids = sorted(data.client_ids)

  def shared():
    return dict(
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.05),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
        client_weighting=tff.learning.ClientWeighting.UNIFORM)

  processes = {
      'fisher over E epochs': algorithms.build_fed_curv(
          task.model_fn, lam=1.0, cross_silo=True, client_epochs=1,
          **shared()),
      'fisher over 1 epoch': algorithms.build_fed_curv(
          task.model_fn, lam=1.0, cross_silo=True, client_epochs=EPOCHS,
          **shared()),
      '1 epoch, stateless': algorithms.build_fed_curv(
          task.model_fn, lam=1.0, cross_silo=False, client_epochs=EPOCHS,
          **shared()),
      'fedopt (no fisher)': algorithms.build_fed_opt(task.model_fn,
                                                    **shared()),
  }
  tf.keras.utils.set_random_seed(0)
  weights = tff.learning.models.ModelWeights.from_model(task.model_fn())
  weights = tf.nest.map_structure(lambda v: np.asarray(v.numpy()), weights)
  states, times, first_u = {}, {name: [] for name in processes}, {}
  client_states = {}

  def run(name, state):
    process = processes[name]
    datasets = [task.datasets.train_preprocess_fn(
        data.create_tf_dataset_for_client(c)) for c in ids]
    if name in client_states:  # Eq. 3: the clients' own last terms.
      output, client_states[name] = process.next(state, datasets,
                                                 client_states[name])
    else:
      output = process.next(state, datasets)
    return output

  for name, process in processes.items():
    if hasattr(process, 'initial_client_state'):
      client_states[name] = [process.initial_client_state() for _ in ids]
    tf.keras.utils.set_random_seed(1)  # The same shuffles for each.
    output = run(name, process.set_model_weights(process.initialize(),
                                                 weights))
    states[name] = output.state
    if name.startswith('fisher'):
      first_u[name] = output.state.finalizer['extras']['fisher_sum']
  a, b = [first_u[n] for n in first_u]
  diff = max(float(np.max(np.abs(x - y)) / (np.max(np.abs(x)) + 1e-30))
             for x, y in zip(a, b))
  for r in range(args.rounds):
    for name in processes:
      started = time.perf_counter()
      states[name] = run(name, states[name]).state
      times[name].append(time.perf_counter() - started)
      print(f'round {r + 2} {name}: {times[name][-1]:.2f} s', flush=True)
  print(f'load average {os.getloadavg()[0]:.1f}')
  medians = {n: statistics.median(t) for n, t in times.items()}
  for name, median in medians.items():
    print(f'{name:24s} median {median:6.2f} s/round over {len(times[name])}'
          f' (min {min(times[name]):.2f}, max {max(times[name]):.2f})')
  names = list(medians)
  print(f'one epoch / E epochs: {medians[names[1]] / medians[names[0]]:.2f}')
  print(f'largest relative difference of u after round 1: {diff:.2e}')
  runtime.shutdown()


if __name__ == '__main__':
  main()
