"""FedGKD (Yao et al., "FedGKD: Towards Heterogeneous Federated Learning via
Global Knowledge Distillation", IEEE TC 2023; arXiv 2107.00051).

The server keeps a buffer of the last M global models; the teacher of round
t is their parameter average

    w_bar_t = (1 / |B_t|) sum_{w in B_t} w,   B_t = {w_{t-M+1}, ..., w_t}

(FedGKD; FedGKD-VOTE, which weighs the models' predictions by a validation
loss, is not implemented). Client k starts from w_t and minimises, with its
client optimizer over its local epochs,

    L = CE(z, y)
        + (gamma / 2) * tau^2 * (1/N) sum_n KL(q^tau(z_bar) || q^tau(z))

with z_bar the logits of w_bar_t (`fed_gkd_loss`, notation of
`tff_opt.round.losses`; the tau^2 factor and the batch mean are
`losses.distillation_kl`'s, written down there, and the gamma/2 choice
below). The server averages
the deltas and applies its server optimizer to the mean, as FedOpt does
(SGD with learning rate 1 is FedAvg's), and pushes w_t into its buffer.

How the buffer travels. The finalizer keeps, beside the server optimizer's
state, the M - 1 global models before w_t (a ring of M - 1 slots and the
number of models pushed so far, in `state.finalizer['extras']`), like
SCAFFOLD's control variate. The distributor broadcasts w_t, the sum of the
buffered models and their number n (`distributors.with_finalizer_state`);
each client forms w_bar = (w_t + sum) / (n + 1)
(`gkd_teacher_weights`). That is one model more down than FedAvg
(the authors' code sends the teacher, also one model); the update sent up
is the delta alone.

Choices written down (each tested in `tests/test_fed_gkd.py` or
`tests/test_losses.py`):
- The coefficient is the paper's gamma/2. The authors' code multiplies
  tau^2 KL by its `distillation_coefficient` (0.1 in their README run and,
  as lambda, in the FedADC paper's Section IV-A3), so gamma = 2 * that
  coefficient; `GKD_GAMMA.default` = 0.2.
- Before M rounds have passed the buffer holds every global model so far,
  w_0 included: w_bar_0 = w_0 (round 0 distils towards the initial model),
  w_bar_1 = (w_0 + w_1) / 2, ... The authors' code skips distillation in
  its first round and starts its buffer at w_1; the two differ in the first
  M rounds only.
- A round the finalizer rejects (non-finite mean delta) keeps the model and
  pushes nothing: the buffer holds distinct rounds' models.
- The buffer holds the trainable weights; the teacher's non-trainable ones
  (batch-norm statistics) are w_t's. M = 1 is the current model as teacher
  (no buffer is kept: a single unused slot).
- Client weighting: uniform by default, as in the authors' code (its server
  "uniformly average[s]" the received models, `Master._fedavg`); example
  weighting is an option.

Settings of the FedADC paper (Ozfatura et al., Section IV-A3): tau = 0.5,
lambda = 0.1 as the weight of the KL term, i.e. gamma = 0.2 here (gamma/2
= lambda, the authors' `distillation_coefficient`), local momentum 0.9 (the
client optimizer's, `client_optimizer_fn`). M = 5 is the buffer length of
the authors' README run (`--buffer_length 5`). The model's predictions must
be logits.
"""

import collections
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import tff_types
from tff_opt.algorithms import _common
from tff_opt.algorithms import hparams
from tff_opt.algorithms import recipe as recipe_lib
from tff_opt.round import client_work as client_work_lib
from tff_opt.round import distributors
from tff_opt.round import finalizers
from tff_opt.round import ground
from tff_opt.round import losses


# The finalizer's extras: the ring of previous global models and the number
# of models pushed into it so far.
HISTORY_KEY = 'history'
PUSHED_KEY = 'pushed'


GKD_GAMMA = hparams.HParam(
    'fedgkd_gamma', 0.2, 'FedGKD coefficient gamma of (gamma/2) tau^2 KL, >= 0 '
    '(0.2: the FedADC paper\'s lambda = 0.1 on tau^2 KL).', lower=0.0,
    argument='gamma', aliases=('gkd_gamma',))
GKD_TEMPERATURE = hparams.HParam(
    'fedgkd_temperature', 0.5, 'FedGKD temperature tau, > 0.', lower=0.0,
    lower_open=True, argument='temperature',
    aliases=('gkd_temperature',))  # FedADC IV-A3.
GKD_BUFFER_SIZE = hparams.HParam(
    'fedgkd_buffer_size', 5, 'FedGKD: the teacher is the mean of the last M '
    'global models; M >= 1.', kind='integer', lower=1,
    # The authors' README run, --buffer_length 5.
    argument='buffer_size', aliases=('gkd_buffer_size',))
SPEC = hparams.Spec(
    summary=('FedGKD (Yao et al.): distillation from the parameter mean of '
             'the last --fedgkd_buffer_size global models, CE + (gamma/2) '
             'tau^2 KL (--fedgkd_gamma, --fedgkd_temperature), server '
             'optimizer from --server_opt'),
    hparams=(GKD_GAMMA, GKD_TEMPERATURE, GKD_BUFFER_SIZE),
    # Its authors' code averages the received models uniformly.
    client_weighting=tff.learning.ClientWeighting.UNIFORM)


class ModelHistory(NamedTuple):
  """FedGKD's broadcast (`algorithms/fed_gkd.py`): w_t and the previous
  global models kept in the server's buffer, as their sum and number."""
  model_weights: Any
  history_sum: Any  # Per trainable variable, over the buffer's n models.
  history_count: Any  # n, float32.


def gkd_teacher_weights(current: Sequence[Any], history_sum: Sequence[Any],
                        history_count) -> list[tf.Tensor]:
  """FedGKD's w_bar = (w_t + sum of the n previous models) / (n + 1)."""
  return [(c + tf.cast(s, c.dtype)) / (1.0 + tf.cast(history_count, c.dtype))
          for c, s in zip(current, history_sum)]


def fed_gkd_loss(logits, teacher_logits, labels, *, gamma, temperature,
                 ce: Optional[tf.Tensor] = None) -> tf.Tensor:
  """FedGKD: CE(z, y) + (gamma / 2) * tau^2 * KL(q^tau(z_bar) || q^tau(z)).

  Args:
    logits: [..., C] student logits z.
    teacher_logits: [..., C] logits z_bar of the averaged teacher.
    labels: [...] integer true labels y.
    gamma: The distillation coefficient of the paper, >= 0 (the term's
      weight is gamma / 2).
    temperature: tau > 0.
    ce: The cross-entropy term when already computed (the model's own
      loss); `losses.cross_entropy(logits, labels)` when `None`.
  """
  if ce is None:
    ce = losses.cross_entropy(logits, labels)
  return ce + 0.5 * gamma * losses.distillation_kl(teacher_logits, logits,
                                                   temperature)


def build_gkd_loss(gamma: float, temperature: float) -> losses.LossFnBuilder:
  """FedGKD's `loss_fn_builder`: `fed_gkd_loss`, teacher = w_bar.

  The broadcast (a `ModelHistory`) carries w_t and the sum and number of
  the previous global models in the server's buffer; the teacher's
  trainable weights are their mean with w_t (`gkd_teacher_weights`), its
  non-trainable ones w_t's.
  """

  def builder(model_fn):
    teacher, teacher_weights = losses.teacher_copy(model_fn)

    def loss_fn(model, batch, output, broadcast, context):
      del model, context
      current = ground.model_weights_of(broadcast)
      losses.assign_weights(teacher_weights.trainable, gkd_teacher_weights(
          current.trainable, broadcast.history_sum,
          broadcast.history_count))
      losses.assign_weights(teacher_weights.non_trainable,
                            current.non_trainable)
      x, y = ground.features_and_labels(batch)
      teacher_logits = teacher.predict_on_batch(x, training=False)
      return fed_gkd_loss(output.predictions, teacher_logits, y, gamma=gamma,
                          temperature=temperature, ce=output.loss)

    return loss_fn

  return builder


def _slots(buffer_size: int) -> int:
  """Ring slots for the M - 1 previous models (one unused slot if M = 1)."""
  return max(buffer_size - 1, 1)


def build_history_finalizer(
    server_optimizer: tff.learning.optimizers.Optimizer,
    model_weights_type: tff.Type,
    buffer_size: int,
) -> tff.learning.templates.FinalizerProcess:
  """The server optimizer on the mean delta, plus FedGKD's model buffer.

  `finalizers.apply_optimizer` makes the step (a non-finite round is
  rejected and measured as `update_non_finite`); after an accepted round
  the model it started from, w_t, is written into the ring of M - 1 slots
  (slot `pushed % (M - 1)`) and `pushed` grows by one. With M = 1 nothing
  is kept.

  Args:
    server_optimizer: A `tff.learning.optimizers.Optimizer`.
    model_weights_type: The unplaced `ModelWeights` type of the model.
    buffer_size: M, a positive integer.

  Returns:
    A `FinalizerProcess` whose state is `{'optimizer': the optimizer's
    state, 'extras': {'history': [per trainable variable, (M - 1, *shape)],
    'pushed': int32}}`, whose hyper-parameters are the optimizer's and whose
    measurements are `{'update_non_finite'}`.
  """
  # Over 80 lines with its docstring: the finalizer's computations share the
  # types of the model ring read here and are read in one place.
  base = finalizers.apply_optimizer(server_optimizer, model_weights_type)
  slots = _slots(buffer_size)
  keeps = buffer_size > 1
  zeros = tff_types.zeros_of(model_weights_type.trainable)
  initial_extras = collections.OrderedDict([
      (HISTORY_KEY, [np.zeros((slots,) + z.shape, z.dtype) for z in zeros]),
      (PUSHED_KEY, np.int32(0)),
  ])

  @tff.federated_computation
  def init_fn():
    return tff.federated_zip(collections.OrderedDict([
        (finalizers.OPTIMIZER_STATE_KEY, base.initialize()),
        (finalizers.EXTRAS_KEY,
         tff.federated_value(initial_extras, tff.SERVER)),
    ]))

  state_type = init_fn.type_signature.result.member
  extras_type = state_type[finalizers.EXTRAS_KEY]
  measurements_type = base.next.type_signature.result.measurements.member
  aggregate_type = base.next.type_signature.parameter[2].member

  @tff.tensorflow.computation(extras_type, model_weights_type,
                              measurements_type)
  def push(extras, weights, measurements):
    accepted = tf.logical_and(
        tf.constant(keeps),
        tf.equal(tf.cast(
            measurements[ground.UPDATE_NON_FINITE_KEY], tf.int32), 0))
    pushed = extras[PUSHED_KEY]
    index = tf.math.floormod(pushed, slots)
    history = [
        tf.where(accepted,
                 tf.tensor_scatter_nd_update(h, [[index]], w[tf.newaxis]), h)
        for h, w in zip(extras[HISTORY_KEY], weights.trainable)
    ]
    return collections.OrderedDict([
        (HISTORY_KEY, history),
        (PUSHED_KEY, tf.where(accepted, pushed + 1, pushed)),
    ])

  @tff.federated_computation(
      tff.FederatedType(state_type, tff.SERVER),
      tff.FederatedType(model_weights_type, tff.SERVER),
      tff.FederatedType(aggregate_type, tff.SERVER))
  def next_fn(state, weights, aggregate):
    output = base.next(state[finalizers.OPTIMIZER_STATE_KEY], weights,
                       aggregate)
    extras = tff.federated_map(push, (state[finalizers.EXTRAS_KEY], weights,
                                      output.measurements))
    new_state = tff.federated_zip(collections.OrderedDict([
        (finalizers.OPTIMIZER_STATE_KEY, output.state),
        (finalizers.EXTRAS_KEY, extras)]))
    return tff.templates.MeasuredProcessOutput(new_state, output.result,
                                               output.measurements)

  @tff.tensorflow.computation(state_type)
  def get_hparams_fn(state):
    return base.get_hparams(state[finalizers.OPTIMIZER_STATE_KEY])

  @tff.tensorflow.computation(state_type,
                              base.get_hparams.type_signature.result)
  def set_hparams_fn(state, hparams):
    return collections.OrderedDict([
        (finalizers.OPTIMIZER_STATE_KEY,
         base.set_hparams(state[finalizers.OPTIMIZER_STATE_KEY], hparams)),
        (finalizers.EXTRAS_KEY, state[finalizers.EXTRAS_KEY]),
    ])

  return tff.learning.templates.FinalizerProcess(
      init_fn, next_fn, get_hparams_fn=get_hparams_fn,
      set_hparams_fn=set_hparams_fn)


def history_broadcast(buffer_size: int):
  """The distributor's `broadcast_fn`: w_t, the buffered models' sum and
  number.

  Returns a TF function `(w_t, finalizer state) -> ModelHistory(w_t,
  [sum over the n filled slots, per trainable variable], n)` (n float32),
  n = min(pushed, M - 1).
  """
  slots = _slots(buffer_size)

  def broadcast_fn(model_weights, state):
    extras = state[finalizers.EXTRAS_KEY]
    count = tf.minimum(extras[PUSHED_KEY], buffer_size - 1)
    filled = tf.range(slots) < count
    sums = []
    for h in extras[HISTORY_KEY]:
      mask = tf.reshape(tf.cast(filled, h.dtype), [slots] + [1] *
                        (h.shape.rank - 1))
      sums.append(tf.reduce_sum(h * mask, axis=0))
    return ModelHistory(model_weights, sums,
                               tf.cast(count, tf.float32))

  return broadcast_fn


def fed_gkd_recipe(
    *,
    gamma: float = GKD_GAMMA.default,
    temperature: float = GKD_TEMPERATURE.default,
    buffer_size: int = GKD_BUFFER_SIZE.default,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
) -> recipe_lib.RecipeFn:
  """FedGKD's recipe (see the module docstring), for `recipe.assemble`.

  The finalizer is `build_history_finalizer` (server optimizer + buffer),
  the distributor `distributors.with_finalizer_state` with
  `history_broadcast`, the aggregator the weighted mean of the deltas
  (`model_aggregator`, `tff.aggregators.MeanFactory()` by default) and the
  local objective's loss hook `build_gkd_loss(gamma, temperature)`.
  Arguments as for `build_fed_gkd`.

  Raises:
    ValueError: If a hyper-parameter is out of range; the message names it.
  """
  GKD_GAMMA.check(gamma)
  GKD_TEMPERATURE.check(temperature)
  GKD_BUFFER_SIZE.check(buffer_size)
  objective = client_work_lib.LocalObjective(
      loss_fn_builder=build_gkd_loss(gamma, temperature))

  def recipe_fn(weights_type):
    _common.check_server_optimizer(server_optimizer_fn)
    finalizer = build_history_finalizer(server_optimizer_fn, weights_type,
                                        buffer_size)
    distributor = distributors.with_finalizer_state(
        weights_type, finalizer.initialize.type_signature.result.member,
        history_broadcast(buffer_size))
    return recipe_lib.from_built_parts(distributor, finalizer, objective,
                                       model_aggregator=model_aggregator)

  return recipe_fn


def build_fed_gkd(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    gamma: float = GKD_GAMMA.default,
    temperature: float = GKD_TEMPERATURE.default,
    buffer_size: int = GKD_BUFFER_SIZE.default,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting = SPEC.client_weighting,
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
) -> tff.learning.templates.LearningProcess:
  """Builds a FedGKD `LearningProcess` (see the module docstring).

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel` whose predictions are logits.
    gamma: The paper's distillation coefficient, >= 0: the KL term's weight
      is gamma / 2 (0 is FedAvg).
    temperature: tau > 0.
    buffer_size: M, the number of global models averaged into the teacher
      (the current one included), a positive integer.
    client_optimizer_fn: The client's `tff.learning.optimizers.Optimizer`
      (the FedADC paper: SGD with momentum 0.9).
    server_optimizer_fn: The server's optimizer, applied to the mean delta
      (SGD with learning rate 1 is FedAvg).
    client_weighting: `UNIFORM` (default, the authors' code) or
      `NUM_EXAMPLES`.
    client_lr_schedule: Optional round number -> client learning rate.
    model_aggregator: Weighted aggregation factory for the deltas;
      `tff.aggregators.MeanFactory()` by default.

  Returns:
    A `tff.learning.templates.LearningProcess`; the buffer is in
    `state.finalizer['extras']` (so checkpoints carry it).

  Raises:
    ValueError: If `gamma` is negative, `temperature` not positive (or
      either not a finite number) or `buffer_size` not a positive integer;
      the message names it.
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
  """
  recipe_fn = fed_gkd_recipe(gamma=gamma, temperature=temperature,
                             buffer_size=buffer_size,
                             server_optimizer_fn=server_optimizer_fn,
                             model_aggregator=model_aggregator)
  return recipe_lib.assemble(model_fn, recipe_fn, client_optimizer_fn,
                             client_weighting, client_lr_schedule)
