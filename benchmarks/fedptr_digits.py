r"""FedAvg vs FedProx vs FedPTR-S on `digits`, Dirichlet alpha = 0.04.

The FedPTR paper's extreme non-IID setting on the UCI digits: the `digits`
task's training examples are split over `--num_clients` clients by
`partitioners.dirichlet_label_partition` with alpha = 0.04, every client
takes part in every round (the paper's full participation), and the global
model is evaluated on the pooled held-out 20 % after every round. All
algorithms start from the same initial model and see the same shuffles.

    .venv/bin/python -m benchmarks.fedptr_digits                 # defaults
    .venv/bin/python -m benchmarks.fedptr_digits --rounds=30

Prints, per algorithm, the final and best test accuracy, the mean seconds
per round and, for FedPTR-S, the mean server seconds spent in MTT and the
last matching loss. Client-side FedPTR is not implemented (see
tff_opt/algorithms/fed_ptr.py), so it is not run. Settings chosen here (not
in the paper for this data set): the digits CNN, client SGD 0.05, 1 local
epoch of batch 20, mu = 0.01 for FedProx and FedPTR-S, 1 image per class,
5 MTT outer steps of 5 inner steps, P = 2.
"""

import argparse
import os
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

from tasks import digits  # pylint: disable=g-import-not-at-top
from tasks import models  # pylint: disable=g-import-not-at-top
from tasks import partitioners  # pylint: disable=g-import-not-at-top
from tff_opt import algorithms  # pylint: disable=g-import-not-at-top
from tff_opt import evaluation  # pylint: disable=g-import-not-at-top
from tff_opt import runtime  # pylint: disable=g-import-not-at-top
from tff_opt import training_loop  # pylint: disable=g-import-not-at-top


def _parse_args():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--rounds', type=int, default=15)
  parser.add_argument('--num_clients', type=int, default=10)
  parser.add_argument('--dirichlet_alpha', type=float, default=0.04)
  parser.add_argument('--client_lr', type=float, default=0.05)
  parser.add_argument('--client_epochs', type=int, default=1)
  parser.add_argument('--batch_size', type=int, default=20)
  parser.add_argument('--mu', type=float, default=0.01)
  parser.add_argument('--images_per_class', type=int, default=1)
  parser.add_argument('--mtt_outer_steps', type=int, default=5)
  parser.add_argument('--mtt_inner_steps', type=int, default=5)
  parser.add_argument('--projection_steps', type=int, default=2)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--algorithms', default='fedavg,fedprox,fedptr_s')
  return parser.parse_args()


def main():
  args = _parse_args()
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
        f'full participation; {args.rounds} rounds', flush=True)

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
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
        len(y), seed=args.seed).repeat(args.client_epochs).batch(
            args.batch_size)

  def sgd(lr):
    return tff.learning.optimizers.build_sgdm(lr)

  test_data = tf.data.Dataset.from_tensor_slices(
      (split.test_images, split.test_labels)).batch(128)
  builders = {
      'fedavg': lambda: algorithms.build_fed_opt(
          model_fn, client_optimizer_fn=sgd(args.client_lr),
          server_optimizer_fn=sgd(1.0)),
      'fedprox': lambda: algorithms.build_fed_prox(
          model_fn, mu=args.mu, client_optimizer_fn=sgd(args.client_lr),
          server_optimizer_fn=sgd(1.0)),
      'fedptr_s': lambda: algorithms.build_fed_ptr(
          model_fn, mu=args.mu, client_optimizer_fn=sgd(args.client_lr),
          server_optimizer_fn=sgd(1.0), images_per_class=args.images_per_class,
          mtt_outer_steps=args.mtt_outer_steps,
          mtt_inner_steps=args.mtt_inner_steps,
          projection_steps=args.projection_steps, seed=args.seed),
  }
  tf.keras.utils.set_random_seed(args.seed)
  initial = tff.learning.models.ModelWeights.from_model(model_fn())
  initial = tf.nest.map_structure(lambda v: np.asarray(v.numpy()), initial)

  try:
    for name in args.algorithms.split(','):
      process = builders[name]()
      evaluate = evaluation.build_evaluator(model_fn, test_data)
      start = time.perf_counter()
      result = training_loop.run_training(
          process, client_ids=ids, client_dataset_fn=client_dataset,
          clients_per_round=args.num_clients, rounds=args.rounds,
          seed=args.seed, evaluate_fn=evaluate, eval_every=1,
          initial_state=process.set_model_weights(process.initialize(),
                                                  initial),
          log=None)
      seconds = time.perf_counter() - start
      accuracy = [r['eval_accuracy'] for r in result.rows]
      line = (f'{name:9s} final {accuracy[-1]:.4f}  best {max(accuracy):.4f}  '
              f'{seconds / args.rounds:.2f} s/round')
      mtt_keys = [k for k in result.rows[-1] if k.endswith('mtt_seconds')]
      if mtt_keys:
        loss_key = mtt_keys[0].replace('mtt_seconds', 'mtt_loss')
        mtt_seconds = np.mean([r[mtt_keys[0]] for r in result.rows])
        line += (f'  (MTT {mtt_seconds:.2f} s/round at the server, last '
                 f'matching loss {result.rows[-1][loss_key]:.3f})')
      print(line, flush=True)
  finally:
    runtime.shutdown()


if __name__ == '__main__':
  main()
