"""Checks every builder shares: argument ranges and the finite guard.

Arguments are checked when a process is built, before anything is traced,
each kind of range with one message (`<name> must be positive, got
<value>.`), so an error reads the same whichever builder raises it. A
declared hyper-parameter (`tff_opt.algorithms.hparams.HParam`) is checked by
its declaration, which words its messages as these do and uses
`checkable`, `finite_number` and `shown`; the `check_*` functions are for
the other arguments (optimizers' learning rates, a schedule's decay, a
task's population, ...).
A symbolic tensor (a hyper-parameter set inside a computation) cannot be
checked then and is let through.

`all_finite` is the one non-finite test of the package: every guard that
keeps the previous value when an update is not finite (client deltas, the
embedded-momentum server rule, FedPTR's synthetic set and projection) asks
it.
"""

import math
from typing import Any, Optional

import numpy as np
import tensorflow as tf


def checkable(value: Any) -> bool:
  """Whether `value` can be checked now (it is not a symbolic tensor)."""
  return not tf.is_symbolic_tensor(value)


def finite_number(value: Any) -> Optional[float]:
  """`value` as a float, or `None` unless it is a finite real number.

  A bool and a string are not numbers here, whatever `float()` makes of
  them.
  """
  if isinstance(value, (bool, np.bool_, str, bytes)):
    return None
  try:
    number = float(value)
  except (TypeError, ValueError):
    return None
  return number if math.isfinite(number) else None


def shown(value: Any) -> str:
  """How a refused value is written in a message ('big' quoted)."""
  return repr(value) if isinstance(value, (str, bytes)) else str(value)


def check_positive(name: str, value: Any) -> None:
  """Raises ValueError unless `value` is a finite number > 0."""
  number = finite_number(value) if checkable(value) else 1.0
  if number is None or number <= 0.0:
    raise ValueError(f'{name} must be positive, got {shown(value)}.')


def check_non_negative(name: str, value: Any) -> None:
  """Raises ValueError unless `value` is a finite number >= 0.

  A penalty's coefficient (mu, alpha, lam) of 0 is the base algorithm, so
  0 is allowed.
  """
  number = finite_number(value) if checkable(value) else 0.0
  if number is None or number < 0.0:
    raise ValueError(
        f'{name} must be a non-negative number, got {shown(value)}.')


def check_unit_interval(name: str, value: Any) -> None:
  """Raises ValueError unless 0 <= `value` < 1 (a momentum, a decay)."""
  number = finite_number(value) if checkable(value) else 0.0
  if number is None or not 0.0 <= number < 1.0:
    raise ValueError(f'{name} must be in [0, 1), got {shown(value)}.')


def check_int(name: str, value: Any, minimum: int = 1) -> None:
  """Raises ValueError unless `value` is an integer >= `minimum` (no bool).

  The message says "a positive integer" for `minimum` 1.
  """
  if (isinstance(value, bool) or not isinstance(value, (int, np.integer))
      or value < minimum):
    what = ('a positive integer' if minimum == 1 else
            f'an integer >= {minimum}')
    raise ValueError(f'{name} must be {what}, got {value!r}.')


def all_finite(structure: Any) -> tf.Tensor:
  """A scalar bool tensor: whether every entry of every tensor is finite.

  Integer and bool tensors (always finite) are skipped; a structure without
  a float tensor is finite.
  """
  floats = [t for t in map(tf.convert_to_tensor, tf.nest.flatten(structure))
            if t.dtype.is_floating]
  if not floats:
    return tf.constant(True)
  return tf.reduce_all([tf.reduce_all(tf.math.is_finite(t)) for t in floats])
