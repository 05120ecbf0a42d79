r"""FedAvg vs SlowMo vs FedADC (both variants) vs FedADC+ on `digits`, s = 2.

The FedADC paper's acceleration setting (Section IV-B) on the UCI digits:
the training examples (the `digits` task's stratified 80 %) are split over
100 clients by `partitioners.sort_and_partition` with s classes per client
(equal sizes), C = 20 % of the clients take part each round, and the global
model is evaluated on the pooled held-out 20 % after every round. Every
algorithm starts from the same initial model and sees the same sampled
clients and shuffles (one seed).

    .venv/bin/python -m benchmarks.fedadc_digits                 # defaults
    .venv/bin/python -m benchmarks.fedadc_digits --rounds=20 --target=0.7

Prints, per algorithm, the final and best test accuracy and the first round
reaching `--target` accuracy ("-" if never), and the seconds it took.
Settings not in the paper for this data set (chosen here): client SGD
learning rate 0.1, 2 local epochs of batch 10 (H = 4 steps for the
12-example clients of s = 2: shards of 6), beta = 0.9 (SlowMo and FedADC),
alpha = 1, FedADC+ lambda = 0.35, tau = 1.
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


def _parse_args():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--rounds', type=int, default=50)
  parser.add_argument('--classes_per_client', type=int, default=2)
  parser.add_argument('--num_clients', type=int, default=100)
  parser.add_argument('--participation', type=float, default=0.2)
  parser.add_argument('--client_lr', type=float, default=0.1)
  parser.add_argument('--client_epochs', type=int, default=2)
  parser.add_argument('--batch_size', type=int, default=10)
  parser.add_argument('--beta', type=float, default=0.9)
  parser.add_argument('--target', type=float, default=0.8)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--algorithms', default='fedavg,slowmo,fedadc_heavy_ball,'
                      'fedadc_nesterov,fedadc_plus')
  return parser.parse_args()


def main():
  args = _parse_args()
  runtime.set_local_execution_context()
  split = digits.split_digits(seed=args.seed)
  partition = partitioners.sort_and_partition(
      split.train_labels, args.num_clients, args.classes_per_client,
      seed=args.seed)
  ids = [f'c{i:03d}' for i in range(args.num_clients)]
  client_arrays = {
      cid: (split.train_images[idx], split.train_labels[idx])
      for cid, idx in zip(ids, partition)
  }
  distinct = [len(np.unique(split.train_labels[p])) for p in partition]
  print(f'sort-and-partition: {args.num_clients} clients x {len(partition[0])} '
        f'examples, s = {args.classes_per_client} (distinct classes per '
        f'client: mean {np.mean(distinct):.2f}, max {max(distinct)}); '
        f'{int(args.participation * args.num_clients)} clients per round; '
        f'{args.rounds} rounds; test examples {split.test_labels.size}',
        flush=True)

  input_spec = (tf.TensorSpec([None, 8, 8, 1], tf.float32),
                tf.TensorSpec([None], tf.int32))

  def model_fn():
    return tff.learning.models.from_keras_model(
        models.create_digits_cnn(digits.NUM_CLASSES),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=input_spec,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')])

  def client_dataset(cid):
    x, y = client_arrays[cid]
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(y)).repeat(
        args.client_epochs).batch(args.batch_size)

  test_data = tf.data.Dataset.from_tensor_slices(
      (split.test_images, split.test_labels)).batch(128)
  uniform = tff.learning.ClientWeighting.UNIFORM
  lr = args.client_lr
  builders = {
      'fedavg': lambda: algorithms.build_fed_opt(
          model_fn,
          client_optimizer_fn=tff.learning.optimizers.build_sgdm(lr),
          server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
          client_weighting=uniform),
      'slowmo': lambda: algorithms.build_slowmo(
          model_fn, client_learning_rate=lr, beta=args.beta),
      'fedadc_heavy_ball': lambda: algorithms.build_fed_adc(
          model_fn, client_learning_rate=lr, beta=args.beta),
      'fedadc_nesterov': lambda: algorithms.build_fed_adc(
          model_fn, client_learning_rate=lr, beta=args.beta,
          variant='nesterov'),
      'fedadc_plus': lambda: algorithms.build_fed_adc(
          model_fn, client_learning_rate=lr, beta=args.beta,
          distillation=True),
  }
  initial = common.initial_weights(model_fn, args.seed)
  table = common.Table([('algorithm', 18, ''), ('final acc', 9, '.4f'),
                        ('best acc', 9, '.4f'),
                        (f'rounds to {args.target:.2f}', 14, ''),
                        ('seconds', 8, '.0f')])
  table.print_header()
  names = args.algorithms.split(',')
  unknown = [n for n in names if n not in builders]
  if unknown:
    raise SystemExit(f'fedadc_digits: error: --algorithms={args.algorithms}: '
                     f'unknown {unknown[0]!r}; known: {", ".join(builders)}.')
  try:
    for name in names:
      result = common.train_and_evaluate(
          builders[name](),
          model_fn=model_fn,
          test_data=test_data,
          client_ids=ids,
          client_dataset_fn=client_dataset,
          clients_per_round=int(args.participation * args.num_clients),
          rounds=args.rounds,
          seed=args.seed,
          initial=initial)
      table.print_row(name, result.accuracies[-1], max(result.accuracies),
                      common.rounds_to_target(result.accuracies, args.target),
                      result.seconds)
  finally:
    runtime.shutdown()


if __name__ == '__main__':
  main()
