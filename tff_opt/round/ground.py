"""The ground floor of `tff_opt/round/`: the names its modules share.

The string keys of the structures that cross slots (client update,
aggregate, server and client state, hook arguments), the types of what a
state-reading distributor receives (`ServerState`), of the two-model
broadcast (`TwoModels`) and of a stateful client's input (`ClientInput`),
the penalty hook
split into per-client and per-step parts (`PrecomputedHook`) and the small
helpers every slot calls (`model_weights_of`, `features_and_labels`,
`unconverted`, ...). Each key is defined here once; the module that uses a
name imports it from here, never from a sibling that happens to define it.
This module imports nothing from `tff_opt`.
"""

import collections
import collections.abc
import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import tensorflow as tf
import tensorflow_federated as tff

# What a client's local training is handed (client_work, vectorized_training,
# the hooks): the round number, the client optimizer's hyper-parameters and
# the TFF optimizers' name of the learning rate; a hook's `num_steps` (H).
ROUND_NUM_KEY = 'round_num'
OPTIMIZER_HPARAMS_KEY = 'optimizer_hparams'
LEARNING_RATE_KEY = 'learning_rate'  # TFF optimizers' name.
NUM_STEPS_KEY = 'num_steps'
# The loss hook's context entry of the client's statistics (FedADC+).
CLIENT_STATS_KEY = 'client_stats'

# The names of a broadcast's model (`Broadcast`s' first field) and of the
# previous model and whether there is one (`TwoModels`, also the state of
# `distributors.with_previous_model` and of client-side FedPTR).
MODEL_WEIGHTS_KEY = 'model_weights'
PREVIOUS_MODEL_KEY = 'previous_model_weights'
HAS_PREVIOUS_KEY = 'has_previous'
# The flag of a client state that is a client's own once it took part (the
# initial state's is False; SCAFFOLD's c_i, FedBN's batch norm).
INITIALIZED_KEY = 'initialized'

# A client's update (`{'delta': ..., **report}`) and its aggregate.
DELTA_KEY = 'delta'
# The aggregate of `aggregators.with_non_trainable_mean`: `{'update': ...,
# 'non_trainable': {'mean': [...], 'total_weight': ...}}`.
UPDATE_KEY = 'update'
NON_TRAINABLE_KEY = 'non_trainable'
MEAN_KEY = 'mean'
TOTAL_WEIGHT_KEY = 'total_weight'

# The measurement of TFF's `build_apply_optimizer_finalizer` (and of the
# finalizers here): 1 when the round's update was rejected as non-finite.
UPDATE_NON_FINITE_KEY = 'update_non_finite'


class ServerState(NamedTuple):
  """What a state-reading distributor receives at the server."""
  model_weights: Any
  finalizer_state: Any


# What the clients receive. FedOpt's broadcast is the `ModelWeights` alone.
# An algorithm that broadcasts more defines its broadcast as a NamedTuple
# whose first field is `model_weights` (FedCurv's `fed_curv.Broadcast`,
# SCAFFOLD's, FedADC's `fed_adc_momentum.Broadcast`, ...), so that its
# penalty reads `broadcast.fisher_sum`, not a key spelled in two modules.


class TwoModels(NamedTuple):
  """The current and the previous global model (FedFOR, client-side FedPTR):
  `distributors.with_previous_model`'s broadcast."""
  model_weights: Any
  previous_model_weights: Any
  has_previous: Any  # False in the first round, when w_{t-1} is zeros.


class ClientInput(NamedTuple):
  """What a stateful algorithm's client work receives: the round's
  broadcast and the client's own state (`client_states.compose`)."""
  broadcast: Any
  client_state: Any


@dataclasses.dataclass(frozen=True)
class PrecomputedHook:
  """A penalty or look-ahead hook split into per-client and per-step parts.

  Attributes:
    precompute: `(broadcast, *, learning_rate[, num_steps]) -> constants`,
      run once per client before its local steps.
    step: `(weights, constants) -> result` (a scalar for a penalty, offsets
      for `look_ahead`), run at every local step.
  """
  precompute: Callable[..., Any]
  step: Callable[[Any, Any], Any]

  def __call__(self, weights, broadcast, **kwargs):
    """The plain hook signature: both parts, one after the other."""
    return self.step(weights, self.precompute(broadcast, **kwargs))


@tf.autograph.experimental.do_not_convert
def unconverted(fn):
  """`fn`, to be called as written: AutoGraph does not convert it.

  AutoGraph converts the client loop (its `for` over the dataset, its `if`s
  on tensors) and, recursively, every function the loop calls. Keras'
  forward pass and metrics and TFF's optimizers branch on Python values
  only, so converting them computes nothing different, yet it is most of a
  process's build time (about 4 of 7 s for FedOpt on EMNIST-CR). The loop
  calls them through `unconverted`; a `tf.function` (a Keras-backed model's
  `forward_pass`) by its Python function, which traced on its own would be
  converted again and called as a nested function. The algorithms' own
  hooks (penalties, look-aheads, reports) are still converted: they may
  branch on tensors.
  """
  return tf.autograph.experimental.do_not_convert(
      getattr(fn, 'python_function', fn))


def unconverted_finalizers(model) -> collections.OrderedDict:
  """`model.metric_finalizers()`, each one left as written by AutoGraph.

  Keras-backed finalizers build a metric object per call and branch on
  Python values only, yet converting them (and what they call) takes ~0.8 s
  of FedOpt's process build. They are `tf.function`s whose automatic
  control dependencies order the metric's variable assignments before its
  `result()`: such a finalizer stays a `tf.function`, traced with
  `autograph=False`; any other callable is wrapped by `unconverted`.
  """
  finalizers = collections.OrderedDict()
  for name, finalizer in model.metric_finalizers().items():
    python_function = getattr(finalizer, 'python_function', None)
    finalizers[name] = (unconverted(finalizer) if python_function is None
                        else tf.function(python_function, autograph=False))
  return finalizers


def model_to_overwrite(model_fn):
  """`model_fn()` whose trainable variables start at zeros, not random.

  TFF runs a client computation's variable initializers on every call, and
  a client's trainable weights are overwritten by the broadcast model before
  anything reads them. Their initializers compute values nobody uses, and
  some are costly: Keras' orthogonal initializer of an LSTM's recurrent
  kernel is a QR decomposition, and the Stack Overflow NWP model's
  initializers took ~0.4 CPU-s per client call on TFF's worker (50 clients
  a round: ~20 of its ~55 CPU-s). Here a variable created with
  `trainable=True`, a fully known shape and a dtype starts at `tf.zeros`
  instead. Every other variable (batch-norm statistics, metric
  accumulators, optimizer slots) keeps its initializer.

  Call it only where the model's weights are assigned before they are read
  (`_build_client_update` does so first thing). A zeroed variable that the
  model's `trainable_variables` do not list gets no assignment. Most are
  left behind by the model's builder and never read again: the Keras model
  that `layers.with_stateless_dropout` clones (EMNIST-CR's CNN,
  `fedcurv_cnn`). The model is kept when its forward pass reads none of
  them (`_reads_any`); if it reads one, or the model has no `forward_pass`
  and `input_spec` to tell, the zeroed model is dropped and `model_fn()` is
  called again as is. Calling it again for a clone would build the model
  twice and put four copies of its weights into every client computation:
  for EMNIST-CR's CNN this function takes 0.8-1.2 CPU-s instead of
  1.4-1.8 s (a loaded 2-core machine).

  Args:
    model_fn: A no-arg builder of a `tff.learning.models.VariableModel`,
      called in a graph (inside a `tff.tensorflow.computation`).

  Returns:
    The model.
  """
  zeroed = []

  def zero_initialized(next_creator, **kwargs):
    shape = kwargs.get('shape')
    dtype = kwargs.get('dtype')
    if (kwargs.get('trainable') is True and dtype is not None and
        shape is not None and tf.TensorShape(shape).is_fully_defined()):
      shape, dtype = tf.TensorShape(shape), tf.as_dtype(dtype)
      kwargs['initial_value'] = lambda: tf.zeros(shape, dtype)
      variable = next_creator(**kwargs)
      zeroed.append(variable)
      return variable
    return next_creator(**kwargs)

  with tf.variable_creator_scope(zero_initialized):
    model = model_fn()
  listed = {v.ref() for v in model.trainable_variables}
  unlisted = [v for v in zeroed if v.ref() not in listed]
  if not unlisted or not _reads_any(model, unlisted):
    return model
  return model_fn()


def _reads_any(model, variables) -> bool:
  """Whether `model`'s training forward pass reads one of `variables`.

  Traced on a batch of `model.input_spec` in a graph of its own, which
  adds nothing to the caller's graph; True when the model has no
  `forward_pass` or `input_spec` to trace.
  """
  forward_pass = getattr(model, 'forward_pass', None)
  input_spec = getattr(model, 'input_spec', None)
  if forward_pass is None or input_spec is None:
    return True
  traced = tf.function(
      lambda batch: unconverted(forward_pass)(batch, training=True),
      autograph=False).get_concrete_function(input_spec)
  read = {v.ref() for v in traced.graph.variables}
  return any(v.ref() in read for v in variables)


def check_client_weighting(client_weighting: Any) -> None:
  """Raises TypeError unless `client_weighting` is a
  `tff.learning.ClientWeighting` (what both client works weight by)."""
  if not isinstance(client_weighting, tff.learning.ClientWeighting):
    raise TypeError('client_weighting must be a tff.learning.ClientWeighting, '
                    f'got {client_weighting!r}.')


@unconverted
def model_weights_of(broadcast: Any) -> tff.learning.models.ModelWeights:
  """Returns the model weights inside what a distributor broadcast (or a
  `ClientInput` of it)."""
  if isinstance(broadcast, tff.learning.models.ModelWeights):
    return broadcast
  if isinstance(broadcast, ClientInput):
    return model_weights_of(broadcast.broadcast)
  return broadcast.model_weights


def features_and_labels(batch) -> tuple[Any, Any]:
  """A batch's (or input spec's) `(x, y)`: a mapping's 'x' and 'y' entries,
  else its first two elements."""
  if isinstance(batch, collections.abc.Mapping):
    return batch['x'], batch['y']
  return batch[0], batch[1]
