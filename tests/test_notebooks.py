"""Every notebook in notebooks/ runs headless, top to bottom, without error.

Each notebook is executed in a fresh IPython kernel (nbclient) from the
repository root; a cell that raises fails the test. The notebooks check
their own numbers with `assert`s and end by stopping TFF's worker process
and asserting that the kernel keeps none. Under test a notebook runs
`TEST_ROUNDS` rounds instead of its `ROUNDS` (its mechanics, tables and
figures need no more), except those in `FULL_ROUNDS`, whose asserts need
the notebook's own count. Each execution is its own xdist group, so the
notebooks run side by side.
"""

import glob
import os
import re

import nbclient
import nbformat
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(REPO, 'notebooks', '*.ipynb')))
# A generous per-cell limit: a loaded machine must not make the test flaky;
# the notebooks themselves take well under two minutes each.
CELL_TIMEOUT_S = 600
# The rounds a notebook runs under test: 5 fills the 5-round windows of the
# tables and selection scores, and FedPTR's MTT runs from round 2 on.
TEST_ROUNDS = 5
# quickstart asserts that FedYogi passes 50 % held-out accuracy in its 30
# rounds.
FULL_ROUNDS = ('quickstart.ipynb',)
_ROUNDS_LINE = re.compile(r'^ROUNDS = \d+$', re.MULTILINE)


def _run_test_rounds(notebook, name):
  """Rewrites the notebook's one `ROUNDS = N` line to `TEST_ROUNDS`."""
  code = [c for c in notebook.cells if c.cell_type == 'code']
  lines = sum(len(_ROUNDS_LINE.findall(c.source)) for c in code)
  assert lines == 1, f'{name}: expected one "ROUNDS = N" line, found {lines}'
  for cell in code:
    cell.source = _ROUNDS_LINE.sub(f'ROUNDS = {TEST_ROUNDS}', cell.source)


def _executions():
  return [pytest.param(p, id=os.path.basename(p),
                       marks=pytest.mark.xdist_group(os.path.basename(p)))
          for p in NOTEBOOKS]


def test_expected_notebooks_exist():
  names = {os.path.basename(p) for p in NOTEBOOKS}
  assert {'quickstart.ipynb', 'write_your_own_algorithm.ipynb',
          'paper_fedopt_reddi.ipynb'} <= names


@pytest.mark.parametrize('path', NOTEBOOKS, ids=os.path.basename)
def test_notebook_is_stored_without_outputs(path):
  notebook = nbformat.read(path, as_version=4)
  nbformat.validate(notebook)
  for cell in notebook.cells:
    if cell.cell_type == 'code':
      assert cell.outputs == [] and cell.execution_count is None, (
          f'{os.path.basename(path)}: clear the outputs before committing')


def test_rounds_line_is_rewritten():
  notebook = nbformat.v4.new_notebook(cells=[
      nbformat.v4.new_code_cell('ROUNDS = 20\nsetup = 1'),
      nbformat.v4.new_code_cell('x = ROUNDS = 3')])
  _run_test_rounds(notebook, 'x.ipynb')
  assert [c.source for c in notebook.cells] == [
      f'ROUNDS = {TEST_ROUNDS}\nsetup = 1', 'x = ROUNDS = 3']
  with pytest.raises(AssertionError,
                     match='expected one "ROUNDS = N" line, found 0'):
    _run_test_rounds(nbformat.v4.new_notebook(cells=[notebook.cells[1]]),
                     'x.ipynb')
  twice = nbformat.v4.new_notebook(cells=[
      nbformat.v4.new_code_cell('ROUNDS = 20\nROUNDS = 10')])
  with pytest.raises(AssertionError,
                     match='expected one "ROUNDS = N" line, found 2'):
    _run_test_rounds(twice, 'x.ipynb')


@pytest.mark.parametrize('path', _executions())
def test_notebook_runs_without_error(path):
  notebook = nbformat.read(path, as_version=4)
  if os.path.basename(path) not in FULL_ROUNDS:
    _run_test_rounds(notebook, os.path.basename(path))
  client = nbclient.NotebookClient(
      notebook, timeout=CELL_TIMEOUT_S, kernel_name='python3',
      resources={'metadata': {'path': REPO}})
  client.execute()  # Raises CellExecutionError on the first failing cell.
  outputs = [o for cell in notebook.cells if cell.cell_type == 'code'
             for o in cell.outputs]
  assert not [o for o in outputs if o.output_type == 'error']
  # Every notebook draws at least one figure.
  assert any('image/png' in o.get('data', {}) for o in outputs)
