"""FedADC, FedADC with double momentum, and FedADC+ (Ozfatura et al.).

"FedADC: Accelerated Federated Learning with Drift Control". The server
broadcasts the model w_t and the global momentum m_t (m_0 = 0); a client with
H local steps this round uses m_bar = beta_local * m_t / H:

    Algorithm 3, heavy ball:  w <- w - eta_t * (g(w) + m_bar)
    Algorithm 3, Nesterov:    w_half = w - eta_t * m_bar;
                              w <- w_half - eta_t * g(w_half)
    Algorithm 4 (double momentum, `local_momentum=phi`):
                              m_i = g (first step),
                              m_i <- phi * m_i + (1 - phi) * g,
                              w <- w - eta_t * (m_bar + m_i)

and sends Delta_k = w_t - w_k. The server:

    Delta_bar = (1 / |S|) sum_k Delta_k / eta_t
    m_{t+1}   = Delta_bar + (beta_global - beta_local) * m_t
    w_{t+1}   = w_t - alpha * eta_t * m_{t+1}

(`tff_opt.algorithms.fed_adc_momentum`, beside this module, has the pieces
and how they map onto the shared client work.) beta_local defaults to
beta_global = `beta` (the paper's choice), so m_{t+1} = Delta_bar, as
Algorithm 4 writes it.

FedADC+ (`distillation=True`, Section III, Eq. 6-9): the local loss is

    L = (1 - lambda) * CE(f(x | w), y) + lambda * KL(p_hat || p(x | w; tau))

with the teacher the broadcast global model w_t, p~ = softmax(f(x | w_t) /
tau), the client's label proportions gamma (its own data, never sent),
rho_i = gamma_i / max_j gamma_j and the self-confidence target

    p_hat_i = (1 - rho_i) * p~_i                   for i != y   (Eq. 8)
    p_hat_y = 1 - sum_{i != y} (1 - rho_i) * p~_i                (Eq. 9)

SlowMo (Algorithm 2) is this server rule with beta_local = 0 (plain local
SGD): `tff_opt.algorithms.build_slowmo`.

Choices the paper leaves open (each tested):
- Client weighting: uniform (1/|S|, as Algorithms 3-4 write it) by default;
  example weighting is an option.
- A model's non-trainable variables (BN moving statistics) are not part of
  the momentum rule: they become the clients' mean of theirs, with the
  deltas' weights, and are kept on a rejected round
  (`recipe.with_shared_non_trainables`).
- H is the client's own number of batches this round (its dataset holds its
  epochs), counted before its loop.
- eta_t at the server is computed from the same schedule and the round
  number the server rule keeps (see `tff_opt.algorithms.fed_adc_momentum`).
- Double momentum uses the heavy-ball form (Algorithm 4); `variant=
  'nesterov'` with `local_momentum` is refused.
- With beta_local = 0 the momentum is not broadcast (no client uses it).
- Distillation: the KL term follows the CS-KD implementation the paper
  points to (Yun et al. 2020): student and teacher logits both divided by
  tau, the KL multiplied by tau^2, averaged over the batch. The paper does
  not print tau; it follows CS-KD's implementation, whose default
  temperature is 4, so tau = 4 by default (`distill_temperature=1` gives the
  teacher's plain softmax). lambda = 0.35 (Section IV-C). CE is the model's
  own loss (the tasks' sparse cross-entropy on logits); the model's
  predictions must be logits. Classes absent from the client have rho = 0:
  their target is the teacher's probability.
"""

import dataclasses
import functools
from collections.abc import Callable
from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import checks
from tff_opt.algorithms import _common
from tff_opt.algorithms import fed_adc_momentum
from tff_opt.algorithms import hparams
from tff_opt.algorithms import recipe as recipe_lib
from tff_opt.round import client_work as client_work_lib
from tff_opt.round import distributors
from tff_opt.round import ground
from tff_opt.round import losses

VARIANTS = ('heavy_ball', 'nesterov')


BETA = hparams.FEDADC_BETA
BETA_LOCAL = hparams.HParam(
    'fedadc_beta_local', None, 'FedADC: share of the global momentum '
    'embedded in the local steps, in [0, 1). Default: --fedadc_beta.',
    lower=0.0, upper=1.0, upper_open=True, argument='beta_local',
    aliases=('beta_local',))
VARIANT = hparams.HParam(
    'fedadc_variant', 'heavy_ball', 'FedADC local step (Algorithm 3): '
    'heavy_ball (blue) or nesterov (red).', kind='enum', choices=VARIANTS,
    argument='variant')
LOCAL_MOMENTUM = hparams.HParam(
    'fedadc_local_momentum', 0.0, 'FedADC double momentum phi (Algorithm '
    '4), in [0, 1); 0 = Algorithm 3.', lower=0.0, upper=1.0, upper_open=True,
    argument='local_momentum', aliases=('local_momentum',))
DISTILL_LAMBDA = hparams.HParam(
    'fedadc_distill_lambda', 0.35, 'FedADC+ distillation weight lambda, in '
    '[0, 1].', lower=0.0, upper=1.0, argument='distill_lambda',
    aliases=('distill_lambda',))
DISTILL_TEMPERATURE = hparams.HParam(
    'fedadc_distill_temperature', losses.SELF_CONFIDENCE_TEMPERATURE,
    'FedADC+ distillation temperature tau, positive (CS-KD\'s default 4, '
    'which the paper follows).', lower=0.0, lower_open=True,
    argument='distill_temperature', aliases=('distill_temperature',))
SPEC = hparams.Spec(
    summary=('FedADC (Ozfatura et al. Algorithm 3; Algorithm 4 with '
             '--fedadc_local_momentum > 0): global momentum embedded in '
             'local SGD steps, server momentum rule with alpha = 1 '
             '(--server_opt/--server_lr unused)'),
    hparams=(BETA, VARIANT, LOCAL_MOMENTUM, BETA_LOCAL),
    # Ozfatura et al. Algorithms 3-4: (1/|S|) sum.
    client_weighting=tff.learning.ClientWeighting.UNIFORM,
    server_rule='own')
PLUS_SPEC = dataclasses.replace(
    SPEC,
    summary=('FedADC+: FedADC with self-confidence distillation '
             '(--fedadc_distill_lambda, --fedadc_distill_temperature)'),
    hparams=SPEC.hparams + (DISTILL_LAMBDA, DISTILL_TEMPERATURE),
    preset=(('distillation', True),))


# --- The recipe and the builder -------------------------------------------


def build_self_confidence_loss(distill_lambda: float, temperature: float
                               ) -> losses.LossFnBuilder:
  """FedADC+'s `loss_fn_builder` (Eq. 7): teacher = broadcast w_t.

  The built `loss_fn(model, batch, output, broadcast, context)` evaluates a
  teacher copy of the model, holding the broadcast weights, on the batch and
  returns (1 - lambda) * output.loss + lambda * tau^2 *
  `losses.self_confidence_kl`, with rho (`losses.confidences`) from
  `context['client_stats']` (the client's label proportions).

  Args:
    distill_lambda: lambda in [0, 1].
    temperature: tau > 0.
  """

  def builder(model_fn):
    teacher, teacher_weights = losses.teacher_copy(model_fn)

    def loss_fn(model, batch, output, broadcast, context):
      del model
      losses.assign_weights(teacher_weights, ground.model_weights_of(broadcast))
      x, y = ground.features_and_labels(batch)
      teacher_logits = tf.stop_gradient(
          teacher.predict_on_batch(x, training=False))
      kl = losses.self_confidence_kl(
          output.predictions, teacher_logits, y,
          losses.confidences(context[ground.CLIENT_STATS_KEY]), temperature)
      return ((1.0 - distill_lambda) * output.loss +
              distill_lambda * temperature**2 * kl)

    return loss_fn

  return builder


def fed_adc_recipe(
    *,
    client_learning_rate: float,
    beta: float,
    alpha: float = 1.0,
    beta_local: Optional[float] = None,
    variant: str = VARIANT.default,
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
) -> recipe_lib.RecipeFn:
  """FedADC's recipe (Algorithm 3; see the module docstring).

  The finalizer is the momentum rule
  (`fed_adc_momentum.build_fedadc_finalizer`); with beta_local > 0 the
  distributor broadcasts m_t with the model and the clients embed it
  (`fed_adc_momentum.embedded_momentum_hook`, plus
  `fed_adc_momentum.nesterov_look_ahead_hook` for the Nesterov variant),
  counting their steps H first; with beta_local = 0 (SlowMo) the model alone is
  broadcast. The client optimizer (SGD, or `LocalEmaMomentum` for
  Algorithm 4) is `recipe.assemble`'s; FedADC+ is `with_distillation` of
  this recipe. Arguments as for `build_fed_adc`.

  Raises:
    ValueError: If a hyper-parameter is out of range; the message names it.
  """
  checks.check_positive('client_learning_rate', client_learning_rate)
  BETA.check(beta)
  checks.check_positive('alpha', alpha)
  if beta_local is None:
    beta_local = beta
  BETA_LOCAL.check(beta_local)
  VARIANT.check(variant)
  objective = client_work_lib.LocalObjective()
  if beta_local > 0:
    objective = client_work_lib.LocalObjective(
        penalty=fed_adc_momentum.embedded_momentum_hook(beta_local),
        look_ahead=(fed_adc_momentum.nesterov_look_ahead_hook(beta_local)
                    if variant == 'nesterov' else None),
        count_steps=True)

  def recipe_fn(weights_type):
    finalizer = fed_adc_momentum.build_fedadc_finalizer(
        weights_type, client_learning_rate=client_learning_rate,
        beta_global=beta, beta_local=beta_local, alpha=alpha,
        learning_rate_schedule=client_lr_schedule)
    if beta_local > 0:
      distributor = distributors.with_finalizer_state(
          weights_type, finalizer.initialize.type_signature.result.member,
          fed_adc_momentum.momentum_broadcast)
    else:
      distributor = tff.learning.templates.build_broadcast_process(
          weights_type)
    return recipe_lib.from_built_parts(distributor, finalizer, objective,
                                       model_aggregator=model_aggregator)

  return recipe_fn


def with_distillation(base: recipe_lib.RecipeFn, *, distill_lambda: float,
                      temperature: float,
                      num_classes: int) -> recipe_lib.RecipeFn:
  """FedADC+: `base` with the self-confidence distillation loss.

  The base recipe's local objective keeps its penalty and look-ahead; its
  loss becomes `build_self_confidence_loss(distill_lambda,
  temperature)` (Eq. 7-9), with the client's label proportions
  (`losses.label_proportions`) as its statistics.
  """

  def distilled(weights_type):
    recipe = base(weights_type)
    return dataclasses.replace(recipe, objective=dataclasses.replace(
        recipe.objective,
        loss_fn_builder=build_self_confidence_loss(
            distill_lambda, temperature),
        client_stats_fn=functools.partial(losses.label_proportions,
                                          num_classes=num_classes)))

  return distilled


def build_fed_adc(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    client_learning_rate: float,
    beta: float,
    alpha: float = 1.0,
    beta_local: Optional[float] = None,
    variant: str = VARIANT.default,
    local_momentum: Optional[float] = None,
    distillation: bool = False,
    distill_lambda: float = DISTILL_LAMBDA.default,
    distill_temperature: float = DISTILL_TEMPERATURE.default,
    client_weighting: tff.learning.ClientWeighting = SPEC.client_weighting,
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
) -> tff.learning.templates.LearningProcess:
  """Builds a FedADC / FedADC+ `LearningProcess` (see the module docstring).

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel` (predictions = logits for FedADC+).
    client_learning_rate: eta, positive (round 0's when scheduled).
    beta: beta_global, in [0, 1).
    alpha: The server learning rate, positive (1 in the paper).
    beta_local: The share of m_t embedded in the local steps, in [0, 1);
      `beta` when `None`.
    variant: 'heavy_ball' (Algorithm 3, blue) or 'nesterov' (red).
    local_momentum: phi in (0, 1) for Algorithm 4 (double momentum); `None`
      or 0 for none (Algorithm 3).
    distillation: FedADC+ (self-confidence distillation).
    distill_lambda: lambda in [0, 1] (FedADC+).
    distill_temperature: tau > 0 (FedADC+).
    client_weighting: `UNIFORM` (the paper) or `NUM_EXAMPLES`.
    client_lr_schedule: Optional round number -> eta_t, used by clients and
      server alike.
    model_aggregator: Weighted aggregation factory for the deltas;
      `tff.aggregators.MeanFactory()` by default.

  Returns:
    A `tff.learning.templates.LearningProcess`; the global momentum is in
    `state.finalizer['momentum']` (so checkpoints carry it).

  Raises:
    ValueError: If a hyper-parameter is out of range; the message names it.
  """
  recipe_fn = fed_adc_recipe(
      client_learning_rate=client_learning_rate, beta=beta, alpha=alpha,
      beta_local=beta_local, variant=variant,
      client_lr_schedule=client_lr_schedule,
      model_aggregator=model_aggregator)
  if local_momentum is not None:
    LOCAL_MOMENTUM.check(local_momentum)
  if local_momentum is None or local_momentum == 0:  # Algorithm 3.
    client_optimizer = tff.learning.optimizers.build_sgdm(
        client_learning_rate, momentum=None)
  else:
    if variant != 'heavy_ball':
      raise ValueError('local_momentum (Algorithm 4, double momentum) takes '
                       "variant='heavy_ball', got variant="
                       f'{variant!r}.')
    client_optimizer = fed_adc_momentum.LocalEmaMomentum(
        client_learning_rate, momentum=local_momentum)
  if distillation:
    DISTILL_LAMBDA.check(distill_lambda)
    DISTILL_TEMPERATURE.check(distill_temperature)
    recipe_fn = with_distillation(
        recipe_fn, distill_lambda=distill_lambda,
        temperature=distill_temperature, num_classes=_common.num_classes_of(model_fn))
  return recipe_lib.assemble(model_fn, recipe_fn, client_optimizer,
                             client_weighting, client_lr_schedule)

