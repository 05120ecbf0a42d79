r"""Start-up: seconds from the command to the first round, and where they go.

    .venv/bin/python -m benchmarks.startup                    # EMNIST-CR
    .venv/bin/python -m benchmarks.startup --task=digits
    .venv/bin/python -m benchmarks.startup --quick            # smoke run
    .venv/bin/python -m benchmarks.startup --binary --runs=5  # the binary

Times, in one fresh process, each stage a training run goes through before
its first round, as `binaries.train` does them:

  python start    interpreter start (the process's start in /proc, to
                  10 ms) to this module's first line
  import TF       `import binaries`: TensorFlow, imported as the binaries
                  import it (collector paused, then `gc.freeze`)
  import TFF      `import tensorflow_federated`
  import tff-opt  `tasks`, `tff_opt.program.registry`, `tff_opt.program.runtime`,
                  ..., then `binaries.freeze_imports()` as `binaries.train` does
  task build      `tasks.create_task` (`--task`; EMNIST-CR from TFF's
                  synthetic EMNIST, no files needed)
  process build   `registry.build_process('fedopt', ...)` (TFF traces and
                  serializes every computation)
  initialize      `process.initialize()`: the first computation run, which
                  waits for TFF's `worker_binary` if it is not up yet (the
                  local context starts it before the task build)
  first round     `process.next` on `--clients` clients (batch 20, one epoch;
                  the synthetic data's clients repeated to make up the number)
                  including TFF's compilation of `next` in this process and
                  the worker's first run of the client graph
  next round      the second round, the steady state

Each stage's seconds are printed, then the total to the end of the first
round. `--quick` uses the `digits` task and 2 clients.

`--binary` times the real thing instead: `python -m binaries.train` with
the default experiment's settings (`--task=digits`, `--rounds=2
--eval_every=2`, a fresh output directory), `--runs` times, from its spawn
to the moment it prints its `round 1/` line (a round without evaluation);
each run's seconds, then the median.
"""

import time

_START = time.perf_counter()

# pylint: disable=g-import-not-at-top,g-bad-import-order
import argparse
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
# TensorFlow's oneDNN kernels unless the environment says otherwise (see
# tff_opt/program/worker_env.py); TFF's worker inherits the setting.
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')

_TASKS = ('emnist_cr', 'digits')


def _parse_args(argv):
  parser = argparse.ArgumentParser(prog='startup',
                                   description=__doc__.split('\n')[0])
  parser.add_argument('--task', default='emnist_cr', choices=_TASKS)
  parser.add_argument('--clients', type=int, default=10)
  parser.add_argument('--quick', action='store_true',
                      help='digits task, 2 clients.')
  parser.add_argument('--binary', action='store_true',
                      help='time binaries.train to its first round line.')
  parser.add_argument('--runs', type=int, default=3,
                      help='--binary: runs of the binary.')
  args = parser.parse_args(argv)
  if args.clients < 1:
    parser.error(f'--clients={args.clients}: expected a positive integer')
  if args.runs < 1:
    parser.error(f'--runs={args.runs}: expected a positive integer')
  if args.quick:
    args.task, args.clients = 'digits', min(args.clients, 2)
  return args


def _seconds_since_process_start() -> float:
  """Seconds since this process started, both ends counted from boot.

  `psutil.Process().create_time()` adds the boot time, which Linux gives in
  whole seconds, so it is off by up to a second (it read 0.96 s for a
  15 ms interpreter start); /proc's start time and uptime share the boot.
  """
  with open('/proc/self/stat') as f:
    # Field 22, counted after the command name (which may hold spaces).
    start_ticks = int(f.read().rpartition(')')[2].split()[19])
  with open('/proc/uptime') as f:
    uptime = float(f.read().split()[0])
  return uptime - start_ticks / os.sysconf('SC_CLK_TCK')


def _time_binary(runs: int) -> list[float]:
  """Seconds from spawning `binaries.train` to its `round 1/` line, per run.

  Raises:
    SystemExit: If a run fails or prints no `round 1/` line.
  """
  import subprocess
  import tempfile
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  seconds = []
  for _ in range(runs):
    with tempfile.TemporaryDirectory() as out:
      command = [sys.executable, '-m', 'binaries.train', '--task=digits',
                 '--rounds=2', '--eval_every=2',
                 f'--output_dir={os.path.join(out, "run")}']
      start = time.perf_counter()
      with subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True) as child:
        first = None
        for line in child.stdout:
          if first is None and line.startswith('round 1/'):
            first = time.perf_counter() - start
        error = child.stderr.read()
      if child.returncode or first is None:
        raise SystemExit(f'startup: {" ".join(command)} exited with status '
                         f'{child.returncode}'
                         f'{"" if first else " before its first round"}:\n'
                         f'{error[-2000:]}')
      seconds.append(first)
  return seconds


def main(argv=None):
  stages = []
  python_start = max(0.0, _seconds_since_process_start() -
                     (time.perf_counter() - _START))
  stages.append(('python start', python_start))
  args = _parse_args(argv)
  if args.binary:
    import statistics
    seconds = _time_binary(args.runs)
    print(f'startup: binaries.train --task=digits, spawn to its first round '
          f'line; {os.getloadavg()[0]:.2f} 1-min load on {os.cpu_count()} '
          'cores at the end')
    print('runs (s):  ' + ' '.join(f'{s:.2f}' for s in seconds))
    print(f'median (s): {statistics.median(seconds):.2f}')
    return

  def timed(name, fn):
    start = time.perf_counter()
    value = fn()
    stages.append((name, time.perf_counter() - start))
    return value

  binaries = timed('import TF', lambda: __import__('binaries'))
  tf = sys.modules['tensorflow']
  tff = timed('import TFF', lambda: __import__('tensorflow_federated'))

  def import_tff_opt():
    import tasks
    from benchmarks import common
    from tff_opt.program import registry
    from tff_opt.program import runtime
    binaries.freeze_imports()
    return tasks, common, registry, runtime

  tasks, common, registry, runtime = timed('import tff-opt', import_tff_opt)
  runtime.set_local_execution_context()
  try:
    task = timed('task build', lambda: tasks.create_task(
        args.task,
        train_client_spec=tff.simulation.baselines.ClientSpec(
            num_epochs=1, batch_size=20),
        use_synthetic_data=True))
    process = timed('process build', lambda: registry.build_process(
        'fedopt', task.model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
        client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
        client_lr_schedule=None))
    state = timed('initialize', process.initialize)
    train = task.datasets.train_data
    # TFF's synthetic EMNIST has few clients: they are repeated as needed.
    available = sorted(train.client_ids)
    ids = [available[i % len(available)] for i in range(args.clients)]
    datasets = [task.datasets.train_preprocess_fn(
        train.create_tf_dataset_for_client(cid)) for cid in ids]
    state = timed('first round', lambda: process.next(state, datasets).state)
    timed('next round', lambda: process.next(state, datasets))
  finally:
    runtime.shutdown()
  del tf
  print(f'startup: task {args.task} (synthetic data), FedOpt, {len(ids)} '
        f'clients, batch 20, one epoch; {common.load_average()}')
  table = common.Table([('stage', 15, ''), ('seconds', 8, '.2f')])
  table.print_header()
  for name, seconds in stages:
    table.print_row(name, seconds)
  to_first = sum(s for n, s in stages if n != 'next round')
  table.print_row('to first round', to_first)
  sys.stdout.flush()


if __name__ == '__main__':
  main()
