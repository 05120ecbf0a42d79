"""Shared pytest set-up: one TFF execution context per test session.

Under `pytest -n N --dist loadgroup --no-loadscope-reorder` (`make test`),
xdist hands whole groups to its workers in the order collected here. Every
test belongs to its module's group unless it names its own with
`pytest.mark.xdist_group` (each notebook's execution does), so a module's
fixtures (its built TFF processes, its binary runs) are built on one worker
only; the groups of files Bazel tags "notebooks" or "slow" in tests/BUILD
go first, so that no long one starts last while the other worker idles.
Those tags, and "ci", are also pytest markers here (e.g. `make test-fast`
deselects the first two).
"""

import os
import sys

# Quiet TensorFlow's C++ start-up lines (CUDA probes) in test output.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
# TensorFlow's oneDNN kernels unless the environment says otherwise (see
# tff_opt/program/worker_env.py); TFF's worker inherits the setting.
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pytest  # pylint: disable=g-import-not-at-top

import binaries  # pylint: disable=g-import-not-at-top,g-bad-import-order
from tests import build_graph  # pylint: disable=g-import-not-at-top
from tff_opt.program import runtime  # pylint: disable=g-import-not-at-top

# As the binaries do (binaries/__init__.py): the collector stops re-scanning
# TensorFlow's and TFF's import-time objects at each full collection.
binaries.freeze_imports()

# Scheduling rank of a Bazel tag: lower goes first.
_TAG_RANK = {'notebooks': 0, 'slow': 1}
_DEFAULT_RANK = 2


def _file_tags():
  """The Bazel tags of each test file; none where tests/BUILD is absent.

  Under `bazel test` the runfiles hold no BUILD file, and Bazel has already
  chosen the targets by tag.
  """
  if not os.path.isfile(os.path.join(build_graph.REPO, 'tests', 'BUILD')):
    return {}
  return build_graph.test_tags()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
  """Marks each test with its file's tags and group; orders groups by tag."""
  del config  # Unused.
  tags = _file_tags()
  ranks = {}
  for item in items:
    name = os.path.basename(str(item.path))
    for tag in tags.get(name, ()):
      item.add_marker(getattr(pytest.mark, tag))
    if item.get_closest_marker('xdist_group') is None:
      item.add_marker(pytest.mark.xdist_group(item.nodeid.split('::')[0]))
    ranks[item.nodeid] = min(
        [_TAG_RANK.get(t, _DEFAULT_RANK) for t in tags.get(name, ())] +
        [_DEFAULT_RANK])
  # A stable sort: within a rank, the collection order (file by file).
  items.sort(key=lambda item: ranks[item.nodeid])


@pytest.fixture(scope='session', autouse=True)
def tff_execution_context():
  runtime.set_local_execution_context()
  yield
  runtime.shutdown()
