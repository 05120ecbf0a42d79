"""Every notebook in notebooks/ runs headless, top to bottom, without error.

Each notebook is executed in a fresh IPython kernel (nbclient) from the
repository root; a cell that raises fails the test. The notebooks check
their own numbers with `assert`s and end by stopping TFF's worker process
and asserting that the kernel keeps none.
"""

import glob
import os

import nbclient
import nbformat
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(REPO, 'notebooks', '*.ipynb')))
# A generous per-cell limit: a loaded machine must not make the test flaky;
# the notebooks themselves take well under two minutes each.
CELL_TIMEOUT_S = 600


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


@pytest.mark.parametrize('path', NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs_without_error(path):
  notebook = nbformat.read(path, as_version=4)
  client = nbclient.NotebookClient(
      notebook, timeout=CELL_TIMEOUT_S, kernel_name='python3',
      resources={'metadata': {'path': REPO}})
  client.execute()  # Raises CellExecutionError on the first failing cell.
  outputs = [o for cell in notebook.cells if cell.cell_type == 'code'
             for o in cell.outputs]
  assert not [o for o in outputs if o.output_type == 'error']
  # Every notebook draws at least one figure.
  assert any('image/png' in o.get('data', {}) for o in outputs)
