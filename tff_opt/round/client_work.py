"""The one local-training loop every tff-opt algorithm runs on its clients.

On client k, starting from the broadcast model w_t, the loop takes one step
per batch b of the client's dataset (the dataset already holds its epochs):

    loss(w)  = L_k(w; b) + penalty(w, broadcast, learning_rate=eta)
    w        <- client_optimizer.next(w, grad loss(w))

and reports the model delta in TFF's *gradient form*, w_t - w_final (what
`tff.learning.templates.build_apply_optimizer_finalizer` expects), weighted by
the client's number of examples (Reddi et al., Algorithm 5) or uniformly.

An algorithm chooses what changes, in two small typed objects (each field
is documented once, in its class's docstring):

- `LocalObjective`: what the client minimises and how a step moves: the
  penalty added to the loss, a look-ahead shift (FedADC's Nesterov step),
  a loss hook replacing the model's loss and the client statistics it
  reads (FedADC+), and whether the client counts its steps first.
- `ClientPasses`: the passes before and after local training: a pre-pass
  that may extend the broadcast (client-side FedPTR's trajectory
  matching), and a report pass whose results travel with the delta
  (FedCurv's Fisher, SCAFFOLD's control variate).

Both default to "nothing": `build_local_training(model_fn, optimizer)` is
FedAvg's client. Besides them, `build_local_training` takes
`broadcast_type` (the type of what the distributor sends, when it is more
than the model) and `learning_rate_schedule` (round number -> client
learning rate, overriding the optimizer's `learning_rate` each round;
ExpDecay of Reddi et al. Appendix E.6 is `schedules.staircase_decay`).

Per-client constants (FedFOR's, FedCurv's, FedADC's): a penalty or
`look_ahead` may be a `ground.PrecomputedHook(precompute, step)` instead of
a plain function. Its `precompute(broadcast, *, learning_rate[, num_steps]) ->
constants` runs once per client, before the loop (e.g. FedFOR's d = w_{t-1}
- w_t), and its `step(weights, constants)` at every step; the penalty's
gradient still comes from autodiff of `step`. Calling the hook with the
plain signature runs both, so a `ground.PrecomputedHook` is also a plain penalty
(its value is the objective's).

Each penalty lives with its algorithm in `tff_opt.algorithms`, beside the
broadcast it reads, its hyper-parameter bound with `functools.partial`, or,
with per-client constants, as `<name>_hook(<hyper-parameters>)`, a
`ground.PrecomputedHook` of `<name>_constants` and `<name>_step`:

    fed_prox.proximal                   FedProx   (mu/2) ||w - w_t||^2
                                        (also the fine-tuning of
                                        `program/personalization.py`)
    fed_for.first_order_positive_hook   FedFOR (Eq. 7)
        (alpha/eta) sum relu(d (w - w_t)),  d = w_{t-1} - w_t
    fed_curv.elastic_hook               FedCurv
        lam (w^T diag(u) w - 2 w^T v) + const
    scaffold.linear_correction          SCAFFOLD
        <w, c - c_i>  (gradient c - c_i)
    fed_dyn.dynamic                     FedDyn
        -<g_k, w> + (alpha/2) ||w - w_t||^2
    fed_dc.local_drift_hook             FedDC
        (alpha/2) ||w + h_i - w_t||^2 + (1/(eta K)) <w, g_i - g>

Choices written down here:
- A client whose update has a non-finite entry (`checks.all_finite`)
  reports a zero update with zero weight (it drops out of the weighted
  mean), as TFF's own client work does; the number of such clients is
  reported as `non_finite_clients`.
- Training metrics are those of the batches as they are trained on (the
  model before each step), summed over clients then finalized, as in TFF.
- The round's client learning rate is reported as `client_learning_rate`.
"""

import collections
import collections.abc
import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple, Optional, Union

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import checks
from tff_opt.round import ground

Penalty = Union[Callable[..., tf.Tensor], ground.PrecomputedHook]

PREPARE_KEY = 'prepare'

# Re-exported from ground.py for notebooks/write_your_own_algorithm.ipynb
# (which imports it from here).
model_weights_of = ground.model_weights_of


def _check_hook(owner: str, name: str, value: Any) -> None:
  """Raises TypeError unless `value` is `None` or callable."""
  if value is not None and not callable(value):
    raise TypeError(f'{owner}.{name} must be callable or None, got '
                    f'{type(value).__name__} {value!r}.')


@dataclasses.dataclass(frozen=True)
class LocalObjective:
  """What a client minimises and how its local step moves.

  Every field is optional; the default is the model's own loss and a plain
  optimizer step (FedAvg's client).

  Attributes:
    penalty: `(weights, broadcast, *, learning_rate[, num_steps]) -> scalar
      tf.Tensor`, added to every batch loss inside the gradient tape (so its
      gradient comes from autodiff, never written by hand), or a
      `ground.PrecomputedHook`. `weights` is the list of trainable variables in
      model order; `broadcast` is what the distributor sent (a
      `tff.learning.models.ModelWeights`, or the algorithm's broadcast
      NamedTuple whose `model_weights` field is one, a stateful algorithm's
      `ground.ClientInput(broadcast, client_state)`, or what `prepare_fn`
      made of it);
      `learning_rate` is this round's client learning rate eta (FedFOR
      divides by it). The module docstring lists the algorithms'.
    look_ahead: `(weights, broadcast, *, learning_rate[, num_steps]) ->
      offsets` (one tensor per trainable variable), or a
      `ground.PrecomputedHook`: before each forward pass the variables are
      shifted by the offsets; the gradient is taken there and the optimizer
      steps from the unshifted weights (a Nesterov-type step; training
      metrics are then those of the shifted model).
    loss_fn_builder: `model_fn -> loss_fn`, called once in the client's
      graph (it may build models, e.g. a teacher); `loss_fn(model, batch,
      output, broadcast, context) -> scalar` replaces `output.loss` (the
      penalty is still added). `context` holds `learning_rate`,
      `num_steps` (when counted) and `client_stats`.
    client_stats_fn: `dataset -> structure`, a pre-pass over the client's
      data (e.g. its label proportions), handed to the loss hook as
      `context['client_stats']`; it never leaves the client.
    count_steps: When True the client counts its batches H before the loop
      (the dataset's cardinality when TF knows it, e.g. `from_tensor_slices`
      then `batch` or `repeat`; otherwise a pass over its dataset); the
      penalty, `look_ahead` and the loss hook then also get `num_steps=H`
      (they are never given it otherwise).

  Raises:
    TypeError: If a hook is neither callable nor `None`, or `count_steps`
      is not a bool.
  """
  penalty: Optional[Penalty] = None
  look_ahead: Optional[Union[Callable[..., Any], ground.PrecomputedHook]] = None
  loss_fn_builder: Optional[Callable[..., Callable[..., tf.Tensor]]] = None
  client_stats_fn: Optional[Callable[[tf.data.Dataset], Any]] = None
  count_steps: bool = False

  def __post_init__(self):
    for field in ('penalty', 'look_ahead', 'loss_fn_builder',
                  'client_stats_fn'):
      _check_hook('LocalObjective', field, getattr(self, field))
    if not isinstance(self.count_steps, bool):
      raise TypeError('LocalObjective.count_steps must be a bool, got '
                      f'{type(self.count_steps).__name__} '
                      f'{self.count_steps!r}.')


@dataclasses.dataclass(frozen=True)
class ClientPasses:
  """The client's passes before and after its local training.

  Both are optional and off by default.

  Attributes:
    prepare_fn: `(broadcast, dataset) -> (broadcast, diagnostics)`, run once
      per client before local training, in the client's TF graph (it may
      build models and iterate the dataset). The broadcast it returns
      replaces the received one for the penalty and every other hook (it
      must keep the received `model_weights`: they are the start of local
      training and the reference of the delta; it typically adds entries,
      e.g. a model computed on the client). `diagnostics` is a flat mapping
      name -> float32 scalar, averaged over the round's clients (plain,
      unweighted mean) and reported as `prepare/<name>` in the client
      work's measurements; it never leaves the client otherwise.
      Client-side FedPTR's trajectory matching.
    report_fn: `(model, dataset, broadcast, *, delta, num_steps,
      learning_rate, num_examples) -> {name: tensor structure}`, run after
      the last local step with the model at its final local weights,
      `delta` the gradient-form delta, `num_steps` the number of local steps
      taken and `num_examples` the examples they trained on (both int64;
      every epoch the dataset holds counts). The client's update is then
      `{'delta': delta, **extras}` instead of the bare delta, and the
      aggregator must accept that structure
      (`aggregators.mean_delta_sum_rest`). Forward passes it makes do not
      change the training metrics (the model's metric variables are
      restored afterwards). A non-finite entry anywhere in
      the update zeroes all of it, as for the delta alone. FedCurv's
      Fisher, SCAFFOLD's control variate, FedBN's local batch norm, the
      model's non-trainables (`recipe.with_shared_non_trainables`).
    vectorized_report_fn: `report_fn` for K clients at once on a
      `vectorized_training.VectorizedModel` (the vectorized client path):
      `(model, weights, dataset, broadcast, *, delta, num_steps,
      learning_rate, num_examples) -> {name: [K, ...] structure}`, with the
      clients' final weights [K, ...] (`vectorized_training`'s module
      docstring). `None` where the report has no vectorized form: the
      vectorized path then refuses the algorithm. This client work never
      calls it. FedCurv's Fisher.

  Raises:
    TypeError: If a pass is neither callable nor `None`.
  """
  prepare_fn: Optional[Callable[..., Any]] = None
  report_fn: Optional[Callable[..., Any]] = None
  vectorized_report_fn: Optional[Callable[..., Any]] = None

  def with_report(self, report_fn: Callable[..., Any]) -> 'ClientPasses':
    """These passes with `report_fn` in place of the report; the new
    report has no vectorized form (`vectorized_report_fn` is dropped)."""
    return dataclasses.replace(self, report_fn=report_fn,
                               vectorized_report_fn=None)

  def __post_init__(self):
    for field in ('prepare_fn', 'report_fn', 'vectorized_report_fn'):
      _check_hook('ClientPasses', field, getattr(self, field))


@ground.unconverted
def _num_examples(output: tff.learning.models.BatchOutput) -> tf.Tensor:
  if output.num_examples is not None:
    return tf.cast(output.num_examples, tf.int64)
  return tf.shape(tf.nest.flatten(output.predictions)[0], out_type=tf.int64)[0]


def _per_step(hook, broadcast, kwargs):
  """Returns `hook` as a function of the weights alone (or `None`).

  A `ground.PrecomputedHook`'s constants are computed here, once per client.
  """
  if hook is None:
    return None
  if isinstance(hook, ground.PrecomputedHook):
    constants = hook.precompute(broadcast, **kwargs)
    return lambda weights: hook.step(weights, constants)
  return lambda weights: hook(weights, broadcast, **kwargs)


def _count_batches(dataset: tf.data.Dataset) -> tf.Tensor:
  """Returns the number of elements of `dataset` (int32).

  Its cardinality when TF knows it, else counted by a pass over it.
  """
  cardinality = dataset.cardinality()
  return tf.cond(
      cardinality >= 0, lambda: tf.cast(cardinality, tf.int32),
      lambda: dataset.reduce(tf.constant(0, tf.int32), lambda n, _: n + 1))


@ground.unconverted
def _zero_if_non_finite(delta):
  """Returns (delta or zeros, 1 if any entry was non-finite else 0)."""
  finite = checks.all_finite(delta)
  delta = tf.cond(finite, lambda: delta,
                  lambda: tf.nest.map_structure(tf.zeros_like, delta))
  return delta, tf.cast(tf.logical_not(finite), tf.int32)


def _build_client_update(model_fn, optimizer, objective: LocalObjective,
                         client_weighting, report_fn=None):
  """Returns a `tf.function` (hparams, broadcast, dataset) -> client outputs.

  Must be called inside a `tff.tensorflow.computation`: the model's
  variables are created in that computation's graph, trainable ones
  without their initializers' work (`ground.model_to_overwrite`).
  """
  # Over 80 lines with its docstring: the one local training loop every
  # algorithm runs, its objective's hooks applied batch by batch, is one
  # tf.function read in one place.
  model = ground.model_to_overwrite(model_fn)
  model_weights = tff.learning.models.ModelWeights.from_model(model)
  trainable = model_weights.trainable
  look_ahead = objective.look_ahead
  client_stats_fn = objective.client_stats_fn
  batch_loss_fn = (objective.loss_fn_builder(model_fn)
                   if objective.loss_fn_builder is not None else None)

  @tf.function
  def client_update(hparams, broadcast, dataset):
    initial_weights = ground.model_weights_of(broadcast)
    tf.nest.map_structure(lambda v, t: v.assign(t), model_weights,
                          initial_weights)
    learning_rate = hparams[ground.LEARNING_RATE_KEY]
    specs = tuple(tf.TensorSpec(v.shape, v.dtype) for v in trainable)
    optimizer_state = ground.unconverted(optimizer.set_hparams)(
        ground.unconverted(optimizer.initialize)(specs), hparams)
    num_examples = tf.constant(0, tf.int64)
    local_steps = tf.constant(0, tf.int64)  # Steps taken (for report_fn).
    hook_kwargs = {}
    if objective.count_steps:
      hook_kwargs[ground.NUM_STEPS_KEY] = _count_batches(dataset)
    hook_args = dict([(ground.LEARNING_RATE_KEY, learning_rate)], **hook_kwargs)
    # A `ground.PrecomputedHook`'s per-client constants: computed once, here.
    penalty_of = _per_step(objective.penalty, broadcast, hook_args)
    offsets_of = _per_step(look_ahead, broadcast, hook_args)
    context = dict(hook_args)
    if client_stats_fn is not None:
      context[ground.CLIENT_STATS_KEY] = client_stats_fn(dataset)
    # Weights before the look-ahead shift (a loop variable for autograph).
    current = [v.read_value() for v in trainable] if look_ahead else []

    for batch in iter(dataset):
      if look_ahead is not None:
        current = [v.read_value() for v in trainable]
        offsets = offsets_of(trainable)
        for variable, value, offset in zip(trainable, current, offsets):
          variable.assign(value + offset)
      with tf.GradientTape() as tape:
        output = ground.unconverted(model.forward_pass)(batch, training=True)
        if batch_loss_fn is None:
          loss = output.loss
        else:
          loss = batch_loss_fn(model, batch, output, broadcast, context)
        if penalty_of is not None:
          loss += penalty_of(trainable)
      gradients = tape.gradient(loss, trainable)
      # After a look-ahead the step is taken from the unshifted weights
      # (`current`); the variables get the updated weights below.
      optimizer_state, updated = ground.unconverted(optimizer.next)(
          optimizer_state,
          tuple(current if look_ahead is not None else trainable),
          tuple(gradients))
      for variable, value in zip(trainable, updated):
        variable.assign(value)
      num_examples += _num_examples(output)
      local_steps += 1

    delta = tf.nest.map_structure(tf.subtract, initial_weights.trainable,
                                  trainable)
    if report_fn is not None:
      # The report's own forward passes must not count as training metrics.
      saved_metrics = [tf.identity(v) for v in model.local_variables]
      extras = report_fn(model, dataset, broadcast, delta=delta,
                         num_steps=local_steps, learning_rate=learning_rate,
                         num_examples=num_examples)
      for variable, value in zip(model.local_variables, saved_metrics):
        variable.assign(value)
      delta = collections.OrderedDict([(ground.DELTA_KEY, delta)] +
                                      list(extras.items()))
    delta, non_finite = _zero_if_non_finite(delta)
    if client_weighting == tff.learning.ClientWeighting.NUM_EXAMPLES:
      weight = tf.cast(num_examples, tf.float32)
    else:
      weight = tf.constant(1.0, tf.float32)
    weight = tf.where(non_finite > 0, 0.0, weight)
    if non_finite > 0:
      ground.unconverted(model.reset_metrics)()
    return (tff.learning.templates.ClientResult(
        update=delta, update_weight=weight),
            ground.unconverted(model.report_local_unfinalized_metrics)(),
            non_finite)

  return client_update


class ClientWorkState(NamedTuple):
  """A client work's server state and its computations (`client_work_state`).

  The state is `{'round_num', 'optimizer_hparams'}`; each round the client
  optimizer's hyper-parameters are broadcast with the learning rate of the
  round's schedule.
  """
  init_fn: tff.Computation
  hparams_type: tff.Type
  round_hparams: tff.Computation  # state -> the round's optimizer hparams.
  learning_rate_of: tff.Computation  # hparams -> their learning rate.
  advance: tff.Computation  # state -> the next round's state.
  get_hparams_fn: tff.Computation
  set_hparams_fn: tff.Computation


def client_work_state(
    client_optimizer: tff.learning.optimizers.Optimizer,
    learning_rate_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
) -> ClientWorkState:
  """The server state every client work here keeps: round and optimizer.

  Shared by `build_local_training` and the vectorized client work of
  `round/vectorized_training.py`, so that a run resumes across them.

  Raises:
    TypeError: If the optimizer has no `learning_rate` hyper-parameter.
  """
  initial_hparams = client_optimizer.get_hparams(
      client_optimizer.initialize(tf.TensorSpec((), tf.float32)))
  if ground.LEARNING_RATE_KEY not in initial_hparams:
    raise TypeError('client_optimizer must have a learning_rate '
                    f'hyper-parameter; it has {list(initial_hparams)}.')
  initial_state = collections.OrderedDict([
      (ground.ROUND_NUM_KEY, 0),
      (ground.OPTIMIZER_HPARAMS_KEY, initial_hparams),
  ])

  @tff.federated_computation
  def init_fn():
    return tff.federated_value(initial_state, tff.SERVER)

  state_type = init_fn.type_signature.result.member
  hparams_type = state_type[ground.OPTIMIZER_HPARAMS_KEY]

  @tff.tensorflow.computation(state_type)
  def round_hparams(state):
    hparams = collections.OrderedDict(state[ground.OPTIMIZER_HPARAMS_KEY])
    if learning_rate_schedule is not None:
      hparams[ground.LEARNING_RATE_KEY] = tf.cast(
          learning_rate_schedule(state[ground.ROUND_NUM_KEY]),
          hparams[ground.LEARNING_RATE_KEY].dtype)
    return hparams

  @tff.tensorflow.computation(hparams_type)
  def learning_rate_of(hparams):
    return hparams[ground.LEARNING_RATE_KEY]

  def with_hparams(hparams, round_num):
    return collections.OrderedDict([
        (ground.ROUND_NUM_KEY, round_num),
        (ground.OPTIMIZER_HPARAMS_KEY, hparams),
    ])

  @tff.tensorflow.computation(state_type)
  def advance(state):
    return with_hparams(state[ground.OPTIMIZER_HPARAMS_KEY],
                        state[ground.ROUND_NUM_KEY] + 1)

  @tff.tensorflow.computation(state_type)
  def get_hparams_fn(state):
    return state[ground.OPTIMIZER_HPARAMS_KEY]

  @tff.tensorflow.computation(state_type, hparams_type)
  def set_hparams_fn(state, hparams):
    return with_hparams(hparams, state[ground.ROUND_NUM_KEY])

  return ClientWorkState(init_fn, hparams_type, round_hparams,
                         learning_rate_of, advance, get_hparams_fn,
                         set_hparams_fn)


def build_local_training(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_optimizer: tff.learning.optimizers.Optimizer,
    *,
    objective: LocalObjective = LocalObjective(),
    passes: ClientPasses = ClientPasses(),
    broadcast_type: Optional[tff.Type] = None,
    client_weighting: tff.learning.ClientWeighting = (
        tff.learning.ClientWeighting.NUM_EXAMPLES),
    learning_rate_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
) -> tff.learning.templates.ClientWorkProcess:
  """Builds the shared local-training `ClientWorkProcess`.

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel` on each call.
    client_optimizer: A `tff.learning.optimizers.Optimizer` with a
      `learning_rate` hyper-parameter; it takes the local steps.
    objective: What the client minimises and how a step moves (a
      `LocalObjective`; the model's loss and plain steps by default).
    passes: The passes before and after local training (a `ClientPasses`;
      none by default).
    broadcast_type: The unplaced type of what the distributor sends; the
      model's `ModelWeights` type when `None`.
    client_weighting: `tff.learning.ClientWeighting.NUM_EXAMPLES` (default)
      or `UNIFORM`.
    learning_rate_schedule: Optional callable round number -> client learning
      rate; when given it replaces the optimizer's learning rate each round.

  Returns:
    A `tff.learning.templates.ClientWorkProcess` whose state is
    `{'round_num', 'optimizer_hparams'}` at the server, whose `next` takes
    `(state, broadcast@CLIENTS, datasets@CLIENTS)`, and whose measurements
    are `{'train': finalized metrics, 'client_learning_rate',
    'non_finite_clients'}` (plus `'prepare'` with a `prepare_fn`).

  Raises:
    TypeError: If `objective` is not a `LocalObjective`, `passes` not a
      `ClientPasses`, `client_weighting` not a
      `tff.learning.ClientWeighting`, or the optimizer has no
      `learning_rate` hyper-parameter.
  """
  # Over 80 lines with its docstring: the client work's computations share the
  # types read here and are read in one place, as TFF's
  # build_model_delta_client_work is.
  if not isinstance(objective, LocalObjective):
    raise TypeError('objective must be a client_work.LocalObjective, got '
                    f'{type(objective).__name__}.')
  if not isinstance(passes, ClientPasses):
    raise TypeError('passes must be a client_work.ClientPasses, got '
                    f'{type(passes).__name__}.')
  prepare_fn = passes.prepare_fn
  ground.check_client_weighting(client_weighting)
  with tf.Graph().as_default():
    model = model_fn()
    metrics_aggregation_fn = tff.learning.metrics.sum_then_finalize(
        ground.unconverted_finalizers(model))
    element_type = tff.types.tensorflow_to_type(model.input_spec)
    weights_type = tff.learning.models.weights_type_from_model(model)
  data_type = tff.SequenceType(element_type)
  if broadcast_type is None:
    broadcast_type = weights_type

  state = client_work_state(client_optimizer, learning_rate_schedule)

  @tff.tensorflow.computation(state.hparams_type, broadcast_type, data_type)
  def client_update(hparams, broadcast, dataset):
    diagnostics = ()
    if prepare_fn is not None:
      broadcast, diagnostics = prepare_fn(broadcast, dataset)
    update_fn = _build_client_update(
        model_fn, client_optimizer, objective, client_weighting,
        report_fn=passes.report_fn)
    return tuple(update_fn(hparams, broadcast, dataset)) + (diagnostics,)

  @tff.federated_computation(
      state.init_fn.type_signature.result,
      tff.FederatedType(broadcast_type, tff.CLIENTS),
      tff.FederatedType(data_type, tff.CLIENTS),
  )
  def next_fn(server_state, broadcast, client_data):
    hparams = tff.federated_map(state.round_hparams, server_state)
    client_result, model_outputs, non_finite, diagnostics = (
        tff.federated_map(client_update, (tff.federated_broadcast(hparams),
                                          broadcast, client_data)))
    measurements = collections.OrderedDict(
        train=metrics_aggregation_fn(model_outputs),
        client_learning_rate=tff.federated_map(state.learning_rate_of,
                                               hparams),
        non_finite_clients=tff.federated_sum(non_finite),
    )
    if prepare_fn is not None:
      measurements[PREPARE_KEY] = tff.federated_mean(diagnostics)
    measurements = tff.federated_zip(measurements)
    return tff.templates.MeasuredProcessOutput(
        tff.federated_map(state.advance, server_state), client_result,
        measurements)

  return tff.learning.templates.ClientWorkProcess(
      state.init_fn, next_fn, get_hparams_fn=state.get_hparams_fn,
      set_hparams_fn=state.set_hparams_fn)
