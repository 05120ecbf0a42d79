"""FedPTR-S: projected trajectory regularization with server-side MTT.

FedPTR (the paper's Algorithms 1-3) pulls each client toward a *projected*
next global model w~_{t+1} instead of the current one. Server-side FedPTR-S,
at the start of round t (with w_{t-1} the model it broadcast last round):

1. Trajectory matching (`tff_opt.mtt`, Algorithm 1): starting from the kept
   synthetic set D_syn and step size alpha_syn, `mtt_outer_steps` gradient
   steps on ||student_N - w_t||^2 / ||w_{t-1} - w_t||^2, student_N being
   w_{t-1} after N = `mtt_inner_steps` SGD steps on D_syn with step alpha_syn.
2. Projection: w~_{t+1} = w_t after P = `projection_steps` SGD steps on D_syn
   with step alpha_syn.
3. Broadcast {'model_weights': w_t, 'projected_model_weights': w~_{t+1}}
   (the trainable weights); client k minimises, Eq. 2,

       L_k(w) + sum_l (mu_l / 2) ||w_l - w~_{t+1,l}||^2,

   and the round ends as FedAvg's (example-weighted mean delta, server
   optimizer).

Choices the paper leaves open (each written here and tested in
tests/test_fed_ptr.py):
- Layer-adaptive mu (its formula is missing from our copy of the paper). A
  "layer" is one trainable variable (a kernel or a bias). With
  d_l = ||w~_{t+1,l} - w_{t,l}|| the projected update norm of layer l and L
  the number of layers,

      mu_l = mu * L * d_l / sum_j d_j,

  so mu_l scales with the layer's projected update norm and the mean of the
  mu_l is mu (the paper's "base" mu). When every d_l is 0 (first round, or
  P = 0) mu_l = mu. The clients compute mu_l from what they receive; nothing
  else is broadcast. `layer_adaptive=False` uses mu for every layer.
- First round (no w_{t-1}): no MTT and w~_1 = w_0, so the round is FedProx
  toward w_t, as the issue asks.
- D_syn starts as N(0, 1) noise (stateless, from `seed`) with
  `images_per_class` images of each class, labels fixed; alpha_syn starts at
  `mtt_init_lr`. Every MTT step uses the whole D_syn as one batch and the
  mean softmax cross-entropy of the model's logits (`tff_opt.mtt`).
- `update_every = k >= 1` runs MTT in the rounds with a previous model whose
  index (counted from the first such round) is a multiple of k; `0` runs it
  once ("one-shot"). Between MTT runs the last D_syn and alpha_syn are kept
  and still used for the projection.
- A guard the paper does not need to state: an MTT run whose images, step
  size or loss is non-finite, or whose alpha_syn is not positive, is
  rejected (the previous D_syn and alpha_syn are kept, `mtt_rejected` is 1);
  a non-finite projection falls back to w~_{t+1} = w_t
  (`projection_non_finite` is 1), so one bad MTT run cannot poison the
  clients' penalty.
- Outer-step sizes (MTT's own defaults are tuned to ZCA-whitened CIFAR):
  `mtt_image_lr` = 100, `mtt_lr_lr` = 1e-4, `mtt_init_lr` = 0.01 (the
  paper's initial alpha_syn is lost in our copy). On `digits` (one image
  per class, N = 5, alpha_syn from 0.05) image_lr = 100 took the matching
  loss from 1.15 to 0.62 in 30 outer steps; image_lr = 1 (alpha_syn from
  0.01) left it at 1.00.
- w_{t-1} is the model this process broadcast in the round before (after a
  rejected round, w_{t-1} = w_t and the matching loss's denominator is
  floored, see `tff_opt.mtt`).

Diagnostics, reported under `distributor` each round: `mtt_loss` (the
matching loss at the last outer step; 0 when MTT did not run),
`synthetic_lr` (alpha_syn after this round's MTT), `mtt_seconds` (server
time spent in MTT and projection), `mtt_ran` (1 when MTT ran),
`mtt_rejected` and `projection_non_finite` (the guards below) and
`auxiliary_global_cosine`: the cosine between the previous round's auxiliary
direction w_{t-1} - w~_t and the realised global update w_{t-1} - w_t (the
paper's Figure 2; 0 until there is a previous projection).

Not implemented here: client-side FedPTR (`side='client'`, MTT on every
sampled client from its own data) and the client-vs-global cosine.
"""

import collections
import functools
from collections.abc import Callable, Mapping
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import client_work as client_work_lib
from tff_opt import mtt
from tff_opt import tff_types
from tff_opt.algorithms import _common

PROJECTED_MODEL_KEY = 'projected_model_weights'
PREVIOUS_MODEL_KEY = 'previous_model_weights'
PREVIOUS_PROJECTED_KEY = 'previous_projected_weights'
HAS_PREVIOUS_KEY = 'has_previous'
HAS_PREVIOUS_PROJECTION_KEY = 'has_previous_projection'
IMAGES_KEY = 'synthetic_images'
SYNTHETIC_LR_KEY = 'synthetic_lr'
MATCHING_ROUNDS_KEY = 'matching_rounds'
MTT_UPDATES_KEY = 'mtt_updates'

_SIDES = ('server',)


def _norm(tensor) -> tf.Tensor:
  return tf.sqrt(tf.reduce_sum(tf.square(tensor)))


def layer_mu(projected, current, *, mu, layer_adaptive: bool):
  """Per-layer mu_l (see the module docstring).

  Args:
    projected: w~_{t+1}, a list of tensors (one per layer).
    current: w_t, a list of tensors of the same shapes.
    mu: The base strength, >= 0.
    layer_adaptive: If False every mu_l is mu.

  Returns:
    A list of scalar float32 tensors, one per layer.
  """
  if not layer_adaptive:
    return [tf.constant(mu, tf.float32) for _ in projected]
  norms = [_norm(tf.cast(p, tf.float32) - tf.cast(c, tf.float32))
           for p, c in zip(projected, current)]
  total = tf.add_n(norms)
  count = float(len(norms))
  return [
      tf.where(total > 0.0, mu * count * n / tf.maximum(total, 1e-30),
               tf.constant(mu, tf.float32)) for n in norms
  ]


def projected_proximal(weights, broadcast, *, learning_rate, mu,
                       layer_adaptive) -> tf.Tensor:
  """FedPTR's penalty sum_l (mu_l/2) ||w_l - w~_{t+1,l}||^2 (Eq. 2).

  Args:
    weights: The trainable variables, in model order.
    broadcast: A mapping with `model_weights` (w_t) and
      `projected_model_weights` (w~_{t+1}, a list of tensors).
    learning_rate: Unused.
    mu: The base strength, >= 0.
    layer_adaptive: Whether mu_l is layer-adaptive (see `layer_mu`).

  Returns:
    A scalar tensor.
  """
  del learning_rate
  projected = list(broadcast[PROJECTED_MODEL_KEY])
  current = client_work_lib.model_weights_of(broadcast).trainable
  mus = layer_mu(projected, current, mu=mu, layer_adaptive=layer_adaptive)
  return tf.add_n([
      0.5 * m * tf.reduce_sum(tf.square(w - p))
      for w, p, m in zip(weights, projected, mus)
  ])


def _model_shapes(model_fn):
  """(input shape without batch, input dtype, number of classes)."""
  with tf.Graph().as_default():
    model = model_fn()
    spec = model.input_spec
    x_spec = spec['x'] if isinstance(spec, Mapping) else spec[0]
    weights = [tf.identity(v) for v in model.trainable_variables]
    x = tf.zeros([1] + x_spec.shape[1:].as_list(), x_spec.dtype)
    logits = mtt.forward_from_model_fn(model_fn)(weights, x)
    return (tuple(x_spec.shape[1:].as_list()), x_spec.dtype,
            int(logits.shape[-1]))


def _server_projection(model_fn, weights_type, *, images_per_class,
                       mtt_outer_steps, mtt_inner_steps, projection_steps,
                       update_every, mtt_init_lr, mtt_image_lr, mtt_lr_lr,
                       seed):
  """The FedPTR-S distributor: MTT + projection at the server, broadcast."""
  input_shape, input_dtype, num_classes = _model_shapes(model_fn)
  num_images = num_classes * images_per_class
  rng = np.random.default_rng(seed)
  images = rng.normal(size=(num_images,) + input_shape).astype(
      input_dtype.as_numpy_dtype)
  trainable_zeros = tff_types.zeros_of(weights_type.trainable)
  initial_state = collections.OrderedDict([
      (PREVIOUS_MODEL_KEY, list(trainable_zeros)),
      (HAS_PREVIOUS_KEY, False),
      (PREVIOUS_PROJECTED_KEY, list(trainable_zeros)),
      (HAS_PREVIOUS_PROJECTION_KEY, False),
      (IMAGES_KEY, images),
      (SYNTHETIC_LR_KEY, np.float32(mtt_init_lr)),
      (MATCHING_ROUNDS_KEY, np.int32(0)),
      (MTT_UPDATES_KEY, np.int32(0)),
  ])

  @tff.federated_computation
  def init_fn():
    return tff.federated_value(initial_state, tff.SERVER)

  state_type = init_fn.type_signature.result.member

  @tff.tensorflow.computation(state_type, weights_type)
  def server_step(state, weights):
    forward = mtt.forward_from_model_fn(model_fn)
    labels = mtt.synthetic_labels(num_classes, images_per_class)
    current = list(weights.trainable)
    previous = list(state[PREVIOUS_MODEL_KEY])
    has_previous = state[HAS_PREVIOUS_KEY]
    rounds = state[MATCHING_ROUNDS_KEY]
    if update_every == 0:
      due = tf.equal(state[MTT_UPDATES_KEY], 0)
    else:
      due = tf.equal(tf.math.floormod(rounds, update_every), 0)
    run_mtt = tf.logical_and(has_previous, due)

    def matched():
      new_images, new_lr, _, last_loss = mtt.distill(
          forward, previous, current, state[IMAGES_KEY], labels,
          state[SYNTHETIC_LR_KEY], outer_steps=mtt_outer_steps,
          inner_steps=mtt_inner_steps, image_lr=mtt_image_lr,
          lr_lr=mtt_lr_lr)
      last_loss = tf.cast(last_loss, tf.float32)
      accepted = tf.logical_and(
          tf.logical_and(tf.reduce_all(tf.math.is_finite(new_images)),
                         tf.math.is_finite(last_loss)),
          tf.logical_and(tf.math.is_finite(new_lr), new_lr > 0.0))
      return (tf.where(accepted, new_images, state[IMAGES_KEY]),
              tf.where(accepted, new_lr, state[SYNTHETIC_LR_KEY]), last_loss,
              tf.cast(tf.logical_not(accepted), tf.int32))

    def kept():
      return (tf.identity(state[IMAGES_KEY]),
              tf.identity(state[SYNTHETIC_LR_KEY]), tf.constant(0.0),
              tf.constant(0))

    start_time = tf.timestamp()
    with tf.control_dependencies([start_time]):
      images, lr, loss, rejected = tf.cond(run_mtt, matched, kept)
      projected = tf.cond(
          has_previous,
          lambda: mtt.train_steps(forward, current, images, labels, lr,
                                  projection_steps),
          lambda: [tf.identity(c) for c in current])
      projection_finite = tf.reduce_all(
          [tf.reduce_all(tf.math.is_finite(p)) for p in projected])
      projected = [tf.where(projection_finite, p, c)
                   for p, c in zip(projected, current)]
    with tf.control_dependencies([loss, lr] + list(projected)):
      seconds = tf.timestamp() - start_time
    # Figure 2: cos(w_{t-1} - w~_t, w_{t-1} - w_t).
    auxiliary = [p - q for p, q in zip(previous,
                                       state[PREVIOUS_PROJECTED_KEY])]
    realised = [p - c for p, c in zip(previous, current)]
    dot = tf.add_n([tf.reduce_sum(a * b) for a, b in zip(auxiliary, realised)])
    norms = _norm(tf.concat([tf.reshape(a, [-1]) for a in auxiliary], 0)) * (
        _norm(tf.concat([tf.reshape(b, [-1]) for b in realised], 0)))
    cosine = tf.where(
        tf.logical_and(state[HAS_PREVIOUS_PROJECTION_KEY], norms > 0.0),
        dot / tf.maximum(norms, 1e-30), 0.0)
    broadcast = collections.OrderedDict([
        (client_work_lib.MODEL_WEIGHTS_KEY, weights),
        (PROJECTED_MODEL_KEY, projected),
    ])
    new_state = collections.OrderedDict([
        (PREVIOUS_MODEL_KEY, current),
        (HAS_PREVIOUS_KEY, tf.constant(True)),
        (PREVIOUS_PROJECTED_KEY, projected),
        (HAS_PREVIOUS_PROJECTION_KEY, has_previous),
        (IMAGES_KEY, images),
        (SYNTHETIC_LR_KEY, lr),
        (MATCHING_ROUNDS_KEY,
         rounds + tf.cast(has_previous, tf.int32)),
        (MTT_UPDATES_KEY, state[MTT_UPDATES_KEY] + tf.cast(run_mtt, tf.int32)),
    ])
    measurements = collections.OrderedDict([
        ('mtt_loss', loss),
        ('synthetic_lr', lr),
        ('mtt_seconds', tf.cast(seconds, tf.float32)),
        ('mtt_ran', tf.cast(run_mtt, tf.int32)),
        ('mtt_rejected', rejected),
        ('projection_non_finite',
         tf.cast(tf.logical_not(projection_finite), tf.int32)),
        ('auxiliary_global_cosine', cosine),
    ])
    return broadcast, new_state, measurements

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(weights_type, tff.SERVER))
  def next_fn(state, weights):
    broadcast, new_state, measurements = tff.federated_map(
        server_step, (state, weights))
    return tff.templates.MeasuredProcessOutput(
        state=new_state,
        result=tff.federated_broadcast(broadcast),
        measurements=measurements)

  return tff.learning.templates.DistributionProcess(init_fn, next_fn)


def _check_positive_int(name, value, minimum=1):
  if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
    raise ValueError(f'{name} must be an integer >= {minimum}, got {value!r}.')


def build_fed_ptr(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    mu: float,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    side: str = 'server',
    images_per_class: int = 10,
    mtt_outer_steps: int = 20,
    mtt_inner_steps: int = 10,
    projection_steps: int = 5,
    layer_adaptive: bool = True,
    update_every: int = 1,
    mtt_init_lr: float = 0.01,
    mtt_image_lr: float = 100.0,
    mtt_lr_lr: float = 1e-4,
    seed: int = 0,
    client_weighting: tff.learning.ClientWeighting = (
        tff.learning.ClientWeighting.NUM_EXAMPLES),
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
) -> tff.learning.templates.LearningProcess:
  """Builds a FedPTR-S `LearningProcess` (see the module docstring).

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel` whose predictions are logits and
      whose forward pass updates no non-trainable state.
    mu: The base regularisation strength, >= 0 (0 is FedAvg).
    client_optimizer_fn: The client's `tff.learning.optimizers.Optimizer`.
    server_optimizer_fn: The server's optimizer.
    side: Where MTT runs; only 'server' (FedPTR-S) is implemented.
    images_per_class: Synthetic images per class (the paper: 10 for 10
      classes, 2 for 100).
    mtt_outer_steps: MTT updates of D_syn per MTT run, >= 0.
    mtt_inner_steps: N, unrolled student steps, >= 1.
    projection_steps: P, SGD steps on D_syn from w_t, >= 0.
    layer_adaptive: Layer-adaptive mu_l (True) or mu for every layer.
    update_every: Run MTT every this many rounds; 0 runs it once.
    mtt_init_lr: Initial alpha_syn, > 0.
    mtt_image_lr: Gradient-descent step of the synthetic images, >= 0.
    mtt_lr_lr: Gradient-descent step of alpha_syn, >= 0.
    seed: Seed of the initial noise images.
    client_weighting: `NUM_EXAMPLES` (default) or `UNIFORM`.
    client_lr_schedule: Optional round number -> client learning rate.
    model_aggregator: Weighted aggregation factory for the deltas;
      `tff.aggregators.MeanFactory()` by default.

  Returns:
    A `tff.learning.templates.LearningProcess`; its metrics include the
    diagnostics under `distributor` and `communication/{bytes_server_to_
    client, bytes_client_to_server}`.

  Raises:
    ValueError: If a hyper-parameter is out of range (the message names it)
      or `side` is not 'server'.
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
  """
  if side not in _SIDES:
    raise ValueError("side must be 'server' (client-side FedPTR is not "
                     f'implemented), got {side!r}.')
  _common.check_non_negative('mu', mu)
  _check_positive_int('images_per_class', images_per_class)
  _check_positive_int('mtt_outer_steps', mtt_outer_steps, minimum=0)
  _check_positive_int('mtt_inner_steps', mtt_inner_steps)
  _check_positive_int('projection_steps', projection_steps, minimum=0)
  _check_positive_int('update_every', update_every, minimum=0)
  _common.check_non_negative('mtt_init_lr', mtt_init_lr)
  if mtt_init_lr == 0:
    raise ValueError(f'mtt_init_lr must be positive, got {mtt_init_lr!r}.')
  _common.check_non_negative('mtt_image_lr', mtt_image_lr)
  _common.check_non_negative('mtt_lr_lr', mtt_lr_lr)
  def distributor_fn(weights_type):
    return _server_projection(
        model_fn, weights_type, images_per_class=images_per_class,
        mtt_outer_steps=mtt_outer_steps, mtt_inner_steps=mtt_inner_steps,
        projection_steps=projection_steps, update_every=update_every,
        mtt_init_lr=mtt_init_lr, mtt_image_lr=mtt_image_lr,
        mtt_lr_lr=mtt_lr_lr, seed=seed)

  return _common.build_penalized_fed_opt(
      model_fn,
      distributor_fn=distributor_fn,
      penalty=functools.partial(projected_proximal, mu=mu,
                                layer_adaptive=layer_adaptive),
      client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn,
      client_weighting=client_weighting,
      client_lr_schedule=client_lr_schedule,
      model_aggregator=model_aggregator)
