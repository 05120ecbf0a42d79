"""FedPTR-S (tff_opt/algorithms/fed_ptr.py): reductions and layer-adaptive mu."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny
from tff_opt import algorithms
from tff_opt.algorithms import fed_ptr

MU = 0.3
CLIENT_LR = 0.1
LOCAL_STEPS = 4
ROUNDS = 3


def _numpy_fed_prox(clients, mu):
  return tiny.numpy_fed_prox(clients, mu, rounds=ROUNDS, lr=CLIENT_LR,
                             local_steps=LOCAL_STEPS)


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


def _build(mu, **kwargs):
  settings = dict(images_per_class=1, mtt_outer_steps=2, mtt_inner_steps=2,
                  projection_steps=2, mtt_init_lr=0.1)
  settings.update(kwargs)
  return algorithms.build_fed_ptr(
      tiny.model_fn, mu=mu, client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(1.0), **settings)


def test_mu_zero_is_fed_avg_with_mtt_running():
  process = _build(0.0)
  clients = tiny.make_clients()
  state, outputs = tiny.run_rounds(process, clients,
      rounds=ROUNDS, local_steps=LOCAL_STEPS)
  for got, want in zip(tiny.trainable(process, state),
                       _numpy_fed_prox(clients, 0.0)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  ran = [int(o.metrics['distributor']['mtt_ran']) for o in outputs]
  assert ran == [0, 1, 1]  # No w_{t-1} in round 1.
  assert float(outputs[1].metrics['distributor']['mtt_loss']) > 0.0
  client_cosine = float(outputs[0].metrics['aggregator'][
      'client_global_cosine'])
  assert 0.0 < client_cosine <= 1.0
  assert float(outputs[0].metrics['distributor']['mtt_loss']) == 0.0
  # The cosine of Figure 2 is defined from round 3 on, and is a cosine.
  cosine = float(outputs[2].metrics['distributor']['auxiliary_global_cosine'])
  assert cosine != 0.0 and -1.0 <= cosine <= 1.0


def test_no_projection_constant_mu_is_fed_prox_toward_w_t():
  process = _build(MU, projection_steps=0, layer_adaptive=False)
  clients = tiny.make_clients(seed=2)
  state, outputs = tiny.run_rounds(process, clients,
      rounds=ROUNDS, local_steps=LOCAL_STEPS)
  expected = _numpy_fed_prox(clients, MU)
  for got, want in zip(tiny.trainable(process, state), expected):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  fed_avg = _numpy_fed_prox(clients, 0.0)
  assert np.abs(expected[0] - fed_avg[0]).max() > 1e-3  # mu acted.
  model_bytes = (tiny.NUM_FEATURES * tiny.NUM_CLASSES + tiny.NUM_CLASSES) * 4
  assert outputs[-1].metrics['communication'] == {
      'bytes_server_to_client': 2 * model_bytes,
      'bytes_client_to_server': model_bytes}


def test_layer_adaptive_mu_on_two_layers():
  current = [np.float32([1.0, 1.0]), np.float32([0.0, 0.0, 0.0])]
  # Projected update norms: layer 1 ||(3, 4)|| = 5, layer 2 ||(0, 9, 12)|| = 15.
  projected = [np.float32([4.0, 5.0]), np.float32([0.0, 9.0, 12.0])]
  # Two layers of one variable each (say, two bias-free Dense kernels).
  mus = fed_ptr.layer_mu(projected, current, mu=0.1, layer_adaptive=True,
                         layer_groups=(0, 1))
  # mu_l = mu / d_l = 0.1 / (5, 15).
  np.testing.assert_allclose([float(m) for m in mus], [0.02, 0.1 / 15],
                             rtol=1e-6)
  weights = [tf.Variable([2.0, 2.0]), tf.Variable([1.0, 1.0, 1.0])]
  broadcast = fed_ptr.Projected(
      model_weights=tff.learning.models.ModelWeights(current, []),
      projected_model_weights=projected)
  with tf.GradientTape() as tape:
    value = fed_ptr.projected_proximal(weights, broadcast, learning_rate=0.5,
                                       mu=0.1, layer_adaptive=True,
                                       layer_groups=(0, 1))
  # 0.02/2 * (4 + 9) + (0.1/15)/2 * (1 + 64 + 121).
  assert float(value) == pytest.approx(0.01 * 13 + 0.05 / 15 * 186, rel=1e-6)
  # Client-side FedPTR's input (`ClientProjected`) gives the same penalty.
  client_side = fed_ptr.ClientProjected(
      model_weights=broadcast.model_weights,
      previous_model_weights=tff.learning.models.ModelWeights(projected, []),
      has_previous=tf.constant(True), projected_model_weights=projected,
      next_client_state=())
  assert float(fed_ptr.projected_proximal(
      weights, client_side, learning_rate=0.5, mu=0.1, layer_adaptive=True,
      layer_groups=(0, 1))) == pytest.approx(float(value), rel=1e-6)
  grads = tape.gradient(value, weights)
  np.testing.assert_allclose(grads[0], [0.02 * -2.0, 0.02 * -3.0], rtol=1e-6)
  np.testing.assert_allclose(grads[1], np.float32([1.0, -8.0, -11.0]) * 0.1 /
                             15, rtol=1e-6)
  # The two variables as one layer (a kernel and its bias): one mu over the
  # joint norm sqrt(5^2 + 15^2).
  joint = fed_ptr.layer_mu(projected, current, mu=0.1, layer_adaptive=True,
                           layer_groups=(0, 0))
  assert [float(m) for m in joint] == pytest.approx(
      [0.1 / np.sqrt(250.0)] * 2, rel=1e-6)
  constant = fed_ptr.layer_mu(projected, current, mu=0.1,
                              layer_adaptive=False, layer_groups=(0, 1))
  assert [float(m) for m in constant] == pytest.approx([0.1, 0.1])
  # No projected movement at all (P = 0, first round): every mu_l is mu;
  # a layer that the projection does not move gets mu, the others mu / d_l.
  still = fed_ptr.layer_mu(current, current, mu=0.1, layer_adaptive=True,
                           layer_groups=(0, 1))
  assert [float(m) for m in still] == pytest.approx([0.1, 0.1])
  half = fed_ptr.layer_mu([projected[0], current[1]], current, mu=0.1,
                          layer_adaptive=True, layer_groups=(0, 1))
  assert [float(m) for m in half] == pytest.approx([0.02, 0.1])
  with pytest.raises(ValueError, match=r'^layer_groups has 3 entries for 2 '
                     r'tensors\.$'):
    fed_ptr.layer_mu(projected, current, mu=0.1, layer_adaptive=True,
                     layer_groups=(0, 0, 1))


def test_layer_adaptive_mu_is_capped_at_one_over_the_learning_rate():
  """A layer the projection barely moves gets mu_l = 1/eta, not mu/d_l.

  Layer 1 moves by d = 1e-4 (mu/d = 1000 > 1/eta = 20: capped); layer 2 by
  d = 5 (mu/d = 0.02: as is). With the cap, one SGD step on the penalty
  alone lands layer 1 exactly on w~ instead of overshooting it 50-fold.
  """
  current = [np.float32([1.0, 1.0]), np.float32([0.0, 0.0])]
  projected = [np.float32([1.0, 1.0001]), np.float32([3.0, 4.0])]
  eta = 0.05
  mus = fed_ptr.layer_mu(projected, current, mu=0.1, layer_adaptive=True,
                         layer_groups=(0, 1), max_mu=1.0 / eta)
  np.testing.assert_allclose([float(m) for m in mus], [20.0, 0.02],
                             rtol=1e-6)
  uncapped = fed_ptr.layer_mu(projected, current, mu=0.1,
                              layer_adaptive=True, layer_groups=(0, 1))
  assert float(uncapped[0]) == pytest.approx(0.1 / 1e-4, rel=1e-2)
  constant = fed_ptr.layer_mu(projected, current, mu=100.0,
                              layer_adaptive=False, layer_groups=(0, 1),
                              max_mu=1.0 / eta)
  assert [float(m) for m in constant] == pytest.approx([100.0, 100.0])
  weights = [tf.Variable([0.0, 0.0]), tf.Variable([1.0, 1.0])]
  broadcast = fed_ptr.Projected(
      model_weights=tff.learning.models.ModelWeights(current, []),
      projected_model_weights=projected)
  with tf.GradientTape() as tape:
    value = fed_ptr.projected_proximal(weights, broadcast, learning_rate=eta,
                                       mu=0.1, layer_adaptive=True,
                                       layer_groups=(0, 1))
  grads = tape.gradient(value, weights)
  stepped = weights[0].numpy() - eta * grads[0].numpy()
  np.testing.assert_allclose(stepped, projected[0], rtol=1e-6)


def _conv_dense_keras_model():
  """Conv2D (with bias) -> Flatten -> Dense (with bias): two layers."""
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(3, 3, 1)),
      tf.keras.layers.Conv2D(2, 2, name='conv'),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(3, name='dense'),
  ])


def _conv_dense_model_fn():
  return tff.learning.models.from_keras_model(
      _conv_dense_keras_model(),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=(tf.TensorSpec([None, 3, 3, 1], tf.float32),
                  tf.TensorSpec([None], tf.int32)))


def test_layer_adaptive_mu_per_keras_layer_matches_numpy():
  """mu_l = mu / ||w~^l - w^l_t|| over each Keras layer's kernel and bias."""
  mu = 0.3
  keras_model = _conv_dense_keras_model()
  layers = [layer for layer in keras_model.layers if layer.trainable_weights]
  assert [layer.name for layer in layers] == ['conv', 'dense']
  rng = np.random.default_rng(4)
  # Per Keras layer: (kernel, bias) of w_t, w~_{t+1} and the local w.
  blocks = [[(rng.normal(size=v.shape), rng.normal(size=v.shape),
              rng.normal(size=v.shape)) for v in layer.trainable_weights]
            for layer in layers]
  # NumPy, from the paper's formula on whole Keras layers.
  expected_value = 0.0
  expected_grads = []
  for block in blocks:
    d = np.sqrt(sum(np.sum((p - c)**2) for c, p, _ in block))
    mu_l = mu / d
    expected_value += mu_l / 2 * sum(np.sum((w - p)**2) for _, p, w in block)
    expected_grads += [mu_l * (w - p) for _, p, w in block]
  current = [c.astype(np.float32) for block in blocks for c, _, _ in block]
  projected = [p.astype(np.float32) for block in blocks for _, p, _ in block]
  local = [tf.Variable(w.astype(np.float32)) for block in blocks
           for _, _, w in block]
  broadcast = fed_ptr.Projected(
      model_weights=tff.learning.models.ModelWeights(current, []),
      projected_model_weights=projected)

  def penalty(groups):
    with tf.GradientTape() as tape:
      value = fed_ptr.projected_proximal(
          local, broadcast, learning_rate=0.1, mu=mu, layer_adaptive=True,
          layer_groups=groups)
    return float(value), [g.numpy() for g in tape.gradient(value, local)]

  groups = fed_ptr.trainable_layer_groups(_conv_dense_model_fn)
  assert groups == (0, 0, 1, 1)  # (conv kernel, conv bias, dense ...).
  value, grads = penalty(groups)
  assert value == pytest.approx(expected_value, rel=1e-5)
  for got, want in zip(grads, expected_grads):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  # A grouping of one "layer" per variable is not the paper's.
  old_value, _ = penalty((0, 1, 2, 3))
  assert abs(old_value - expected_value) > 1e-2 * expected_value


def test_layer_groups_of_the_mtt_convnet_and_the_tiny_model():
  from tasks import models  # pylint: disable=g-import-not-at-top

  def convnet_fn():
    return tff.learning.models.from_keras_model(
        models.create_mtt_convnet((8, 8, 1), 10, width=4, depth=2),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=(tf.TensorSpec([None, 8, 8, 1]),
                    tf.TensorSpec([None], tf.int32)))

  # conv, norm (scale, offset), conv, norm, dense: two variables each.
  assert fed_ptr.trainable_layer_groups(convnet_fn) == (
      0, 0, 1, 1, 2, 2, 3, 3, 4, 4)
  assert fed_ptr.trainable_layer_groups(tiny.model_fn) == (0, 0)

  # A Keras model nested in another: each variable goes to its innermost
  # layer, not to the nested model.
  def nested_fn():
    inner = tf.keras.Sequential([
        tf.keras.layers.Dense(3, input_shape=(4,)),
        tf.keras.layers.Dense(3, use_bias=False)])
    outer = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(4,)), inner,
        tf.keras.layers.Dense(2)])
    return tff.learning.models.from_keras_model(
        outer,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=tiny.INPUT_SPEC)

  assert fed_ptr.trainable_layer_groups(nested_fn) == (0, 0, 1, 2, 2)


def test_rejects_bad_hyper_parameters():
  with pytest.raises(ValueError, match=r'^mu must be a non-negative number, '
                     r'got -1\.0\.$'):
    _build(-1.0)
  with pytest.raises(ValueError, match=r'^mtt_inner_steps must be a positive '
                     r'integer, got 0\.$'):
    _build(MU, mtt_inner_steps=0)
  with pytest.raises(ValueError, match=r"^side must be 'server' or 'client', "
                     r"got 'clients'\.$"):
    _build(MU, side='clients')
  for momentum in (-0.5, 1.0, 2.0):
    with pytest.raises(ValueError, match=r'^mtt_momentum must be in '
                       rf'\[0, 1\), got {momentum!r}\.$'):
      _build(MU, mtt_momentum=momentum)


def _binary_rows(output_dir, *args):
  """Runs `binaries.train` with `args`; its metrics.csv rows and hparams."""
  import csv  # pylint: disable=g-import-not-at-top
  import json  # pylint: disable=g-import-not-at-top
  from tests import binary  # pylint: disable=g-import-not-at-top
  assert binary.run_train(*args, f'--output_dir={output_dir}') == 0
  with open(f'{output_dir}/metrics.csv') as f:
    rows = list(csv.DictReader(f))
  with open(f'{output_dir}/hparams.json') as f:
    return rows, json.load(f)


_DIGITS_RUN = ('--task=digits', '--clients_per_round=3', '--client_epochs=1',
               '--rounds=2', '--eval_every=1', '--seed=1', '--server_opt=sgd',
               '--server_lr=1.0')


def test_binary_runs_fedptr_s_on_digits_with_diagnostics(tmp_path):
  rows, hparams = _binary_rows(
      str(tmp_path / 'run'), *_DIGITS_RUN, '--algorithm=fedptr_s',
      '--mu=0.01', '--images_per_class=1', '--mtt_outer_steps=2',
      '--mtt_inner_steps=2', '--projection_steps=2')
  fedavg, _ = _binary_rows(str(tmp_path / 'fedavg'), *_DIGITS_RUN,
                           '--algorithm=fedopt')
  assert [r['round'] for r in rows] == ['1', '2']
  mtt_ran = [k for k in rows[0] if k.endswith('mtt_ran')]
  assert len(mtt_ran) == 1, list(rows[0])
  assert [float(r[mtt_ran[0]]) for r in rows] == [0.0, 1.0]
  loss_key = mtt_ran[0].replace('mtt_ran', 'mtt_loss')
  assert float(rows[1][loss_key]) > 0.0
  # The same clients from the same start as FedAvg: round 1's training
  # metrics (each batch's, before its step) are FedAvg's. The penalty
  # towards the projected model moves the global model off FedAvg's.
  for key in ('train_loss', 'train_accuracy'):
    assert rows[0][key] == fedavg[0][key], key
  for row, fedavg_row in zip(rows, fedavg):
    assert abs(float(row['eval_loss']) - float(fedavg_row['eval_loss'])) > (
        1e-6 * float(fedavg_row['eval_loss']))
  assert hparams['algorithm'] == 'fedptr_s'
  assert (hparams['fedptr_mu'], hparams['fedptr_mtt_outer_steps'],
          hparams['fedptr_layer_adaptive']) == (0.01, 2, False)  # Default.


def test_diverging_mtt_is_rejected_and_keeps_the_synthetic_set():
  process = _build(MU, mtt_image_lr=1e30, mtt_init_lr=0.1)
  clients = tiny.make_clients(seed=4)
  state, outputs = tiny.run_rounds(process, clients,
      rounds=ROUNDS, local_steps=LOCAL_STEPS)
  rejected = [int(o.metrics['distributor']['mtt_rejected']) for o in outputs]
  assert rejected == [0, 1, 1]
  assert [float(o.metrics['distributor']['synthetic_lr'])
          for o in outputs] == pytest.approx([0.1, 0.1, 0.1])
  assert all(np.isfinite(w).all() for w in tiny.trainable(process, state))
  assert all(int(o.metrics['client_work']['non_finite_clients']) == 0
             for o in outputs)


@pytest.mark.parametrize('update_every, expected_ran', [
    (2, [0, 1, 0, 1]),  # Rounds with w_{t-1}, counted from 0: 0 and 2.
    (0, [0, 1, 0, 0]),  # One-shot.
])
def test_update_every_schedules_mtt(update_every, expected_ran):
  # A small image step, so that no MTT run diverges and is rejected.
  process = _build(MU, update_every=update_every, mtt_outer_steps=1,
                   mtt_image_lr=0.1)
  _, outputs = tiny.run_rounds(process, tiny.make_clients(), rounds=4,
                                 local_steps=LOCAL_STEPS)
  assert [int(o.metrics['distributor']['mtt_ran'])
          for o in outputs] == expected_ran
  assert [int(o.metrics['distributor']['mtt_rejected'])
          for o in outputs] == [0, 0, 0, 0]
  lrs = [float(o.metrics['distributor']['synthetic_lr']) for o in outputs]
  # The step size changes only in rounds where MTT ran; otherwise it is kept.
  for t in range(1, 4):
    assert (lrs[t] != lrs[t - 1]) == bool(expected_ran[t]), lrs
