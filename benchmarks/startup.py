r"""Start-up: seconds from the command to the first round, and where they go.

    .venv/bin/python -m benchmarks.startup                    # EMNIST-CR
    .venv/bin/python -m benchmarks.startup --task=digits
    .venv/bin/python -m benchmarks.startup --quick            # smoke run

Times, in one fresh process, each stage a training run goes through before
its first round, as `binaries.train` does them:

  python start    interpreter start (the process's creation time) to this
                  module's first line
  import TF       `import tensorflow`
  import TFF      `import tensorflow_federated`
  import tff-opt  `tasks`, `tff_opt.program.registry`, `tff_opt.program.runtime`, ...
  task build      `tasks.create_task` (`--task`; EMNIST-CR from TFF's
                  synthetic EMNIST, no files needed)
  process build   `registry.build_process('fedopt', ...)` (TFF traces and
                  serializes every computation)
  initialize      `process.initialize()`: the first computation run, which
                  starts TFF's `worker_binary`
  first round     `process.next` on `--clients` clients (batch 20, one epoch;
                  the synthetic data's clients repeated to make up the number)
                  including the worker's first compilation of the client graph
  next round      the second round, the steady state

Each stage's seconds are printed, then the total to the end of the first
round. `--quick` uses the `digits` task and 2 clients.
"""

import time

_START = time.perf_counter()

# pylint: disable=g-import-not-at-top,g-bad-import-order
import argparse
import os
import sys

import psutil

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
  args = parser.parse_args(argv)
  if args.clients < 1:
    parser.error(f'--clients={args.clients}: expected a positive integer')
  if args.quick:
    args.task, args.clients = 'digits', min(args.clients, 2)
  return args


def main(argv=None):
  stages = []
  python_start = max(0.0, time.time() - psutil.Process().create_time() -
                     (time.perf_counter() - _START))
  stages.append(('python start', python_start))
  args = _parse_args(argv)

  def timed(name, fn):
    start = time.perf_counter()
    value = fn()
    stages.append((name, time.perf_counter() - start))
    return value

  tf = timed('import TF', lambda: __import__('tensorflow'))
  tff = timed('import TFF', lambda: __import__('tensorflow_federated'))

  def import_tff_opt():
    import tasks
    from benchmarks import common
    from tff_opt.program import registry
    from tff_opt.program import runtime
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
