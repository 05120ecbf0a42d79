"""Files replaced whole or not at all.

A run's `hparams.json`, `metrics.csv` and `final_eval.json`, the sweeps',
reproductions' and claims' tables and plots: each may be read while it is
rewritten (a report, a second claims process, a user's notebook) and its
writer may die mid-write (SIGTERM from a scheduler, a crash). Each is
therefore written to a temporary file beside it and renamed over it with
`os.replace`, atomic on POSIX within one file system: a reader sees the
old file or the new one, never half of one, and a writer that raises
leaves the old file as it was and no temporary behind.

The temporary's name is unique to one write, `<name>.<pid>.<n>.tmp` (the
writer's pid and a per-process count): two writers of the same file (two
`binaries.claims` processes rewriting `claims.md` as their runs end, or
one writer inside another) never write into or rename away each other's
temporary; the last to finish wins. It is opened like any file (not
`tempfile.mkstemp`, whose files are private to their owner), so the
result has the permissions a plain `open` gives.

Durable as well: the temporary is synced to disk (flush, fsync) before the
rename, and the directory after it, so that a machine that stops (power,
a kernel panic) leaves the old file or the whole new one, never a new
name over data still in the page cache (`fsync_directory`).

A file some library builds from a path (an SQLite database, a copy) is
written the same way through `built_atomically`, which hands out the
temporary's path instead of an open file.
"""

import contextlib
import itertools
import os
from typing import IO, Iterator, Optional

_COUNT = itertools.count()


def _fsync_file(path: str) -> None:
  """Syncs the data of the file at `path` to disk."""
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def fsync_directory(path: str) -> None:
  """Syncs directory `path`'s entries (a rename into it) to disk.

  A file system that cannot sync a directory (some network ones) is left
  to its own guarantees.
  """
  try:
    fd = os.open(path, os.O_RDONLY)
  except OSError:
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


def _temporary_name(path: str) -> str:
  """A name beside `path` that no other write (in any process) uses."""
  return f'{path}.{os.getpid()}.{next(_COUNT)}.tmp'


@contextlib.contextmanager
def built_atomically(path: str) -> Iterator[str]:
  """A temporary path that replaces `path` when the block ends.

  For files a library writes from a path: `with built_atomically(path) as
  tmp: sqlite3.connect(tmp)...`. The block builds `tmp` (nothing exists
  there at first); when it ends, `tmp` is renamed over `path`. If the
  block raises, `path` is left as it was and `tmp` is removed.

  Args:
    path: The file to replace (its directory must exist).

  Yields:
    The temporary's path, beside `path`.

  Raises:
    FileNotFoundError: If the block did not create the temporary.
    OSError: If the temporary cannot be renamed.
  """
  tmp = _temporary_name(path)
  try:
    yield tmp
    _fsync_file(tmp)
    os.replace(tmp, path)
    fsync_directory(os.path.dirname(path) or '.')
  except BaseException:
    with contextlib.suppress(FileNotFoundError):
      os.remove(tmp)
    raise


@contextlib.contextmanager
def replaced_atomically(path: str, mode: str = 'w', *,
                        newline: Optional[str] = None) -> Iterator[IO]:
  """Opens a temporary file that replaces `path` when the block ends.

  Usage: `with replaced_atomically(path) as f: json.dump(data, f)`. Inside
  the block `f.name` is the temporary's path (flush `f` before reading it
  back, e.g. to validate what was written).

  Args:
    path: The file to replace (its directory must exist).
    mode: `'w'` (text) or `'wb'` (bytes).
    newline: As `open`'s (`''` for the `csv` module); text mode only.

  Yields:
    The temporary file, open for writing.

  Raises:
    ValueError: If `mode` is neither `'w'` nor `'wb'`.
    OSError: If the temporary cannot be written or renamed.
  """
  if mode not in ('w', 'wb'):
    raise ValueError(f"mode must be 'w' or 'wb', not {mode!r}.")
  with built_atomically(path) as tmp:
    with open(tmp, mode, newline=newline) as f:
      yield f


def write_text(path: str, text: str) -> None:
  """Replaces `path` with `text` (`replaced_atomically`)."""
  with replaced_atomically(path) as f:
    f.write(text)
