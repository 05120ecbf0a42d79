"""The library's checks: argument ranges, declared hyper-parameters, finiteness.

Arguments are checked when a process is built, before anything is traced,
each kind of range with one message (`<name> must be positive, got
<value>.`), so an error reads the same whichever builder raises it. A
symbolic tensor (a hyper-parameter set inside a computation) cannot be
checked then and is let through.

`HParam` is an algorithm's hyper-parameter as its module declares it
(`tff_opt.algorithms.hparams`: flag, builder argument, default, open or
closed bounds, help). Its `check` is the one range check of that value,
worded as the `check_*` functions word theirs: the builders call it on their
arguments, `binaries.train`'s flag validators (`HParam.flag_validator`) and
the registry on the flags' values. It is here, beside those words, so that
a hyper-parameter's value is checked in this one file whoever checks it.
The `check_*` functions are for the arguments that are no declared
hyper-parameter (optimizers' learning rates, a schedule's decay, a task's
population, ...).

`all_finite` is the one non-finite test of the package: every guard that
keeps the previous value when an update is not finite (client deltas, the
embedded-momentum server rule, FedPTR's synthetic set and projection) asks
it.
"""

import dataclasses
import math
from collections.abc import Callable
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


# --- A declared hyper-parameter ------------------------------------------------

KINDS = ('float', 'integer', 'boolean', 'enum')


@dataclasses.dataclass(frozen=True)
class HParam:
  """One hyper-parameter: its flag, builder argument, default, bounds, help.

  Attributes:
    flag: The `binaries.train` flag, without dashes: the name of the
      algorithm that reads it (its `--algorithm` value; FedADC+ reads
      FedADC's, FedPTR-S FedPTR's) and the hyper-parameter's
      (`fedcurv_lam`, `feddyn_alpha`).
    default: The default value, the flag's and the builder's; `None` where
      the algorithm has none (`needed`) or derives one (`--fedadc_beta_local`).
    help: The flag's help text.
    kind: 'float', 'integer', 'boolean' or 'enum'.
    choices: An enum's values.
    lower: The lower bound, or `None`.
    upper: The upper bound, or `None`.
    lower_open: `lower` itself is refused (`> 0` rather than `>= 0`).
    upper_open: `upper` itself is refused (a momentum's `[0, 1)`).
    needed: The algorithm refuses to run without a value (no default).
    argument: The builder's argument the flag's value is passed as, where
      it is not the flag's name (`--feddyn_alpha` is `alpha`); see
      `argument_name`.
    aliases: Earlier spellings of the flag, still accepted (`lam` for
      `fedcurv_lam`), so that command lines and recorded runs that use them
      keep working. A spelling that two declarations list (`mu`: FedProx's
      and FedPTR's) goes to the one of the run's `--algorithm`.
  """
  flag: str
  default: Any
  help: str
  kind: str = 'float'
  choices: tuple[str, ...] = ()
  lower: Optional[float] = None
  upper: Optional[float] = None
  lower_open: bool = False
  upper_open: bool = False
  needed: bool = False
  argument: Optional[str] = None
  aliases: tuple[str, ...] = ()

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f'HParam {self.flag}: kind {self.kind!r} is not one '
                       f'of {KINDS}.')
    if (self.kind == 'enum') != bool(self.choices):
      raise ValueError(f'HParam {self.flag}: choices go with kind enum.')
    if self.kind not in ('float', 'integer') and (
        self.lower is not None or self.upper is not None):
      raise ValueError(f'HParam {self.flag}: bounds go with kind float or '
                       'integer.')
    if (self.lower_open and self.lower is None) or (
        self.upper_open and self.upper is None):
      raise ValueError(f'HParam {self.flag}: an open bound needs its value.')
    if self.needed and self.default is not None:
      raise ValueError(f'HParam {self.flag}: a needed one has no default.')
    if self.default is not None:
      self.check(self.default)

  @property
  def argument_name(self) -> str:
    """The builder's argument: `argument`, or else the flag's name."""
    return self.argument or self.flag

  def check(self, value: Any, name: Optional[str] = None) -> None:
    """Raises `ValueError` if `value` is out of the declared range.

    The one check of a declared hyper-parameter: the builders call it on
    their arguments, `define_flag`'s validator on the flag's value and the
    registry on the values it is given. `None` passes where the declared
    default is `None` and the value is not `needed` (the builder derives
    one: `--fedadc_beta_local`); a symbolic tensor (a value set inside a
    computation) cannot be checked and passes.

    Args:
      value: The value.
      name: What the message calls it (default: `argument_name`).

    Raises:
      ValueError: `<name> must be <what>, got <value>.`, e.g. `alpha must
        be positive, got 0.0.` (`requirement` says what).
    """
    name = name or self.argument_name
    if value is None and self.default is None and not self.needed:
      return
    if value is not None and (not checkable(value) or
                              self._accepts(value)):
      return
    text = shown(value) if self.kind == 'float' else repr(value)
    raise ValueError(f'{name} must be {self.requirement()}, got {text}.')

  def _accepts(self, value: Any) -> bool:
    """Whether `value` (not `None`) is of the kind and in the bounds."""
    if self.kind == 'enum':
      return isinstance(value, str) and value in self.choices
    if self.kind == 'boolean':
      return isinstance(value, (bool, np.bool_))
    if self.kind == 'integer':
      if isinstance(value, (bool, np.bool_)) or not isinstance(
          value, (int, np.integer)):
        return False
      number = float(value)
    else:
      number = finite_number(value)
      if number is None:
        return False
    if self.lower is not None and (
        number < self.lower or (self.lower_open and number == self.lower)):
      return False
    return self.upper is None or not (
        number > self.upper or (self.upper_open and number == self.upper))

  def flag_validator(self, error: type[Exception]
                     ) -> Callable[[Any], bool]:
    """`check` as a flag's validator (absl's `register_validator`).

    Args:
      error: What the validator raises for a refused value (absl's
        `flags.ValidationError`, which absl reports as `flag --fedadc_beta=1.0:
        beta must be in [0, 1), got 1.0.`).

    Returns:
      `validate(value) -> True`; an unset flag (`None`) passes: it is the
      algorithm's default or, where needed, the registry's to report.
    """

    def validate(value) -> bool:
      if value is not None:
        try:
          self.check(value)
        except ValueError as e:
          raise error(str(e)) from e
      return True

    return validate

  def requirement(self) -> str:
    """What a value must be, as the messages say it.

    E.g. `positive`, `a non-negative number`, `in [0, 1)`, `a positive
    integer`, `an integer >= 0`, `one of auto, on, off`, `true or false`:
    the words of `tff_opt.checks`' messages where a declaration has their
    range.
    """
    if self.kind == 'enum':
      return f'one of {", ".join(self.choices)}'
    if self.kind == 'boolean':
      return 'true or false'
    if self.kind == 'integer':
      if self.lower == 1 and not self.lower_open and self.upper is None:
        return 'a positive integer'
      bounds = self.range_text()
      return 'an integer' + ('' if bounds == 'any' else
                             f' {bounds}' if bounds[0] in '<>' else
                             f' in {bounds}')
    if self.lower == 0 and self.upper is None:
      return 'positive' if self.lower_open else 'a non-negative number'
    bounds = self.range_text()
    return ('a finite number' if bounds == 'any' else
            f'a number {bounds}' if bounds[0] in '<>' else f'in {bounds}')

  def range_text(self) -> str:
    """`[0, 1]`, `[0, 1)`, `> 0`, `>= 0`, `<= 1` or `any`."""
    if self.lower is not None and self.upper is not None:
      return (f'{"(" if self.lower_open else "["}{self.lower:g}, '
              f'{self.upper:g}{")" if self.upper_open else "]"}')
    if self.lower is not None:
      return f'{">" if self.lower_open else ">="} {self.lower:g}'
    if self.upper is not None:
      return f'{"<" if self.upper_open else "<="} {self.upper:g}'
    return 'any'


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
