"""The pieces of local objectives that replace the model's loss, shared.

An algorithm whose local loss is not the model's own (FedNTD, FedRS,
FedGKD, FedADC+) writes it in its module in `tff_opt/algorithms/`, as its
paper's equation: a pure function of the logits, the labels and what the
client knows (a teacher's logits, the classes it holds), and a
`loss_fn_builder` for `client_work.LocalObjective` that feeds it from the
client's batch and the broadcast. This module keeps what several of them
(or `program/personalization.py`) use:

    cross_entropy, flat_logits_and_labels   CE(z, y); FedNTD, FedRS, FedGKD
    distillation_kl                          FedNTD's and FedGKD's KL term
    teacher_copy, assign_weights, LossFnBuilder
                                             the teacher copy of the model
                                             (FedNTD, FedGKD, FedADC+)
    label_proportions                        FedRS, FedADC+, personalization
    confidences, self_confidence_target, self_confidence_kl,
    SELF_CONFIDENCE_TEMPERATURE              FedADC+ and personalization

The objectives themselves: `fed_ntd.fed_ntd_loss` / `build_ntd_loss`,
`fed_rs.fed_rs_loss` / `build_restricted_softmax_loss`,
`fed_gkd.fed_gkd_loss` / `build_gkd_loss`,
`fed_adc.build_self_confidence_loss`.

Notation: z = f(x | w) the logits of the model being trained (the student),
z_g those of a teacher, y the true label, C the number of classes, N the
examples of the batch (every position of a sequence model's output counts as
one), q^tau(z) = softmax(z / tau), and CE(z, y) = -(1/N) sum_n log
softmax(z_n)_{y_n}.

Choices written down here (each tested in `tests/test_losses.py`):
- The KL terms are multiplied by tau^2 (Hinton et al.'s scale, which keeps
  the term's gradient comparable across temperatures) and averaged over the
  batch: the authors' code does both (FedNTD's `NTD_Loss`, Lee-Gihun/FedNTD;
  FedGKD's `_divergence`, CGCL-codes/FedGKD, `KLDivLoss(reduction=
  'batchmean')`). FedNTD's paper prints L_NTD without tau^2; at the FedADC
  paper's tau = 1 the two agree.
- FedNTD and FedGKD add their term to the model's own loss (`output.loss`,
  the tasks' sparse cross-entropy on logits, with any regularization the
  model adds); FedRS must recompute the cross-entropy on the restricted
  logits, so it replaces the model's loss entirely (the package's task
  models add no regularization losses). The model's predictions must be
  logits. Training metrics stay those of the model's own forward pass.
- Teachers run with `training=False` and never receive gradients.
"""

from collections.abc import Callable

import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.round import ground


# --- Pieces ------------------------------------------------------------------


def flat_logits_and_labels(logits, labels):
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
  logits, labels = flat_logits_and_labels(logits, labels)
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
  (`tf.stop_gradient`). The callers (`fed_adc.build_self_confidence_loss`,
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


# --- loss_fn_builders for `client_work.LocalObjective` -----------------------

LossFnBuilder = Callable[..., Callable[..., tf.Tensor]]


def teacher_copy(model_fn):
  """A copy of the model whose weights are assigned before each use."""
  teacher = ground.model_to_overwrite(model_fn)
  return teacher, tff.learning.models.ModelWeights.from_model(teacher)


def assign_weights(variables, values) -> None:
  """Assigns each of `values` to its variable of `variables` (same nesting)."""
  tf.nest.map_structure(lambda v, t: v.assign(t), variables, values)


