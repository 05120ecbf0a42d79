"""Penalties: pure functions added to a client's batch loss.

Every penalty has the signature

    penalty(weights, broadcast, *, learning_rate, <hyper-parameter>) -> scalar

where `weights` is the list of trainable variables (model order), `broadcast`
what the distributor sent (see `ground.model_weights_of`) and
`learning_rate` the round's client learning rate eta. An algorithm binds its
hyper-parameter with `functools.partial` and hands the result to the client
work (`client_work.LocalObjective(penalty=...)`), which adds it to the loss
inside the gradient tape: gradients come from autodiff, never from a
hand-written formula.

A penalty with per-client constants (FedFOR's d = w_{t-1} - w_t, FedCurv's
sqrt(u)) has one form, `<name>_hook(<hyper-parameters>)`: a
`ground.PrecomputedHook` of `<name>_constants(broadcast, *,
learning_rate)`, which the client work runs once per client, and
`<name>_step(weights, constants)`, run at every local step (the same
numbers as the paper's formula, fewer passes over model-sized tensors). A
hook is callable with the penalty signature above, so the formula's value
is `<name>_hook(...)(weights, broadcast, learning_rate=eta)`.

This module keeps the penalty more than one caller uses:

    proximal                   FedProx   (mu/2) ||w - w_t||^2
                               (also the fine-tuning of
                               `program/personalization.py`)

A penalty of one algorithm lives with it in `tff_opt/algorithms/`, written
in this form beside the broadcast it reads (a NamedTuple, or
`ground.TwoModels`; a stateful client's penalty gets a
`ground.ClientInput(broadcast, client_state)`):

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
"""

import tensorflow as tf

from tff_opt.round import ground


def proximal(weights, broadcast, *, learning_rate, mu) -> tf.Tensor:
  """FedProx's proximal term (mu/2) ||w - w_t||^2 (gradient mu (w - w_t)).

  Written as mu * sum(l2_loss(w - w_t)) (l2_loss(x) = ||x||^2 / 2): the same
  value, and autodiff gives the gradient as (w - w_t) * mu in one
  multiplication (the same numbers as through `tf.square`, fewer passes).

  Args:
    weights: The trainable variables, in model order.
    broadcast: What the distributor sent; its model weights are w_t.
    learning_rate: Unused (every penalty takes it).
    mu: The proximal strength, >= 0.

  Returns:
    A scalar tensor.
  """
  del learning_rate
  anchor = ground.model_weights_of(broadcast).trainable
  return mu * tf.add_n(
      [tf.nn.l2_loss(w - a) for w, a in zip(weights, anchor)])
