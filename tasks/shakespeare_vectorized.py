"""The Shakespeare character LSTM as a pure function of stacked weights.

`tasks/shakespeare.py` builds the model as Keras layers (embedding with
`mask_zero=True`, `lstm_layers` x LSTM with `return_sequences=True`, dense to
the 90-token vocabulary). `VectorizedCharLstm` computes the same logits, loss
and metrics from a list of weight tensors in that model's
`trainable_variables` order, for K models at once: every weight carries a
leading axis K (client k's copy is `w[k]`) and every batch one too (`x[k]`
is client k's batch). `tff_opt/round/vectorized_training.py` trains K clients
with it as one TensorFlow computation.

What the Keras model computes, and this module with it (checked against the
Keras model and TFF's `from_keras_model` wrapper in
`tests/test_shakespeare_vectorized.py`):

- Embedding: a row lookup; pad id 0 is looked up like any id (its vector is
  not zeroed), and `mask_zero` only makes the mask `x != 0`.
- LSTM (Keras' `LSTMCell`, TF 2.14): z = x W + h U + b, split into the gates
  in the order (i, f, c, o); i, f, o = sigmoid (the recurrent activation),
  c' = f c + i tanh(z_c), h' = o tanh(c'). At a masked step (input id 0)
  the state (h, c) is carried unchanged and the step's output is the
  previous step's output (Keras' `zero_output_for_mask=False`), i.e. the
  carried h; the second LSTM receives the same mask.
- Loss: TFF's `from_keras_model` calls the Keras model inside a
  `tf.function` (`predict_on_batch`), whose outputs do not carry Keras'
  `_keras_mask`, so `SparseCategoricalCrossentropy` averages over *all*
  B x T positions, padding included (checked: TFF's batch loss is the plain
  mean, not the masked one). The per-client batch loss here is the same
  plain mean over that client's real examples.
- Metrics, as `report_local_unfinalized_metrics()` of TFF's model orders
  them: `num_tokens` (targets != 0), `accuracy` (correct and counted targets
  != 0, argmax), `loss` (sum of batch loss x batch size, sum of batch
  sizes), `num_examples`, `num_batches`.

Design choices:
- Each LSTM layer projects its inputs for all T steps at once (one batched
  matmul, [K, B*T, D] x [K, D, 4H]); only the recurrent product h U is taken
  per step, inside `tf.scan` (or an unrolled Python loop, `unroll=True`:
  measured slower and 1.5-2.5 GB heavier on a paper-size round, kept for
  comparison; `benchmarks/vectorized_round.py --unroll`).
  All products are `tf.matmul` on stacked operands (BatchMatMulV2):
  `tf.einsum` was 2x slower and `tf.vectorized_map` over the scan cannot
  take its gradient (TensorList variants).
- Rows of a batch that are padding (a client's last, smaller batch, or a
  client without a batch at this step) are marked by `example_mask` [K, B]:
  they are computed (all-pad rows carry zero states) and weighted 0, so a
  client's loss and gradient are exactly those of its real rows.
- Weights may be any float dtype the Keras model uses (float32 here).
"""

import collections
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from tasks import shakespeare

# Trainable variables per LSTM layer: kernel, recurrent kernel, bias.
_PER_LSTM = 3
METRIC_NAMES = ('num_tokens', 'accuracy', 'loss', 'num_examples',
                'num_batches')


class VectorizedCharLstm:
  """K copies of the Shakespeare character LSTM, as one pure function.

  Weights are a list in the Keras model's `trainable_variables` order:
  embedding [V, E], then per LSTM layer kernel [D, 4H], recurrent kernel
  [H, 4H], bias [4H], then dense kernel [H, V] and bias [V]; each with a
  leading axis K for the K models.
  """

  def __init__(self, *, vocab_size: int = shakespeare.VOCAB_SIZE,
               embedding_dim: int = 8, lstm_units: int = 256,
               lstm_layers: int = 2, pad_id: int = shakespeare.PAD,
               unroll: bool = False):
    """Initializes the model's sizes.

    Args:
      vocab_size: Number of token ids (90).
      embedding_dim: Width of the embedding.
      lstm_units: Units of each LSTM layer.
      lstm_layers: Number of stacked LSTM layers.
      pad_id: The padding id: masked input steps, targets not counted by
        the accuracy and `num_tokens`.
      unroll: Step the recurrence in an unrolled Python loop instead of
        `tf.scan` (a larger graph, slower on CPU; for benchmarks).

    Raises:
      ValueError: If a size is below 1.
    """
    for name, value in (('vocab_size', vocab_size),
                        ('embedding_dim', embedding_dim),
                        ('lstm_units', lstm_units),
                        ('lstm_layers', lstm_layers)):
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f'{name} must be an integer of at least 1, got '
                         f'{value!r}.')
    self.vocab_size = vocab_size
    self.embedding_dim = embedding_dim
    self.lstm_units = lstm_units
    self.lstm_layers = lstm_layers
    self.pad_id = pad_id
    self.unroll = unroll

  @classmethod
  def from_weight_shapes(cls, shapes: Sequence[Any],
                         **kwargs) -> 'VectorizedCharLstm':
    """The model whose (unstacked) trainable weights have `shapes`.

    Args:
      shapes: The shapes of the Keras model's `trainable_variables`, in
        order (anything `tf.TensorShape` accepts).
      **kwargs: Passed on (`pad_id`, `unroll`).

    Returns:
      A `VectorizedCharLstm` of those sizes.

    Raises:
      ValueError: If the shapes are not those of an embedding, LSTM layers
        and a dense layer as `shakespeare.create_model` builds them.
    """
    shapes = [tuple(tf.TensorShape(s).as_list()) for s in shapes]
    layers, rest = divmod(len(shapes) - 3, _PER_LSTM)
    ok = len(shapes) >= 6 and rest == 0 and len(shapes[0]) == 2
    if ok:
      vocab, embedding = shapes[0]
      units = shapes[2][0] if len(shapes[2]) == 2 else -1
      expected = [(vocab, embedding)]
      width = embedding
      for _ in range(layers):
        expected += [(width, 4 * units), (units, 4 * units), (4 * units,)]
        width = units
      expected += [(units, vocab), (vocab,)]
      ok = shapes == expected
    if not ok:
      raise ValueError(
          'Expected the trainable weight shapes of an embedding [V, E], '
          'LSTM layers (kernel [D, 4H], recurrent kernel [H, 4H], bias '
          f'[4H]) and a dense layer [H, V], [V]; got {shapes}.')
    return cls(vocab_size=vocab, embedding_dim=embedding, lstm_units=units,
               lstm_layers=layers, **kwargs)

  def weight_shapes(self) -> list[tuple[int, ...]]:
    """The shapes of one model's weights (without the K axis), in order."""
    vocab, units = self.vocab_size, self.lstm_units
    shapes = [(vocab, self.embedding_dim)]
    width = self.embedding_dim
    for _ in range(self.lstm_layers):
      shapes += [(width, 4 * units), (units, 4 * units), (4 * units,)]
      width = units
    return shapes + [(units, vocab), (vocab,)]

  def _lstm(self, inputs, mask, kernel, recurrent_kernel, bias):
    """One LSTM layer over [K, B, T, D] inputs; returns [K, B, T, H]."""
    shape = tf.shape(inputs)
    k, b, t = shape[0], shape[1], shape[2]
    units = self.lstm_units
    # The input part of z for all T steps at once: [K, B*T, 4H].
    projected = tf.matmul(tf.reshape(inputs, [k, b * t, -1]), kernel)
    projected = projected + bias[:, tf.newaxis, :]
    # Time first for the recurrence: [T, K, B, 4H] and [T, K, B, 1].
    projected = tf.transpose(tf.reshape(projected, [k, b, t, 4 * units]),
                             [2, 0, 1, 3])
    step_mask = tf.transpose(mask, [2, 0, 1])[..., tf.newaxis]
    zeros = tf.zeros(tf.stack([k, b, units]), inputs.dtype)

    def step(carry, elements):
      h, c = carry
      z_x, m = elements
      z = z_x + tf.matmul(h, recurrent_kernel)
      z_i, z_f, z_c, z_o = tf.split(z, 4, axis=-1)
      c_new = tf.sigmoid(z_f) * c + tf.sigmoid(z_i) * tf.tanh(z_c)
      h_new = tf.sigmoid(z_o) * tf.tanh(c_new)
      return tf.where(m, h_new, h), tf.where(m, c_new, c)

    if self.unroll:
      length = inputs.shape[2]
      if length is None:
        raise ValueError('unroll=True needs a static sequence length.')
      carry, outputs = (zeros, zeros), []
      for i in range(length):
        carry = step(carry, (projected[i], step_mask[i]))
        outputs.append(carry[0])
      hidden = tf.stack(outputs)
    else:
      hidden, _ = tf.scan(step, (projected, step_mask),
                          initializer=(zeros, zeros))
    return tf.transpose(hidden, [1, 2, 0, 3])  # [K, B, T, H]

  def logits(self, weights: Sequence[tf.Tensor], x: tf.Tensor) -> tf.Tensor:
    """The K models' logits.

    Args:
      weights: The stacked weights ([K, ...] each), in the Keras model's
        `trainable_variables` order.
      x: Input ids [K, B, T] (int).

    Returns:
      Logits [K, B, T, V].

    Raises:
      ValueError: If `weights` has the wrong number of tensors.
    """
    weights = list(weights)
    if len(weights) != 3 + _PER_LSTM * self.lstm_layers:
      raise ValueError(f'Expected {3 + _PER_LSTM * self.lstm_layers} weight '
                       f'tensors, got {len(weights)}.')
    mask = tf.not_equal(x, tf.cast(self.pad_id, x.dtype))
    hidden = tf.gather(weights[0], x, batch_dims=1)  # [K, B, T, E]
    for layer in range(self.lstm_layers):
      kernel, recurrent_kernel, bias = weights[1 + _PER_LSTM * layer:
                                               1 + _PER_LSTM * (layer + 1)]
      hidden = self._lstm(hidden, mask, kernel, recurrent_kernel, bias)
    dense_kernel, dense_bias = weights[-2:]
    shape = tf.shape(hidden)
    flat = tf.reshape(hidden, [shape[0], shape[1] * shape[2], shape[3]])
    logits = tf.matmul(flat, dense_kernel) + dense_bias[:, tf.newaxis, :]
    return tf.reshape(
        logits, tf.concat([shape[:3], [tf.shape(dense_bias)[-1]]], 0))

  def batch_loss(self, weights: Sequence[tf.Tensor], batch: Any,
                 example_mask: tf.Tensor):
    """Each model's loss on its own batch, and the batch's metric terms.

    Args:
      weights: The stacked weights ([K, ...] each).
      batch: `(x, y)` or a mapping with 'x' and 'y': ids [K, B, T] each.
      example_mask: [K, B] bool: which rows of each client's batch are real
        examples.

    Returns:
      `(loss, stats)`: `loss` [K] is client k's mean loss over the B_k x T
      positions of its real rows (0 where B_k = 0), as TFF's model computes
      a batch loss; `stats` an `OrderedDict` of [K] tensors (float32
      `loss_sum` = loss x B_k, `correct`, `counted`; int64 `num_tokens`,
      `num_examples`, `num_batches`), summed over steps by the caller and
      turned into metrics by `unfinalized_metrics`.
    """
    if isinstance(batch, Mapping):
      x, y = batch['x'], batch['y']
    else:
      x, y = batch[0], batch[1]
    logits = self.logits(weights, x)
    dtype = logits.dtype
    rows = tf.cast(example_mask, dtype)  # [K, B]
    cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y, logits=logits)  # [K, B, T]
    num_rows = tf.reduce_sum(rows, axis=1)  # [K]
    positions = num_rows * tf.cast(tf.shape(y)[2], dtype)
    loss = tf.math.divide_no_nan(
        tf.reduce_sum(cross_entropy * rows[:, :, tf.newaxis], axis=[1, 2]),
        positions)
    counted = tf.cast(tf.not_equal(y, tf.cast(self.pad_id, y.dtype)),
                      tf.float32) * tf.cast(example_mask, tf.float32)[
                          :, :, tf.newaxis]
    predicted = tf.argmax(logits, axis=-1, output_type=y.dtype)
    correct = tf.cast(tf.equal(predicted, y), tf.float32) * counted
    num_examples = tf.reduce_sum(tf.cast(example_mask, tf.int64), axis=1)
    stats = collections.OrderedDict(
        loss_sum=tf.cast(loss * num_rows, tf.float32),
        correct=tf.reduce_sum(correct, axis=[1, 2]),
        counted=tf.reduce_sum(counted, axis=[1, 2]),
        num_tokens=tf.cast(tf.reduce_sum(counted, axis=[1, 2]), tf.int64),
        num_examples=num_examples,
        num_batches=tf.cast(num_examples > 0, tf.int64),
    )
    return loss, stats

  def unfinalized_metrics(self, stats: Any) -> collections.OrderedDict:
    """Summed `stats` as TFF's model reports its unfinalized metrics.

    Args:
      stats: The `batch_loss` stats, each summed to a scalar (over steps
        and clients).

    Returns:
      `OrderedDict` name -> list of scalars, in the structure and dtypes of
      `report_local_unfinalized_metrics()` of the task's model.
    """
    num_examples = stats['num_examples']
    return collections.OrderedDict(
        num_tokens=[stats['num_tokens']],
        accuracy=[stats['correct'], stats['counted']],
        loss=[stats['loss_sum'], tf.cast(num_examples, tf.float32)],
        num_examples=[num_examples],
        num_batches=[stats['num_batches']],
    )


def vectorized_model_for(model_fn, **kwargs) -> VectorizedCharLstm:
  """The `VectorizedCharLstm` of the task's `model_fn` (its weight shapes).

  Args:
    model_fn: The task's no-arg `VariableModel` builder (built once, in a
      graph of its own).
    **kwargs: Passed on (`pad_id`, `unroll`).

  Raises:
    ValueError: If the model is not the task's character LSTM.
  """
  with tf.Graph().as_default():
    model = model_fn()
    shapes = [v.shape for v in model.trainable_variables]
    if model.non_trainable_variables:
      raise ValueError('Expected the character LSTM (no non-trainable '
                       'variables).')
  return VectorizedCharLstm.from_weight_shapes(shapes, **kwargs)
