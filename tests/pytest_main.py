"""Runs one test file under pytest; the `main` of every Bazel `py_test`.

Usage: `python tests/pytest_main.py TEST_FILE [PYTEST_ARG...]`. pytest reads
the repository's pytest.ini (found next to this file's directory, so under
Bazel the copy in the test's runfiles), writes JUnit XML where Bazel asks for
it (`XML_OUTPUT_FILE`) and keeps its temporary files in Bazel's per-test
directory (`TEST_TMPDIR`). When Bazel shards the target (`shard_count`), shard
i of n runs the collected tests whose position is i modulo n. The process
exits with pytest's exit code.
"""

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ShardPlugin:
  """Keeps every `total`-th collected test, starting at position `index`."""

  def __init__(self, index: int, total: int):
    if not 0 <= index < total:
      raise ValueError(f'index must be in [0, {total}), got {index}')
    self.index = index
    self.total = total

  def pytest_collection_modifyitems(self, config, items):
    keep, dropped = [], []
    for i, item in enumerate(items):
      (keep if i % self.total == self.index else dropped).append(item)
    if dropped:
      config.hook.pytest_deselected(items=dropped)
    items[:] = keep


def pytest_args(test_file: str, extra: list[str]) -> list[str]:
  """Returns pytest's command line for `test_file` under this environment.

  Args:
    test_file: Path of the test file, relative to the repository root or
      absolute.
    extra: Further pytest arguments, appended last.

  Returns:
    The arguments for `pytest.main`.
  """
  args = [test_file, '-q', '-c', os.path.join(REPO, 'pytest.ini'),
          '--rootdir', REPO]
  if os.environ.get('XML_OUTPUT_FILE'):
    args.append('--junitxml=' + os.environ['XML_OUTPUT_FILE'])
  if os.environ.get('TEST_TMPDIR'):
    args.append('--basetemp=' + os.path.join(os.environ['TEST_TMPDIR'],
                                             'pytest'))
  return args + list(extra)


def shard_plugins() -> list[ShardPlugin]:
  """Returns the sharding plugin Bazel's environment asks for, if any.

  Touches `TEST_SHARD_STATUS_FILE`, telling Bazel the runner shards.

  Returns:
    `[ShardPlugin]` when `TEST_TOTAL_SHARDS` > 1, else `[]`.
  """
  total = int(os.environ.get('TEST_TOTAL_SHARDS', '1'))
  if total <= 1:
    return []
  if os.environ.get('TEST_SHARD_STATUS_FILE'):
    with open(os.environ['TEST_SHARD_STATUS_FILE'], 'a'):
      pass
  return [ShardPlugin(int(os.environ['TEST_SHARD_INDEX']), total)]


def main(argv: list[str]) -> int:
  if len(argv) < 2:
    print(f'usage: {argv[0]} TEST_FILE [PYTEST_ARG...]', file=sys.stderr)
    return 2
  return int(pytest.main(pytest_args(argv[1], argv[2:]),
                         plugins=shard_plugins()))


if __name__ == '__main__':
  sys.exit(main(sys.argv))
