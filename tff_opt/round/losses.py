"""Local objectives that replace the model's loss: FedNTD, FedRS, FedGKD,
FedADC+.

Each is written here once, as its paper's equation: a pure function of the
logits, the labels and what the client knows (a teacher's logits, the classes
it holds), and a `loss_fn_builder` for `client_work.LocalObjective` that
feeds it from the client's batch and the broadcast.

Notation: z = f(x | w) the logits of the model being trained (the student),
z_g those of a teacher, y the true label, C the number of classes, N the
examples of the batch (every position of a sequence model's output counts as
one), q^tau(z) = softmax(z / tau), and CE(z, y) = -(1/N) sum_n log
softmax(z_n)_{y_n}.

FedNTD (Lee et al., "Preservation of the Global Knowledge by Not-True
Distillation in Federated Learning", NeurIPS 2022). The teacher is the
broadcast global model w_t. With q~^tau(z) the softmax at temperature tau
over the C - 1 not-true classes only (the true class's logit removed):

    L = CE(z, y) + beta * tau^2 * (1/N) sum_n KL(q~^tau(z_g) || q~^tau(z))

FedRS (Li & Zhan, "FedRS: Federated Learning with Restricted Softmax for
Label Distribution Non-IID Data", KDD 2021). Client k holds the classes
C_k; the restricted softmax scales the logits of the others by alpha:

    L = CE(s * z, y),  s_c = 1 if c in C_k, alpha otherwise

FedGKD (Yao et al., "FedGKD: Towards Heterogeneous Federated Learning via
Global Knowledge Distillation", IEEE TC 2023; arXiv 2107.00051). The teacher
w_bar is the parameter average of the last M global models (FedGKD, not
FedGKD-VOTE); with z_bar its logits

    L = CE(z, y)
        + (gamma / 2) * tau^2 * (1/N) sum_n KL(q^tau(z_bar) || q^tau(z))

Choices written down here (each tested in `tests/test_losses.py`):
- The KL terms are multiplied by tau^2 (Hinton et al.'s scale, which keeps
  the term's gradient comparable across temperatures) and averaged over the
  batch: the authors' code does both (FedNTD's `NTD_Loss`, Lee-Gihun/FedNTD;
  FedGKD's `_divergence`, CGCL-codes/FedGKD, `KLDivLoss(reduction=
  'batchmean')`). FedNTD's paper prints L_NTD without tau^2; at the FedADC
  paper's tau = 1 the two agree.
- FedGKD's coefficient is the paper's gamma/2. The authors' code multiplies
  tau^2 KL by its `distillation_coefficient` (0.1 in their README run and,
  as lambda, in the FedADC paper's Section IV-A3), so gamma = 2 * that
  coefficient; `fed_gkd.GKD_GAMMA.default` = 0.2.
- FedRS scales the whole logit z_c = w_c . h + b_c of a missing class. The
  paper writes the restricted softmax for a final layer without bias,
  exp(alpha_c w_c . h) / sum_j exp(alpha_j w_j . h), i.e. it scales the
  classifier's weight vector w_c; for a bias-free final layer the two are
  the same, and with a bias this scales the augmented vector (w_c, b_c)
  acting on (h, 1). Only logits are visible to a loss hook (any
  `VariableModel`), hence this form. A class is held when the client's
  label statistics give it a positive share; the hard 1/alpha choice is the
  paper's (and the FedADC paper's description); the authors' FedRepo code
  also has a proportional variant, alpha + (1 - alpha) * n_c / max_j n_j,
  which is not used.
- FedNTD and FedGKD add their term to the model's own loss (`output.loss`,
  the tasks' sparse cross-entropy on logits, with any regularization the
  model adds); FedRS must recompute the cross-entropy on the restricted
  logits, so it replaces the model's loss entirely (the package's task
  models add no regularization losses). The model's predictions must be
  logits. Training metrics stay those of the model's own forward pass.
- Teachers run with `training=False` and never receive gradients.
"""

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.round import ground



class ModelHistory(NamedTuple):
  """FedGKD's broadcast (`algorithms/fed_gkd.py`): w_t and the previous
  global models kept in the server's buffer, as their sum and number."""
  model_weights: Any
  history_sum: Any  # Per trainable variable, over the buffer's n models.
  history_count: Any  # n, float32.


# --- Pieces ------------------------------------------------------------------


def _flat(logits, labels):
  """Logits as [N, C] and labels as [N] int32 (sequence outputs flattened)."""
  logits = tf.convert_to_tensor(logits)
  num_classes = logits.shape[-1]
  if num_classes is None:
    raise ValueError('The logits need a known number of classes (last axis), '
                     f'got shape {logits.shape}.')
  return (tf.reshape(logits, [-1, num_classes]),
          tf.reshape(tf.cast(labels, tf.int32), [-1]))


def cross_entropy(logits, labels) -> tf.Tensor:
  """CE(z, y): the mean softmax cross-entropy of integer labels."""
  logits, labels = _flat(logits, labels)
  return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=labels, logits=logits))


def distillation_kl(teacher_logits, logits, temperature) -> tf.Tensor:
  """tau^2 * (1/N) sum_n KL(q^tau(z_g) || q^tau(z)), over the last axis.

  The teacher's side is a constant (`tf.stop_gradient`).
  """
  teacher_logits = tf.stop_gradient(tf.convert_to_tensor(teacher_logits))
  logits = tf.convert_to_tensor(logits)
  num_classes = logits.shape[-1]
  teacher_logits = tf.reshape(teacher_logits, [-1, num_classes])
  logits = tf.reshape(logits, [-1, num_classes])
  target = tf.nn.softmax(teacher_logits / temperature)
  log_student = tf.nn.log_softmax(logits / temperature)
  kl = tf.reduce_sum(tf.math.xlogy(target, target) - target * log_student,
                     axis=-1)
  return temperature**2 * tf.reduce_mean(kl)


def not_true_logits(logits, labels) -> tf.Tensor:
  """The [N, C - 1] logits of the not-true classes (the true one removed).

  The classes keep their order; row n drops column y_n.
  """
  logits, labels = _flat(logits, labels)
  num_classes = logits.shape[-1]
  keep = tf.logical_not(tf.cast(tf.one_hot(labels, num_classes), tf.bool))
  return tf.reshape(tf.boolean_mask(logits, keep), [-1, num_classes - 1])


def not_true_distillation(logits, teacher_logits, labels,
                          temperature) -> tf.Tensor:
  """FedNTD's L_NTD: tau^2 * (1/N) sum_n KL(q~^tau(z_g) || q~^tau(z))."""
  return distillation_kl(not_true_logits(teacher_logits, labels),
                         not_true_logits(logits, labels), temperature)


def restricted_logits(logits, present, alpha) -> tf.Tensor:
  """FedRS's s * z: logits of the classes not `present` scaled by alpha.

  Args:
    logits: [..., C] logits z.
    present: [C] bool, the classes the client holds.
    alpha: The scale of the other classes, in [0, 1].
  """
  logits = tf.convert_to_tensor(logits)
  scale = tf.where(tf.cast(present, tf.bool), tf.ones([], logits.dtype),
                   tf.cast(alpha, logits.dtype))
  return logits * scale


# FedADC+'s default temperature: CS-KD's (Yun et al. 2020), whose
# implementation the FedADC paper follows (`algorithms/fed_adc.py`).
SELF_CONFIDENCE_TEMPERATURE = 4.0


def confidences(gamma: tf.Tensor) -> tf.Tensor:
  """FedADC+'s rho_i = gamma_i / max_j gamma_j (zeros when gamma is all 0)."""
  return gamma / tf.maximum(tf.reduce_max(gamma), 1e-12)


def self_confidence_target(teacher_probs: tf.Tensor, labels: tf.Tensor,
                           rho: tf.Tensor) -> tf.Tensor:
  """The FedADC+ target p_hat of Eq. 8-9.

  Args:
    teacher_probs: [batch, classes] teacher probabilities p~.
    labels: [batch] integer true labels y.
    rho: [classes] confidences rho_i = gamma_i / max_j gamma_j in [0, 1].

  Returns:
    [batch, classes] targets: (1 - rho_i) * p~_i off the true class, and
    1 minus their sum on it. rho = 0 gives p~; rho = 1 the one-hot label.
  """
  teacher_probs = tf.convert_to_tensor(teacher_probs)
  num_classes = tf.shape(teacher_probs)[-1]
  true_class = tf.one_hot(tf.cast(labels, tf.int32), num_classes,
                          dtype=teacher_probs.dtype)
  rho = tf.cast(rho, teacher_probs.dtype)
  off_true = (1.0 - true_class) * (1.0 - rho)[tf.newaxis, :] * teacher_probs
  return off_true + true_class * (
      1.0 - tf.reduce_sum(off_true, axis=-1, keepdims=True))


def self_confidence_kl(logits, teacher_logits, labels, rho,
                       temperature) -> tf.Tensor:
  """FedADC+'s (1/N) sum_n KL(p_hat_n || q^tau(z_n)) (Eq. 7, before tau^2).

  p_hat is `self_confidence_target` of the teacher's q^tau(z_g), a constant
  (`tf.stop_gradient`). The callers (`build_self_confidence_loss`,
  `program/personalization.py`'s fine-tuning) weigh it by lambda * tau^2.
  """
  target = tf.stop_gradient(self_confidence_target(
      tf.nn.softmax(teacher_logits / temperature), tf.reshape(labels, [-1]),
      rho))
  log_student = tf.nn.log_softmax(logits / temperature)
  kl = tf.reduce_sum(tf.math.xlogy(target, target) - target * log_student,
                     axis=-1)
  return tf.reduce_mean(kl)


def label_proportions(dataset: tf.data.Dataset,
                      num_classes: int) -> tf.Tensor:
  """gamma: the share of each class among the labels of `dataset`.

  Args:
    dataset: Batches `(x, y)` or `{'x': ..., 'y': ...}`.
    num_classes: Number of classes.

  Returns:
    A [num_classes] float32 tensor summing to 1 (zeros if there are no
    examples).
  """

  def add(counts, batch):
    _, y = ground.features_and_labels(batch)
    return counts + tf.reduce_sum(
        tf.one_hot(tf.reshape(tf.cast(y, tf.int32), [-1]), num_classes), 0)

  counts = dataset.reduce(tf.zeros([num_classes], tf.float32), add)
  return counts / tf.maximum(tf.reduce_sum(counts), 1.0)


def present_classes(label_stats) -> tf.Tensor:
  """[C] bool: the classes with a positive count (or share) in the stats."""
  return tf.convert_to_tensor(label_stats) > 0


def gkd_teacher_weights(current: Sequence[Any], history_sum: Sequence[Any],
                        history_count) -> list[tf.Tensor]:
  """FedGKD's w_bar = (w_t + sum of the n previous models) / (n + 1)."""
  return [(c + tf.cast(s, c.dtype)) / (1.0 + tf.cast(history_count, c.dtype))
          for c, s in zip(current, history_sum)]


# --- The three objectives ----------------------------------------------------


def fed_ntd_loss(logits, teacher_logits, labels, *, beta, temperature,
                 ce: Optional[tf.Tensor] = None) -> tf.Tensor:
  """FedNTD: CE(z, y) + beta * L_NTD (module docstring).

  Args:
    logits: [..., C] student logits z.
    teacher_logits: [..., C] logits z_g of the global model.
    labels: [...] integer true labels y.
    beta: The weight of the not-true distillation, >= 0.
    temperature: tau > 0.
    ce: The cross-entropy term when already computed (the model's own
      loss); `cross_entropy(logits, labels)` when `None`.
  """
  if ce is None:
    ce = cross_entropy(logits, labels)
  return ce + beta * not_true_distillation(logits, teacher_logits, labels,
                                           temperature)


def fed_rs_loss(logits, labels, present, *, alpha) -> tf.Tensor:
  """FedRS: CE(s * z, y), s_c = 1 for the `present` classes, else alpha."""
  return cross_entropy(restricted_logits(logits, present, alpha), labels)


def fed_gkd_loss(logits, teacher_logits, labels, *, gamma, temperature,
                 ce: Optional[tf.Tensor] = None) -> tf.Tensor:
  """FedGKD: CE(z, y) + (gamma / 2) * tau^2 * KL(q^tau(z_bar) || q^tau(z)).

  Args:
    logits: [..., C] student logits z.
    teacher_logits: [..., C] logits z_bar of the averaged teacher.
    labels: [...] integer true labels y.
    gamma: The distillation coefficient of the paper, >= 0 (the term's
      weight is gamma / 2).
    temperature: tau > 0.
    ce: The cross-entropy term when already computed (the model's own
      loss); `cross_entropy(logits, labels)` when `None`.
  """
  if ce is None:
    ce = cross_entropy(logits, labels)
  return ce + 0.5 * gamma * distillation_kl(teacher_logits, logits,
                                            temperature)


# --- loss_fn_builders for `client_work.LocalObjective` -----------------------

LossFnBuilder = Callable[..., Callable[..., tf.Tensor]]


def _teacher(model_fn):
  """A copy of the model whose weights are assigned before each use."""
  teacher = ground.model_to_overwrite(model_fn)
  return teacher, tff.learning.models.ModelWeights.from_model(teacher)


def _assign(variables, values) -> None:
  tf.nest.map_structure(lambda v, t: v.assign(t), variables, values)


def build_ntd_loss(beta: float, temperature: float) -> LossFnBuilder:
  """FedNTD's `loss_fn_builder`: `fed_ntd_loss`, teacher = broadcast w_t.

  The built `loss_fn(model, batch, output, broadcast, context)` evaluates a
  teacher copy of the model holding the broadcast weights on the batch and
  adds beta * L_NTD to `output.loss`.
  """

  def builder(model_fn):
    teacher, teacher_weights = _teacher(model_fn)

    def loss_fn(model, batch, output, broadcast, context):
      del model, context
      _assign(teacher_weights, ground.model_weights_of(broadcast))
      x, y = ground.features_and_labels(batch)
      teacher_logits = teacher.predict_on_batch(x, training=False)
      return fed_ntd_loss(output.predictions, teacher_logits, y, beta=beta,
                          temperature=temperature, ce=output.loss)

    return loss_fn

  return builder


def build_restricted_softmax_loss(alpha: float) -> LossFnBuilder:
  """FedRS's `loss_fn_builder`: `fed_rs_loss` on the client's classes.

  The classes the client holds are read from `context['client_stats']`, a
  [C] vector of its label counts or shares (`present_classes`), which the
  recipe's `client_stats_fn` computes in a pre-pass over its data.
  """

  def builder(model_fn):
    del model_fn

    def loss_fn(model, batch, output, broadcast, context):
      del model, broadcast
      _, y = ground.features_and_labels(batch)
      present = present_classes(context[ground.CLIENT_STATS_KEY])
      return fed_rs_loss(output.predictions, y, present, alpha=alpha)

    return loss_fn

  return builder


def build_gkd_loss(gamma: float, temperature: float) -> LossFnBuilder:
  """FedGKD's `loss_fn_builder`: `fed_gkd_loss`, teacher = w_bar.

  The broadcast (a `ModelHistory`) carries w_t and the sum and number of
  the previous global models in the server's buffer; the teacher's trainable weights are their mean
  with w_t (`gkd_teacher_weights`), its non-trainable ones w_t's.
  """

  def builder(model_fn):
    teacher, teacher_weights = _teacher(model_fn)

    def loss_fn(model, batch, output, broadcast, context):
      del model, context
      current = ground.model_weights_of(broadcast)
      _assign(teacher_weights.trainable, gkd_teacher_weights(
          current.trainable, broadcast.history_sum,
          broadcast.history_count))
      _assign(teacher_weights.non_trainable, current.non_trainable)
      x, y = ground.features_and_labels(batch)
      teacher_logits = teacher.predict_on_batch(x, training=False)
      return fed_gkd_loss(output.predictions, teacher_logits, y, gamma=gamma,
                          temperature=temperature, ce=output.loss)

    return loss_fn

  return builder


def build_self_confidence_loss(distill_lambda: float, temperature: float
                               ) -> LossFnBuilder:
  """FedADC+'s `loss_fn_builder` (Eq. 7): teacher = broadcast w_t.

  The built `loss_fn(model, batch, output, broadcast, context)` evaluates a
  teacher copy of the model, holding the broadcast weights, on the batch and
  returns (1 - lambda) * output.loss + lambda * tau^2 *
  `self_confidence_kl`, with rho (`confidences`) from
  `context['client_stats']` (the client's label proportions).

  Args:
    distill_lambda: lambda in [0, 1].
    temperature: tau > 0.
  """

  def builder(model_fn):
    teacher, teacher_weights = _teacher(model_fn)

    def loss_fn(model, batch, output, broadcast, context):
      del model
      _assign(teacher_weights, ground.model_weights_of(broadcast))
      x, y = ground.features_and_labels(batch)
      teacher_logits = tf.stop_gradient(
          teacher.predict_on_batch(x, training=False))
      kl = self_confidence_kl(
          output.predictions, teacher_logits, y,
          confidences(context[ground.CLIENT_STATS_KEY]), temperature)
      return ((1.0 - distill_lambda) * output.loss +
              distill_lambda * temperature**2 * kl)

    return loss_fn

  return builder
