"""Every stateful algorithm resumes bit for bit after an interruption.

Each algorithm that keeps state across rounds (FedDyn's g_k and h, FedCurv
Eq. 3's per-client Fisher terms, FedBN's per-client batch norm, SlowMo's
momentum, FedPTR-S's synthetic set, client-side FedPTR's per-client
synthetic sets) trains 5 rounds straight, and 3 rounds in another directory
whose round-3 checkpoint is then deleted (as a kill between the save at
round 2 and the next would leave it), then resumes from the files on disk
to round 5. The server state and every client state must be equal, bit for
bit, to the straight run's. SCAFFOLD and FedADC have their own such tests
(tests/test_scaffold.py, tests/test_fed_adc.py).
"""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import test_fed_bn
from tests import test_moon
from tests import tiny
from tff_opt import algorithms
from tff_opt.algorithms import fed_opt
from tff_opt.program import training_loop

# TFF warns that BN statistics are not updated by *its* training loops;
# tff-opt's client work does update them (tests/test_fed_bn.py).
pytestmark = pytest.mark.filterwarnings(
    'ignore:Batch Normalization contains non-trainable')

CLIENTS = {f'client_{k}': c for k, c in enumerate(
    tiny.make_clients(num_clients=6, seed=5, sizes=(8, 12, 5, 9, 3, 7)))}


def _sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


def _dataset(client_id):
  x, y = CLIENTS[client_id]
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(4)


_MTT = dict(images_per_class=1, mtt_outer_steps=2, mtt_inner_steps=2,
            projection_steps=2, mtt_init_lr=0.1)
BUILDERS = {
    'feddyn': lambda: algorithms.build_fed_dyn(
        tiny.model_fn, alpha=0.1, num_clients=len(CLIENTS),
        client_optimizer_fn=_sgd(0.1), server_optimizer_fn=_sgd(1.0)),
    'fedcurv_eq3': lambda: algorithms.build_fed_curv(
        tiny.model_fn, lam=0.1, client_optimizer_fn=_sgd(0.1),
        server_optimizer_fn=_sgd(1.0), cross_silo=True),
    'fedbn': lambda: algorithms.build_fed_bn(
        fed_opt.fed_opt_recipe, test_fed_bn.bn_model_fn,
        client_optimizer_fn=_sgd(0.1), server_optimizer_fn=_sgd(1.0),
        client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES),
    'slowmo': lambda: algorithms.build_slowmo(
        tiny.model_fn, client_learning_rate=0.1, beta=0.9),
    'fedptr_s': lambda: algorithms.build_fed_ptr(
        tiny.model_fn, mu=0.1, client_optimizer_fn=_sgd(0.1),
        server_optimizer_fn=_sgd(1.0), **_MTT),
    'moon': lambda: algorithms.build_moon(
        test_moon.model_fn, mu=1.0, client_optimizer_fn=_sgd(0.1),
        server_optimizer_fn=_sgd(1.0)),
    # 3 of 6 clients a round: the absent clients' drifts are in the
    # server's drift sum, which must resume with them.
    'feddc': lambda: algorithms.build_fed_dc(
        tiny.model_fn, alpha=0.1, num_clients=len(CLIENTS),
        client_optimizer_fn=_sgd(0.1), server_optimizer_fn=_sgd(1.0)),
    'fedptr_client': lambda: algorithms.build_fed_ptr(
        tiny.model_fn, mu=0.1, client_optimizer_fn=_sgd(0.1),
        server_optimizer_fn=_sgd(1.0), side='client', mtt_image_lr=0.1,
        **_MTT),
}


def train(process, initial_state, output_dir, rounds):
  return training_loop.run_training(
      process, client_ids=sorted(CLIENTS), client_dataset_fn=_dataset,
      clients_per_round=3, rounds=rounds, seed=7, output_dir=output_dir,
      checkpoint_every=2, initial_state=initial_state, log=None)


def _leaves(structure):
  return [np.asarray(x) for x in tf.nest.flatten(structure)]


@pytest.mark.parametrize('name', sorted(BUILDERS))
def test_kill_and_resume_equals_the_straight_run(name, tmp_path):
  process = BUILDERS[name]()
  initial = process.initialize()
  straight = train(process, initial, str(tmp_path / 'straight'), rounds=5)
  interrupted = str(tmp_path / 'interrupted')
  train(process, initial, interrupted, rounds=3)
  shutil.rmtree(os.path.join(interrupted, training_loop.CHECKPOINT_DIR,
                             'program_state_3'))
  resumed = train(process, initial, interrupted, rounds=5)
  assert resumed.start_round == 2  # From the files on disk.
  got, want = _leaves(resumed.state), _leaves(straight.state)
  assert len(got) == len(want)
  for a, b in zip(got, want):
    np.testing.assert_array_equal(a, b)
  # Training moved the model: the equality is not of two initial states.
  assert any(not np.array_equal(a, b)
             for a, b in zip(want, _leaves(initial)))
  if straight.client_states is None:
    assert resumed.client_states is None
    return
  assert sorted(resumed.client_states) == sorted(straight.client_states)
  assert straight.client_states  # Some client kept a state.
  for cid, want_state in straight.client_states.items():
    got_leaves = _leaves(resumed.client_states[cid])
    want_leaves = _leaves(want_state)
    assert len(got_leaves) == len(want_leaves)
    for a, b in zip(got_leaves, want_leaves):
      np.testing.assert_array_equal(a, b)
