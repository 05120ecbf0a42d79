"""The shared hyper-parameter checks and the finite guard."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tff_opt import checks


@pytest.mark.parametrize('check, value, message', [
    (checks.check_positive, 0.0, 'x must be positive, got 0.0.'),
    (checks.check_positive, -2, 'x must be positive, got -2.'),
    (checks.check_positive, math.nan, 'x must be positive, got nan.'),
    (checks.check_positive, math.inf, 'x must be positive, got inf.'),
    (checks.check_positive, '1', "x must be positive, got '1'."),
    (checks.check_unit_interval, False, 'x must be in [0, 1), got False.'),
    (checks.check_non_negative, -0.5,
     'x must be a non-negative number, got -0.5.'),
    (checks.check_non_negative, math.inf,
     'x must be a non-negative number, got inf.'),
    (checks.check_non_negative, 'big',
     "x must be a non-negative number, got 'big'."),
    (checks.check_non_negative, True,
     'x must be a non-negative number, got True.'),
    (checks.check_unit_interval, 1.0, 'x must be in [0, 1), got 1.0.'),
    (checks.check_unit_interval, -0.1, 'x must be in [0, 1), got -0.1.'),
    (checks.check_int, 0, 'x must be a positive integer, got 0.'),
    (checks.check_int, 2.5, 'x must be a positive integer, got 2.5.'),
    (checks.check_int, True, 'x must be a positive integer, got True.'),
])
def test_out_of_range_is_one_message_naming_the_value(check, value, message):
  with pytest.raises(ValueError) as e:
    check('x', value)
  assert str(e.value) == message


def test_in_range_values_and_symbolic_tensors_pass():
  checks.check_positive('x', np.float32(1e-8))
  checks.check_non_negative('x', 0)
  checks.check_unit_interval('x', 0.0)
  checks.check_int('x', np.int64(3))
  checks.check_int('x', 0, minimum=0)
  with pytest.raises(ValueError, match=r'^x must be an integer >= 2, got 1\.$'):
    checks.check_int('x', 1, minimum=2)

  @tf.function
  def symbolic(value):
    checks.check_positive('x', value)  # Cannot be checked while tracing.
    return value
  assert symbolic(tf.constant(-1.0)).numpy() == -1.0


def test_all_finite_sees_every_entry_of_every_tensor():
  ok = {'a': np.ones((2, 2), np.float32), 'b': [np.zeros(3, np.float32)]}
  assert bool(checks.all_finite(ok))
  for bad in (np.inf, -np.inf, np.nan):
    broken = {'a': np.ones((2, 2), np.float32),
              'b': [np.array([0.0, 0.0, bad], np.float32)]}
    assert not bool(checks.all_finite(broken))


def test_all_finite_skips_integer_and_bool_tensors():
  assert bool(checks.all_finite({'steps': np.int64(3),
                                 'seen': np.array([True, False])}))
  assert not bool(checks.all_finite([np.int32(1),
                                     np.array([np.nan], np.float32)]))
