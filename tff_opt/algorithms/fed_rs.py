"""FedRS (Li & Zhan, "FedRS: Federated Learning with Restricted Softmax for
Label Distribution Non-IID Data", KDD 2021).

Client k holds the classes C_k of its own data. Starting from the broadcast
model w_t it minimises, with its client optimizer over its local epochs, the
cross-entropy of the restricted softmax

    L = CE(s * z, y),   s_c = 1 if c in C_k, alpha otherwise

so that the classes it never sees are pushed down less
(`tff_opt.round.losses.fed_rs_loss`, where the choices are written down:
the whole logit w_c . h + b_c is scaled, the hard 1/alpha form). The client
learns C_k in a pre-pass over its data (`losses.label_proportions`, as the
client's statistics: they never leave it). The server averages the deltas
by example count (the authors' code weighs each client by its number of
examples; uniform is an option) and applies its server optimizer, as FedOpt
does (SGD with learning rate 1 is FedAvg). alpha = 1, or a client holding
every class, is FedAvg. Evaluation uses the model's own (unrestricted)
logits.

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
  `losses.build_restricted_softmax_loss(alpha)` and its client statistics
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
          loss_fn_builder=losses.build_restricted_softmax_loss(alpha),
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
