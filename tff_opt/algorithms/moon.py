"""MOON (Li, He & Song, "Model-Contrastive Federated Learning", CVPR 2021).

Round t broadcasts w_t. Client i, starting from w_t, takes its local steps
(its local epochs over its batches) on

    CE(f(x; w), y) + mu * l_con(z, z_glob, z_prev)

(`tff_opt.algorithms.moon_contrastive`: z, z_glob and z_prev the projection-head
outputs of the local model, of w_t and of the client's previous local
model w_i^{t-1}, l_con = -log(e^{sim(z, z_glob)/tau} / (e^{sim(z,
z_glob)/tau} + e^{sim(z, z_prev)/tau})), sim the cosine similarity), sends
its delta w_t - w_i^t and keeps w_i^t as its next previous model. The
server averages the deltas by example count (MOON's Algorithm 1, w^{t+1} =
sum_i |D^i|/|D| w_i^t, and its code's `fed_avg_freqs` over the round's
parties; uniform is an option) and applies its server optimizer (SGD with
learning rate 1 is MOON's, FedAvg's, step).

The FedADC paper's settings (Ozfatura et al., Section IV-A2): tau = 0.5
(the default here; MOON's too), mu grid-searched in [1, 5] (MOON's own
CIFAR-10 example uses mu = 5), client learning rate 0.01 and weight decay
1e-5, and a projection head, a 2-layer MLP with 256 outputs, on the CNNs
(`tasks.models_zoo`'s '<model>_proj' models; the model contract is
`moon_contrastive.projection_model`'s: a Keras layer named 'projection').

Choices written down (and tested):
- Client state: `{'initialized': bool, 'previous_model': the trainable
  weights of w_i^{t-1}}`, kept by the training loop (keyed by client id,
  checkpointed with the server state, as SCAFFOLD's c_i): memory and
  checkpoints grow by population x model size. It is written at the client
  after local training as w_t - Delta_i (the final local weights up to one
  float32 rounding of w_t).
- A client taking part for the first time uses w_t as its previous model.
  Then z_prev = z_glob and l_con is log 2 with zero gradient: its training
  is FedAvg's. This is what MOON's code does in its first round, for every
  party (its pool of previous models is still empty, so the logits have the
  positive column only and the loss is log 1 = 0). With partial
  participation MOON's code keeps one network per party, so a party first
  sampled after round 0 contrasts with its never-trained network (its own
  random initialisation, not w_0); a new client here contrasts with
  nothing. So with every client new MOON equals FedAvg exactly, for any mu.
- A client whose update is not finite is dropped from the mean (weight 0,
  zero delta; `client_work`); its previous model becomes w_t.
- Only the previous model's trainable weights are kept; its non-trainable
  ones (BN statistics) are taken from w_t when z_prev is computed.
- mu = 0 is FedAvg (the contrastive term is still computed, with weight 0).
- Communication is FedAvg's: the client's state never leaves it.
- MOON's code keeps a pool of `model_buffer_size` previous models, 1 by
  default (one negative pair); that default is the only one here.
"""

import collections
from collections.abc import Callable
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import tff_types
from tff_opt.algorithms import _common
from tff_opt.algorithms import hparams
from tff_opt.algorithms import moon_contrastive
from tff_opt.algorithms import recipe as recipe_lib
from tff_opt.round import client_states
from tff_opt.round import client_work as client_work_lib
from tff_opt.round import finalizers
from tff_opt.round import ground

PREVIOUS_MODEL_KEY = 'previous_model'


MOON_MU = hparams.HParam(
    'moon_mu', None, 'MOON weight mu of the model-contrastive loss, >= 0; '
    'needed by --algorithm=moon (the FedADC paper searches 1 to 5).',
    lower=0.0, needed=True, argument='mu')
MOON_TEMPERATURE = hparams.HParam(
    'moon_temperature', 0.5, 'MOON temperature tau of the cosine '
    'similarities, > 0.', lower=0.0, lower_open=True,
    argument='temperature')  # MOON's and the FedADC paper's tau.
SPEC = hparams.Spec(
    summary=('MOON (Li, He & Song, CVPR 2021): local loss CE + mu l_con '
             'contrasting the projection head\'s z with the global model\'s '
             '(positive) and the client\'s previous local model\'s '
             '(negative, client state kept by the training loop), cosine at '
             '--moon_temperature (--moon_mu); needs a model with a projection '
             'layer (--task_option=model=<name>_proj); server optimizer from '
             '--server_opt'),
    hparams=(MOON_MU, MOON_TEMPERATURE),
    client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES)  # FedAvg's.


def previous_trainable(broadcast):
  """w_i^{t-1}'s trainable weights, or w_t's for a client seen first."""
  state = broadcast.client_state
  own = list(state[PREVIOUS_MODEL_KEY])
  server = list(ground.model_weights_of(broadcast).trainable)
  return tf.cond(state[ground.INITIALIZED_KEY], lambda: own,
                 lambda: server)


def _client_state_update(client_input, update):
  """The client's final local weights, w_t - Delta_i, as its next state."""
  start = ground.model_weights_of(client_input).trainable
  return collections.OrderedDict([
      (ground.INITIALIZED_KEY, tf.constant(True)),
      (PREVIOUS_MODEL_KEY, [w - d for w, d in zip(start, update)]),
  ])


def moon_recipe(
    *,
    mu: float,
    temperature: float = MOON_TEMPERATURE.default,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    model_aggregator: Optional[tff.aggregators.WeightedAggregationFactory] = (
        None),
) -> recipe_lib.RecipeFn:
  """MOON's recipe (see the module docstring), for `recipe.assemble`.

  The distributor broadcasts w_t (paired at each client with its state);
  the local objective's loss is `moon_contrastive.moon_loss` with the previous
  model read from the client state (`previous_trainable`); the aggregator
  is the weighted mean of the deltas and the finalizer the server
  optimizer's step (FedAvg's with SGD at learning rate 1); the client keeps
  its final local weights (`_client_state_update`).

  Raises:
    ValueError: If `mu` is negative or `temperature` not positive (or
      either is not a finite number); the message names it.
  """
  MOON_MU.check(mu)
  MOON_TEMPERATURE.check(temperature)
  mu, temperature = float(mu), float(temperature)

  def recipe_fn(weights_type):
    _common.check_server_optimizer(server_optimizer_fn)
    initial_client_state = collections.OrderedDict([
        (ground.INITIALIZED_KEY, np.bool_(False)),
        (PREVIOUS_MODEL_KEY, tff_types.zeros_of(weights_type.trainable)),
    ])
    return recipe_lib.Recipe(
        work_broadcast_type=client_states.client_broadcast_type(
            weights_type, tff_types.type_of(initial_client_state)),
        distributor_fn=lambda _: (
            tff.learning.templates.build_broadcast_process(weights_type)),
        aggregator_fn=(model_aggregator or
                       tff.aggregators.MeanFactory()).create,
        finalizer_fn=lambda _: (
            finalizers.apply_optimizer(server_optimizer_fn, weights_type)),
        objective=client_work_lib.LocalObjective(
            loss_fn_builder=moon_contrastive.moon_loss(
                mu, temperature, previous_trainable)),
        initial_client_state=initial_client_state,
        client_state_update=_client_state_update)

  return recipe_fn


def build_moon(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    mu: float,
    temperature: float = MOON_TEMPERATURE.default,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting = SPEC.client_weighting,
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
) -> client_states.ClientStatefulProcess:
  """Builds a MOON process with per-client state (module docstring).

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel` made by
      `tff.learning.models.from_keras_model`, whose Keras model has a layer
      named 'projection' (the representation z; see
      `moon_contrastive.projection_model`) and whose loss is the supervised loss
      (cross-entropy).
    mu: The weight of the model-contrastive loss, >= 0 (0 is FedAvg; the
      FedADC paper searches [1, 5]).
    temperature: tau > 0 (0.5, MOON's and the FedADC paper's).
    client_optimizer_fn: The client's optimizer (SGD, lr 0.01 in the FedADC
      paper's MOON runs).
    server_optimizer_fn: The server's optimizer for the averaged delta;
      SGD with learning rate 1 is MOON's FedAvg step.
    client_weighting: `NUM_EXAMPLES` (default, MOON's) or `UNIFORM`.
    client_lr_schedule: Optional round number -> client learning rate.

  Returns:
    A `client_states.ClientStatefulProcess`: `next(state, datasets,
    client_states) -> (output, new_client_states)`; a client's state holds
    its previous local model under `'previous_model'`.

  Raises:
    ValueError: If `mu` is negative, `temperature` not positive (the
      message names it), or the model has no layer named 'projection'.
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
  """
  recipe_fn = moon_recipe(mu=mu, temperature=temperature,
                          server_optimizer_fn=server_optimizer_fn)
  moon_contrastive.check_projection_layer(model_fn)
  return recipe_lib.assemble(model_fn, recipe_fn, client_optimizer_fn,
                             client_weighting, client_lr_schedule)
