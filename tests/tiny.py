"""Tiny models and hand-made clients shared by the tests.

A linear softmax classifier on 4 features and 3 classes: small enough to
reproduce every algorithm in NumPy, real enough to exercise TFF's types.
"""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.round import client_states

NUM_FEATURES = 4
NUM_CLASSES = 3


def keras_model() -> tf.keras.Model:
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(NUM_FEATURES,)),
      tf.keras.layers.Dense(NUM_CLASSES, kernel_initializer='zeros'),
  ])


INPUT_SPEC = (tf.TensorSpec([None, NUM_FEATURES], tf.float32),
              tf.TensorSpec([None], tf.int32))


def model_fn() -> tff.learning.models.VariableModel:
  return tff.learning.models.from_keras_model(
      keras_model(),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=INPUT_SPEC,
      metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')])


def make_clients(num_clients=3, seed=0, sizes=(6, 10, 4)):
  """Returns [(x, y)] NumPy arrays, one pair per client, of unequal sizes."""
  rng = np.random.default_rng(seed)
  clients = []
  for k in range(num_clients):
    n = sizes[k % len(sizes)]
    x = rng.normal(size=(n, NUM_FEATURES)).astype(np.float32)
    y = rng.integers(0, NUM_CLASSES, size=n).astype(np.int32)
    clients.append((x, y))
  return clients


def full_batch_datasets(clients, local_steps=1):
  """One dataset per client: its whole data as one batch, `local_steps` times."""
  return [
      tf.data.Dataset.from_tensors((x, y)).repeat(local_steps)
      for x, y in clients
  ]


def initial_weights(seed=1):
  """Random (kernel, bias) so that the first gradients are not symmetric."""
  rng = np.random.default_rng(seed)
  return [
      rng.normal(scale=0.5, size=(NUM_FEATURES, NUM_CLASSES)).astype(
          np.float32),
      rng.normal(scale=0.5, size=(NUM_CLASSES,)).astype(np.float32),
  ]


def set_weights(process, state, weights):
  model_weights = tff.learning.models.ModelWeights(
      trainable=list(weights), non_trainable=[])
  return process.set_model_weights(state, model_weights)


def trainable(process, state):
  return [np.asarray(w) for w in process.get_model_weights(state).trainable]


# --- NumPy reference of the local objective's pieces -------------------------


def softmax_ce_grad(w, x, y):
  """Mean cross-entropy gradient of the linear softmax model, in NumPy."""
  kernel, bias = w
  logits = x @ kernel + bias
  logits = logits - logits.max(axis=1, keepdims=True)
  p = np.exp(logits)
  p /= p.sum(axis=1, keepdims=True)
  p[np.arange(len(y)), y] -= 1.0
  p /= len(y)
  return [x.T @ p, p.sum(axis=0)]


def local_sgd(w, x, y, lr, steps, extra_grad=None):
  """Full-batch SGD in NumPy; `extra_grad(w_now)` adds a penalty gradient."""
  w = [np.array(t, np.float64) for t in w]
  x = x.astype(np.float64)
  for _ in range(steps):
    g = softmax_ce_grad(w, x, y)
    if extra_grad is not None:
      g = [a + b for a, b in zip(g, extra_grad(w))]
    w = [t - lr * d for t, d in zip(w, g)]
  return w


def weighted_mean(values, weights):
  total = float(sum(weights))
  return [
      sum(wt * v[i] for v, wt in zip(values, weights)) / total
      for i in range(len(values[0]))
  ]


ClientMetrics = collections.namedtuple('ClientMetrics', ['loss', 'accuracy'])


def run_rounds(process, clients, *, rounds, local_steps):
  """Runs `process` from `initial_weights()` on full-batch clients.

  A process with per-client state (`client_states.ClientStatefulProcess`)
  gets every client's state from its previous round (a new client's at the
  start), all clients taking part in every round.

  Returns:
    `(final state, [output of each round])`.
  """
  state = set_weights(process, process.initialize(), initial_weights())
  stateful = client_states.is_client_stateful(process)
  if stateful:
    states = [process.initial_client_state() for _ in clients]
  outputs = []
  for _ in range(rounds):
    datasets = full_batch_datasets(clients, local_steps)
    if stateful:
      output, states = process.next(state, datasets, states)
    else:
      output = process.next(state, datasets)
    outputs.append(output)
    state = outputs[-1].state
  return state, outputs


def numpy_fed_prox(clients, mu, *, rounds, lr, local_steps):
  """FedProx toward w_t in NumPy (mu = 0: FedAvg): g + mu (w - w_t), example
  weighting, from `initial_weights()`."""
  w = [t.astype(np.float64) for t in initial_weights()]
  for _ in range(rounds):
    finals = [
        local_sgd(w, x, y, lr, local_steps,
                  extra_grad=lambda v, w=w: [mu * (a - b)
                                             for a, b in zip(v, w)])
        for x, y in clients
    ]
    w = weighted_mean(finals, [len(y) for _, y in clients])
  return w
