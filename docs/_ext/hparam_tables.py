"""What the docs say of each algorithm's hyper-parameters: rows and notes.

`tffopt_docs.py`'s `algorithm-spec` table and `flag-reference` list are made
from these functions, which read the declarations
(`tff_opt.algorithms.hparams.HParam`) and nothing else. They are apart from
`tffopt_docs.py`, which needs Sphinx, so that
tests/test_declared_bounds.py can hold the range the documentation shows
against what the flag parser and the builders refuse, without Sphinx.
"""

from typing import Any, Collection, Optional

SPEC_HEADER = ['flag', 'builder argument', 'kind', 'default', 'range', 'help',
               'earlier spelling']


def kind_text(hparam) -> str:
  """`float`, `integer`, `boolean` or `enum {auto, on, off}`."""
  return hparam.kind + (f' {{{", ".join(hparam.choices)}}}'
                        if hparam.choices else '')


def spec_row(hparam) -> list[str]:
  """One hyper-parameter's row of an `algorithm-spec` table (`SPEC_HEADER`)."""
  return [f'--{hparam.flag}', hparam.argument_name, kind_text(hparam),
          'needed' if hparam.needed else repr(hparam.default),
          hparam.range_text(), hparam.help,
          ', '.join(f'--{a}' for a in hparam.aliases)]


def old_spellings_text(hparam, shared: Collection[str] = ()) -> str:
  """`Earlier spelling, still accepted: --lam.`; empty where it has none.

  Command lines and scripts written before the flags were named
  `<algorithm>_<name>` keep working; the reference says so, flag by flag.

  Args:
    hparam: The declaration.
    shared: The earlier spellings that several flags list (`mu`), whose
      value goes to the flag of the run's `--algorithm`.

  Returns:
    One sentence, or '' for a flag that kept its name.
  """
  if not hparam.aliases:
    return ''
  names = ', '.join(f'--{a}' for a in hparam.aliases)
  note = (' (for the run\'s --algorithm)'
          if set(hparam.aliases) & set(shared) else '')
  return f'Earlier spelling, still accepted: {names}{note}.'


def flag_term(flag_type: str, default: str,
              hparam: Optional[Any] = None) -> str:
  """The `flag-reference` text after a flag's name.

  `(float, default 0.9, range [0, 1))` for a declared hyper-parameter with
  bounds, `(enum, default auto, one of auto, on, off)` for an enum, `(int,
  default 5)` for any other flag.
  """
  extra = ''
  if hparam is not None and hparam.kind == 'enum':
    extra = f', one of {", ".join(hparam.choices)}'
  elif hparam is not None and hparam.range_text() != 'any':
    extra = f', range {hparam.range_text()}'
  return f'  ({flag_type}, default {default}{extra})'
