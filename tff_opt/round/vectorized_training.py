"""Vectorized local training: K clients as one TensorFlow computation.

`client_work.build_local_training` trains each client in its own TFF client
computation: one small step after another, one client after another. Here
the clients of a *group* train together: every weight carries a leading
axis K (client k's copy is `w[k]`), step s feeds every client its own s-th
batch, and one forward and backward pass of a `VectorizedModel` (a pure
function of stacked weights, e.g. `tasks/shakespeare_vectorized.py`) serves
all K. The loss summed over the K clients has, as its gradient with respect
to `w[k]`, client k's own gradient (the clients share no weight), so each
client takes exactly its own SGD steps.

Data: `vectorize_clients` pads the clients' batch lists into arrays x, y
[S, K, B, ...] and `mask` [S, K, B] (which rows are real examples), with S
the group's largest number of batches and B its largest batch. A client
whose batches ran out, or whose batch is smaller, has padding rows there:
they are computed and weighted 0, its loss at that step is the mean over
its real rows (as TFF's model computes a batch loss), and a client with no
real row at step s does not step at all: each step gathers the slices of
the clients that have a batch (weights, optimizer state, data), computes
and steps only those, and scatters them back, so a finished client costs
nothing and keeps its weights and optimizer state (not a zero gradient,
which momentum would still move). Real clients' sizes are skewed (the
Shakespeare file: median 19 sequences, 90th percentile 152), so a group
computes the steps its clients take, not K times its largest client's.

The client work (`build_vectorized_local_training`) is a TFF
`ClientWorkProcess` whose "client" is a group: a TFF client computation
sees one client's data, so a group's clients must arrive as one dataset
(elements `{'x', 'y', 'mask'}` with K and B leading, `group_datasets`),
and the group reports one update:

    update = sum_k w_k delta_k / sum_k w_k,   weight = sum_k w_k,

w_k = client k's number of examples (or 1 under uniform weighting), 0 for
a client whose delta is not finite. The weighted mean over groups that the
aggregator forms is then sum_g W_g (sum_k w_k delta_k / W_g) / sum_g W_g =
sum_k w_k delta_k / sum_k w_k: the per-client path's aggregate (to float
rounding). Training metrics are the per-client metrics summed over the
group (a non-finite client's dropped, as the per-client path resets its
metrics), in the structure of the model's `report_local_unfinalized_metrics`,
and finalized by the model's own finalizers after the sum over groups: the
same numbers as the per-client path. `non_finite_clients` counts clients,
not groups.

Choices:
- Client optimizers: those whose state, besides their hyper-parameters,
  holds one tensor per weight (TFF's SGD and SGD with momentum). Such state
  is stacked and masked like the weights. An optimizer with shared state
  (Adam's step counter) is refused: a client that skips a step would need
  its own count.
- Models: trainable weights only (no non-trainable variables such as
  batch-norm statistics), float weights.
- The round's client learning rate (its schedule included) is computed as
  in `client_work.build_local_training` and reported the same way.
- A group whose clients all lack data still runs one all-padding step, so
  that the group's size K is known (uniform weighting counts its clients).

An algorithm's local objective (`client_work.LocalObjective`, the recipe's
own) runs per client, as `client_work.build_local_training` runs it:

- `penalty`: a function of ONE client's list of weights and the broadcast
  (shared by the group's clients, as it is the same for every client of a
  round). At each step it is evaluated on each active client's own weights
  by `tf.vectorized_map` over the leading axis and the K_s values summed
  into the loss, so client k's gradient is that of its own loss plus its
  own penalty (any penalty, not only a sum of coordinate-wise terms; an op
  without a vectorized form runs in a `tf.while_loop` over the clients,
  e.g. `tf.nn.l2_loss`, with the same numbers).
- A `PrecomputedHook`'s constants are computed once per group when they
  depend only on the broadcast and the learning rate (FedFOR's d and
  alpha/eta, FedCurv's sqrt(u), v/sqrt(u)): they are the same for every
  client. With `count_steps` they depend on the client's number of batches
  H_k (FedADC's m_bar = beta m_t / H_k): H_k is counted per client (its
  steps with a real row) and the constants are computed per client
  (`tf.vectorized_map` over H), stacked [K, ...] and gathered with the
  weights at each step.
- `look_ahead` (FedADC's Nesterov step): each active client's offsets are
  computed the same way, the gradient (loss and penalty) is taken at
  w_k + offsets_k and the optimizer steps from w_k.
- A report pass (FedCurv's Fisher) has a vectorized form of its own, given to
  `build_vectorized_local_training` as `report_fn` (the recipe's runs on a
  `VariableModel`): `(model, weights, dataset, broadcast, *, delta,
  num_steps, learning_rate, num_examples) -> {name: [K, ...] structure}`,
  run after the last step with the clients' final weights [K, ...]. A
  group then reports `{'delta': weighted mean, name: sum over its clients,
  ...}`: `aggregators.mean_delta_sum_rest` over the groups gives the
  per-client path's weighted mean and sums. `per_example_fisher` is
  FedCurv's Fisher (`fed_curv.empirical_fisher_diagonal`'s per-example
  path) on a `VectorizedModel`.
- A loss hook (`loss_fn_builder`, `client_stats_fn`: FedADC+) or a pre-pass
  (`ClientPasses.prepare_fn`) runs on a `VariableModel` and has no vectorized
  form: refused. So is client state (kept by the caller, `vectorized.py`).
- Hooks are called as written (not converted by AutoGraph): they must not
  branch in Python on tensors (none of the algorithms' penalties or look-aheads does).

Grouping (`group_datasets(..., by_steps=True)`): the round's clients may be
ordered by their number of batches (most first, ties in the round's order)
before they are split into groups, so that a group's clients take similar
numbers of steps: a group runs as many steps as its longest client, and a
step with few active clients vectorizes little. The clients' results are
their own either way; the aggregate differs only by float rounding (the
groups' sums are taken in another order). Off by default.
"""

import collections
from collections.abc import Callable, Sequence
from typing import Any, Optional, Protocol

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.round import client_work
from tff_opt.round import ground

X_KEY = 'x'
Y_KEY = 'y'
MASK_KEY = 'mask'
NUM_EXAMPLES_KEY = 'num_examples'
STATS_KEY = 'stats'
EXTRAS_KEY = 'extras'


class VectorizedModel(Protocol):
  """K copies of a model as a pure function of stacked weights."""

  def batch_loss(self, weights: Sequence[tf.Tensor], batch: Any,
                 example_mask: tf.Tensor) -> tuple[tf.Tensor, Any]:
    """`(loss [K], stats)`: each client's loss on its own batch.

    `weights` are [K, ...] in the `VariableModel`'s trainable order,
    `batch` is `(x, y)` with K and B leading, `example_mask` [K, B] bool.
    `loss[k]` is client k's mean loss over its real rows (0 if none);
    `stats` a mapping of [K] tensors summed over steps and clients.
    """

  def unfinalized_metrics(self, stats: Any) -> Any:
    """Summed `stats` in the structure of the model's unfinalized
    metrics."""


# --- Data: a group's clients as one dataset ----------------------------------


def client_batches(dataset: tf.data.Dataset) -> list[tuple[np.ndarray,
                                                           np.ndarray]]:
  """A client's batches as NumPy `(x, y)` pairs, in the dataset's order."""
  return [tuple(np.asarray(t) for t in ground.features_and_labels(b))
          for b in dataset.as_numpy_iterator()]


def _trailing_shapes(dataset: tf.data.Dataset):
  """(x, y) shapes without the batch axis and dtypes, from element_spec."""
  x_spec, y_spec = ground.features_and_labels(dataset.element_spec)
  shapes = []
  for name, spec in (('x', x_spec), ('y', y_spec)):
    if not isinstance(spec, tf.TensorSpec):
      raise TypeError(f'Vectorized training needs dense tensors for {name}; '
                      f'got {spec!r}.')
    trailing = spec.shape[1:]
    if not trailing.is_fully_defined():
      raise ValueError(f'Vectorized training needs {name} of a fixed shape '
                       f'besides the batch axis; got {spec.shape}.')
    shapes.append((tuple(trailing.as_list()), spec.dtype.as_numpy_dtype))
  return shapes


def vectorize_clients(
    clients: Sequence[Sequence[tuple[np.ndarray, np.ndarray]]], *,
    x_shape: tuple[int, ...], y_shape: tuple[int, ...], x_dtype=np.int32,
    y_dtype=np.int32) -> collections.OrderedDict:
  """Pads K clients' batches into step-major arrays.

  Args:
    clients: Per client, its list of `(x, y)` batches (batch axis first).
    x_shape: Shape of one example's x (without the batch axis).
    y_shape: Shape of one example's y.
    x_dtype: dtype of x.
    y_dtype: dtype of y.

  Returns:
    `OrderedDict(x=[S, K, B, *x_shape], y=[S, K, B, *y_shape],
    mask=[S, K, B] bool)`: S is the largest number of batches of a client
    (at least 1), B the largest batch; padding is 0 and `mask` False.

  Raises:
    ValueError: If `clients` is empty or a batch has the wrong shape.
  """
  if not clients:
    raise ValueError('vectorize_clients needs at least one client.')
  steps = max(1, max(len(batches) for batches in clients))
  rows = max([1] + [len(x) for batches in clients for x, _ in batches])
  k = len(clients)
  x = np.zeros((steps, k, rows) + tuple(x_shape), x_dtype)
  y = np.zeros((steps, k, rows) + tuple(y_shape), y_dtype)
  mask = np.zeros((steps, k, rows), bool)
  for c, batches in enumerate(clients):
    for s, (bx, by) in enumerate(batches):
      n = len(bx)
      if bx.shape[1:] != tuple(x_shape) or by.shape[1:] != tuple(y_shape):
        raise ValueError(f'Client {c}, batch {s}: shapes {bx.shape}, '
                         f'{by.shape} do not match {x_shape}, {y_shape}.')
      x[s, c, :n] = bx
      y[s, c, :n] = by
      mask[s, c, :n] = True
  return collections.OrderedDict([(X_KEY, x), (Y_KEY, y), (MASK_KEY, mask)])


def group_sizes(num_clients: int, group_size: int) -> list[int]:
  """Splits `num_clients` into ceil(n / group_size) groups of near-equal
  size (10 by 4: 4, 3, 3), so that no group is much smaller than the rest.

  Raises:
    ValueError: If `group_size` is below 1 or `num_clients` below 0.
  """
  if isinstance(group_size, bool) or not isinstance(group_size, int) or (
      group_size < 1):
    raise ValueError(f'group_size must be a positive integer, got '
                     f'{group_size!r}.')
  if num_clients < 0:
    raise ValueError(f'num_clients must be >= 0, got {num_clients}.')
  groups = -(-num_clients // group_size)
  if groups == 0:
    return []
  base, extra = divmod(num_clients, groups)
  return [base + 1] * extra + [base] * (groups - extra)


def step_order(num_batches: Sequence[int]) -> list[int]:
  """Client indices by decreasing number of batches (ties: given order)."""
  return sorted(range(len(num_batches)), key=lambda c: -num_batches[c])


def group_datasets(client_datasets: Sequence[tf.data.Dataset],
                   group_size: int, *,
                   by_steps: bool = False) -> list[tf.data.Dataset]:
  """The round's client datasets as one dataset per group of clients.

  Each client's dataset is read once here (in this process), in its order.
  The groups are consecutive (`group_sizes`) in the clients' order, or,
  with `by_steps`, in `step_order` of their numbers of batches (clients of
  similar lengths together; module docstring).

  Args:
    client_datasets: One batched `(x, y)` dataset per client, as
      `process.next` takes them.
    group_size: At most this many clients per group.
    by_steps: Order the clients by their number of batches first.

  Returns:
    One `tf.data.Dataset` per group, elements `{'x', 'y', 'mask'}` with
    the group's K and B axes leading (`vectorize_clients`, one element per
    step).

  Raises:
    ValueError: If there is no dataset, or their shapes differ.
  """
  if not client_datasets:
    raise ValueError('group_datasets needs at least one client dataset.')
  (x_shape, x_dtype), (y_shape, y_dtype) = _trailing_shapes(
      client_datasets[0])
  batches = [client_batches(d) for d in client_datasets]
  if by_steps:
    batches = [batches[c] for c in step_order([len(b) for b in batches])]
  groups, start = [], 0
  for size in group_sizes(len(batches), group_size):
    stacked = vectorize_clients(batches[start:start + size],
                                x_shape=x_shape, y_shape=y_shape,
                                x_dtype=x_dtype, y_dtype=y_dtype)
    groups.append(tf.data.Dataset.from_tensor_slices(stacked))
    start += size
  return groups


def group_element_type(input_spec: Any) -> tff.Type:
  """The TFF type of a group dataset's element for a model's input spec."""
  x_spec, y_spec = ground.features_and_labels(input_spec)
  element = collections.OrderedDict([
      (X_KEY, tf.TensorSpec([None] + x_spec.shape.as_list(), x_spec.dtype)),
      (Y_KEY, tf.TensorSpec([None] + y_spec.shape.as_list(), y_spec.dtype)),
      (MASK_KEY, tf.TensorSpec([None, None], tf.bool)),
  ])
  return tff.types.tensorflow_to_type(element)


# --- The optimizer on stacked weights ----------------------------------------


def _state_keys(state: Any, hparam_keys: Any,
                specs: Sequence[tf.TensorSpec]) -> tuple[str, ...]:
  """The non-hyper-parameter keys of `state`; each must be per weight."""
  keys = []
  for key, value in state.items():
    if key in hparam_keys:
      continue
    ok = False
    try:
      tf.nest.assert_same_structure(value, tuple(specs))
      ok = all(tf.convert_to_tensor(v).shape == s.shape
               for v, s in zip(tf.nest.flatten(value), specs))
    except (TypeError, ValueError):
      pass
    if not ok:
      raise ValueError(
          f'The client optimizer keeps {key!r}, which is not one tensor '
          'per weight: vectorized training can mask only per-weight state '
          '(use SGD, with or without momentum).')
    keys.append(key)
  return tuple(keys)


def per_client_state_keys(optimizer: tff.learning.optimizers.Optimizer,
                          specs: Sequence[tf.TensorSpec]) -> tuple[str, ...]:
  """The optimizer's state entries that hold one tensor per weight.

  Args:
    optimizer: A `tff.learning.optimizers.Optimizer`.
    specs: One client's weight specs.

  Returns:
    The keys of the state's non-hyper-parameter entries (all of them hold
    one tensor per weight).

  Raises:
    ValueError: If an entry other than a hyper-parameter is not one tensor
      per weight of that weight's shape (e.g. Adam's step counter).
  """
  specs = tuple(specs)
  with tf.Graph().as_default():
    state = optimizer.initialize(specs)
    return _state_keys(state, set(optimizer.get_hparams(state)), specs)


def _leading(mask: tf.Tensor, value: tf.Tensor) -> tf.Tensor:
  """`mask` [K] reshaped to broadcast over `value` [K, ...]."""
  return tf.reshape(mask, [-1] + [1] * (value.shape.rank - 1))


def _stack(value: tf.Tensor, k: tf.Tensor) -> tf.Tensor:
  """`value` repeated K times on a new leading axis."""
  value = tf.convert_to_tensor(value)
  stacked = tf.broadcast_to(value[tf.newaxis],
                            tf.concat([[k], tf.shape(value)], 0))
  stacked.set_shape([None] + value.shape.as_list())
  return stacked


class _ClientHook:
  """A penalty or look-ahead hook as a function of one client's weights.

  `fn(weights, own)` gets one client's weights (a list) and its slice of
  `per_client` (a structure of [K, ...] tensors, or `None` when everything
  the hook reads is shared by the group).
  """

  def __init__(self, fn: Callable[[list, Any], Any], per_client: Any = None):
    self.fn = fn
    self.per_client = per_client

  def __call__(self, weights: Sequence[tf.Tensor], take) -> Any:
    """The hook of each client of `weights` ([K_s, ...], `take` gathers
    the same clients from a [K, ...] tensor): its results stacked."""
    if self.per_client is None:
      return tf.vectorized_map(lambda w: self.fn(list(w), None),
                               tuple(weights), warn=False)
    own = tf.nest.map_structure(take, self.per_client)
    return tf.vectorized_map(lambda args: self.fn(list(args[0]), args[1]),
                             (tuple(weights), own), warn=False)


def _tensors(structure: Any) -> Any:
  """Every leaf of `structure` as a tensor (Python numbers included)."""
  return tf.nest.map_structure(tf.convert_to_tensor, structure)


def _client_hook(hook, broadcast, learning_rate,
                 num_steps) -> Optional[_ClientHook]:
  """`hook` (a plain function or a `PrecomputedHook`) per client.

  Args:
    hook: `LocalObjective.penalty` or `look_ahead`, or `None`.
    broadcast: What the distributor sent (shared by the group's clients).
    learning_rate: The round's client learning rate.
    num_steps: [K] int32 numbers of batches when the objective counts
      steps, else `None`.
  """
  if hook is None:
    return None
  kwargs = {ground.LEARNING_RATE_KEY: learning_rate}
  steps_key = ground.NUM_STEPS_KEY
  if isinstance(hook, ground.PrecomputedHook):
    step = hook.step
    if num_steps is None:  # Once per group: the same for every client.
      constants = hook.precompute(broadcast, **kwargs)
      return _ClientHook(lambda w, _: step(w, constants))
    per_client = tf.vectorized_map(
        lambda n: _tensors(hook.precompute(broadcast, **{steps_key: n},
                                           **kwargs)),
        num_steps, warn=False)
    return _ClientHook(step, per_client)
  if num_steps is None:
    return _ClientHook(lambda w, _: hook(w, broadcast, **kwargs))
  return _ClientHook(lambda w, n: hook(w, broadcast, **{steps_key: n},
                                       **kwargs), num_steps)


def check_objective(objective: client_work.LocalObjective) -> None:
  """Raises ValueError if `objective` has a part without a vectorized form."""
  if not isinstance(objective, client_work.LocalObjective):
    raise TypeError('objective must be a client_work.LocalObjective, got '
                    f'{type(objective).__name__}.')
  if (objective.loss_fn_builder is not None or
      objective.client_stats_fn is not None):
    raise ValueError('Vectorized client training has no vectorized form of '
                     'a loss hook (loss_fn_builder, client_stats_fn: e.g. '
                     'FedADC+\'s distillation), which runs on a '
                     'VariableModel.')


def _steps_per_client(dataset: tf.data.Dataset, k: tf.Tensor) -> tf.Tensor:
  """[K] int32: each client's number of batches (steps with a real row)."""
  return dataset.reduce(
      tf.zeros(tf.reshape(k, [1]), tf.int32),
      lambda n, batch: n + tf.cast(tf.reduce_any(batch[MASK_KEY], axis=1),
                                   tf.int32))


def build_local_training_fn(
    model: VectorizedModel, optimizer: tff.learning.optimizers.Optimizer,
    stats_dtypes: Any, *,
    objective: client_work.LocalObjective = client_work.LocalObjective(),
    report_fn: Optional[Callable[..., Any]] = None,
) -> Callable[..., collections.OrderedDict]:
  """Returns a `tf.function` training K clients on their stacked batches.

  Args:
    model: The `VectorizedModel`.
    optimizer: The client optimizer (`per_client_state_keys` must accept
      it).
    stats_dtypes: A mapping name -> dtype of `model.batch_loss`'s stats.
    objective: The local objective (`client_work.LocalObjective`): its
      penalty and look-ahead run per client (module docstring); a loss hook
      is refused.
    report_fn: Optional vectorized report pass (module docstring), run after
      the last step.

  Returns:
    `fn(hparams, initial_weights, dataset, broadcast=None)`: `hparams` the
    optimizer's hyper-parameters (its `learning_rate` this round's),
    `initial_weights` a list of [K, ...] tensors (each client's start),
    `dataset` elements `{'x', 'y', 'mask'}` ([K, B, ...], one per step),
    `broadcast` what the hooks and the report read (the distributor's
    broadcast). It returns `OrderedDict(delta=[initial - final, per weight,
    [K, ...]], num_examples=[K] int64, num_steps=[K] int64, stats={name:
    [K]})`, `delta` in TFF's gradient form, as `client_work` reports it,
    plus `extras` (the report's `{name: [K, ...]}`) with a `report_fn`.

  Raises:
    ValueError: If the objective has a loss hook.
  """
  # Over 80 lines with its docstring: the K clients' steps, their hooks and the
  # report pass are one tf.function read in one place, as `client_work`'s loop
  # is.
  check_objective(objective)
  batch_loss = ground.unconverted(model.batch_loss)
  opt_initialize = ground.unconverted(optimizer.initialize)
  opt_set_hparams = ground.unconverted(optimizer.set_hparams)
  opt_next = ground.unconverted(optimizer.next)

  @ground.unconverted
  def initial_state(hparams, weights, k):
    specs = tuple(tf.TensorSpec(w.shape[1:], w.dtype) for w in weights)
    state = opt_initialize(specs)
    keys = _state_keys(state, set(optimizer.get_hparams(state)), specs)
    state = collections.OrderedDict(opt_set_hparams(state, hparams))
    for key in keys:
      state[key] = tf.nest.map_structure(lambda v: _stack(v, k), state[key])
    return state, keys

  @ground.unconverted
  def step(state, keys, weights, batch, penalty, look_ahead):
    if penalty is None and look_ahead is None:
      return train_step(state, keys, weights, batch, None, None)
    # With hooks, a step without an active client (a group of empty
    # clients) is skipped: `tf.vectorized_map` over no client does not keep
    # its shapes. (The tape is inside the branch: nothing is differentiated
    # through the `tf.cond`.)
    mask = batch[MASK_KEY]
    k = tf.shape(mask)[0]

    def idle():
      zeros = tf.zeros(tf.reshape(k, [1]), tf.int64)
      stats = collections.OrderedDict(
          (name, tf.zeros(tf.reshape(k, [1]), dtype))
          for name, dtype in stats_dtypes.items())
      return state, list(weights), stats, zeros, zeros

    return tf.cond(
        tf.reduce_any(mask),
        lambda: train_step(state, keys, weights, batch, penalty, look_ahead),
        idle)

  @ground.unconverted
  def train_step(state, keys, weights, batch, penalty, look_ahead):
    mask = batch[MASK_KEY]
    k = tf.shape(mask, out_type=tf.int64)[0]
    active = tf.reduce_any(mask, axis=1)  # [K]: clients with a batch.
    # Only the clients with a batch at this step are computed: their
    # slices are gathered, stepped and scattered back; the others' weights
    # and optimizer state stay as they are.
    index = tf.where(active)  # [K_s, 1]
    take = lambda value: tf.gather_nd(value, index)
    put = lambda value, new: tf.tensor_scatter_nd_update(value, index, new)
    own = [take(w) for w in weights]
    own_mask = take(mask)
    at = own  # Where the gradient is taken (shifted by a look-ahead).
    if look_ahead is not None:
      at = [w + o for w, o in zip(own, look_ahead(own, take))]
    with tf.GradientTape() as tape:
      tape.watch(at)
      loss, stats = batch_loss(at, (take(batch[X_KEY]), take(batch[Y_KEY])),
                               own_mask)
      total = tf.reduce_sum(loss)
      if penalty is not None:
        total += tf.reduce_sum(penalty(at, take))
    gradients = [tf.convert_to_tensor(g) for g in tape.gradient(total, at)]
    own_state = collections.OrderedDict(state)
    for key in keys:
      own_state[key] = tf.nest.map_structure(take, state[key])
    new_state, new_weights = opt_next(own_state, tuple(own),
                                      tuple(gradients))
    weights = [put(w, n) for w, n in zip(weights, new_weights)]
    state = collections.OrderedDict(state)
    for key in keys:
      state[key] = tf.nest.map_structure(put, state[key], new_state[key])
    stats = collections.OrderedDict(
        (name, tf.scatter_nd(index, value, tf.reshape(k, [1])))
        for name, value in stats.items())
    examples = tf.reduce_sum(tf.cast(mask, tf.int64), axis=1)
    return state, weights, stats, examples, tf.cast(active, tf.int64)

  @tf.function
  def local_training(hparams, initial_weights, dataset, broadcast=None):
    initial_weights = [tf.convert_to_tensor(w) for w in initial_weights]
    k = tf.shape(initial_weights[0])[0]
    state, keys = initial_state(hparams, initial_weights, k)
    learning_rate = hparams[ground.LEARNING_RATE_KEY]
    counted = (_steps_per_client(dataset, k) if objective.count_steps
               else None)
    penalty = _client_hook(objective.penalty, broadcast, learning_rate,
                           counted)
    look_ahead = _client_hook(objective.look_ahead, broadcast,
                              learning_rate, counted)
    weights = list(initial_weights)
    zeros = tf.zeros(tf.reshape(k, [1]), tf.int64)
    num_examples, num_steps = zeros, zeros
    totals = collections.OrderedDict(
        (name, tf.zeros(tf.reshape(k, [1]), dtype))
        for name, dtype in stats_dtypes.items())
    for batch in iter(dataset):
      state, weights, stats, examples, active = step(
          state, keys, weights, batch, penalty, look_ahead)
      totals = collections.OrderedDict(
          (name, totals[name] + tf.cast(stats[name], totals[name].dtype))
          for name in totals)
      num_examples += examples
      num_steps += active
    delta = [a - b for a, b in zip(initial_weights, weights)]
    result = collections.OrderedDict([
        (ground.DELTA_KEY, delta),
        (NUM_EXAMPLES_KEY, num_examples),
        (ground.NUM_STEPS_KEY, num_steps),
        (STATS_KEY, totals),
    ])
    if report_fn is not None:
      result[EXTRAS_KEY] = collections.OrderedDict(report_fn(
          model, weights, dataset, broadcast, delta=delta,
          num_steps=num_steps, learning_rate=learning_rate,
          num_examples=num_examples))
    return result

  return local_training


# --- A vectorized report pass: FedCurv's Fisher ------------------------------


def per_example_fisher(model: VectorizedModel, weights: Sequence[tf.Tensor],
                       dataset: tf.data.Dataset,
                       max_examples: Optional[tf.Tensor] = None
                       ) -> list[tf.Tensor]:
  """Each client's mean over its examples of the squared per-example
  gradient of the loss, at its `weights`.

  What `fed_curv.empirical_fisher_diagonal` computes for a model without
  the fast path (the character LSTM): example i's loss is the model's batch
  loss on a batch of i alone, and F_k = sum_i (grad l_i)^2 / n_k over
  client k's first `max_examples[k]` examples (all of them without it), in
  its dataset's order; 0 for a client without one. The vectorized model must
  compute the inference-mode loss (no dropout; `VectorizedCharLstm` has none).

  Per step, the rows that count are gathered (`tf.where` of the mask and
  the limit), each gets its own copy of its client's weights ([N, ...],
  `tf.gather`), one forward and backward pass of `model.batch_loss` over
  the N one-example "clients" gives every row's own gradient (the copies
  share nothing), and the squares are summed into their clients
  (`tf.math.unsorted_segment_sum`). The copies and their gradients take
  2 N model sizes (N <= K B; the paper's LSTM, K = 10, B = 4: ~260 MB).

  Args:
    model: The `VectorizedModel`.
    weights: The clients' weights, [K, ...] each.
    dataset: The group's dataset (`group_datasets`).
    max_examples: Optional [K] integer tensor: the examples of each client
      that count (its first ones).

  Returns:
    A list shaped like `weights`: F_k stacked on the leading axis.
  """
  batch_loss = ground.unconverted(model.batch_loss)
  weights = [tf.convert_to_tensor(w) for w in weights]
  k = tf.shape(weights[0])[0]
  sums = tuple(tf.zeros_like(w) for w in weights)  # A tuple: loop variable.
  seen = tf.zeros(tf.reshape(k, [1]), tf.int64)  # Examples before the step.
  counts = tf.zeros(tf.reshape(k, [1]), tf.float32)
  if max_examples is not None:
    max_examples = tf.cast(max_examples, tf.int64)

  for batch in iter(dataset):
    mask = batch[MASK_KEY]  # [K, B]
    rows = tf.cast(mask, tf.int64)
    position = seen[:, tf.newaxis] + tf.cumsum(rows, axis=1) - 1
    counted = mask
    if max_examples is not None:
      counted = tf.logical_and(mask, position < max_examples[:, tf.newaxis])
    index = tf.where(counted)  # [N, 2]: (client, row).
    client = index[:, 0]
    copies = [tf.gather(w, client) for w in weights]
    x = tf.gather_nd(batch[X_KEY], index)[:, tf.newaxis]
    y = tf.gather_nd(batch[Y_KEY], index)[:, tf.newaxis]
    with tf.GradientTape() as tape:
      tape.watch(copies)
      loss, _ = batch_loss(copies, (x, y),
                           tf.ones(tf.shape(x)[:2], tf.bool))
      total = tf.reduce_sum(loss)
    gradients = tape.gradient(total, copies)
    sums = tuple(
        s + tf.math.unsorted_segment_sum(tf.square(tf.convert_to_tensor(g)),
                                         client, k)
        for s, g in zip(sums, gradients))
    counts += tf.reduce_sum(tf.cast(counted, tf.float32), axis=1)
    seen += tf.reduce_sum(rows, axis=1)
  return [tf.math.divide_no_nan(s, _leading(counts, s)) for s in sums]


def stats_dtypes_of(model: VectorizedModel, weight_specs: Sequence[Any],
                    input_spec: Any) -> collections.OrderedDict:
  """name -> dtype of `model.batch_loss`'s stats (traced once, in a graph).

  Args:
    model: The `VectorizedModel`.
    weight_specs: One client's weight `tf.TensorSpec`s.
    input_spec: The model's `(x, y)` input spec (batch axis first).
  """
  x_spec, y_spec = ground.features_and_labels(input_spec)
  with tf.Graph().as_default():
    weights = [tf.zeros([1] + [d or 1 for d in s.shape.as_list()], s.dtype)
               for s in weight_specs]
    x = tf.zeros([1, 1] + [d or 1 for d in x_spec.shape.as_list()[1:]],
                 x_spec.dtype)
    y = tf.zeros([1, 1] + [d or 1 for d in y_spec.shape.as_list()[1:]],
                 y_spec.dtype)
    _, stats = model.batch_loss(weights, (x, y), tf.ones([1, 1], tf.bool))
    return collections.OrderedDict(
        (name, tf.convert_to_tensor(v).dtype) for name, v in stats.items())


# --- The client work: one TFF client = one group -----------------------------


def _group_update(local_result, client_weighting):
  """(update, weight, extras, summed stats, non-finite count) of one group.

  `extras` (with a report pass) are the report's entries summed over the
  group's finite clients, else `None`. A client with a non-finite entry in
  its delta or its report drops out of all of them (as the per-client path
  zeroes its whole update and weight).
  """
  delta = local_result[ground.DELTA_KEY]
  extras = local_result.get(EXTRAS_KEY)
  checked = list(delta)
  if extras is not None:
    checked += [e for e in tf.nest.flatten(extras) if e.dtype.is_floating]
  per_client = [tf.reduce_all(tf.math.is_finite(tf.reshape(
      d, [tf.shape(d)[0], -1])), axis=1) for d in checked]
  finite = tf.reduce_all(tf.stack(per_client), axis=0)  # [K]
  if client_weighting == tff.learning.ClientWeighting.NUM_EXAMPLES:
    weights = tf.cast(local_result[NUM_EXAMPLES_KEY], tf.float32)
  else:
    weights = tf.ones_like(finite, tf.float32)
  weights = tf.where(finite, weights, 0.0)
  total = tf.reduce_sum(weights)
  update = []
  for d in delta:
    d = tf.where(_leading(finite, d), d, tf.zeros_like(d))
    weighted = tf.reduce_sum(_leading(tf.cast(weights, d.dtype), d) * d,
                             axis=0)
    update.append(tf.math.divide_no_nan(weighted, tf.cast(total, d.dtype)))
  if extras is not None:
    extras = tf.nest.map_structure(
        lambda e: tf.reduce_sum(
            tf.where(_leading(finite, e), e, tf.zeros_like(e)), axis=0),
        extras)
  stats = collections.OrderedDict(
      (name, tf.reduce_sum(tf.where(finite, value, tf.zeros_like(value))))
      for name, value in local_result[STATS_KEY].items())
  non_finite = tf.reduce_sum(tf.cast(tf.logical_not(finite), tf.int32))
  return update, total, extras, stats, non_finite


def _type_of(tensors: Any) -> tff.Type:
  """The TFF type of a structure of (graph) tensors."""
  return tff.types.tensorflow_to_type(tf.nest.map_structure(
      lambda t: tf.TensorSpec(t.shape, t.dtype), tensors))


def build_vectorized_local_training(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    vectorized_model: VectorizedModel,
    client_optimizer: tff.learning.optimizers.Optimizer,
    *,
    objective: client_work.LocalObjective = client_work.LocalObjective(),
    broadcast_type: Optional[tff.Type] = None,
    report_fn: Optional[Callable[..., Any]] = None,
    client_weighting: tff.learning.ClientWeighting = (
        tff.learning.ClientWeighting.NUM_EXAMPLES),
    learning_rate_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
) -> tff.learning.templates.ClientWorkProcess:
  """A `ClientWorkProcess` whose clients are groups (module docstring).

  Args:
    model_fn: The task's no-arg `VariableModel` builder: its weights type,
      input spec and metric finalizers are the process's.
    vectorized_model: The same model as a `VectorizedModel`.
    client_optimizer: The client optimizer (SGD, with or without
      momentum), with a `learning_rate` hyper-parameter.
    objective: The clients' local objective (penalty, look-ahead, step
      count; module docstring), as `client_work.build_local_training`
      takes it.
    broadcast_type: The unplaced type of what the distributor sends; the
      model's `ModelWeights` type when `None`.
    report_fn: Optional vectorized report pass (module docstring); the update
      is then `{'delta': ..., **its entries}`, each summed over the group.
    client_weighting: `NUM_EXAMPLES` (default) or `UNIFORM`, per client.
    learning_rate_schedule: Optional round number -> client learning rate.

  Returns:
    A `tff.learning.templates.ClientWorkProcess` with the state and the
    measurements of `client_work.build_local_training`'s, whose `next`
    takes one group dataset per TFF client (`group_datasets`).

  Raises:
    TypeError: If `client_weighting` is not a `tff.learning.ClientWeighting`
      or the optimizer has no `learning_rate`.
    ValueError: If the model has non-trainable variables, the optimizer
      keeps state other than one tensor per weight, the objective has a
      loss hook, or the vectorized model's metrics do not have the structure
      of the model's.
  """
  # Over 80 lines with its docstring: the client work's computations share the
  # types read here and are read in one place, as
  # `client_work.build_local_training`'s are.
  check_objective(objective)
  ground.check_client_weighting(client_weighting)
  with tf.Graph().as_default():
    model = model_fn()
    metrics_aggregation_fn = tff.learning.metrics.sum_then_finalize(
        ground.unconverted_finalizers(model))
    metrics_type = _type_of(model.report_local_unfinalized_metrics())
    input_spec = model.input_spec
    weights_type = tff.learning.models.weights_type_from_model(model)
    weight_specs = [tf.TensorSpec(v.shape, v.dtype)
                    for v in model.trainable_variables]
    if model.non_trainable_variables:
      raise ValueError(
          'Vectorized training needs a model without non-trainable variables; '
          f'this one has {len(model.non_trainable_variables)}.')
  per_client_state_keys(client_optimizer, weight_specs)
  stats_dtypes = stats_dtypes_of(vectorized_model, weight_specs, input_spec)
  with tf.Graph().as_default():
    vectorized_metrics = vectorized_model.unfinalized_metrics(
        collections.OrderedDict((n, tf.zeros([], d))
                                for n, d in stats_dtypes.items()))
    vectorized_metrics_type = _type_of(vectorized_metrics)
  if not vectorized_metrics_type.is_equivalent_to(metrics_type):
    raise ValueError('The vectorized model reports metrics of type '
                     f'{vectorized_metrics_type}, the model {metrics_type}.')
  data_type = tff.SequenceType(group_element_type(input_spec))
  if broadcast_type is None:
    broadcast_type = weights_type
  hooks = (objective.penalty is not None or objective.look_ahead is not None
           or report_fn is not None)

  state = client_work.client_work_state(client_optimizer,
                                       learning_rate_schedule)

  @tff.tensorflow.computation(state.hparams_type, broadcast_type, data_type)
  def group_update(hparams, broadcast, dataset):
    train = build_local_training_fn(vectorized_model, client_optimizer,
                                    stats_dtypes, objective=objective,
                                    report_fn=report_fn)
    first = dataset.take(1).get_single_element()
    k = tf.shape(first[MASK_KEY])[0]
    trainable = ground.model_weights_of(broadcast).trainable
    start = [_stack(w, k) for w in trainable]
    if hooks:
      result = train(hparams, start, dataset, broadcast)
    else:
      result = train(hparams, start, dataset)
    update, weight, extras, stats, non_finite = _group_update(
        result, client_weighting)
    update = tf.nest.pack_sequence_as(list(trainable), update)
    if extras is not None:
      update = collections.OrderedDict([(ground.DELTA_KEY, update)] +
                                       list(extras.items()))
    return (tff.learning.templates.ClientResult(update=update,
                                                update_weight=weight),
            vectorized_model.unfinalized_metrics(stats), non_finite)

  @tff.federated_computation(
      state.init_fn.type_signature.result,
      tff.FederatedType(broadcast_type, tff.CLIENTS),
      tff.FederatedType(data_type, tff.CLIENTS),
  )
  def next_fn(server_state, broadcast, group_data):
    hparams = tff.federated_map(state.round_hparams, server_state)
    client_result, model_outputs, non_finite = tff.federated_map(
        group_update, (tff.federated_broadcast(hparams), broadcast,
                       group_data))
    measurements = tff.federated_zip(collections.OrderedDict(
        train=metrics_aggregation_fn(model_outputs),
        client_learning_rate=tff.federated_map(state.learning_rate_of,
                                               hparams),
        non_finite_clients=tff.federated_sum(non_finite),
    ))
    return tff.templates.MeasuredProcessOutput(
        tff.federated_map(state.advance, server_state), client_result,
        measurements)

  return tff.learning.templates.ClientWorkProcess(
      state.init_fn, next_fn, get_hparams_fn=state.get_hparams_fn,
      set_hparams_fn=state.set_hparams_fn)
