"""SlowMo / FedAvgM (`tff_opt/algorithms/slowmo.py`), Algorithm 2 of FedADC.

SlowMo is FedADC's server rule with beta_local = 0: it must match the
paper's algorithm in NumPy (the FedADC reference of tests/test_fed_adc.py
with beta_local = 0) and equal FedOpt with server SGD with momentum while
the client learning rate is constant, and only then.
"""

import numpy as np
import tensorflow_federated as tff

from tests import test_fed_adc
from tests import tiny
from tff_opt import algorithms
from tff_opt.round import schedules

# FedADC's NumPy reference and its helpers (tiny clients, own H each).
# pylint: disable=protected-access
_run = test_fed_adc._run
_assert_close = test_fed_adc._assert_close
_momentum = test_fed_adc._momentum
# pylint: enable=protected-access
numpy_fed_adc = test_fed_adc.numpy_fed_adc


def test_slowmo_matches_numpy_and_fedopt_sgdm_while_eta_is_constant():
  # eta = 0.25 in rounds 0-1, 0.025 in round 2.
  schedule = schedules.staircase_decay(0.25, decay_factor=0.1, decay_every=2)
  slowmo = algorithms.build_slowmo(tiny.model_fn, client_learning_rate=0.25,
                                   beta=0.9, client_lr_schedule=schedule)
  fed_avgm = algorithms.build_fed_opt(
      tiny.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.25),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0,
                                                             momentum=0.9),
      client_weighting=tff.learning.ClientWeighting.UNIFORM,
      client_lr_schedule=schedule)
  clients = tiny.make_clients()
  _assert_close(tiny.trainable(slowmo, _run(slowmo, clients, rounds=2)),
                tiny.trainable(fed_avgm, _run(fed_avgm, clients, rounds=2)))
  state = _run(slowmo, clients)
  w, m = numpy_fed_adc(clients, lr_of_round=lambda t: 0.25 * 0.1**(t // 2),
                       beta_global=0.9, beta_local=0.0, alpha=1.0)
  _assert_close(tiny.trainable(slowmo, state), w)
  _assert_close(_momentum(state), m)
  # Once eta changes, TFF's momentum buffer (eta-scaled) no longer agrees.
  theirs = tiny.trainable(fed_avgm, _run(fed_avgm, clients))
  assert not np.allclose(theirs[0], w[0], atol=1e-4)
