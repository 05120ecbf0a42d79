"""FedNTD (Lee et al., "Preservation of the Global Knowledge by Not-True
Distillation in Federated Learning", NeurIPS 2022).

Client k starts from the broadcast model w_t and minimises, with its client
optimizer over its local epochs,

    L = CE(z, y) + beta * tau^2 * (1/N) sum_n KL(q~^tau(z_g) || q~^tau(z))

where z_g are the logits of w_t (the teacher, fixed during the round) and
q~^tau the softmax at temperature tau over the C - 1 not-true classes only
(the true class's logit removed); the second term without beta is L_NTD
(`fed_ntd_loss`; the tau^2 factor of the authors' code and the batch mean
are `losses.distillation_kl`'s, written down in `tff_opt.round.losses`,
with that module's notation). The server averages
the deltas by example count (the authors' code weighs each client by its
data size; uniform is an option) and applies its server optimizer, as
FedOpt does (SGD with learning rate 1 is FedAvg's x_{t+1} = mean of the
client models). beta = 0 is FedAvg.

Settings of the FedADC paper (Ozfatura et al., Section IV-A4): tau = 1,
beta = 0.3 (the defaults here), local momentum 0.9 -- the latter is the
client optimizer's (`client_optimizer_fn`, e.g. SGD with momentum 0.9, its
state reset each round), not a hyper-parameter of this module. The model's
predictions must be logits and its loss the cross-entropy on them.
"""

import functools
from collections.abc import Callable
from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.algorithms import hparams
from tff_opt.algorithms import recipe as recipe_lib
from tff_opt.round import client_work as client_work_lib
from tff_opt.round import ground
from tff_opt.round import losses



NTD_BETA = hparams.HParam(
    'fedntd_beta', 0.3, 'FedNTD weight beta of the not-true distillation, >= 0 '
    '(0: FedAvg).', lower=0.0, argument='beta',
    aliases=('ntd_beta',))  # FedADC paper, Section IV-A4.
NTD_TEMPERATURE = hparams.HParam(
    'fedntd_temperature', 1.0, 'FedNTD temperature tau, > 0.', lower=0.0,
    lower_open=True, argument='temperature',
    aliases=('ntd_temperature',))  # Ibid.
SPEC = hparams.Spec(
    summary=('FedNTD (Lee et al., NeurIPS 2022): local loss CE + beta tau^2 '
             'KL over the not-true classes, the broadcast model the teacher '
             '(--fedntd_beta, --fedntd_temperature), server optimizer from '
             '--server_opt'),
    hparams=(NTD_BETA, NTD_TEMPERATURE),
    client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES)  # FedAvg's.


def not_true_logits(logits, labels) -> tf.Tensor:
  """The [N, C - 1] logits of the not-true classes (the true one removed).

  The classes keep their order; row n drops column y_n.
  """
  logits, labels = losses.flat_logits_and_labels(logits, labels)
  num_classes = logits.shape[-1]
  keep = tf.logical_not(tf.cast(tf.one_hot(labels, num_classes), tf.bool))
  return tf.reshape(tf.boolean_mask(logits, keep), [-1, num_classes - 1])


def not_true_distillation(logits, teacher_logits, labels,
                          temperature) -> tf.Tensor:
  """FedNTD's L_NTD: tau^2 * (1/N) sum_n KL(q~^tau(z_g) || q~^tau(z))."""
  return losses.distillation_kl(not_true_logits(teacher_logits, labels),
                                not_true_logits(logits, labels), temperature)


def fed_ntd_loss(logits, teacher_logits, labels, *, beta, temperature,
                 ce: Optional[tf.Tensor] = None) -> tf.Tensor:
  """FedNTD: CE(z, y) + beta * L_NTD (module docstring).

  Args:
    logits: [..., C] student logits z.
    teacher_logits: [..., C] logits z_g of the global model.
    labels: [...] integer true labels y.
    beta: The weight of the not-true distillation, >= 0.
    temperature: tau > 0.
    ce: The cross-entropy term when already computed (the model's own
      loss); `losses.cross_entropy(logits, labels)` when `None`.
  """
  if ce is None:
    ce = losses.cross_entropy(logits, labels)
  return ce + beta * not_true_distillation(logits, teacher_logits, labels,
                                           temperature)


def build_ntd_loss(beta: float, temperature: float) -> losses.LossFnBuilder:
  """FedNTD's `loss_fn_builder`: `fed_ntd_loss`, teacher = broadcast w_t.

  The built `loss_fn(model, batch, output, broadcast, context)` evaluates a
  teacher copy of the model holding the broadcast weights on the batch and
  adds beta * L_NTD to `output.loss`.
  """

  def builder(model_fn):
    teacher, teacher_weights = losses.teacher_copy(model_fn)

    def loss_fn(model, batch, output, broadcast, context):
      del model, context
      losses.assign_weights(teacher_weights, ground.model_weights_of(broadcast))
      x, y = ground.features_and_labels(batch)
      teacher_logits = teacher.predict_on_batch(x, training=False)
      return fed_ntd_loss(output.predictions, teacher_logits, y, beta=beta,
                          temperature=temperature, ce=output.loss)

    return loss_fn

  return builder


def fed_ntd_recipe(
    *,
    beta: float = NTD_BETA.default,
    temperature: float = NTD_TEMPERATURE.default,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
) -> recipe_lib.RecipeFn:
  """FedNTD's recipe: FedOpt's round with `build_ntd_loss`.

  `recipe.penalized_fed_opt` (model broadcast, mean delta, server
  optimizer) without a penalty; its local objective's loss hook is the
  not-true distillation with the broadcast model as teacher. Arguments as
  for `build_fed_ntd`.

  Raises:
    ValueError: If a hyper-parameter is out of range; the message names it.
  """
  NTD_BETA.check(beta)
  NTD_TEMPERATURE.check(temperature)
  return functools.partial(
      recipe_lib.penalized_fed_opt,
      distributor_fn=tff.learning.templates.build_broadcast_process,
      objective=client_work_lib.LocalObjective(
          loss_fn_builder=build_ntd_loss(beta, temperature)),
      server_optimizer_fn=server_optimizer_fn,
      model_aggregator=model_aggregator)


def build_fed_ntd(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    beta: float = NTD_BETA.default,
    temperature: float = NTD_TEMPERATURE.default,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting = SPEC.client_weighting,
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
) -> tff.learning.templates.LearningProcess:
  """Builds a FedNTD `LearningProcess` (see the module docstring).

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel` whose predictions are logits.
    beta: The weight of the not-true distillation term, >= 0 (0 is FedAvg).
    temperature: tau > 0.
    client_optimizer_fn: The client's `tff.learning.optimizers.Optimizer`
      (the FedADC paper: SGD with momentum 0.9).
    server_optimizer_fn: The server's optimizer, applied to the mean delta
      (SGD with learning rate 1 is FedAvg).
    client_weighting: `NUM_EXAMPLES` (default, the authors' code) or
      `UNIFORM`.
    client_lr_schedule: Optional round number -> client learning rate.
    model_aggregator: Weighted aggregation factory for the deltas;
      `tff.aggregators.MeanFactory()` by default.

  Returns:
    A `tff.learning.templates.LearningProcess`; it broadcasts the model
    alone and receives the delta alone, as FedAvg does.

  Raises:
    ValueError: If `beta` is negative or `temperature` not positive (or
      either not a finite number); the message names it.
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
  """
  recipe_fn = fed_ntd_recipe(beta=beta, temperature=temperature,
                             server_optimizer_fn=server_optimizer_fn,
                             model_aggregator=model_aggregator)
  return recipe_lib.assemble(model_fn, recipe_fn, client_optimizer_fn,
                             client_weighting, client_lr_schedule)
