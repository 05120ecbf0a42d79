"""FedRS (Li & Zhan, "FedRS: Federated Learning with Restricted Softmax for
Label Distribution Non-IID Data", KDD 2021).

Client k holds the classes C_k of its own data. Starting from the broadcast
model w_t it minimises, with its client optimizer over its local epochs, the
cross-entropy of the restricted softmax

    L = CE(s * z, y),   s_c = 1 if c in C_k, alpha otherwise

so that the classes it never sees are pushed down less
(`fed_rs_loss`, notation of `tff_opt.round.losses`; the choice is written
down below). The client
learns C_k in a pre-pass over its data (`losses.label_proportions`, as the
client's statistics: they never leave it). The server averages the deltas
by example count (the authors' code weighs each client by its number of
examples; uniform is an option) and applies its server optimizer, as FedOpt
does (SGD with learning rate 1 is FedAvg). alpha = 1, or a client holding
every class, is FedAvg. Evaluation uses the model's own (unrestricted)
logits.

Choice written down (tested in `tests/test_losses.py`): FedRS scales the
whole logit z_c = w_c . h + b_c of a missing class. The paper writes the
restricted softmax for a final layer without bias,
exp(alpha_c w_c . h) / sum_j exp(alpha_j w_j . h), i.e. it scales the
classifier's weight vector w_c; for a bias-free final layer the two are
the same, and with a bias this scales the augmented vector (w_c, b_c)
acting on (h, 1). Only logits are visible to a loss hook (any
`VariableModel`), hence this form. A class is held when the client's label
statistics give it a positive share; the hard 1/alpha choice is the
paper's (and the FedADC paper's description); the authors' FedRepo code
also has a proportional variant, alpha + (1 - alpha) * n_c / max_j n_j,
which is not used.

Settings of the FedADC paper (Ozfatura et al., Section IV-A1): alpha = 0.5
(the default here) and local momentum 0.9 (the client optimizer's,
`client_optimizer_fn`); FedRS runs there in the sort-and-partition
experiments only. The model's predictions must be logits.
"""

import functools
from collections.abc import Callable
from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import checks
from tff_opt.algorithms import _common
from tff_opt.algorithms import hparams
from tff_opt.algorithms import recipe as recipe_lib
from tff_opt.round import client_work as client_work_lib
from tff_opt.round import ground
from tff_opt.round import losses



FEDRS_ALPHA = hparams.HParam(
    'fedrs_alpha', 0.5, 'FedRS scale of the logits of the classes a client '
    'lacks, in [0, 1] (1: FedAvg).', lower=0.0,
    upper=1.0, argument='alpha')  # FedADC paper, Section IV-A1.
SPEC = hparams.Spec(
    summary=('FedRS (Li & Zhan, KDD 2021): restricted softmax, the logits '
             'of the classes a client lacks scaled by --fedrs_alpha, server '
             'optimizer from --server_opt'),
    hparams=(FEDRS_ALPHA,),
    client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES)  # FedAvg's.


def restricted_logits(logits, present, alpha) -> tf.Tensor:
  """FedRS's s * z: logits of the classes not `present` scaled by alpha.

  Args:
    logits: [..., C] logits z.
    present: [C] bool, the classes the client holds.
    alpha: The scale of the other classes, in [0, 1].
  """
  logits = tf.convert_to_tensor(logits)
  scale = tf.where(tf.cast(present, tf.bool), tf.ones([], logits.dtype),
                   tf.cast(alpha, logits.dtype))
  return logits * scale


def present_classes(label_stats) -> tf.Tensor:
  """[C] bool: the classes with a positive count (or share) in the stats."""
  return tf.convert_to_tensor(label_stats) > 0


def fed_rs_loss(logits, labels, present, *, alpha) -> tf.Tensor:
  """FedRS: CE(s * z, y), s_c = 1 for the `present` classes, else alpha."""
  return losses.cross_entropy(restricted_logits(logits, present, alpha), labels)


def build_restricted_softmax_loss(alpha: float) -> losses.LossFnBuilder:
  """FedRS's `loss_fn_builder`: `fed_rs_loss` on the client's classes.

  The classes the client holds are read from `context['client_stats']`, a
  [C] vector of its label counts or shares (`present_classes`), which the
  recipe's `client_stats_fn` computes in a pre-pass over its data.
  """

  def builder(model_fn):
    del model_fn

    def loss_fn(model, batch, output, broadcast, context):
      del model, broadcast
      _, y = ground.features_and_labels(batch)
      present = present_classes(context[ground.CLIENT_STATS_KEY])
      return fed_rs_loss(output.predictions, y, present, alpha=alpha)

    return loss_fn

  return builder


def fed_rs_recipe(
    *,
    alpha: float = FEDRS_ALPHA.default,
    num_classes: int,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
) -> recipe_lib.RecipeFn:
  """FedRS's recipe: FedOpt's round with the restricted-softmax loss.

  `recipe.penalized_fed_opt` (model broadcast, mean delta, server
  optimizer) without a penalty; the local objective's loss hook is
  `build_restricted_softmax_loss(alpha)` and its client statistics
  the client's label proportions over `num_classes` classes.

  Args:
    alpha: The scale of the missing classes' logits, in [0, 1].
    num_classes: The model's number of classes, >= 2.
    server_optimizer_fn: The server's optimizer.
    model_aggregator: Weighted aggregation factory for the deltas.

  Raises:
    ValueError: If a hyper-parameter is out of range; the message names it.
  """
  FEDRS_ALPHA.check(alpha)
  checks.check_int('num_classes', num_classes, minimum=2)
  return functools.partial(
      recipe_lib.penalized_fed_opt,
      distributor_fn=tff.learning.templates.build_broadcast_process,
      objective=client_work_lib.LocalObjective(
          loss_fn_builder=build_restricted_softmax_loss(alpha),
          client_stats_fn=functools.partial(losses.label_proportions,
                                            num_classes=num_classes)),
      server_optimizer_fn=server_optimizer_fn,
      model_aggregator=model_aggregator)


def build_fed_rs(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    alpha: float = FEDRS_ALPHA.default,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting = SPEC.client_weighting,
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
) -> tff.learning.templates.LearningProcess:
  """Builds a FedRS `LearningProcess` (see the module docstring).

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel` whose predictions are logits (its
      last axis is the classes).
    alpha: The scale of the logits of the classes a client does not hold,
      in [0, 1] (1 is FedAvg).
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
    ValueError: If `alpha` is not in [0, 1]; the message names it.
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
  """
  FEDRS_ALPHA.check(alpha)
  recipe_fn = fed_rs_recipe(alpha=alpha, num_classes=_common.num_classes_of(model_fn),
                            server_optimizer_fn=server_optimizer_fn,
                            model_aggregator=model_aggregator)
  return recipe_lib.assemble(model_fn, recipe_fn, client_optimizer_fn,
                             client_weighting, client_lr_schedule)
