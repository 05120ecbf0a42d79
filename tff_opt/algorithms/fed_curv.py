"""FedCurv (Shoham et al., "Overcoming Forgetting in Federated Learning on
Non-IID Data"), Eq. 3 rearranged as in Sec. 3.1.

After local training, client k reports its delta and, at its final local
model w_k, the diagonal of the empirical Fisher information

    F_k = mean over its examples x of (grad_w log p(y_x | x; w_k))^2

(per-example squared gradients, not squared batch gradients) and F_k * w_k.
The server keeps the SUMS over the round's participants,

    u = sum_k F_k,    v = sum_k F_k * w_k,

and broadcasts them with the next model; client s then minimises

    L_s(w) + lam (w^T diag(u) w - 2 w^T v)          (gradient 2 lam (u w - v))

(`elastic_hook`, with u's square root and v / sqrt(u) computed once
per client; Eq. 3's constant term is not kept). Deltas are averaged
and applied by the server optimizer as in FedAvg.

Choices written down (and tested):
- First round: u = v = 0 (no penalty; FedAvg's round).
- Eq. 3 exactly (`cross_silo=True`; the binary's `--fedcurv_exact`): the
  paper's penalty sums over j != s, which the paper obtains "by
  subtraction". Each client keeps its last (F_k, F_k * w_k) and the round it
  sent them, and subtracts them from u, v when u, v are the sums of that
  very round (a client that did not take part in that round has nothing in
  them to subtract, so this is exact under partial participation too). That
  variant is a `client_states.ClientStatefulProcess`; it also broadcasts two
  int32 round counters.
- Stateless variant (`cross_silo=False`, the builder's default): u, v
  include the client's own previous contribution; a client cannot subtract
  it without remembering it. It differs from Eq. 3 only for a client that
  took part in the previous round.
- The binary's `--fedcurv_exact=auto` (default) runs Eq. 3 wherever the
  clients' previous statistics can be kept: when the client state, two
  float32 vectors of the model's size per training client, fits in
  `EXACT_STATE_BYTES` (2 GiB); e.g. FedCurv's 96 MNIST devices with its
  1.2M-parameter CNN need 0.9 GiB. Otherwise (cross-device populations such
  as Stack Overflow's 342,477 clients) it runs the stateless variant and says
  so. FedBN + FedCurv runs the stateless variant.
- Fisher: the loss used is the model's batch loss on one example (for the
  classification tasks here, -log p(y|x); a model's regularization losses
  would be included), with the model in inference mode (training=False).
  It is the mean over ONE epoch of the client's examples. The client's
  dataset holds its E local epochs (`client_epochs`; every task here
  shuffles, then repeats E times, then batches), so the Fisher is taken
  over the first ceil(n_E / E) of the n_E examples trained on: exactly one
  epoch, each example once, which is the mean over all E epochs (each
  example E times) up to float rounding, at 1/E of its cost. With
  `client_epochs=1` (the builder's default) every example of the dataset
  counts, whatever it holds. A dataset that repeats BEFORE shuffling (a
  buffer spanning epochs) may show some example twice in its first
  n_E / E: an unbiased one-epoch estimate, not the exact mean. At the
  claim's setting (E = 5) a round takes 5.7 s thus, 12.7 s with the Fisher
  over all E epochs (FedOpt's 4.0 s; `benchmarks.fedcurv_fisher_epochs`).
- How the Fisher is computed (the same numbers either way):
  * Fast path, when `fed_curv_fisher.is_supported(model)`: the model is TFF's
    `from_keras_model` wrapper itself (its Keras model and its single
    Keras loss are read from the wrapper's private `_keras_model` and
    `_loss_fns`, as FedBN reads `_keras_model`), the Keras model is a
    `Sequential` or a functional plain chain, only `Dense` and `Conv2D`
    layers (channels_last, with or without bias, any activation, no
    regularizers) own trainable weights, and every other layer is a known
    parameter-free one (Flatten, pooling, Dropout, Activation, Reshape,
    ...; `fed_curv_fisher.PARAMETER_FREE_LAYERS`). The dataset is re-batched
    into `FISHER_BATCH_SIZE` examples; each batch takes one forward and one
    backward pass of sum_i l_i to the layers' pre-activation outputs z,
    and the per-layer closed forms of sum_i (grad_i)^2 (Dense:
    (a^2)^T (g^2); Conv2D: per-example patches^T G, squared; see
    `tff_opt/algorithms/fed_curv_fisher.py`).
  * Fallback, for every other model (BatchNormalization, embeddings,
    LSTMs, branches, custom layers or losses, regularizers, a
    `VariableModel` not made by `from_keras_model`): one gradient pass per
    example, `model.forward_pass` on batches of one.
  The fast path takes 0.20-0.23 CPU-s for 200 EMNIST-CR examples where
  the loop takes 0.56 (`python -m benchmarks.fisher_pass`).
- A round rejected by the finalizer (non-finite) leaves u, v unchanged.
- Communication: three model-sized vectors each way.
"""

import collections
import functools
from collections.abc import Callable
from typing import Any, NamedTuple, Optional, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import checks
from tff_opt import tff_types
from tff_opt.algorithms import _common
from tff_opt.algorithms import fed_curv_fisher
from tff_opt.algorithms import hparams
from tff_opt.algorithms import recipe as recipe_lib
from tff_opt.round import aggregators
from tff_opt.round import client_states
from tff_opt.round import client_work as client_work_lib
from tff_opt.round import distributors
from tff_opt.round import finalizers
from tff_opt.round import ground
from tff_opt.round import vectorized_training

FISHER_SUM_KEY = 'fisher_sum'  # u, in the finalizer's state.
FISHER_WEIGHT_SUM_KEY = 'fisher_weight_sum'  # v, in the finalizer's state.
FISHER_KEY = 'fisher'
FISHER_WEIGHTS_KEY = 'fisher_weights'
SOURCE_ROUND_KEY = 'source_round'
CLIENT_ROUND_KEY = 'round'


class FisherSums(NamedTuple):
  """FedCurv's broadcast (`algorithms/fed_curv.py`, stateless variant)."""
  model_weights: Any
  fisher_sum: Any  # u = sum_k diag(F_k), shaped like the trainables.
  fisher_weight_sum: Any  # v = sum_k diag(F_k) * w_k.


Broadcast = FisherSums  # (w_t, u, v): the stateless variant's.


class ExactBroadcast(NamedTuple):
  """Eq. 3's broadcast: `Broadcast` and the rounds that tell a client
  whether u, v hold its own last terms (`excluding_own`)."""
  model_weights: Any
  fisher_sum: Any  # u
  fisher_weight_sum: Any  # v
  round_num: Any  # The round being broadcast, int32.
  source_round: Any  # The round whose clients u, v sum; -1 before any.
FISHER_BATCH_SIZE = 32  # Examples per batch of the fast Fisher pass.
EXACT_STATE_BYTES = 2 * 1024**3  # --fedcurv_exact=auto's client-state budget.
EXACT_CHOICES = ('auto', 'on', 'off')


LAM = hparams.HParam(
    'fedcurv_lam', None, 'FedCurv penalty strength lambda; needed by fedcurv.',
    lower=0.0, needed=True, argument='lam', aliases=('lam',))
EXACT = hparams.HParam(
    'fedcurv_exact', 'auto', 'FedCurv: on = the paper\'s Eq. 3 (each '
    'client subtracts its own last Fisher terms from u, v; client state), '
    'off = the stateless variant (u, v include them), auto = on where the '
    'client state (2 model-sized vectors per client) fits in 2 GiB.',
    kind='enum', choices=EXACT_CHOICES, argument='cross_silo')
SPEC = hparams.Spec(
    summary=('FedCurv: Fisher sums u, v broadcast, local penalty lam (w^T '
             'diag(u) w - 2 w^T v) (--fedcurv_lam), Eq. 3 (the client\'s '
             'own term subtracted) per --fedcurv_exact, server optimizer from '
             '--server_opt'),
    hparams=(LAM, EXACT),
    # Shoham et al.: the plain mean of the participants' models.
    client_weighting=tff.learning.ClientWeighting.UNIFORM,
    task_facts=('num_clients', 'client_epochs'))


def elastic_constants(broadcast, *, learning_rate, lam):
  """FedCurv's per-client constants: (sqrt(u), v / sqrt(u), lam).

  Where u <= 0 the penalty has no term: a sum of Fisher diagonals is never
  negative and v = sum F w is 0 where it is 0; u - F_own of the cross-silo
  variant can round below 0 (with v - (F w)_own rounding near 0), and is
  clamped at 0 before the square root; v / sqrt(u) is 0 where u is 0.

  Args:
    broadcast: A `FisherSums` (or any broadcast with its `fisher_sum` u
      and `fisher_weight_sum` v, each a list shaped like the trainables).
    learning_rate: Unused.
    lam: The penalty strength lambda, >= 0.

  Returns:
    A tuple `(root, target, lam)`: sqrt(u) and v / sqrt(u) as lists in
    model order, and lam.
  """
  del learning_rate
  root = [tf.sqrt(tf.maximum(u, 0.0)) for u in broadcast.fisher_sum]
  target = [tf.math.divide_no_nan(v, r)
            for v, r in zip(broadcast.fisher_weight_sum, root)]
  return root, target, lam


def elastic_step(weights, constants) -> tf.Tensor:
  """FedCurv's penalty from its constants: lam sum (sqrt(u) w - v/sqrt(u))^2.

  Equal to lam (w^T diag(u) w - 2 w^T v) plus the constant lam sum v^2 / u,
  so with the same gradient 2 lam (u w - v); written as an `l2_loss` of one
  product and one difference, autodiff needs a few passes over the weights
  per step instead of a dozen.

  Args:
    weights: The trainable variables, in model order.
    constants: `elastic_constants(...)`.

  Returns:
    A scalar tensor.
  """
  root, target, lam = constants
  return (2.0 * lam) * tf.add_n([
      tf.nn.l2_loss(r * w - t) for w, r, t in zip(weights, root, target)])


def elastic_hook(lam: float, adjust=None) -> ground.PrecomputedHook:
  """FedCurv's penalty, Eq. 3 as rearranged in Sec. 3.1 (up to a constant):

      lam (w^T diag(u) w - 2 w^T v) + const,   gradient 2 lam (u w - v),

  where u and v are the broadcast's `fisher_sum` and `fisher_weight_sum`
  (Eq. 3's constant is not kept; `elastic_step` adds lam sum v^2 / u).
  sqrt(u) and v / sqrt(u) are computed once per client
  (`elastic_constants`), the sum at every step (`elastic_step`).

  Args:
    lam: The penalty strength lambda, >= 0.
    adjust: Optional `broadcast -> broadcast` applied first, once per
      client (FedCurv's cross-silo variant removes the client's own
      contribution from u and v with it).

  Returns:
    A `ground.PrecomputedHook`; called as `hook(weights, broadcast, *,
    learning_rate)` (a broadcast with `fisher_sum` and `fisher_weight_sum`,
    each a list shaped like the trainable weights) it returns the penalty's
    value (of the adjusted broadcast), a scalar tensor.
  """

  def constants(broadcast, *, learning_rate):
    if adjust is not None:
      broadcast = adjust(broadcast)
    return elastic_constants(broadcast, learning_rate=learning_rate, lam=lam)

  return ground.PrecomputedHook(constants, elastic_step)


def empirical_fisher_diagonal(model, dataset, *,
                              batch_size: int = FISHER_BATCH_SIZE,
                              max_examples=None):
  """Mean over the dataset's examples of the squared per-example gradient.

  Fast path (`fed_curv_fisher.is_supported(model)`: a Keras chain of Dense /
  Conv2D layers wrapped by `tff.learning.models.from_keras_model`): the
  dataset is re-batched into `batch_size` examples and each batch takes one
  forward and one backward pass (`fed_curv_fisher.squared_gradient_sums`);
  the metric variables are not touched. Any other model: one gradient pass per
  example (batches of one, `model.forward_pass` with `training=False`),
  which updates the model's metric variables (loss, accuracy, example and
  batch counts) and leaves them so. When this runs as FedCurv's report
  hook, `client_work` saves `model.local_variables` before the hook and
  restores them after it, so neither path reaches the training metrics.

  Args:
    model: A `tff.learning.models.VariableModel` (its current weights).
    dataset: Batches of examples; each example counts on its own.
    batch_size: Examples per batch of the fast path (memory is bounded by
      it; the result does not depend on it).
    max_examples: If given (an integer, or an integer scalar tensor), only
      the dataset's first `max_examples` examples count (FedCurv: one
      epoch of a dataset holding several).

  Returns:
    A list of tensors shaped like `model.trainable_variables`.

  Raises:
    ValueError: If `batch_size` is not a positive integer.
  """
  checks.check_int('batch_size', batch_size)
  if max_examples is not None:
    dataset = dataset.unbatch().take(tf.cast(max_examples, tf.int64)).batch(
        batch_size)
  chain = fed_curv_fisher.keras_chain(model)
  if chain is None:
    return _per_example_fisher(model, dataset)
  weights = model.trainable_variables
  sums = tuple(tf.zeros_like(w) for w in weights)  # A tuple: loop variable.
  count = tf.constant(0.0)
  # An iterator, not `for batch in dataset`: autograph turns the latter into
  # a `dataset.reduce`, whose body tf.data runs about 1.5x slower here.
  for batch in iter(dataset.unbatch().batch(batch_size)):
    batch_sums, batch_count = fed_curv_fisher.squared_gradient_sums(
        chain, model, batch, max_examples=batch_size)
    sums = tuple(s + b for s, b in zip(sums, batch_sums))
    count += batch_count
  return [tf.math.divide_no_nan(s, count) for s in sums]


def _per_example_fisher(model, dataset):
  """`empirical_fisher_diagonal` for any model: batches of one example."""
  weights = model.trainable_variables
  sums = tuple(tf.zeros_like(w) for w in weights)  # A tuple: loop variable.
  count = tf.constant(0.0)
  for example in dataset.unbatch().batch(1):
    with tf.GradientTape() as tape:
      loss = model.forward_pass(example, training=False).loss
    grads = tape.gradient(loss, weights)
    sums = tuple(s + tf.square(g) for s, g in zip(sums, grads))
    count += 1.0
  return [tf.math.divide_no_nan(s, count) for s in sums]


def _one_epoch(num_examples, client_epochs):
  """ceil(n_E / E): the examples of one epoch (module docstring); `None`
  (all of them) for one epoch."""
  if client_epochs > 1:
    return (num_examples + client_epochs - 1) // client_epochs
  return None


def _fisher_report(model, dataset, broadcast, *, delta, num_steps,
                   learning_rate, num_examples, client_epochs):
  """F_k and F_k * w_k at the final local model, over one epoch."""
  del broadcast, delta, num_steps, learning_rate
  fisher = empirical_fisher_diagonal(
      model, dataset, max_examples=_one_epoch(num_examples, client_epochs))
  return collections.OrderedDict([
      (FISHER_KEY, fisher),
      (FISHER_WEIGHTS_KEY,
       [f * w for f, w in zip(fisher, model.trainable_variables)]),
  ])


def _vectorized_fisher_report(model, weights, dataset, broadcast, *, delta,
                              num_steps, learning_rate, num_examples,
                              client_epochs):
  """`_fisher_report` of K clients at once, on a `VectorizedModel`.

  The vectorized client path's form (`vectorized_training`): each client's
  F_k over its own first epoch and F_k * w_k at its own final weights,
  stacked [K, ...]; the per-example gradients are the same as the
  per-example path's above (`vectorized_training.per_example_fisher`).
  """
  del broadcast, delta, num_steps, learning_rate
  fisher = vectorized_training.per_example_fisher(
      model, weights, dataset,
      max_examples=_one_epoch(num_examples, client_epochs))
  return collections.OrderedDict([
      (FISHER_KEY, fisher),
      (FISHER_WEIGHTS_KEY, [f * w for f, w in zip(fisher, weights)]),
  ])


def excluding_own(broadcast):
  """u, v without the client's own last contribution: a `Broadcast`.

  Used by the cross-silo variant, on its `ground.ClientInput` (an
  `ExactBroadcast` and the client's state): when the client's stored
  contribution is from the round whose sums are broadcast, u - F_own and
  v - (F w)_own replace u and v (Eq. 3's sum over j != s).
  """
  received, state = broadcast.broadcast, broadcast.client_state
  own = tf.logical_and(
      tf.equal(state[CLIENT_ROUND_KEY], received.source_round),
      received.source_round >= 0)
  scale = tf.cast(own, tf.float32)
  return Broadcast(
      received.model_weights,
      [u - scale * f for u, f in zip(received.fisher_sum, state[FISHER_KEY])],
      [v - scale * f for v, f in zip(received.fisher_weight_sum,
                                     state[FISHER_WEIGHTS_KEY])])


def build_fed_curv(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    *,
    lam: float,
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    client_weighting: tff.learning.ClientWeighting = SPEC.client_weighting,
    client_lr_schedule: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    cross_silo: Union[bool, str] = False,
    client_epochs: int = 1,
    num_clients: Optional[int] = None,
):
  """Builds a FedCurv process.

  Args:
    model_fn: A no-arg callable returning a new
      `tff.learning.models.VariableModel` on each call.
    lam: The penalty strength lambda, >= 0.
    client_optimizer_fn: The client's `tff.learning.optimizers.Optimizer`.
    server_optimizer_fn: The server's optimizer.
    client_weighting: `UNIFORM` (default, `SPEC.client_weighting`: the paper's
      plain mean of the participants' models) or `NUM_EXAMPLES`, for the deltas
      (u and v are always plain sums).
    client_lr_schedule: Optional round number -> client learning rate.
    cross_silo: Each client subtracts its own previous contribution from
      u, v (see the module docstring); clients then keep state. `True` or
      'on': Eq. 3; `False` or 'off': the stateless variant; 'auto' (the
      `--fedcurv_exact` flag's default, `EXACT`): Eq. 3 where its client
      state for `num_clients` clients fits (`resolve_exact`). `False` by
      default: Eq. 3's state is sized by the population, which the builder
      is not told unless `num_clients` is given.
    client_epochs: The local epochs each client dataset holds (shuffled,
      then repeated): the Fisher is taken over one of them, the first
      1/`client_epochs` of the examples (see the module docstring). 1
      (default): over the whole dataset.
    num_clients: The population, which `cross_silo='auto'` needs.

  Returns:
    A `tff.learning.templates.LearningProcess` (or, with `cross_silo`, a
    `client_states.ClientStatefulProcess`); its metrics include
    `communication/{bytes_server_to_client, bytes_client_to_server}`.

  Raises:
    ValueError: If `lam` is negative or not a finite number, `cross_silo`
      is none of the above ('auto' without `num_clients` included), or
      `client_epochs` is not a positive integer.
    TypeError: If an optimizer is not a `tff.learning.optimizers.Optimizer`.
  """
  if not isinstance(cross_silo, bool):
    cross_silo = resolve_exact(cross_silo, model_fn, num_clients,
                               name='cross_silo')
  recipe_fn = fed_curv_recipe(lam=lam, server_optimizer_fn=server_optimizer_fn,
                              cross_silo=cross_silo,
                              client_epochs=client_epochs)
  return recipe_lib.assemble(model_fn, recipe_fn, client_optimizer_fn,
                             client_weighting, client_lr_schedule)


def exact_state_bytes(model_fn, num_clients: int) -> int:
  """Bytes of Eq. 3's client state: F_k and F_k * w_k for every client."""
  model = model_fn()
  size = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
  return 2 * 4 * size * num_clients


def resolve_exact(exact: str, model_fn, num_clients: Optional[int], *,
                  name: str = 'fedcurv_exact') -> bool:
  """`--fedcurv_exact` ('auto', 'on', 'off') -> whether to run Eq. 3.

  Args:
    exact: 'on', 'off' or 'auto'.
    model_fn: The model, whose size 'auto' weighs.
    num_clients: The population, which 'auto' needs.
    name: What the messages call `exact`.

  Raises:
    ValueError: If `exact` is not one of `EXACT_CHOICES`, or is 'auto'
      without `num_clients`.
  """
  EXACT.check(exact, name)
  if exact != 'auto':
    return exact == 'on'
  if num_clients is None:
    raise ValueError(f"{name}='auto' needs the number of training "
                     'clients.')
  return exact_state_bytes(model_fn, num_clients) <= EXACT_STATE_BYTES



def stateless_recipe(
    *,
    lam: float,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    cross_silo: Union[bool, str] = False,
    client_epochs: int = 1,
    num_clients: Optional[int] = None,
) -> recipe_lib.RecipeFn:
  """FedCurv's stateless variant, as FedBN composes it (`fed_bn`).

  FedBN keeps each client's batch-norm values as its client state, and
  over FedCurv it runs the stateless variant (each client's own Fisher
  terms stay in u, v); this takes `build_fed_curv`'s arguments, so that
  FedBN is given what FedCurv is, and refuses Eq. 3 where it is asked for.

  Args:
    lam: As for `build_fed_curv`.
    server_optimizer_fn: The server's optimizer.
    cross_silo: `False`, 'off' or 'auto' ('auto' is the stateless variant
      here); `True` or 'on' are refused.
    client_epochs: As for `build_fed_curv`.
    num_clients: Not needed (nothing here is sized by the population);
      accepted since FedCurv takes it.

  Raises:
    ValueError: If `cross_silo` asks for Eq. 3 or is not one of the above,
      or another argument is out of range.
  """
  del num_clients  # The stateless variant holds nothing per client.
  if not isinstance(cross_silo, bool):
    EXACT.check(cross_silo, 'cross_silo')
  if cross_silo is True or cross_silo == 'on':
    raise ValueError(
        f'cross_silo={cross_silo!r}: FedBN over FedCurv runs its stateless '
        "variant (each client's own Fisher terms stay in u, v); Eq. 3 "
        "(cross_silo) is not available with FedBN: use 'off' or 'auto'.")
  return fed_curv_recipe(lam=lam, server_optimizer_fn=server_optimizer_fn,
                         client_epochs=client_epochs)


def fed_curv_recipe(
    *,
    lam: float,
    server_optimizer_fn: tff.learning.optimizers.Optimizer,
    cross_silo: bool = False,
    client_epochs: int = 1,
) -> recipe_lib.RecipeFn:
  """FedCurv's recipe (see the module docstring), for `recipe.assemble`.

  The finalizer keeps u = sum_j diag(F_j) and v = sum_j diag(F_j) * w_j
  (plain sums over the round's clients) next to the server optimizer's
  state, and the distributor broadcasts them with w_t; the clients report
  their delta plus F_k and F_k * w_k (`_fisher_report`), averaged (delta)
  and summed (the rest) by `aggregators.mean_delta_sum_rest`; the Fisher
  runs over one of the dataset's `client_epochs` epochs.

  Raises:
    ValueError: If `lam` is negative or not a finite number, or
      `client_epochs` is not a positive integer.
  """
  # Over 80 lines with its docstring: the broadcast, the report pass and the
  # finalizer's extras share the types read here and are read in one place.
  LAM.check(lam)
  checks.check_int('client_epochs', client_epochs)

  def recipe_fn(weights_type):
    _common.check_server_optimizer(server_optimizer_fn)
    zeros = tff_types.zeros_of(weights_type.trainable)
    vector_type = tff_types.type_of(zeros)
    broadcast_class = ExactBroadcast if cross_silo else Broadcast
    broadcast_type = tff_types.named_tuple_type(
        broadcast_class, weights_type, vector_type, vector_type,
        *[tff.TensorType(np.int32)] * (len(broadcast_class._fields) - 3))
    # The finalizer's extras hold what is broadcast beside the model, under
    # the broadcast's own field names (and so the checkpoints' keys).
    initial_extras = collections.OrderedDict([
        (FISHER_SUM_KEY, zeros),
        (FISHER_WEIGHT_SUM_KEY, tff_types.zeros_of(vector_type)),
    ])
    if cross_silo:
      initial_extras[ground.ROUND_NUM_KEY] = np.int32(0)
      initial_extras[SOURCE_ROUND_KEY] = np.int32(-1)

    def update_extras(extras, aggregate):
      sums = aggregate[aggregators.SUMS_KEY]
      updated = collections.OrderedDict([
          (FISHER_SUM_KEY, sums[FISHER_KEY]),
          (FISHER_WEIGHT_SUM_KEY, sums[FISHER_WEIGHTS_KEY]),
      ])
      if cross_silo:
        updated[ground.ROUND_NUM_KEY] = extras[ground.ROUND_NUM_KEY] + 1
        updated[SOURCE_ROUND_KEY] = extras[ground.ROUND_NUM_KEY]
      return updated

    def finalizer_fn(aggregate_type):
      return finalizers.apply_optimizer_with_extras(
          server_optimizer_fn, weights_type, aggregate_type,
          initial_extras=initial_extras, update_extras=update_extras)

    def broadcast_fn(model_weights, finalizer_state):
      extras = finalizer_state[finalizers.EXTRAS_KEY]
      return broadcast_class(model_weights, *(
          extras[name] for name in broadcast_class._fields[1:]))

    def distributor_fn(finalizer_state_type):
      return distributors.with_finalizer_state(
          weights_type, finalizer_state_type, broadcast_fn)

    parts = dict(
        distributor_fn=distributor_fn,
        aggregator_fn=aggregators.mean_delta_sum_rest,
        finalizer_fn=finalizer_fn,
        passes=client_work_lib.ClientPasses(
            report_fn=functools.partial(_fisher_report,
                                        client_epochs=client_epochs),
            vectorized_report_fn=functools.partial(
                _vectorized_fisher_report, client_epochs=client_epochs)))
    if not cross_silo:
      return recipe_lib.Recipe(
          work_broadcast_type=broadcast_type,
          objective=client_work_lib.LocalObjective(
              penalty=elastic_hook(lam)),
          **parts)

    initial_client_state = collections.OrderedDict([
        (FISHER_KEY, tff_types.zeros_of(vector_type)),
        (FISHER_WEIGHTS_KEY, tff_types.zeros_of(vector_type)),
        (CLIENT_ROUND_KEY, np.int32(-1)),
    ])

    def client_state_update(client_input, update):
      return collections.OrderedDict([
          (FISHER_KEY, update[FISHER_KEY]),
          (FISHER_WEIGHTS_KEY, update[FISHER_WEIGHTS_KEY]),
          (CLIENT_ROUND_KEY, client_input.broadcast.round_num),
      ])

    return recipe_lib.Recipe(
        work_broadcast_type=client_states.client_broadcast_type(
            broadcast_type, tff_types.type_of(initial_client_state)),
        objective=client_work_lib.LocalObjective(
            penalty=elastic_hook(lam, adjust=excluding_own)),
        initial_client_state=initial_client_state,
        client_state_update=client_state_update,
        **parts)

  return recipe_fn
