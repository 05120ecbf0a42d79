r"""Rounds to 90% accuracy on label-skewed digits with many local epochs.

    .venv/bin/python -m benchmarks.local_epochs                  # defaults
    .venv/bin/python -m benchmarks.local_epochs --epochs=8 --rounds=60 \
        --dirichlet_alpha=0.1 --seeds=0,1

The FedFOR paper's claim (Tab. 2, Sec. 4.2): its advantage over FedAvg,
FedProx and FedCurv grows with the number of local epochs E. This script
trains FedAvg (FedOpt with server SGD, learning rate 1), FedProx, FedCurv
and FedFOR on the `digits` task (100 clients, Dirichlet label skew), with the
same seeds, client sampling and client learning rate, and prints, for each,
the first round at which the held-out accuracy reaches `--target` (or
"never" within `--rounds`), and the final accuracy. It prints what it
measured; nothing is asserted.
"""

import os
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
# TensorFlow's oneDNN kernels unless the environment says otherwise (see
# tff_opt/program/worker_env.py); TFF's worker inherits the setting.
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags  # pylint: disable=g-import-not-at-top
import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

from benchmarks import common  # pylint: disable=g-import-not-at-top
import tasks  # pylint: disable=g-import-not-at-top
from tff_opt import algorithms  # pylint: disable=g-import-not-at-top
from tff_opt.program import runtime  # pylint: disable=g-import-not-at-top

flags.DEFINE_integer('epochs', 8, 'Local epochs E.')
flags.DEFINE_integer('rounds', 60, 'Rounds per run.')
flags.DEFINE_float('dirichlet_alpha', 0.1, 'Dirichlet label-skew '
                   'concentration of the digits split.')
flags.DEFINE_integer('clients_per_round', 10, 'Clients per round.')
flags.DEFINE_integer('batch_size', 10, 'Local batch size.')
flags.DEFINE_float('client_lr', 0.05, 'Client learning rate eta.')
flags.DEFINE_float('target', 0.9, 'Accuracy target.')
flags.DEFINE_float('mu', 0.01, 'FedProx mu.')
flags.DEFINE_float('lam', 0.1, 'FedCurv lambda.')
flags.DEFINE_float('alpha', 5.0, 'FedFOR alpha (the paper\'s value).')
flags.DEFINE_list('seeds', ['0'], 'Seeds (split, model init, sampling).')
flags.DEFINE_list('algorithms', ['fedavg', 'fedprox', 'fedcurv', 'fedfor'],
                  'Which algorithms to run.')
FLAGS = flags.FLAGS


def _builders():

  def shared():
    return dict(
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(FLAGS.client_lr),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))

  return {
      'fedavg': lambda m: algorithms.build_fed_opt(m, **shared()),
      'fedprox': lambda m: algorithms.build_fed_prox(m, mu=FLAGS.mu,
                                                     **shared()),
      'fedcurv': lambda m: algorithms.build_fed_curv(m, lam=FLAGS.lam,
                                                     **shared()),
      'fedfor': lambda m: algorithms.build_fed_for(m, alpha=FLAGS.alpha,
                                                   **shared()),
  }


def run_one(build, seed):
  """Trains one algorithm; returns (rounds to target or None, final acc)."""
  task = tasks.create_task(
      'digits',
      train_client_spec=tff.simulation.baselines.ClientSpec(
          num_epochs=FLAGS.epochs, batch_size=FLAGS.batch_size),
      seed=seed, alpha=FLAGS.dirichlet_alpha)
  process = build(task.model_fn)
  train_data = task.datasets.train_data
  result = common.train_and_evaluate(
      process,
      model_fn=task.model_fn,
      test_data=tasks.pooled_test_data(task),
      client_ids=sorted(train_data.client_ids),
      client_dataset_fn=lambda cid: task.datasets.train_preprocess_fn(
          train_data.create_tf_dataset_for_client(cid)),
      clients_per_round=FLAGS.clients_per_round,
      rounds=FLAGS.rounds,
      seed=seed,
      initial=common.initial_weights(task.model_fn, seed))
  return (common.rounds_to_target(result.accuracies, FLAGS.target),
          result.accuracies[-1])


def main(argv):
  del argv
  builders = _builders()
  unknown = [n for n in FLAGS.algorithms if n not in builders]
  if unknown:
    raise app.UsageError(
        f'--algorithms={",".join(FLAGS.algorithms)}: unknown {unknown[0]!r};'
        f' known: {", ".join(builders)}')
  runtime.set_local_execution_context()
  print(f'digits, Dirichlet alpha={FLAGS.dirichlet_alpha}, E={FLAGS.epochs}, '
        f'{FLAGS.clients_per_round} clients/round, batch {FLAGS.batch_size}, '
        f'client lr {FLAGS.client_lr}, server SGD lr 1, {FLAGS.rounds} rounds; '
        f'mu={FLAGS.mu} lam={FLAGS.lam} alpha={FLAGS.alpha}', flush=True)
  table = common.Table([('algorithm', 10, ''), ('seed', 4, ''),
                        (f'rounds to {FLAGS.target}', 16, ''),
                        ('final acc', 10, '.4f'), ('seconds', 8, '.1f')])
  table.print_header()
  for name in FLAGS.algorithms:
    for seed in FLAGS.seeds:
      started = time.perf_counter()
      reached, final = run_one(builders[name], int(seed))
      table.print_row(name, seed, reached or 'never', final,
                      time.perf_counter() - started)
  runtime.shutdown()
  sys.stdout.flush()


if __name__ == '__main__':
  app.run(main)
