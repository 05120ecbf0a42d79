r"""Worker memory against how TFF disposes of the values the trainer drops.

TFF's `RemoteExecutor` tells the worker to free the values the trainer no
longer holds `dispose_batch_size` at a time (TFF's default 20); until then
the worker keeps them. This calls one federated computation over
`--clients` client values of `--mib` MiB each (a `federated_map` that
doubles them) `--calls` times on the local worker
(`runtime.create_local_execution_context`, one client at a time), for each
batch size of `--dispose_batch_sizes` in a fresh process, and prints the
worker's `VmRSS` every 5 calls.

    .venv/bin/python -m benchmarks.worker_dispose
    .venv/bin/python -m benchmarks.worker_dispose --dispose_batch_sizes=20,1 \
        --calls=30 --clients=10 --mib=10

The package disposes of each value at once (`runtime.DISPOSE_BATCH_SIZE`);
results in `results/perf/worker_memory.md`. Not collected by pytest.
"""

import argparse
import subprocess
import sys

_REPO_ROOT = __file__.rsplit('/benchmarks/', 1)[0]


def measure(batch_size: int, calls: int, clients: int, mib: int) -> str:
  """Runs the calls in this process; returns the line of RSS samples."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_opt.program import runtime  # pylint: disable=g-import-not-at-top

  runtime.DISPOSE_BATCH_SIZE = batch_size
  size = mib * 1024 * 1024 // 4
  value_type = tff.types.TensorType(np.float32, [size])

  @tff.tensorflow.computation(value_type)
  def double(x):
    return x * 2.0

  @tff.federated_computation(tff.FederatedType(value_type, tff.CLIENTS))
  def double_all(values):
    return tff.federated_map(double, values)

  tff.framework.set_default_context(
      runtime.create_local_execution_context(max_concurrent_clients=1))
  values = [np.full([size], i, np.float32) for i in range(clients)]
  (worker,) = runtime.worker_children()
  samples = []
  try:
    for call in range(1, calls + 1):
      result = double_all(values)
      if float(result[-1][0]) != 2.0 * (clients - 1):
        raise AssertionError('wrong result')
      del result
      if call % 5 == 0:
        rss = worker.memory_info().rss / 2**20
        samples.append(f'{call}:{rss:.0f}')
  finally:
    runtime.stop_worker_processes()
  return (f'dispose_batch_size={batch_size}: worker RSS (MiB) after call '
          + ' '.join(samples))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--dispose_batch_sizes', default='20,1')
  parser.add_argument('--calls', type=int, default=30)
  parser.add_argument('--clients', type=int, default=10)
  parser.add_argument('--mib', type=int, default=10)
  parser.add_argument('--one', type=int, default=None, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.one is not None:
    print(measure(args.one, args.calls, args.clients, args.mib), flush=True)
    return
  for batch_size in (int(b) for b in args.dispose_batch_sizes.split(',')):
    # A fresh process each: the worker and the trainer start from nothing.
    out = subprocess.run(
        [sys.executable, '-m', 'benchmarks.worker_dispose',
         f'--one={batch_size}', f'--calls={args.calls}',
         f'--clients={args.clients}', f'--mib={args.mib}'],
        cwd=_REPO_ROOT, capture_output=True, text=True, check=True)
    print(out.stdout.strip().splitlines()[-1], flush=True)


if __name__ == '__main__':
  main()
