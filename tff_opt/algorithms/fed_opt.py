"""FedOpt (Reddi et al., "Adaptive Federated Optimization", Algorithm 1).

Each round t, every sampled client k starts from the global model x_t and
runs its client optimizer (SGD in the paper) over its local epochs; the server
forms the example-weighted mean of the client deltas (Algorithm 5; uniform
weighting is an option),

    Delta_t = sum_k n_k (x_k - x_t) / sum_k n_k,

and hands -Delta_t, as a pseudo-gradient, to its server optimizer:

    FedAvg      SGD, server learning rate 1     x_{t+1} = x_t + Delta_t
    FedAvgM     SGD with momentum (0.9)
    FedAdagrad, FedAdam, FedYogi   `tff_opt.round.optimizers` (Algorithm 2)

The client learning rate may follow a schedule (`tff_opt.round.schedules`, e.g.
the paper's staircase ExpDecay). A round whose aggregate is not finite is
rejected by the finalizer: model and server-optimizer state stay as they
were, and the finalizer reports `update_non_finite = 1`. A model's
non-trainable variables (BN moving statistics) become the clients'
weighted mean of theirs, with the deltas' weights, set directly rather
than through the server optimizer, and kept on a rejected round
(`recipe.with_shared_non_trainables`).
"""

import functools
from collections.abc import Callable
from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.algorithms import hparams
from tff_opt.algorithms import recipe


SPEC = hparams.Spec(
    summary=('FedOpt (Reddi et al.): client SGD, server optimizer from '
             '--server_opt (sgd = FedAvg, sgdm = FedAvgM, adagrad/adam/yogi '
             '= FedAdagrad/FedAdam/FedYogi)'),
    client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES)  # Alg. 5.


def fed_opt_recipe(
    *,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
) -> recipe.RecipeFn:
  """FedOpt's recipe (`recipe.penalized_fed_opt` without a penalty)."""
  return functools.partial(
      recipe.penalized_fed_opt,
      distributor_fn=tff.learning.templates.build_broadcast_process,
      penalty=None, server_optimizer_fn=server_optimizer_fn,
      model_aggregator=model_aggregator)


def build_fed_opt(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting = SPEC.client_weighting,
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
) -> tff.learning.templates.LearningProcess:
  """Builds a FedOpt `LearningProcess`.

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel` on each call.
    client_optimizer_fn: The client's `tff.learning.optimizers.Optimizer`
      (e.g. `tff.learning.optimizers.build_sgdm(0.1)`).
    server_optimizer_fn: The server's optimizer, applied to the averaged
      pseudo-gradient (e.g. `tff_opt.round.optimizers.build_fed_yogi(0.01)`).
    client_weighting: `tff.learning.ClientWeighting.NUM_EXAMPLES` (the
      paper's Algorithm 5) or `UNIFORM`.
    client_lr_schedule: Optional round number -> client learning rate.
    model_aggregator: Weighted aggregation factory for the deltas;
      `tff.aggregators.MeanFactory()` by default.

  Returns:
    A `tff.learning.templates.LearningProcess`. `next(state, datasets)` takes
    a list of client `tf.data.Dataset`s, already batched and repeated for the
    local epochs.

  Raises:
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
  """
  recipe_fn = fed_opt_recipe(server_optimizer_fn=server_optimizer_fn,
                             model_aggregator=model_aggregator)
  return recipe.assemble(model_fn, recipe_fn, client_optimizer_fn,
                         client_weighting, client_lr_schedule)
