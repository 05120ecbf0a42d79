r"""FedAvg, FedProx, FedPTR and FedPTR-S on `digits`, Dirichlet alpha = 0.04.

The FedPTR paper's extreme non-IID setting on the UCI digits: the `digits`
task's training examples are split over `--num_clients` clients by
`partitioners.dirichlet_label_partition` with alpha = 0.04, every client
takes part in every round (the paper's full participation), and the global
model is evaluated on the pooled held-out 20 % after every round. All
algorithms start from the same initial model and see the same shuffles.

    .venv/bin/python -m benchmarks.fedptr_digits                 # defaults
    .venv/bin/python -m benchmarks.fedptr_digits --rounds=30 \
        --mtt_outer_steps=30 --mtt_inner_steps=10                # more MTT

Prints one row per algorithm: final and best test accuracy, mean seconds
per round, the seconds spent in MTT + projection per round (FedPTR-S: at
the server; FedPTR: mean per client, clients run one after another on this
machine's simulation), the last matching loss, and the mean over rounds of
the Figure-2 cosines: `client cos` (mean over clients of cos(Delta_k,
Delta_bar), every algorithm, `aggregators.ClientCosineFactory`) and
`aux cos` (FedPTR-S: cos(w_{t-1} - w~_t, w_{t-1} - w_t)). Settings chosen
here (not in the paper for this data set): the digits CNN (`--model=
mtt_convnet` for the paper's ConvNet), client SGD 0.05, 1 local epoch of
batch 20, mu = 0.01 for FedProx and both FedPTRs, 1 image per class, 5 MTT
outer steps of 5 inner steps, P = 2, MTT image step 100, alpha_syn from
0.01. Timings are wall-clock on whatever machine runs this: print them
with its load (`common.load_average`).
"""

import argparse
import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
# TensorFlow's oneDNN kernels unless the environment says otherwise (see
# tff_opt/program/worker_env.py); TFF's worker inherits the setting.
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

from benchmarks import common  # pylint: disable=g-import-not-at-top
from tasks import digits  # pylint: disable=g-import-not-at-top
from tasks import models  # pylint: disable=g-import-not-at-top
from tasks import partitioners  # pylint: disable=g-import-not-at-top
from tff_opt import algorithms  # pylint: disable=g-import-not-at-top
from tff_opt.program import runtime  # pylint: disable=g-import-not-at-top
from tff_opt.round import aggregators  # pylint: disable=g-import-not-at-top

ALGORITHMS = ('fedavg', 'fedprox', 'fedptr', 'fedptr_s')


def _parse_args():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--rounds', type=int, default=15)
  parser.add_argument('--num_clients', type=int, default=10)
  parser.add_argument('--dirichlet_alpha', type=float, default=0.04)
  parser.add_argument('--model', choices=('cnn', 'mtt_convnet'),
                      default='cnn')
  parser.add_argument('--client_lr', type=float, default=0.05)
  parser.add_argument('--client_epochs', type=int, default=1)
  parser.add_argument('--batch_size', type=int, default=20)
  parser.add_argument('--mu', type=float, default=0.01)
  parser.add_argument('--images_per_class', type=int, default=1)
  parser.add_argument('--mtt_outer_steps', type=int, default=5,
                      help='MTT updates of D_syn per run (more MTT steps).')
  parser.add_argument('--mtt_inner_steps', type=int, default=5,
                      help='Unrolled student steps N per MTT update.')
  parser.add_argument('--projection_steps', type=int, default=2)
  parser.add_argument('--mtt_image_lr', type=float, default=100.0)
  parser.add_argument('--mtt_init_lr', type=float, default=0.01)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--algorithms', default=','.join(ALGORITHMS))
  args = parser.parse_args()
  names = args.algorithms.split(',')
  unknown = [n for n in names if n not in ALGORITHMS]
  if unknown:
    parser.error(f'--algorithms={args.algorithms}: unknown {unknown[0]!r}; '
                 f'known: {", ".join(ALGORITHMS)}.')
  return args, names


def _mean(rows, key):
  values = [r[key] for r in rows if key in r]
  return float(np.mean(values)) if values else None


def main():
  args, names = _parse_args()
  runtime.set_local_execution_context()
  split = digits.split_digits(seed=args.seed)
  partition = partitioners.dirichlet_label_partition(
      split.train_labels, args.num_clients, args.dirichlet_alpha,
      seed=args.seed)
  ids = [f'c{i:03d}' for i in range(args.num_clients)]
  client_arrays = {cid: (split.train_images[idx], split.train_labels[idx])
                   for cid, idx in zip(ids, partition)}
  distinct = [len(np.unique(split.train_labels[p])) for p in partition]
  print(f'Dirichlet alpha = {args.dirichlet_alpha}: {args.num_clients} '
        f'clients, distinct classes per client mean {np.mean(distinct):.2f}; '
        f'full participation; {args.rounds} rounds; model {args.model}; '
        f'MTT {args.mtt_outer_steps} x {args.mtt_inner_steps} steps, '
        f'P = {args.projection_steps}; {common.load_average()}', flush=True)

  input_spec = (tf.TensorSpec([None, 8, 8, 1], tf.float32),
                tf.TensorSpec([None], tf.int32))

  def model_fn():
    if args.model == 'mtt_convnet':
      keras_model = models.create_mtt_convnet(models.DIGITS_IMAGE_SHAPE,
                                              digits.NUM_CLASSES)
    else:
      keras_model = models.create_digits_cnn(digits.NUM_CLASSES)
    return tff.learning.models.from_keras_model(
        keras_model,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=input_spec,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')])

  def client_dataset(cid):
    x, y = client_arrays[cid]
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
        len(y), seed=args.seed).repeat(args.client_epochs).batch(
            args.batch_size)

  def sgd(lr):
    return tff.learning.optimizers.build_sgdm(lr)

  def fed_ptr(side):
    return algorithms.build_fed_ptr(
        model_fn, mu=args.mu, side=side,
        client_optimizer_fn=sgd(args.client_lr),
        server_optimizer_fn=sgd(1.0), images_per_class=args.images_per_class,
        mtt_outer_steps=args.mtt_outer_steps,
        mtt_inner_steps=args.mtt_inner_steps,
        projection_steps=args.projection_steps,
        mtt_image_lr=args.mtt_image_lr, mtt_init_lr=args.mtt_init_lr,
        seed=args.seed)

  test_data = tf.data.Dataset.from_tensor_slices(
      (split.test_images, split.test_labels)).batch(128)
  builders = {
      'fedavg': lambda: algorithms.build_fed_opt(
          model_fn, client_optimizer_fn=sgd(args.client_lr),
          server_optimizer_fn=sgd(1.0),
          model_aggregator=aggregators.ClientCosineFactory()),
      'fedprox': lambda: algorithms.build_fed_prox(
          model_fn, mu=args.mu, client_optimizer_fn=sgd(args.client_lr),
          server_optimizer_fn=sgd(1.0),
          model_aggregator=aggregators.ClientCosineFactory()),
      'fedptr': lambda: fed_ptr('client'),
      'fedptr_s': lambda: fed_ptr('server'),
  }
  initial = common.initial_weights(model_fn, args.seed)
  table = common.Table([('algorithm', 9, ''), ('final acc', 9, '.4f'),
                        ('best acc', 9, '.4f'), ('s/round', 8, '.2f'),
                        ('MTT s/round', 11, '.3f'), ('MTT loss', 9, '.3f'),
                        ('client cos', 10, '.3f'), ('aux cos', 8, '.3f')])
  table.print_header()
  try:
    for name in names:
      result = common.train_and_evaluate(
          builders[name](), model_fn=model_fn, test_data=test_data,
          client_ids=ids, client_dataset_fn=client_dataset,
          clients_per_round=args.num_clients, rounds=args.rounds,
          seed=args.seed, initial=initial)
      rows = result.rows
      has_mtt = 'mtt_seconds' in rows[-1]
      table.print_row(
          name, result.accuracies[-1], max(result.accuracies),
          result.seconds / args.rounds,
          _mean(rows, 'mtt_seconds') if has_mtt else None,
          rows[-1]['mtt_loss'] if has_mtt else None,
          _mean(rows, 'client_global_cosine'),
          _mean(rows[2:], 'auxiliary_global_cosine'))
  finally:
    runtime.shutdown()


if __name__ == '__main__':
  main()
