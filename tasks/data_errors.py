"""The errors a task raises when its dataset files are missing or damaged.

No task ever tries a download when its file is missing (the machines this
runs on may be offline, and TFF's and TFDS's downloaders can hang or print a
traceback there): it checks for the file first and raises `MissingDataError`,
whose message names the task, the path looked for and how to obtain the file.
The binary prints that message as one `train: error: ...` line. A TFF
SQLite file that is there but is not a database, or lacks TFF's tables, is a
`BadDataError` naming the file and what was expected. Both are `DataError`s.
"""

import contextlib
import os
import re
import sqlite3


class DataError(Exception):
  """A task's dataset file is missing or unusable."""


class MissingDataError(DataError):
  """A task's dataset file is not in its data directory."""

  def __init__(self, task: str, path: str, how_to_obtain: str):
    self.task = task
    self.path = path
    super().__init__(
        f'task {task!r} needs {path}, which does not exist (no download is '
        f'attempted). {how_to_obtain}')


# The data directory of every binary and tool when none is given: `data`
# relative to the working directory, where `make data` (the Makefile's
# DATA), `binaries.claims` and `binaries.reproduce` put and read the files.
DEFAULT_DATA_DIR = 'data'


def default_data_dir() -> str:
  """The data directory used when `data_dir` is None (`DEFAULT_DATA_DIR`)."""
  return DEFAULT_DATA_DIR


def require_file(task: str, data_dir: str | None, filename: str,
                 how_to_obtain: str) -> str:
  """Returns `<data_dir>/<filename>` if it is a file; raises otherwise.

  Args:
    task: The task's name (for the message).
    data_dir: The task's data directory; `None` means `default_data_dir()`.
    filename: The file's path relative to `data_dir`.
    how_to_obtain: A sentence telling the user how to get the file.

  Returns:
    The file's path.

  Raises:
    MissingDataError: If the file does not exist.
  """
  path = os.path.join(data_dir or default_data_dir(), filename)
  if not os.path.isfile(path):
    raise MissingDataError(task, path, how_to_obtain)
  if filename.endswith('.sqlite'):
    check_tff_sqlite(task, path)
  return path


class BadDataError(DataError):
  """A task's dataset file exists but is not what the task reads."""

  def __init__(self, task: str, path: str, problem: str):
    self.task = task
    self.path = path
    super().__init__(f'task {task!r}: {path} {problem}')


TFF_SQLITE_TABLES = ('client_metadata', 'examples')


def check_tff_sqlite(task: str, path: str) -> None:
  """Checks that `path` is an SQLite database with TFF's two tables.

  Reads the schema only (cheap even for Stack Overflow's 10 GB file); damage
  inside the data shows when the rows are read.

  Raises:
    BadDataError: If the file is not an SQLite database or lacks a table.
  """
  try:
    with sqlite3.connect(f'file:{path}?mode=ro', uri=True) as db:
      tables = {row[0] for row in db.execute(
          "SELECT name FROM sqlite_master WHERE type = 'table'")}
  except sqlite3.Error as e:
    raise BadDataError(task, path, f'is not a readable SQLite database '
                       f'({e}); expected TFF\'s format (tables '
                       f'{" and ".join(TFF_SQLITE_TABLES)})') from e
  missing = [t for t in TFF_SQLITE_TABLES if t not in tables]
  if missing:
    raise BadDataError(task, path, f'has no table {", ".join(missing)}; '
                       f'expected TFF\'s format (tables '
                       f'{" and ".join(TFF_SQLITE_TABLES)})')


# SQLite's own words for a damaged file, as sqlite3 raises them and as TF's
# SqlDataset reports them from inside a round (through the TFF worker).
_DAMAGED_SQLITE = re.compile(r'database disk image is malformed|file is not a '
                             r'database|database or disk is full|disk I/O '
                             r'error')


def damaged_sqlite_reason(error: BaseException) -> str | None:
  """SQLite's words if `error` says a database file is damaged, else None.

  Recognises `sqlite3.DatabaseError` (read in Python) and the errors a TFF
  round raises when TF's SQL dataset fails inside the worker (a gRPC error
  whose text carries SQLite's message).
  """
  match = _DAMAGED_SQLITE.search(str(error))
  if match:
    return match.group(0)
  if isinstance(error, sqlite3.DatabaseError):
    return str(error) or type(error).__name__
  return None


@contextlib.contextmanager
def reading_sqlite(task: str, path: str):
  """Turns SQLite errors while reading `path` into one `BadDataError`.

  The schema check of `require_file` reads only the first page; damage
  further in shows when the client ids or the rows are read.

  Raises:
    BadDataError: Naming `path` and SQLite's reason.
  """
  try:
    yield
  except sqlite3.DatabaseError as e:
    raise BadDataError(task, path, f'is damaged ({damaged_sqlite_reason(e)}); '
                       'rebuild it or copy it again') from e


def tff_sqlite_instructions(filename: str) -> str:
  """How to obtain one of TFF's `<name>.sqlite` files."""
  return (f'Download https://storage.googleapis.com/tff-datasets-public/'
          f'{filename}.lzma on a machine with internet access, decompress it '
          f'(xz -d {filename}.lzma) and put {filename} in --data_dir.')
