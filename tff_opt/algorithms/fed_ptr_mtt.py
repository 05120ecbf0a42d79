"""Trajectory matching (MTT, Cazenavette et al. 2022) as FedPTR uses it.

FedPTR (Algorithm 1 of the paper) distils the last global step w_{t-1} ->
w_t into a small synthetic set D_syn = (x_syn, y_syn) and a learnable step
size alpha_syn. With `forward(weights, x) -> logits` a pure function of the
weights and CE the mean softmax cross-entropy:

    student_0     = w_{t-1}
    student_{n+1} = student_n - alpha_syn * grad CE(student_n; D_syn),
                    n = 0 .. N-1                       (unrolled, N inner steps)
    loss          = ||student_N - w_t||^2 / ||w_{t-1} - w_t||^2

and (x_syn, alpha_syn) take SGD steps (with momentum) on `loss` through the
unrolled steps (second-order gradients: nested `tf.GradientTape`s), for a
number of outer iterations. The projection of FedPTR is then

    w~_{t+1} = w_t trained P steps on D_syn with step alpha_syn.

Choices the paper leaves open (written down here, tested in
tests/test_mtt.py):
- Every inner step uses the whole synthetic set as one batch (the paper's
  sets are 10 or 2 images per class; MTT's default batch is the whole set).
- Labels are hard and fixed: `images_per_class` images of each class, in
  class order; only the images and alpha_syn are learned.
- Outer updates are SGD with heavy-ball momentum m (`momentum`), in
  PyTorch's form, which MTT's `torch.optim.SGD(momentum=0.5)` uses for both
  the images and alpha_syn:

      v <- m * v + grad,    value <- value - rate * v,

  with separate rates for the images (`image_lr`) and for alpha_syn
  (`lr_lr`); alpha_syn is learned directly (not its logarithm), as in MTT.
  m = 0 (this module's default) is plain gradient descent. The velocities
  start at zero in every `distill` call: one call is one MTT run on one
  trajectory segment (w_{t-1} -> w_t), and FedPTR's next run matches a
  different segment, so no velocity is carried from run to run.
- The denominator ||w_{t-1} - w_t||^2 is floored at 1e-12 (a rejected or
  identical round would otherwise divide by zero).
- The reported MTT loss is the one of the last outer iteration's student
  (before that iteration's update).

`forward_from_model_fn` turns a `tff.learning.models.VariableModel` builder
into such a pure forward: it builds the model with its trainable variables
replaced by the given tensors (a `tf.variable_creator_scope`, the trick
`tff.learning.models.functional_model_from_keras` uses), so gradients flow
to the weights. It must be called in graph mode (a `tff.tensorflow.
computation` or a `tf.Graph`), and the model must have no non-trainable
state that its forward pass updates (no batch normalisation).
"""

from collections.abc import Callable, Sequence

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import checks

Forward = Callable[[Sequence[tf.Tensor], tf.Tensor], tf.Tensor]

_DENOMINATOR_FLOOR = 1e-12


def forward_from_model_fn(
    model_fn: Callable[[], tff.learning.models.VariableModel]) -> Forward:
  """Returns `forward(trainable_weights, x) -> logits` for `model_fn`'s model.

  Args:
    model_fn: A no-arg callable returning a new `VariableModel` whose
      `predict_on_batch` returns logits.

  Returns:
    A pure function of the weights (list of tensors, model order) and a batch
    of inputs; it builds a fresh variable-less model on each call, so call
    it in graph mode.
  """

  def forward(weights, x):
    remaining = list(weights)

    def creator(next_creator, **kwargs):
      del next_creator
      if kwargs.get('trainable', True):
        if not remaining:
          raise ValueError('model_fn created more trainable variables than '
                           'weights were given.')
        return remaining.pop(0)
      initial = kwargs['initial_value']
      if callable(initial):
        initial = initial()
      return tf.convert_to_tensor(initial, dtype=kwargs.get('dtype'))

    with tf.variable_creator_scope(creator):
      model = model_fn()
    if remaining:
      raise ValueError(f'{len(remaining)} weights were left unused by '
                       'model_fn.')
    return model.predict_on_batch(x, training=True)

  return forward


def synthetic_labels(num_classes: int, images_per_class: int) -> tf.Tensor:
  """The fixed labels [0]*ipc + [1]*ipc + ... (int32)."""
  return tf.repeat(tf.range(num_classes, dtype=tf.int32), images_per_class)


def cross_entropy(forward: Forward, weights, x, y) -> tf.Tensor:
  """Mean softmax cross-entropy of `forward(weights, x)` against labels y."""
  logits = forward(weights, x)
  return tf.reduce_mean(
      tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def train_steps(forward: Forward, weights, x, y, lr, num_steps: int):
  """`num_steps` full-batch SGD steps on (x, y) from `weights` (unrolled).

  Differentiable with respect to `weights`, `x` and `lr` when called under an
  outer tape (each step's gradient is taken under its own tape).

  Returns:
    The list of weights after the steps.
  """
  weights = list(weights)
  for _ in range(num_steps):
    with tf.GradientTape() as tape:
      tape.watch(weights)
      loss = cross_entropy(forward, weights, x, y)
    grads = tape.gradient(loss, weights)
    weights = [w - tf.cast(lr, w.dtype) * g for w, g in zip(weights, grads)]
  return weights


def _squared_norm(tensors) -> tf.Tensor:
  return tf.add_n([tf.reduce_sum(tf.square(t)) for t in tensors])


def matching_loss(forward: Forward, start, target, x, y, lr,
                  num_steps: int) -> tf.Tensor:
  """||student_N - target||^2 / ||start - target||^2 (see module docstring).

  Args:
    forward: Pure forward of the weights.
    start: w_{t-1}, the student's start (list of tensors).
    target: w_t, the teacher (list of tensors).
    x: Synthetic images.
    y: Their int32 labels.
    lr: alpha_syn, the student's step size (scalar).
    num_steps: N, the number of unrolled student steps.

  Returns:
    The scalar matching loss.
  """
  student = train_steps(forward, start, x, y, lr, num_steps)
  numerator = _squared_norm([s - t for s, t in zip(student, target)])
  denominator = _squared_norm([s - t for s, t in zip(start, target)])
  return numerator / tf.maximum(denominator,
                                tf.cast(_DENOMINATOR_FLOOR, denominator.dtype))


def matching_gradients(forward: Forward, start, target, x, y, lr,
                       num_steps: int):
  """Returns (loss, d loss / d x, d loss / d lr) through the unrolled steps."""
  lr = tf.convert_to_tensor(lr, x.dtype)
  with tf.GradientTape() as tape:
    tape.watch([x, lr])
    loss = matching_loss(forward, start, target, x, y, lr, num_steps)
  grad_x, grad_lr = tape.gradient(loss, [x, lr])
  return loss, grad_x, grad_lr


def distill(forward: Forward, start, target, x, y, lr, *, outer_steps: int,
            inner_steps: int, image_lr: float, lr_lr: float,
            momentum: float = 0.0):
  """Runs `outer_steps` MTT updates of (x, lr) (a `tf.while_loop`).

  Each update is one SGD-with-momentum step (see the module docstring):
  v_x <- m v_x + dL/dx, x <- x - image_lr v_x, and likewise for lr with
  `lr_lr`; both velocities start at zero.

  Args:
    forward: Pure forward of the weights.
    start: w_{t-1} (list of tensors).
    target: w_t (list of tensors).
    x: Initial synthetic images.
    y: Their labels.
    lr: Initial alpha_syn (scalar).
    outer_steps: Number of gradient-descent updates of (x, alpha_syn).
    inner_steps: N, unrolled student steps per update.
    image_lr: Step size of the image updates.
    lr_lr: Step size of the alpha_syn updates.
    momentum: The momentum m of both updates, 0 <= m < 1 (0: plain gradient
      descent).

  Returns:
    `(x, lr, first_loss, last_loss)`: the updated images and step size, the
    matching loss before the first update and the one computed at the last
    update (both 0 when `outer_steps` is 0).

  Raises:
    ValueError: If `momentum` is not in [0, 1).
  """
  checks.check_unit_interval('momentum', momentum)
  x = tf.convert_to_tensor(x)
  lr = tf.convert_to_tensor(lr, x.dtype)
  zero = tf.zeros([], x.dtype)
  m = tf.cast(momentum, x.dtype)

  def body(i, x, lr, velocity_x, velocity_lr, first, last):
    loss, grad_x, grad_lr = matching_gradients(forward, start, target, x, y,
                                               lr, inner_steps)
    first = tf.where(tf.equal(i, 0), loss, first)
    velocity_x = m * velocity_x + grad_x
    velocity_lr = m * velocity_lr + grad_lr
    return (i + 1, x - tf.cast(image_lr, x.dtype) * velocity_x,
            lr - tf.cast(lr_lr, x.dtype) * velocity_lr, velocity_x,
            velocity_lr, first, loss)

  _, x, lr, _, _, first, last = tf.while_loop(
      lambda i, *_: i < outer_steps, body,
      (tf.constant(0), x, lr, tf.zeros_like(x), zero, zero, zero))
  return x, lr, first, last
