r"""Characters per second: Shakespeare clients one at a time or in groups.

    .venv/bin/python -m benchmarks.vectorized_round --data_dir=data
    .venv/bin/python -m benchmarks.vectorized_round --data_dir=data \
        --group_sizes=2,5,10 --rounds=3 --warmup=1
    .venv/bin/python -m benchmarks.vectorized_round --data_dir=data \
        --algorithm=fedprox --group_sizes=10 --by_steps
    .venv/bin/python -m benchmarks.vectorized_round --quick     # smoke run

The workload is `round_time`'s Shakespeare one (`round_time.Workload`): the
paper's character LSTM (embedding 8, 2 x LSTM 256; `--lstm_layers` and
`--lstm_units` resize it), 10 real train clients of
`<--data_dir>/shakespeare.sqlite` drawn with `--seed` (synthetic clients of
the real file's size percentiles without the file), TFF's preprocessing,
batch 4, one epoch. The clients' batches are read once and frozen (the same
batches in the same order every round, for every path), so that every path
trains on the same data and the first round's results can be compared.

Paths, each a process of `--algorithm` (FedOpt by default; client SGD at
`round_time.CLIENT_LR`, server SGD at 1, the algorithm's registry
weighting; the others' hyper-parameters in `ALGORITHM_FLAGS`) under TFF's
local C++ context with `--max_concurrent_clients` client computations at
once:

  per-client  `registry.build_process` (for FedOpt
              `tff_opt.algorithms.build_fed_opt`): one TFF client
              computation per client, Keras' LSTM;
  K=k         `tff_opt.algorithms.vectorized.vectorize` of that process
              with `group_size=k`: the clients in groups of at most k
              (`vectorized_training.group_sizes`), each group one computation
              over stacked weights (`tasks/shakespeare_vectorized.py`);
  K=k,steps   the same with `by_steps=True` (`--by_steps`): the clients
              ordered by their numbers of batches before they are grouped.

After one warm-up round each (`--warmup`), the paths take their timed
rounds in turns (a, b, c, a, b, c, ...), so a change of the machine's load
falls on all alike. Printed per path: median seconds per round, characters
(non-padding targets) per second, the ratio to the per-client path, CPU
seconds per round (this process and its TFF worker), and the worker's peak
resident memory after the path's warm-up round (VmHWM: the paths warm up
one after another, so a path that needs more memory than those before it
raises it). Before timing, each vectorized path's model after one round from
the same initial model is compared with the per-client path's (largest
difference relative to the largest change the round made).

The vectorized path reads the clients' datasets in this Python process each
round (as `binaries.train --client_vectorization=K` does); that time is in
its seconds per round.
"""

import argparse
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
# TensorFlow's oneDNN kernels unless the environment says otherwise, as in
# `round_time` (the worker inherits the setting).
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import round_time  # pylint: disable=g-import-not-at-top
from tasks import shakespeare_vectorized  # pylint: disable=g-import-not-at-top
from tff_opt import algorithms  # pylint: disable=g-import-not-at-top
from tff_opt.algorithms import vectorized  # pylint: disable=g-import-not-at-top
from tff_opt.program import registry  # pylint: disable=g-import-not-at-top
from tff_opt.program import runtime  # pylint: disable=g-import-not-at-top

PER_CLIENT = 'per-client'


def frozen(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """`dataset`'s batches of one pass, as a dataset that replays them."""
  batches = list(dataset.as_numpy_iterator())
  if not batches:
    return dataset.take(0)
  x = np.concatenate([b[0] for b in batches])
  y = np.concatenate([b[1] for b in batches])
  sizes = {len(b[0]) for b in batches[:-1]}
  batch = sizes.pop() if sizes else len(batches[0][0])
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def worker_peak_mb() -> float:
  """Peak resident memory (VmHWM) of this process's TFF workers, MiB."""
  peak = 0
  for worker in common.worker_processes():
    try:
      with open(f'/proc/{worker.pid}/status') as f:
        for line in f:
          if line.startswith('VmHWM:'):
            peak += int(line.split()[1])
    except OSError:
      continue
  return peak / 1024


# Hyper-parameters of the other algorithms (their values do not change the
# work a round does).
ALGORITHM_FLAGS = {
    'fedopt': {},
    'fedprox': {'mu': 0.01},
    'fedfor': {'alpha': 0.5},
    'fedcurv': {'lam': 0.01, 'fedcurv_exact': 'off'},
    'fedadc': {'beta': 0.9, 'fedadc_variant': 'heavy_ball',
               'local_momentum': 0.0},
    'fedadc_nesterov': {'beta': 0.9, 'fedadc_variant': 'nesterov',
                        'local_momentum': 0.0},
    'slowmo': {'beta': 0.9},
}


def build_processes(workload, group_sizes, *, unroll: bool,
                    algorithm: str = 'fedopt', by_steps: bool = False):
  """{path name: process} for the per-client and vectorized paths."""
  common_args = dict(
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(
          round_time.CLIENT_LR),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))
  if algorithm == 'fedopt':
    per_client = algorithms.build_fed_opt(workload.model_fn, **common_args)
  else:
    name = 'fedadc' if algorithm == 'fedadc_nesterov' else algorithm
    weighting = registry.ALGORITHMS[name].client_weighting
    per_client = registry.build_process(
        name, workload.model_fn, **common_args,
        client_weighting=getattr(tff.learning.ClientWeighting,
                                 weighting.upper()),
        client_lr_schedule=None,
        client_learning_rate=round_time.CLIENT_LR,
        num_clients=len(workload.datasets),
        client_epochs=1, **ALGORITHM_FLAGS[algorithm])
  vectorized_model = shakespeare_vectorized.vectorized_model_for(
      workload.model_fn, unroll=unroll)
  processes = {PER_CLIENT: per_client}
  for k in group_sizes:
    for steps in ([False, True] if by_steps else [False]):
      processes[f'K={k}' + (',steps' if steps else '')] = (
          vectorized.vectorize(per_client, vectorized_model, group_size=k,
                               by_steps=steps))
  return processes


def check_equal(processes, datasets, initial) -> dict[str, float]:
  """{path: max |w - w_per_client| / max |w_per_client - w0|} after a round."""
  finals = {}
  for name, process in processes.items():
    state = process.set_model_weights(process.initialize(), initial)
    state = process.next(state, datasets).state
    finals[name] = [np.asarray(w) for w in
                    process.get_model_weights(state).trainable]
  reference = finals[PER_CLIENT]
  change = max(np.abs(r - np.asarray(w0)).max()
               for r, w0 in zip(reference, initial.trainable))
  return {name: max(np.abs(a - b).max() for a, b in zip(w, reference)) /
                change
          for name, w in finals.items() if name != PER_CLIENT}


def _parse_args(argv):
  parser = argparse.ArgumentParser(
      prog='vectorized_round', description=__doc__.split('\n')[0])
  parser.add_argument('--data_dir', default='data',
                      help='directory of shakespeare.sqlite (default data; '
                      'synthetic clients without it)')
  parser.add_argument('--seed', type=int, default=0,
                      help='seed of the real clients drawn')
  parser.add_argument('--group_sizes', default='2,5,10',
                      help='comma-separated K of the vectorized paths')
  parser.add_argument('--rounds', type=int, default=3,
                      help='timed rounds per path')
  parser.add_argument('--warmup', type=int, default=1,
                      help='untimed rounds per path first')
  parser.add_argument('--max_concurrent_clients', type=int, default=2,
                      help='TFF client computations at once (0: no limit)')
  parser.add_argument('--lstm_layers', type=int, default=None)
  parser.add_argument('--lstm_units', type=int, default=None)
  parser.add_argument('--unroll', action='store_true',
                      help='unrolled recurrence instead of tf.scan')
  parser.add_argument('--algorithm', default='fedopt',
                      choices=sorted(ALGORITHM_FLAGS),
                      help='the algorithm of every path (default fedopt)')
  parser.add_argument('--by_steps', action='store_true',
                      help='also each K with the clients grouped by their '
                      'numbers of batches')
  parser.add_argument('--no_check', action='store_true',
                      help='skip the equality check')
  parser.add_argument('--quick', action='store_true',
                      help='4 clients, 3 batches each, 1 timed round')
  args = parser.parse_args(argv)
  try:
    args.group_sizes = [int(k) for k in args.group_sizes.split(',')]
  except ValueError:
    parser.error(f'--group_sizes: expected integers, got {args.group_sizes}')
  if any(k < 1 for k in args.group_sizes):
    parser.error('--group_sizes: every K must be at least 1')
  if args.rounds < 1 or args.warmup < 1:
    parser.error('--rounds and --warmup must be at least 1')
  if args.quick:
    args.rounds = 1
  return args


def main(argv=None):
  args = _parse_args(argv)
  workload = round_time.Workload(
      'shakespeare', quick=args.quick, data_dir=args.data_dir,
      seed=args.seed, lstm_layers=args.lstm_layers,
      lstm_units=args.lstm_units)
  datasets = [frozen(d) for d in workload.datasets]
  print(f'vectorized_round: {args.algorithm} '
        f'{ALGORITHM_FLAGS[args.algorithm] or ""}; '
        f'{workload.describe} ({workload.examples} '
        f'sequences, {workload.steps} local steps per round); client SGD lr '
        f'{round_time.CLIENT_LR}, server SGD lr 1; group sizes '
        f'{args.group_sizes}; recurrence '
        f'{"unrolled" if args.unroll else "tf.scan"}; '
        f'max_concurrent_clients={args.max_concurrent_clients or "none"}; '
        f'median of {args.rounds} rounds after {args.warmup} warm-up, taken '
        f'in turns; {common.load_average()}', flush=True)
  initial = common.initial_weights(workload.model_fn, 0)
  processes = build_processes(workload, args.group_sizes, unroll=args.unroll,
                              algorithm=args.algorithm,
                              by_steps=args.by_steps)
  runtime.set_local_execution_context(args.max_concurrent_clients or None)
  try:
    if not args.no_check:
      for name, diff in check_equal(processes, datasets, initial).items():
        print(f'{name}: after one round, max |w - w_per_client| = '
              f'{diff:.2e} of the largest change', flush=True)
    peaks = {}
    round_fns = {}
    for name, process in processes.items():
      round_fn = common.process_round_fn(process, datasets, initial)

      def warmed(round_fn=round_fn, name=name):
        round_fn()
        if name not in peaks:  # After the path's first (warm-up) round.
          peaks[name] = worker_peak_mb()

      round_fns[name] = warmed
    times = round_time.interleaved_times(round_fns, warmup=args.warmup,
                                         repeats=args.rounds)
  finally:
    runtime.shutdown()
  report(times, workload, peaks)
  sys.stdout.flush()


def report(times, workload, peaks) -> None:
  """Prints one row per path."""
  wall = {name: common.median(w) for name, (w, _) in times.items()}
  cpu = {name: common.median(c) for name, (_, c) in times.items()}
  base = wall[PER_CLIENT]
  table = common.Table([
      ('path', 10, ''), ('s/round', 8, '.3f'), ('chars/s', 8, '.0f'),
      ('speed-up', 8, '.2f'), ('cpu s', 7, '.2f'),
      ('worker peak MiB', 15, '.0f')])
  table.print_header()
  for name, seconds in wall.items():
    table.print_row(name, seconds, workload.tokens / seconds,
                    base / seconds, cpu[name], peaks.get(name))
  print('all rounds (s): ' + '; '.join(
      f'{name} ' + ', '.join(f'{s:.2f}' for s in w)
      for name, (w, _) in times.items()))
  print(f'after the run: {common.load_average()}', flush=True)


if __name__ == '__main__':
  main()
