"""Client-side FedPTR, the client-vs-global cosine and the digits MTT ConvNet.

NumPy references use the tiny linear softmax model of tests/tiny.py on
full-batch clients, so every local step and every projection step is one
full-batch gradient step that NumPy can repeat exactly.
"""

import collections
import csv
import json

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import binary
from tests import tiny
from tff_opt import algorithms
from tff_opt.algorithms import fed_ptr
from tff_opt.round import client_states
from tff_opt.round import ground

MU = 0.3
CLIENT_LR = 0.1
LOCAL_STEPS = 4
ROUNDS = 3
SEED = 7


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


def _build(mu=MU, **kwargs):
  settings = dict(side='client', images_per_class=1, mtt_outer_steps=2,
                  mtt_inner_steps=2, projection_steps=2, mtt_init_lr=0.1,
                  mtt_image_lr=0.1, seed=SEED)
  settings.update(kwargs)
  return algorithms.build_fed_ptr(
      tiny.model_fn, mu=mu, client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(1.0), **settings)


def _prepare(output, name):
  return float(output.metrics['client_work']['prepare'][name])


@pytest.fixture(scope='module')
def fed_avg_run():
  """mu = 0 with MTT running on every client."""
  clients = tiny.make_clients()
  process = _build(0.0)
  state, outputs = tiny.run_rounds(process, clients, rounds=ROUNDS,
                                   local_steps=LOCAL_STEPS)
  return clients, process, state, outputs


def test_mu_zero_is_fed_avg_while_mtt_runs(fed_avg_run):
  clients, process, state, outputs = fed_avg_run
  expected = tiny.numpy_fed_prox(clients, 0.0, rounds=ROUNDS, lr=CLIENT_LR,
                                 local_steps=LOCAL_STEPS)
  for got, want in zip(tiny.trainable(process, state), expected):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  assert [_prepare(o, 'mtt_ran') for o in outputs] == [0.0, 1.0, 1.0]
  assert [_prepare(o, 'mtt_rejected') for o in outputs] == [0.0, 0.0, 0.0]
  assert _prepare(outputs[0], 'mtt_loss') == 0.0
  assert all(_prepare(o, 'mtt_loss') > 0.0 for o in outputs[1:])
  # alpha_syn moved away from its start on the clients that matched.
  assert _prepare(outputs[0], 'synthetic_lr') == pytest.approx(0.1)
  assert _prepare(outputs[1], 'synthetic_lr') != pytest.approx(0.1, abs=1e-7)
  assert all(_prepare(o, 'mtt_seconds') >= 0.0 for o in outputs)
  # Two models down (w_t, w_{t-1}) plus the has_previous byte, one up.
  model_bytes = (tiny.NUM_FEATURES * tiny.NUM_CLASSES + tiny.NUM_CLASSES) * 4
  assert outputs[-1].metrics['communication'] == {
      'bytes_server_to_client': 2 * model_bytes + 1,
      'bytes_client_to_server': model_bytes}


def test_client_global_cosine_matches_numpy(fed_avg_run):
  clients, _, _, outputs = fed_avg_run
  # Round 1 of FedAvg from the initial weights, in NumPy.
  w0 = [t.astype(np.float64) for t in tiny.initial_weights()]
  deltas = []
  for x, y in clients:
    final = tiny.local_sgd(w0, x, y, CLIENT_LR, LOCAL_STEPS)
    deltas.append(np.concatenate([(a - b).ravel() for a, b in zip(w0,
                                                                   final)]))
  mean = sum(len(y) * d for d, (_, y) in zip(deltas, clients)) / sum(
      len(y) for _, y in clients)
  cosines = [d @ mean / (np.linalg.norm(d) * np.linalg.norm(mean))
             for d in deltas]
  got = float(outputs[0].metrics['aggregator']['client_global_cosine'])
  assert got == pytest.approx(np.mean(cosines), rel=1e-5)
  assert 0.0 < got < 1.0


def test_no_projection_constant_mu_is_fed_prox_toward_w_t():
  process = _build(MU, projection_steps=0, layer_adaptive=False)
  clients = tiny.make_clients(seed=2)
  state, outputs = tiny.run_rounds(process, clients, rounds=ROUNDS,
                                   local_steps=LOCAL_STEPS)
  expected = tiny.numpy_fed_prox(clients, MU, rounds=ROUNDS, lr=CLIENT_LR,
                                 local_steps=LOCAL_STEPS)
  for got, want in zip(tiny.trainable(process, state), expected):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  fed_avg = tiny.numpy_fed_prox(clients, 0.0, rounds=ROUNDS, lr=CLIENT_LR,
                                local_steps=LOCAL_STEPS)
  assert np.abs(expected[0] - fed_avg[0]).max() > 1e-3  # mu acted.
  assert _prepare(outputs[-1], 'mtt_ran') == 1.0  # MTT ran, P = 0 anyway.


def _noise(num_images):
  return tf.random.stateless_normal(
      [num_images, tiny.NUM_FEATURES], seed=tf.constant([SEED, 0], tf.int64),
      dtype=tf.float32).numpy()


def test_synthetic_init_uses_own_images_and_noise_for_missing_classes():
  # A hand-made client: classes 0 (three examples) and 2 (one); 1 missing.
  x = np.float32([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
  y = np.int32([0, 2, 0, 0])
  def init(epochs):
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(3).repeat(
        epochs)
    images, counts = fed_ptr.client_synthetic_images(
        dataset, num_classes=3, images_per_class=2,
        input_shape=[tiny.NUM_FEATURES], seed=SEED)
    return images.numpy(), counts.numpy()

  images, counts = init(epochs=1)
  noise = _noise(6)
  np.testing.assert_array_equal(counts, [2, 0, 1])
  # Class 0: its first two examples, in dataset order (rows 0 and 2).
  np.testing.assert_array_equal(images[0], x[0])
  np.testing.assert_array_equal(images[1], x[2])
  # Class 1 is missing: both slots are the seeded noise.
  np.testing.assert_array_equal(images[2:4], noise[2:4])
  # Class 2 has one example: the real one, then noise.
  np.testing.assert_array_equal(images[4], x[1])
  np.testing.assert_array_equal(images[5], noise[5])
  assert not any(np.array_equal(images[i], row) for i in (2, 3, 5)
                 for row in x)
  # Two local epochs: class 2's one example is met twice and fills both.
  images, counts = init(epochs=2)
  np.testing.assert_array_equal(counts, [2, 0, 2])
  np.testing.assert_array_equal(images[4:6], [x[1], x[1]])
  np.testing.assert_array_equal(images[2:4], noise[2:4])


def _hand_made_clients():
  rng = np.random.default_rng(11)
  def client(labels):
    labels = np.int32(labels)
    return rng.normal(size=(labels.size, tiny.NUM_FEATURES)).astype(
        np.float32), labels
  return [client([0, 1, 0, 1, 1]), client([2, 2, 2]),
          client([1, 0, 2, 2, 0, 1])]


def _numpy_layer_mus(anchor, w, mu):
  """mu_l = mu / ||w~ - w_t|| over the tiny model's one layer (kernel, bias)."""
  d = np.sqrt(sum(np.sum((a - b)**2) for a, b in zip(anchor, w)))
  mu_l = mu / d if d > 0 else mu
  return [mu_l for _ in w]


@pytest.mark.parametrize('layer_adaptive', [False, True])
def test_projection_from_own_images_matches_numpy(layer_adaptive):
  """No MTT updates (D_syn stays at its initialisation): w~ per client."""
  ipc, steps, alpha = 2, 3, 0.2
  process = _build(MU, mtt_outer_steps=0, images_per_class=ipc,
                   projection_steps=steps, mtt_init_lr=alpha,
                   layer_adaptive=layer_adaptive)
  clients = _hand_made_clients()
  state, _ = tiny.run_rounds(process, clients, rounds=2,
                             local_steps=LOCAL_STEPS)
  noise = _noise(tiny.NUM_CLASSES * ipc).astype(np.float64)
  labels = np.repeat(np.arange(tiny.NUM_CLASSES), ipc)

  def init_images(x, y):
    images = noise.copy()
    for c in range(tiny.NUM_CLASSES):
      rows = np.flatnonzero(y == c)[:ipc]
      images[c * ipc:c * ipc + rows.size] = x[rows]
    return images

  w = [t.astype(np.float64) for t in tiny.initial_weights()]
  for round_num in range(2):
    finals = []
    for x, y in clients:
      if round_num == 0:
        anchor = w
      else:
        anchor = tiny.local_sgd(w, init_images(x, y), labels, alpha, steps)
      mus = (_numpy_layer_mus(anchor, w, MU) if layer_adaptive else
             [MU, MU])
      finals.append(tiny.local_sgd(
          w, x, y, CLIENT_LR, LOCAL_STEPS,
          extra_grad=lambda v, a=anchor, m=mus: [
              m_l * (p - q) for p, q, m_l in zip(v, a, m)]))
    w = tiny.weighted_mean(finals, [len(y) for _, y in clients])
  for got, want in zip(tiny.trainable(process, state), w):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  # The projection mattered: FedProx toward w_t ends elsewhere.
  prox = tiny.numpy_fed_prox(clients, MU, rounds=2, lr=CLIENT_LR,
                             local_steps=LOCAL_STEPS)
  assert np.abs(prox[0] - w[0]).max() > 1e-4


# --- Client state: each client keeps its D_syn and alpha_syn ----------------

IPC = 2
P_STEPS = 2
OUTER = 2
INNER = 2
IMAGE_LR = 0.1
LR_LR = 1e-3  # alpha_syn visibly moves in two steps; no run diverges.
MOMENTUM = 0.5


def _stateful_settings(update_every):
  return dict(
      mu=MU, images_per_class=IPC, mtt_outer_steps=OUTER,
      mtt_inner_steps=INNER, projection_steps=P_STEPS,
      layer_adaptive=True, update_every=update_every, mtt_init_lr=0.1,
      mtt_image_lr=IMAGE_LR, mtt_lr_lr=LR_LR, mtt_momentum=MOMENTUM)


def _run_schedule(process, clients, schedule):
  """Rounds in which `schedule[r]` (client indices) take part.

  Returns:
    `(outputs, states, weights)`: each round's output; `states[r]` the
    `{client: state}` of the clients seen after round r (`states[0]` empty,
    before round 1); `weights[r]` the global model after round r
    (`weights[0]` the initial one).
  """
  state = tiny.set_weights(process, process.initialize(),
                           tiny.initial_weights())
  store = {}
  outputs, states, weights = [], [{}], [tiny.trainable(process, state)]
  for sampled in schedule:
    output, new_states = process.next(
        state,
        tiny.full_batch_datasets([clients[k] for k in sampled], LOCAL_STEPS),
        [store.get(k, process.initial_client_state()) for k in sampled])
    store.update(zip(sampled, new_states))
    state = output.state
    outputs.append(output)
    states.append(dict(store))
    weights.append(tiny.trainable(process, state))
  return outputs, states, weights


@pytest.fixture(scope='module')
def every_two():
  """update_every=2, built through the registry (as binaries.train does)."""
  from tff_opt.program import registry  # pylint: disable=g-import-not-at-top
  process = registry.build_process(
      'fedptr', tiny.model_fn, client_optimizer_fn=_sgd(CLIENT_LR),
      server_optimizer_fn=_sgd(1.0),
      client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
      client_lr_schedule=None, **_stateful_settings(update_every=2))
  assert client_states.is_client_stateful(process)
  return process


def _assert_same_state(a, b):
  assert set(a) == set(b)
  for key in a:
    np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]))


def test_stored_set_is_reused_when_not_due_and_matches_numpy(every_two):
  clients = _hand_made_clients()
  outputs, states, weights = _run_schedule(every_two, clients,
                                           [[0, 1, 2]] * 3)
  initial = every_two.initial_client_state()
  assert initial['synthetic_images'].shape == (tiny.NUM_CLASSES * IPC,
                                               tiny.NUM_FEATURES)
  for k in range(3):
    # Round 1 (no w_{t-1}): nothing to match, the state is untouched.
    _assert_same_state(states[1][k], initial)
    # Round 2: the client's first chance, MTT ran from its own data.
    assert int(states[2][k]['matching_rounds']) == 1
    assert float(states[2][k]['synthetic_lr']) != pytest.approx(0.1,
                                                                 abs=1e-6)
    assert np.abs(states[2][k]['synthetic_images']).max() > 0.0
    # Round 3: not due (1 earlier chance, update_every=2): D_syn and
    # alpha_syn are kept exactly; only the count moves.
    assert int(states[3][k]['matching_rounds']) == 2
    np.testing.assert_array_equal(states[3][k]['synthetic_images'],
                                  states[2][k]['synthetic_images'])
    assert states[3][k]['synthetic_lr'] == states[2][k]['synthetic_lr']
  assert [_prepare(o, 'mtt_ran') for o in outputs] == [0.0, 1.0, 0.0]
  assert [_prepare(o, 'mtt_reused') for o in outputs] == [0.0, 0.0, 1.0]
  assert [_prepare(o, 'mtt_rejected') for o in outputs] == [0.0] * 3
  # Round 3 in NumPy: each client projects w_2 with its stored set and step
  # size, then trains with the layer-adaptive penalty toward it.
  labels = np.repeat(np.arange(tiny.NUM_CLASSES), IPC)
  w = [t.astype(np.float64) for t in weights[2]]
  finals = []
  for k, (x, y) in enumerate(clients):
    stored = states[2][k]
    anchor = tiny.local_sgd(w, stored['synthetic_images'].astype(np.float64),
                            labels, float(stored['synthetic_lr']), P_STEPS)
    mus = _numpy_layer_mus(anchor, w, MU)
    finals.append(tiny.local_sgd(
        w, x, y, CLIENT_LR, LOCAL_STEPS,
        extra_grad=lambda v, a=anchor, m=mus: [
            m_l * (p - q) for p, q, m_l in zip(v, a, m)]))
  expected = tiny.weighted_mean(finals, [len(y) for _, y in clients])
  for got, want in zip(weights[3], expected):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_due_is_counted_per_client_under_partial_participation(every_two):
  """Client 1 skips rounds 1 and 3: its 2nd chance (round 4) is not due."""
  clients = _hand_made_clients()
  outputs, states, _ = _run_schedule(every_two, clients,
                                     [[0], [0, 1], [0], [0, 1]])
  # Client 0 had a chance in rounds 2, 3, 4: MTT in 2 and 4, reuse in 3.
  assert [int(states[r][0]['matching_rounds']) for r in (1, 2, 3, 4)] == [
      0, 1, 2, 3]
  _assert_same_state(
      {k: v for k, v in states[3][0].items() if k != 'matching_rounds'},
      {k: v for k, v in states[2][0].items() if k != 'matching_rounds'})
  assert np.abs(states[4][0]['synthetic_images'] -
                states[3][0]['synthetic_images']).max() > 1e-6
  # Client 1 had chances in rounds 2 and 4 only: MTT in 2, reuse in 4 (a
  # rule on the round number would have re-run it in round 4).
  assert int(states[4][1]['matching_rounds']) == 2
  np.testing.assert_array_equal(states[4][1]['synthetic_images'],
                                states[2][1]['synthetic_images'])
  assert states[4][1]['synthetic_lr'] == states[2][1]['synthetic_lr']
  assert all(_prepare(o, 'mtt_rejected') == 0.0 for o in outputs)
  # Round 4's clients: client 0 ran MTT, client 1 reused (plain mean).
  assert _prepare(outputs[3], 'mtt_ran') == 0.5
  assert _prepare(outputs[3], 'mtt_reused') == 0.5

  # The states survive the training loop's checkpoint layout, and a round
  # run from the unpacked states is the round run from the originals.
  ids = ['client_0', 'client_1', 'client_2']
  store = {ids[k]: s for k, s in states[4].items()}
  initial = every_two.initial_client_state()
  packed = client_states.pack(ids, store, initial)
  np.testing.assert_array_equal(packed['seen'], [True, True, False])
  assert packed['states']['synthetic_images'].shape == (
      3, tiny.NUM_CLASSES * IPC, tiny.NUM_FEATURES)
  unpacked = client_states.unpack(ids, packed, initial)
  assert sorted(unpacked) == ids[:2]
  for cid, state in store.items():
    _assert_same_state(unpacked[cid], state)
    for key in state:
      assert np.asarray(unpacked[cid][key]).dtype == np.asarray(
          state[key]).dtype
  server_state = outputs[3].state
  datasets = tiny.full_batch_datasets(clients[:2], LOCAL_STEPS)
  original, original_states = every_two.next(
      server_state, datasets, [states[4][0], states[4][1]])
  resumed, resumed_states = every_two.next(
      server_state, datasets, [unpacked[ids[0]], unpacked[ids[1]]])
  for got, want in zip(tiny.trainable(every_two, resumed.state),
                       tiny.trainable(every_two, original.state)):
    np.testing.assert_array_equal(got, want)
  for got, want in zip(resumed_states, original_states):
    _assert_same_state(got, want)


def _numpy_matching_loss(start, target, x, y, lr):
  """||N SGD steps from w_{t-1} on (x, y) - w_t||^2 / ||w_{t-1} - w_t||^2."""
  student = tiny.local_sgd(start, x, y, lr, INNER)
  numerator = sum(np.sum((s - t)**2) for s, t in zip(student, target))
  return numerator / sum(np.sum((s - t)**2) for s, t in zip(start, target))


def _numpy_distill(start, target, images, lr):
  """MTT's outer loop in float64 NumPy: central finite-difference gradients
  of the matching loss, SGD with momentum (velocities from zero)."""
  start = [np.asarray(w, np.float64) for w in start]
  target = [np.asarray(w, np.float64) for w in target]
  x, lr = np.array(images, np.float64), float(lr)
  y = np.repeat(np.arange(tiny.NUM_CLASSES), IPC)
  velocity_x, velocity_lr, h = np.zeros_like(x), 0.0, 1e-6

  def loss(x_value, lr_value):
    return _numpy_matching_loss(start, target, x_value, y, lr_value)

  for _ in range(OUTER):
    grad_x = np.zeros_like(x)
    for index in np.ndindex(*x.shape):
      step = np.zeros_like(x)
      step[index] = h
      grad_x[index] = (loss(x + step, lr) - loss(x - step, lr)) / (2 * h)
    grad_lr = (loss(x, lr + h) - loss(x, lr - h)) / (2 * h)
    velocity_x = MOMENTUM * velocity_x + grad_x
    velocity_lr = MOMENTUM * velocity_lr + grad_lr
    x, lr = x - IMAGE_LR * velocity_x, lr - LR_LR * velocity_lr
  return x, lr


def test_update_every_one_reruns_mtt_from_the_stored_set():
  process = _build(**_stateful_settings(update_every=1))
  clients = _hand_made_clients()
  outputs, states, weights = _run_schedule(process, clients, [[0, 1, 2]] * 3)
  assert [_prepare(o, 'mtt_ran') for o in outputs] == [0.0, 1.0, 1.0]
  assert [_prepare(o, 'mtt_reused') for o in outputs] == [0.0, 0.0, 0.0]
  assert [_prepare(o, 'mtt_rejected') for o in outputs] == [0.0] * 3
  for k, (x, y) in enumerate(clients):
    assert int(states[3][k]['matching_rounds']) == 2
    # Round 3 matched (w_1 -> w_2), starting from what round 2 left.
    images, lr = _numpy_distill(weights[1], weights[2],
                                states[2][k]['synthetic_images'],
                                states[2][k]['synthetic_lr'])
    np.testing.assert_allclose(states[3][k]['synthetic_images'], images,
                               rtol=1e-4, atol=1e-5)
    assert float(states[3][k]['synthetic_lr']) == pytest.approx(lr, rel=1e-4)
    assert np.abs(states[3][k]['synthetic_images'] -
                  states[2][k]['synthetic_images']).max() > 1e-4
    # Not a fresh start from the client's own images.
    fresh, _ = fed_ptr.client_synthetic_images(
        tf.data.Dataset.from_tensors((x, y)), num_classes=tiny.NUM_CLASSES,
        images_per_class=IPC, input_shape=[tiny.NUM_FEATURES], seed=SEED)
    fresh_images, _ = _numpy_distill(weights[1], weights[2], fresh.numpy(),
                                     0.1)
    assert np.abs(states[3][k]['synthetic_images'] -
                  fresh_images).max() > 1e-3


def test_a_client_whose_update_was_zeroed_keeps_its_state():
  old = collections.OrderedDict([
      ('synthetic_images', tf.ones([2, 3])),
      ('synthetic_lr', tf.constant(0.2)),
      ('matching_rounds', tf.constant(4)),
  ])
  def next_state(valid):
    return {'next_client_state': collections.OrderedDict([
        ('synthetic_images', 5.0 * tf.ones([2, 3]) * valid),
        ('synthetic_lr', tf.constant(0.3) * valid),
        ('matching_rounds', tf.constant(5.0) * valid),
        ('valid', tf.constant(valid)),
    ])}
  merged = ground.ClientInput(broadcast=None, client_state=old)
  update_fn = fed_ptr._client_state_update  # pylint: disable=protected-access
  kept = update_fn(merged, next_state(0.0))
  updated = update_fn(merged, next_state(1.0))
  _assert_same_state({k: v.numpy() for k, v in kept.items()},
                     {k: v.numpy() for k, v in old.items()})
  assert float(updated['synthetic_lr']) == pytest.approx(0.3)
  assert int(updated['matching_rounds']) == 5
  assert updated['matching_rounds'].dtype == tf.int32
  np.testing.assert_array_equal(updated['synthetic_images'],
                                5.0 * np.ones([2, 3]))


def test_bad_side_and_momentum_are_rejected():
  with pytest.raises(ValueError, match=r"^side must be 'server' or 'client', "
                     r"got 'both'\.$"):
    _build(MU, side='both')
  with pytest.raises(ValueError, match=r'^mtt_momentum must be in '
                     r'\[0, 1\), got 1\.0\.$'):
    _build(MU, mtt_momentum=1.0)


def test_digits_mtt_convnet_option():
  from tasks import digits  # pylint: disable=g-import-not-at-top
  import tasks  # pylint: disable=g-import-not-at-top
  spec = tff.simulation.baselines.ClientSpec(1, 8)
  task = tasks.create_task('digits', train_client_spec=spec,
                           use_synthetic_data=True, model='mtt_convnet')
  model = task.model_fn()
  # 3 x (conv3x3 + instance-norm scale/offset) of width 128, dense 128 -> 10
  # (8x8 pools down to 1x1).
  convs = (9 * 1 * 128 + 128) + 2 * (9 * 128 * 128 + 128)
  expected = convs + 3 * 2 * 128 + 128 * 10 + 10
  assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == (
      expected)
  logits = model.predict_on_batch(tf.zeros([2, 8, 8, 1]), training=False)
  assert logits.shape == (2, digits.NUM_CLASSES)
  assert 'mtt_convnet' in digits.MODEL_NAMES
  names = ', '.join(digits.MODEL_NAMES)
  with pytest.raises(ValueError,
                     match=rf"^model must be one of {names}, got 'vgg'\.$"):
    tasks.create_task('digits', train_client_spec=spec,
                      use_synthetic_data=True, model='vgg')


_MTT_CONVNET_RUN = ('--task=digits', '--task_option=model=mtt_convnet',
                    '--clients_per_round=2', '--client_epochs=1',
                    '--rounds=2', '--eval_every=2', '--seed=1',
                    '--server_opt=sgd', '--server_lr=1.0')


def test_binary_runs_fedptr_on_digits_with_mtt_convnet(tmp_path):
  output_dir = str(tmp_path / 'run')
  assert binary.run_train(
      '--algorithm=fedptr', '--mu=0.01', '--images_per_class=1',
      '--mtt_outer_steps=1', '--mtt_inner_steps=1', '--projection_steps=1',
      '--update_every=2', '--mtt_momentum=0.25', *_MTT_CONVNET_RUN,
      f'--output_dir={output_dir}') == 0
  fedavg_dir = str(tmp_path / 'fedavg')
  assert binary.run_train('--algorithm=fedopt', *_MTT_CONVNET_RUN,
                          f'--output_dir={fedavg_dir}') == 0
  with open(f'{fedavg_dir}/metrics.csv') as f:
    fedavg = list(csv.DictReader(f))
  with open(f'{output_dir}/metrics.csv') as f:
    rows = list(csv.DictReader(f))
  with open(f'{output_dir}/hparams.json') as f:
    hparams = json.load(f)
  assert (hparams['fedptr_update_every'],
          hparams['fedptr_mtt_momentum']) == (2, 0.25)
  assert [r['round'] for r in rows] == ['1', '2']
  for column in ('mtt_loss', 'synthetic_lr', 'mtt_seconds', 'mtt_ran',
                 'mtt_reused', 'client_global_cosine'):
    assert column in rows[0], (column, list(rows[0]))
  assert [float(r['mtt_ran']) for r in rows] == [0.0, 1.0]
  assert float(rows[1]['mtt_loss']) > 0.0
  assert -1.0 <= float(rows[1]['client_global_cosine']) <= 1.0
  # Round 1: no client has matched a global step yet, so no penalty: the
  # same clients and steps as FedAvg's. Round 2: the penalty moves it off.
  for key in ('train_loss', 'train_accuracy'):
    assert rows[0][key] == fedavg[0][key], key
  assert rows[1]['train_loss'] != fedavg[1]['train_loss']
  assert abs(float(rows[1]['eval_loss']) - float(fedavg[1]['eval_loss'])) > (
      1e-5 * float(fedavg[1]['eval_loss']))
