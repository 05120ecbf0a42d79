"""Client learning-rate schedules (`tff_opt/round/schedules.py`).

`staircase_decay` must give lr_t = lr * factor ** floor(t / every) (Reddi
et al.'s "ExpDecay": x0.1 every 500 rounds by default), on Python ints and
on int32 tensors inside a traced function, as the client work calls it;
`constant` the same rate every round; bad arguments are refused naming
them. How FedOpt and FedADC use a schedule is their own files' business.
"""

import numpy as np
import pytest
import tensorflow as tf

from tff_opt.round import schedules

ROUNDS = [0, 1, 2, 3, 5, 6, 7, 11, 12]


def test_staircase_decay_follows_the_formula():
  schedule = schedules.staircase_decay(0.5, decay_factor=0.3, decay_every=3)
  np.testing.assert_allclose([float(schedule(t)) for t in ROUNDS],
                             [0.5 * 0.3**(t // 3) for t in ROUNDS],
                             rtol=1e-6)


def test_staircase_decay_on_int32_tensors_in_a_traced_function():
  schedule = schedules.staircase_decay(0.5, decay_factor=0.3, decay_every=3)
  traced = tf.function(schedule,
                       input_signature=[tf.TensorSpec((), tf.int32)])
  got = [float(traced(tf.constant(t, tf.int32))) for t in ROUNDS]
  np.testing.assert_allclose(got, [0.5 * 0.3**(t // 3) for t in ROUNDS],
                             rtol=1e-6)


def test_staircase_defaults_are_the_papers_tenfold_decay_every_500_rounds():
  schedule = schedules.staircase_decay(0.1)
  np.testing.assert_allclose(
      [float(schedule(t)) for t in (0, 499, 500, 999, 1000)],
      [0.1, 0.1, 0.01, 0.01, 0.001], rtol=1e-6)


def test_decay_factor_one_is_constant():
  staircase = schedules.staircase_decay(0.2, decay_factor=1.0, decay_every=1)
  constant = schedules.constant(0.2)
  for t in (0, 1, 7, 1000):
    assert float(staircase(t)) == pytest.approx(0.2)
    assert float(constant(t)) == pytest.approx(0.2)


@pytest.mark.parametrize('make, message', [
    (lambda: schedules.constant(-0.1),
     'learning_rate must be non-negative, got -0.1.'),
    (lambda: schedules.staircase_decay(-0.1),
     'learning_rate must be non-negative, got -0.1.'),
    (lambda: schedules.staircase_decay(0.1, decay_factor=0.0),
     r'decay_factor must be in \(0, 1\], got 0.0.'),
    (lambda: schedules.staircase_decay(0.1, decay_factor=1.5),
     r'decay_factor must be in \(0, 1\], got 1.5.'),
    (lambda: schedules.staircase_decay(0.1, decay_every=0),
     'decay_every must be positive, got 0.'),
])
def test_bad_arguments_are_refused_naming_them(make, message):
  with pytest.raises(ValueError, match=f'^{message}$'):
    make()
