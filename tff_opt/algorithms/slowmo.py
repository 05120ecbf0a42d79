"""SlowMo / FedAvgM as FedADC's baseline (Algorithm 2 of the FedADC paper).

Clients run plain local SGD from w_t and send Delta_k = w_t - w_k; the server

    g_bar   = (1 / |S|) sum_k Delta_k / eta_t
    m_{t+1} = beta * m_t + g_bar
    w_{t+1} = w_t - alpha * eta_t * m_{t+1}

This is FedADC's server rule with beta_local = 0 (nothing embedded in the
local steps; beta_global = beta), so it is built by `build_fed_adc` (the
recipe `fed_adc.fed_adc_recipe(beta_local=0)`, assembled by
`recipe.assemble`). With a
constant eta it is also FedOpt with server SGD with momentum (learning rate
alpha, momentum beta) on the mean delta, because TFF's momentum buffer is
eta * m_t; with a client learning-rate schedule the two differ (SlowMo's
momentum is in units of Delta / eta_t), which is why SlowMo is not simply
`build_fed_opt` with `sgdm`. Both identities are tested.

Choices: uniform client weighting (as Algorithm 2 writes it) by default,
example weighting as an option; alpha = 1 as in the paper's experiments.
"""

from collections.abc import Callable
from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.algorithms import fed_adc
from tff_opt.algorithms import hparams


BETA = hparams.SLOWMO_BETA
SPEC = hparams.Spec(
    summary=('SlowMo / FedAvgM (FedADC paper Algorithm 2): local SGD, server '
             'momentum --slowmo_beta in units of Delta / eta, alpha = 1 '
             '(--server_opt/--server_lr unused)'),
    hparams=(BETA,),
    # The FedADC paper's Algorithm 2: (1/|S|) sum.
    client_weighting=tff.learning.ClientWeighting.UNIFORM,
    server_rule='own')


def build_slowmo(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    client_learning_rate: float,
    beta: float,
    alpha: float = 1.0,
    client_weighting: tff.learning.ClientWeighting = SPEC.client_weighting,
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
) -> tff.learning.templates.LearningProcess:
  """Builds a SlowMo `LearningProcess`.

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel`.
    client_learning_rate: eta, positive.
    beta: The server momentum, in [0, 1).
    alpha: The server learning rate, positive.
    client_weighting: `UNIFORM` (the paper) or `NUM_EXAMPLES`.
    client_lr_schedule: Optional round number -> eta_t.
    model_aggregator: Weighted aggregation factory for the deltas.

  Returns:
    A `tff.learning.templates.LearningProcess`; the momentum is in
    `state.finalizer['momentum']`.

  Raises:
    ValueError: If a hyper-parameter is out of range; the message names it.
  """
  return fed_adc.build_fed_adc(
      model_fn,
      client_learning_rate=client_learning_rate,
      beta=beta,
      alpha=alpha,
      beta_local=0.0,
      client_weighting=client_weighting,
      client_lr_schedule=client_lr_schedule,
      model_aggregator=model_aggregator)
