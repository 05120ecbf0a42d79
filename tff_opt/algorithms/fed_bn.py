"""FedBN (Li et al., "FedBN: Federated Learning on Non-IID Features via Local
Batch Normalization"), on top of FedAvg/FedOpt, FedProx, FedFOR, FedCurv or
FedDyn.

Every batch-normalization layer stays local: its variables never leave the
client and are never averaged; every other variable is trained and
aggregated exactly as the base algorithm does. The FedFOR paper's
covariate-shift tables run "X + FedBN" this way for X in FedProx, FedDyn,
FedCurv and FedFOR.

Which variables: all four of every BN layer, gamma and beta (trainable) and
the moving mean and variance (non-trainable), as in FedBN. They are found
through the Keras model of a `VariableModel` made by
`tff.learning.models.from_keras_model`: every layer (nested ones included)
that is an instance of a class named `BatchNormalization` (Keras's, and its
subclasses), matched to the model's trainable and non-trainable variables by
identity. A model with no such layer, or not built from Keras, is refused
with a ValueError.

One round, client k (its state `{'batch_norm': {'initialized', 'trainable',
'non_trainable'}}`, plus `'base'`, the base algorithm's client state, when the
base has one; kept and checkpointed by the training loop):

1. It receives the base's broadcast; in every model in it (w_t, and FedFOR's
   w_{t-1}) the BN entries are replaced by its own BN values. A client seen
   for the first time keeps the global ones (the server's, see below).
2. It trains as the base does: the base's penalty sees those models, so
   FedProx's and FedDyn's anchors for BN parameters are the client's own
   BN values, FedFOR's d = w_{t-1} - w_t is 0 on them, and FedCurv's u, v
   are 0 there (nothing of them is ever sent).
3. Before sending, the BN coordinates of every entry of its update shaped
   like the trainable weights (the delta; FedCurv's F_k and F_k * w_k) are
   set to 0, and its final BN values (read from the model after the last
   local step, moving statistics included) are kept as its new state. The
   base's client state (FedDyn's g_k) is updated from what is sent, so its
   BN coordinates stay 0 (FedDyn's penalty on BN parameters is then the
   proximal term alone).

Server: the aggregate's BN coordinates are 0 (a zero pseudo-gradient), so
with every server optimizer here (SGD, momentum, Adagrad, Adam, Yogi, all
starting from zero moments) and FedDyn's h the server's BN trainables keep
their initial values. Every other algorithm of the package averages the
model's non-trainable variables, BN moving statistics included
(`recipe.with_shared_non_trainables`); FedBN names its BN statistics in
the recipe's `local_non_trainables`, so they are neither sent nor
averaged and the server's keep their initial values too (a non-BN
non-trainable variable, if a model had one, would still be averaged). The
"global BN" a new client starts from is therefore the initial model's.

Evaluation: the global model (`get_model_weights`) carries those initial BN
values (gamma = 1, beta = 0, mean = 0, variance = 1 for Keras's defaults),
and the training binary evaluates it as it is: its `eval_*` metrics are of
the shared layers with untrained BN. FedBN's paper instead evaluates each
client with its own BN (a personalised evaluation); the client states hold
what that needs (`local_batch_norm_weights` puts one client's BN values into
the global model) but the binary does not run it.

Choices written down (and tested):
- A client whose update is not finite (dropped by the client work) keeps
  the BN values it started the round from.
- `bytes_client_to_server` counts the delta's BN entries, sent as zeros
  (they could be left out: an over-count by the BN parameters' bytes).
- Bases: any stateless recipe; the binary runs it over `fedopt`,
  `fedprox`, `fedfor`, `fedcurv` (`fed_curv.stateless_recipe`: Eq. 3's
  `cross_silo` is not supported) and `feddyn`, the registry's entries
  that name a FedBN recipe (`tff_opt.program.registry`).

How: FedBN is a transformation of a recipe (`with_local_batch_norm`, any
`recipe.Recipe`), not a re-encoding of each base. `build_fed_bn` takes the
base's recipe function (e.g. `fed_prox.fed_prox_recipe`), hands it the
base's hyper-parameters (which it checks: the names it takes are FedBN's,
`hparam_names`), wraps the recipe and assembles it with `recipe.assemble`.
"""

import collections
import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import tff_types
from tff_opt.algorithms import recipe as recipe_lib
from tff_opt.round import client_states
from tff_opt.round import ground

BATCH_NORM_KEY = 'batch_norm'
BASE_KEY = 'base'
TRAINABLE_KEY = 'trainable'
NON_TRAINABLE_KEY = 'non_trainable'
# The update entry with the client's final BN values (never sent).
LOCAL_KEY = 'local_batch_norm'
FINITE_KEY = 'finite'


@dataclasses.dataclass(frozen=True)
class BatchNormVariables:
  """Where a model's batch-norm variables are in its `ModelWeights`.

  Attributes:
    trainable: Indices into `ModelWeights.trainable` (gamma, beta).
    non_trainable: Indices into `ModelWeights.non_trainable` (moving mean
      and variance).
    names: The variables' names, trainable ones first.
  """
  trainable: tuple[int, ...]
  non_trainable: tuple[int, ...]
  names: tuple[str, ...]


def _is_batch_norm(layer) -> bool:
  return any(cls.__name__ == 'BatchNormalization'
             for cls in type(layer).__mro__)


def find_batch_norm_variables(
    model_fn: Callable[[], tff.learning.models.VariableModel]
) -> BatchNormVariables:
  """Finds the variables of the model's BN layers (module docstring).

  Args:
    model_fn: A no-arg callable returning a `VariableModel` made by
      `tff.learning.models.from_keras_model`.

  Returns:
    A `BatchNormVariables`.

  Raises:
    ValueError: If the model has no Keras model or no BatchNormalization
      layer.
  """
  with tf.Graph().as_default():
    model = model_fn()
    keras_model = getattr(model, '_keras_model', None)
    if not isinstance(keras_model, tf.keras.Model):
      raise ValueError(
          'FedBN finds batch-norm layers in the Keras model of a VariableModel '
          'made by tff.learning.models.from_keras_model; got a '
          f'{type(model).__name__} without one.')
    layers = [m for m in keras_model.submodules if _is_batch_norm(m)]
    refs = {v.ref() for layer in layers for v in layer.variables}
    trainable = tuple(i for i, v in enumerate(model.trainable_variables)
                      if v.ref() in refs)
    non_trainable = tuple(
        i for i, v in enumerate(model.non_trainable_variables)
        if v.ref() in refs)
    names = tuple([model.trainable_variables[i].name for i in trainable] +
                  [model.non_trainable_variables[i].name
                   for i in non_trainable])
  if not trainable and not non_trainable:
    raise ValueError('FedBN needs a model with a BatchNormalization layer; '
                     f'the model {keras_model.name!r} has none.')
  return BatchNormVariables(trainable, non_trainable, names)


def local_batch_norm_weights(
    model_weights: tff.learning.models.ModelWeights, client_state: Any,
    variables: BatchNormVariables) -> tff.learning.models.ModelWeights:
  """The global model with one client's own BN values (NumPy).

  Args:
    model_weights: The global model's weights.
    client_state: A FedBN client state (`{'batch_norm': ...}`).
    variables: From `find_batch_norm_variables`.

  Returns:
    `ModelWeights` whose BN entries are the client's (the global ones when
    the client has none yet).
  """
  own = client_state[BATCH_NORM_KEY]
  if not bool(np.asarray(own[ground.INITIALIZED_KEY])):
    return model_weights
  trainable = list(model_weights.trainable)
  non_trainable = list(model_weights.non_trainable)
  for value, i in zip(own[TRAINABLE_KEY], variables.trainable):
    trainable[i] = np.asarray(value)
  for value, i in zip(own[NON_TRAINABLE_KEY], variables.non_trainable):
    non_trainable[i] = np.asarray(value)
  return tff.learning.models.ModelWeights(trainable, non_trainable)


# --- FedBN as a transformation of a base recipe ------------------------------


def _bn_entries(model_weights, variables):
  return collections.OrderedDict([
      (TRAINABLE_KEY, [model_weights.trainable[i]
                       for i in variables.trainable]),
      (NON_TRAINABLE_KEY, [model_weights.non_trainable[i]
                           for i in variables.non_trainable]),
  ])


def _with_own_batch_norm(value, own, variables):
  """Every `ModelWeights` inside `value` with the client's BN entries."""
  if isinstance(value, tff.learning.models.ModelWeights):
    initialized = own[ground.INITIALIZED_KEY]
    trainable = list(value.trainable)
    non_trainable = list(value.non_trainable)
    for mine, i in zip(own[TRAINABLE_KEY], variables.trainable):
      trainable[i] = tf.where(initialized, mine, trainable[i])
    for mine, i in zip(own[NON_TRAINABLE_KEY], variables.non_trainable):
      non_trainable[i] = tf.where(initialized, mine, non_trainable[i])
    return tff.learning.models.ModelWeights(trainable, non_trainable)
  if hasattr(value, '_fields'):  # A broadcast NamedTuple (`ground`).
    return type(value)(*(_with_own_batch_norm(v, own, variables)
                         for v in value))
  return value


def _mask(value, variables, num_trainable):
  """Zeroes the BN coordinates of a list shaped like the trainables."""
  if isinstance(value, (list, tuple)) and len(value) == num_trainable:
    return [tf.zeros_like(t) if i in variables.trainable else t
            for i, t in enumerate(value)]
  return value


def with_local_batch_norm(base: recipe_lib.Recipe, weights_type: tff.Type,
                          variables: BatchNormVariables) -> recipe_lib.Recipe:
  """The FedBN recipe over `base` (see the module docstring).

  Args:
    base: The base algorithm's recipe.
    weights_type: The model's `ModelWeights` type.
    variables: The BN variables, from `find_batch_norm_variables`.

  Returns:
    A `recipe.Recipe` with client state.
  """
  # Over 80 lines with its docstring: the wrapped round's computations
  # share the types read here and are read in one place.
  if base.to_server is not None:
    raise ValueError('FedBN cannot wrap a recipe that already maps its '
                     'update before sending it.')
  num_trainable = len(weights_type.trainable)
  bn_state = collections.OrderedDict([
      (ground.INITIALIZED_KEY, np.bool_(False)),
      (TRAINABLE_KEY, [tff_types.zeros_of(weights_type.trainable[i])
                       for i in variables.trainable]),
      (NON_TRAINABLE_KEY, [tff_types.zeros_of(weights_type.non_trainable[i])
                           for i in variables.non_trainable]),
  ])
  stateful_base = base.initial_client_state is not None
  initial_state = collections.OrderedDict([(BATCH_NORM_KEY, bn_state)])
  if stateful_base:
    initial_state[BASE_KEY] = base.initial_client_state

  def client_input_fn(broadcast, state):
    received = _with_own_batch_norm(broadcast, state[BATCH_NORM_KEY],
                                    variables)
    if not stateful_base:
      return received
    if base.client_input_fn is not None:
      return base.client_input_fn(received, state[BASE_KEY])
    return ground.ClientInput(received, state[BASE_KEY])

  base_report_fn = base.passes.report_fn

  def report_fn(model, dataset, broadcast, **kwargs):
    extras = collections.OrderedDict()
    if base_report_fn is not None:
      extras.update(base_report_fn(model, dataset, broadcast, **kwargs))
    weights = tff.learning.models.ModelWeights.from_model(model)
    local = _bn_entries(
        tf.nest.map_structure(lambda v: v.read_value(), weights), variables)
    local[FINITE_KEY] = tf.constant(1.0)
    extras[LOCAL_KEY] = local
    return extras

  def to_server(update):
    sent = [(k, _mask(v, variables, num_trainable))
            for k, v in update.items() if k != LOCAL_KEY]
    if len(sent) == 1:  # The base sends its delta alone.
      return sent[0][1]
    return collections.OrderedDict(sent)

  def client_state_update(client_input, update):
    local = update[LOCAL_KEY]
    start = _bn_entries(ground.model_weights_of(client_input), variables)
    finite = local[FINITE_KEY] > 0
    new_state = collections.OrderedDict([(BATCH_NORM_KEY,
                                          collections.OrderedDict([
        (ground.INITIALIZED_KEY, tf.constant(True)),
        (TRAINABLE_KEY, [tf.where(finite, a, b) for a, b in zip(
            local[TRAINABLE_KEY], start[TRAINABLE_KEY])]),
        (NON_TRAINABLE_KEY, [tf.where(finite, a, b) for a, b in zip(
            local[NON_TRAINABLE_KEY], start[NON_TRAINABLE_KEY])]),
    ]))])
    if stateful_base:
      new_state[BASE_KEY] = base.client_state_update(
          client_input, to_server(update))
    return new_state

  return dataclasses.replace(
      base,
      passes=base.passes.with_report(report_fn),
      initial_client_state=initial_state,
      client_state_update=client_state_update,
      client_input_fn=client_input_fn,
      to_server=to_server,
      local_non_trainables=tuple(sorted(
          set(base.local_non_trainables) | set(variables.non_trainable))))


# --- The base algorithm's recipe ---------------------------------------------


def hparam_names(base_recipe: Callable[..., recipe_lib.RecipeFn]
                 ) -> tuple[tuple[str, ...], tuple[str, ...]]:
  """The hyper-parameters FedBN passes to `base_recipe`.

  Returns:
    `(required, optional)`: its keyword arguments but the server optimizer,
    those without a default and those with one (FedCurv's `client_epochs`,
    FedFOR's `grad_at_zero`, which keep their defaults when not given).
  """
  arguments = [p for p in inspect.signature(base_recipe).parameters.values()
               if p.kind == p.KEYWORD_ONLY and p.name != 'server_optimizer_fn']
  return (tuple(p.name for p in arguments if p.default is p.empty),
          tuple(p.name for p in arguments if p.default is not p.empty))


def _base_recipe_fn(base_recipe, hparams, server_optimizer_fn):
  """The base's recipe function; the base's recipe checks the values."""
  expected, optional = hparam_names(base_recipe)
  if not set(expected) <= set(hparams) <= set(expected) | set(optional):
    also = f' (optional: {", ".join(optional)})' if optional else ''
    raise ValueError(
        f'FedBN over {base_recipe.__name__} takes the hyper-parameters '
        f'{", ".join(expected) or "(none)"}{also}; got '
        f'{", ".join(sorted(hparams)) or "(none)"}.')
  return base_recipe(server_optimizer_fn=server_optimizer_fn, **hparams)


def build_fed_bn(
    base: Callable[..., recipe_lib.RecipeFn],
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting,
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    **base_hparams,
) -> client_states.ClientStatefulProcess:
  """Builds `base` + FedBN: BN layers local to each client (module docstring).

  Args:
    base: The base algorithm's recipe function, which takes its
      hyper-parameters and `server_optimizer_fn` as keyword arguments and
      returns a stateless `recipe.RecipeFn`: `fed_opt.fed_opt_recipe`,
      `fed_prox.fed_prox_recipe`, `fed_for.fed_for_recipe`,
      `fed_curv.stateless_recipe` or `fed_dyn.fed_dyn_recipe`.
    model_fn: A no-arg callable returning a new `VariableModel` made by
      `tff.learning.models.from_keras_model`, with BatchNormalization.
    client_optimizer_fn: The client's optimizer.
    server_optimizer_fn: The server's optimizer.
    client_weighting: The averaging of the client updates (the base's
      paper's is its `SPEC.client_weighting`).
    client_lr_schedule: Optional round number -> client learning rate.
    **base_hparams: The base recipe's hyper-parameters, under its argument
      names: `mu` (fedprox), `alpha` and optionally `grad_at_zero`
      (fedfor), `lam` and optionally `client_epochs`, `cross_silo`,
      `num_clients` (fedcurv), `alpha` and `num_clients` (feddyn).

  Returns:
    A `client_states.ClientStatefulProcess`; client state
    `{'batch_norm': ..., ['base': ...]}`.

  Raises:
    ValueError: If a hyper-parameter is missing, unexpected or out of
      range, or the model has no BatchNormalization layer.
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
  """
  base_recipe_fn = _base_recipe_fn(base, base_hparams, server_optimizer_fn)
  variables = find_batch_norm_variables(model_fn)

  def recipe_fn(weights_type):
    return with_local_batch_norm(base_recipe_fn(weights_type), weights_type,
                                 variables)

  return recipe_lib.assemble(model_fn, recipe_fn, client_optimizer_fn,
                             client_weighting, client_lr_schedule)
