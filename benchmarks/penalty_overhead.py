r"""CPU seconds per local step: the shared client loop with each penalty.

    .venv/bin/python -m benchmarks.penalty_overhead
    .venv/bin/python -m benchmarks.penalty_overhead --repeats=9 \
        --variants=none,fedfor

In one process with one TF thread (intra-op and inter-op), it builds the
shared client loop of `client_work` (the `tf.function` every tff-opt client
runs) on the EMNIST-CR CNN (`tasks/emnist.py`, 1,206,590 parameters) and
runs one client of `--steps` batches of 20 synthetic examples through it,
once per variant, with the hooks the algorithms pass:

  none          FedOpt: no penalty.
  proximal      FedProx, mu = 0.01 (`fed_prox.proximal`).
  fedfor        FedFOR, alpha = 5, with a previous model
                (`fed_for.first_order_positive_hook`: d = w_{t-1} - w_t
                and alpha/eta computed once per client).
  fedadc        FedADC heavy ball, beta_local = 0.9 (the embedded-momentum
                penalty, `fed_adc_momentum.embedded_momentum_hook`: m_bar
                once per client).
  fedadc_nag    FedADC Nesterov: the same plus the look-ahead shift
                (`fed_adc_momentum.nesterov_look_ahead_hook`).
  *_per_step    The same hooks wrapped as plain functions, their constants
                recomputed at every local step (the cost that
                `ground.PrecomputedHook` saves).

The variants take their timed calls in turns (after one warm-up call each),
so a change in the machine's load falls on all of them alike. It prints,
per variant, the median CPU seconds (`time.process_time`) per local step
over `--repeats` calls, and the overhead over `none` in ms per step, with
the machine's load average. No TFF runtime is involved: only the client's
local training is measured.
"""

import argparse
import functools
import os
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
# TensorFlow's oneDNN kernels unless the environment says otherwise (see
# tff_opt/program/worker_env.py), as in the binaries.
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

PER_STEP = '_per_step'
VARIANTS = ('none', 'proximal', 'fedfor', 'fedfor' + PER_STEP, 'fedadc',
            'fedadc' + PER_STEP, 'fedadc_nag', 'fedadc_nag' + PER_STEP)
BATCH = 20
CLIENT_LR = 0.1


def _parse_args(argv):
  parser = argparse.ArgumentParser(prog='penalty_overhead',
                                   description=__doc__.split('\n')[0])
  parser.add_argument('--steps', type=int, default=100,
                      help='Local steps (batches of 20) per timed call.')
  parser.add_argument('--repeats', type=int, default=7,
                      help='Timed calls per variant (median reported).')
  parser.add_argument('--variants', default=','.join(VARIANTS),
                      help='Comma-separated subset of: '
                      + ', '.join(VARIANTS) + '.')
  args = parser.parse_args(argv)
  if args.steps < 1:
    parser.error(f'--steps={args.steps}: expected an integer >= 1.')
  if args.repeats < 1:
    parser.error(f'--repeats={args.repeats}: expected an integer >= 1.')
  args.variants = [v for v in args.variants.split(',') if v]
  unknown = [v for v in args.variants if v not in VARIANTS]
  if unknown or not args.variants:
    parser.error(f'--variants={",".join(args.variants)}: expected names '
                 f'from {", ".join(VARIANTS)}.')
  return args


def _every_step(hook):
  """`hook` as a plain function: its constants recomputed at every step."""
  return lambda weights, broadcast, **kwargs: hook(weights, broadcast,
                                                   **kwargs)


def _objective(variant):
  """The client work's `LocalObjective` the algorithm of `variant` passes."""
  from tff_opt.algorithms import fed_adc_momentum  # pylint: disable=g-import-not-at-top
  from tff_opt.algorithms import fed_for  # pylint: disable=g-import-not-at-top
  from tff_opt.algorithms import fed_prox  # pylint: disable=g-import-not-at-top
  from tff_opt.round import client_work  # pylint: disable=g-import-not-at-top
  wrap = _every_step if variant.endswith(PER_STEP) else (lambda hook: hook)
  variant = variant.removesuffix(PER_STEP)
  if variant == 'none':
    return client_work.LocalObjective()
  if variant == 'proximal':
    return client_work.LocalObjective(
        penalty=functools.partial(fed_prox.proximal, mu=0.01))
  if variant == 'fedfor':
    return client_work.LocalObjective(
        penalty=wrap(fed_for.first_order_positive_hook(5.0)))
  return client_work.LocalObjective(
      penalty=wrap(fed_adc_momentum.embedded_momentum_hook(0.9)),
      look_ahead=(wrap(fed_adc_momentum.nesterov_look_ahead_hook(0.9))
                  if variant == 'fedadc_nag' else None),
      count_steps=True)


def _broadcast(variant, weights, rng):
  """What the variant's distributor would send: w_t, or its broadcast
  NamedTuple (`ground.TwoModels`, `fed_adc_momentum.Broadcast`)."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_opt.round import ground  # pylint: disable=g-import-not-at-top
  from tff_opt.algorithms import fed_adc_momentum  # pylint: disable=g-import-not-at-top

  def near(arrays, scale):
    return [tf.constant(a + scale * rng.standard_normal(a.shape)
                        .astype(np.float32)) for a in arrays]

  model = tff.learning.models.ModelWeights(
      trainable=[tf.constant(a) for a in weights.trainable],
      non_trainable=[tf.constant(a) for a in weights.non_trainable])
  variant = variant.removesuffix(PER_STEP)
  if variant in ('none', 'proximal'):
    return model
  if variant == 'fedfor':
    previous = tff.learning.models.ModelWeights(
        trainable=near(weights.trainable, 1e-3),
        non_trainable=[tf.constant(a) for a in weights.non_trainable])
    return ground.TwoModels(model, previous, tf.constant(True))
  return fed_adc_momentum.Broadcast(
      model, near([0 * a for a in weights.trainable], 1e-2))


def main(argv=None):
  args = _parse_args(argv)
  tf.config.threading.set_intra_op_parallelism_threads(1)
  tf.config.threading.set_inter_op_parallelism_threads(1)
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from benchmarks import common  # pylint: disable=g-import-not-at-top
  from tasks import emnist  # pylint: disable=g-import-not-at-top
  from tff_opt.round import client_work  # pylint: disable=g-import-not-at-top
  from tff_opt.round import ground  # pylint: disable=g-import-not-at-top

  dataset = common.synthetic_clients(
      1, args.steps * BATCH, x_shape=(28, 28, 1),
      num_classes=emnist.NUM_CLASSES, batch_size=BATCH)[0]
  input_spec = dataset.element_spec

  def model_fn():
    return tff.learning.models.from_keras_model(
        emnist.create_cr_model(),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(),
        input_spec=input_spec,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])

  weights = common.initial_weights(model_fn, seed=0)
  optimizer = tff.learning.optimizers.build_sgdm(CLIENT_LR)
  hparams = {ground.LEARNING_RATE_KEY: tf.constant(CLIENT_LR)}
  rng = np.random.default_rng(0)
  calls = {}
  for variant in args.variants:
    update = client_work._build_client_update(  # pylint: disable=protected-access
        model_fn, optimizer, _objective(variant),
        tff.learning.ClientWeighting.NUM_EXAMPLES)
    broadcast = _broadcast(variant, weights, rng)
    calls[variant] = functools.partial(update, hparams, broadcast, dataset)
    calls[variant]()  # Warm-up: traces the loop.

  seconds = {v: [] for v in args.variants}
  for _ in range(args.repeats):
    for variant, call in calls.items():
      start = time.process_time()
      call()
      seconds[variant].append(time.process_time() - start)

  print(f'client loop, EMNIST-CR CNN, {args.steps} steps of batch {BATCH}, '
        f'one TF thread; median of {args.repeats}; {common.load_average()}')
  table = common.Table([('variant', 19, ''), ('cpu ms/step', 12, '.2f'),
                        ('overhead ms', 12, '.2f'), ('ratio', 7, '.3f')])
  table.print_header()
  base = (common.median(seconds['none']) / args.steps
          if 'none' in seconds else None)
  for variant, values in seconds.items():
    per_step = common.median(values) / args.steps
    table.print_row(variant, 1e3 * per_step,
                    None if base is None else 1e3 * (per_step - base),
                    None if base is None else per_step / base)
  return 0


if __name__ == '__main__':
  sys.exit(main())
