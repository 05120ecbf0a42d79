"""The papers' result tables that this package can run: the registry.

`binaries.reproduce` runs one of these tables (`get_table`): every grid
point (method x setting x seed) is one `binaries.train` run, and the table
it writes is laid out as the paper's, our mean +- std over seeds next to
the paper's printed number.

Each paper's tables are data in its module of `binaries/papers/`, one
`TableSpec` per table, next to the paper's claim: FedFOR Tables 2-5
(`fedfor.py`), FedCurv Table 1 (`fedcurv.py`), FedADC Table I
(`fedadc.py`), FedPTR Tables 1-2 (`fedptr.py`), Reddi et al. Tables 1 and
11 (`fedopt.py`). Tables left out: FedFOR Table 1 (communication, no
numbers); FedPTR Tables 3-8 (ablations of client-side FedPTR, not
implemented here, or with their numbers lost); Reddi et al. Tables 8-10
(grids; see `binaries.sweep`).

What a table is (`TableSpec`, `Table`, the stand-in scales, what each cell
measures) and how a spec is read (`expand`, `SpecError`, `check_names`):
`binaries.tables`, whose names this module re-exports. Here: `SPECS`, every
paper's specs in `PAPERS`' order; `TABLES`, each expanded; `tables_of`;
`get_table`.
"""

from binaries import tables
from binaries.papers import fedadc
from binaries.papers import fedcurv
from binaries.papers import fedfor
from binaries.papers import fedopt
from binaries.papers import fedptr

# The machinery (`binaries.tables`), by the names `binaries.reproduce` and
# the tests use.
PAPERS = tables.PAPERS
PAPER_TITLES = tables.PAPER_TITLES
SCALES = tables.SCALES
STAND_INS = tables.STAND_INS
TASK_DEFAULT_MODELS = tables.TASK_DEFAULT_MODELS
Measure = tables.Measure
Method = tables.Method
Setting = tables.Setting
Printed = tables.Printed
Table = tables.Table
TableSpec = tables.TableSpec
SpecError = tables.SpecError
expand = tables.expand
check_names = tables.check_names

_MODULES = (fedfor, fedcurv, fedadc, fedptr, fedopt)  # `PAPERS`' order.

SPECS: dict[tuple[str, str], TableSpec] = {
    (s.paper, s.number): s for module in _MODULES for s in module.SPECS}
TABLES: dict[tuple[str, str], Table] = {
    key: expand(spec) for key, spec in SPECS.items()}


def tables_of(paper: str) -> list[str]:
  """The table numbers of `paper` that can be reproduced, in order."""
  return sorted((n for p, n in TABLES if p == paper), key=int)


def get_table(paper: str, number: str) -> Table:
  """The table `number` of `paper`.

  Raises:
    ValueError: If the paper is unknown or has no such reproducible table.
  """
  if paper not in PAPERS:
    raise ValueError(f'--paper={paper}: unknown paper; expected one of '
                     f'{", ".join(PAPERS)}.')
  if (paper, str(number)) not in TABLES:
    raise ValueError(f'--table={number}: {paper} has no reproducible table '
                     f'{number}; its tables are {", ".join(tables_of(paper))}.')
  return TABLES[(paper, str(number))]
