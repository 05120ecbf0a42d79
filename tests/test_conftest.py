"""tests/conftest.py's scheduling: groups, order and markers from tests/BUILD.

`make test` relies on it to keep a module's fixtures on one xdist worker and
to start the long files first; here on stand-in items, without xdist.
"""

import os

import pytest

from tests import build_graph
from tests import conftest


@pytest.fixture(autouse=True)
def _needs_build_file():
  # A test by test skip: a file whose every test is skipped at import would
  # collect none, which pytest (and so Bazel) counts as a failure.
  if not os.path.isfile(os.path.join(build_graph.REPO, 'tests', 'BUILD')):
    pytest.skip('reads tests/BUILD, which Bazel\'s runfiles lack')


class _Item:
  """The part of a pytest item the hook uses."""

  def __init__(self, nodeid, group=None):
    self.nodeid = nodeid
    self.path = os.path.join(build_graph.REPO, nodeid.split('::')[0])
    self.own_markers = []
    if group:
      self.add_marker(pytest.mark.xdist_group(group))

  def add_marker(self, marker):
    self.own_markers.append(getattr(marker, 'mark', marker))

  def get_closest_marker(self, name):
    return next((m for m in self.own_markers if m.name == name), None)

  def marker_names(self):
    return [m.name for m in self.own_markers]

  def group(self):
    return self.get_closest_marker('xdist_group').args[0]


def test_groups_by_module_and_heavy_tags_first():
  items = [_Item('tests/test_schedules.py::test_a'),
           _Item('tests/test_train_binary.py::test_b'),
           _Item('tests/test_schedules.py::test_c'),
           _Item('tests/test_notebooks.py::test_d[x.ipynb]', group='x.ipynb'),
           _Item('tests/test_notebooks.py::test_e'),
           _Item('tests/test_layout.py::test_f')]
  conftest.pytest_collection_modifyitems(None, items)
  assert [i.nodeid.split('::')[1] for i in items] == [
      'test_d[x.ipynb]', 'test_e', 'test_b', 'test_a', 'test_c', 'test_f']
  assert [i.group() for i in items] == [
      'x.ipynb', 'tests/test_notebooks.py', 'tests/test_train_binary.py',
      'tests/test_schedules.py', 'tests/test_schedules.py',
      'tests/test_layout.py']
  names = {i.nodeid.split('::')[1]: i.marker_names() for i in items}
  assert names['test_d[x.ipynb]'] == ['xdist_group', 'notebooks']
  assert names['test_b'] == ['slow', 'xdist_group']
  assert names['test_a'] == ['xdist_group']
  assert names['test_f'] == ['ci', 'xdist_group']


def test_a_file_unknown_to_build_is_grouped_by_module_with_the_rest():
  items = [_Item('tests/test_not_in_build.py::test_a'),
           _Item('tests/test_workers_stateful.py::test_b')]
  conftest.pytest_collection_modifyitems(None, items)
  assert [(i.nodeid, i.group(), i.marker_names()) for i in items] == [
      ('tests/test_workers_stateful.py::test_b',
       'tests/test_workers_stateful.py', ['slow', 'xdist_group']),
      ('tests/test_not_in_build.py::test_a', 'tests/test_not_in_build.py',
       ['xdist_group'])]
