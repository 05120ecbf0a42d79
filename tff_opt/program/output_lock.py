"""One writer per output directory: an exclusive `flock` on `<dir>/.lock`.

Two trainers writing one run directory would interleave their rounds in
`metrics.csv` and overwrite each other's checkpoints. `binaries.train`
takes the directory's lock before it writes anything there and keeps it
until it exits; the kernel drops a `flock` when its holder ends, however
it ends (a crash or SIGKILL included), so nothing is left to clean up. The
file holds the holder's pid, for the messages. Sweeps and claims ask
`holder` before launching a run, and skip one another process is writing
(two `binaries.claims` processes can share one queue of runs that way).

Locks are per open file, so a second `acquire` in the same process (a
test that runs the trainer in-process twice) is refused as another
process's would be; `release_all` drops this process's locks.
"""

import fcntl
import os
from typing import Optional, TextIO

LOCK_FILE = '.lock'
_HELD: list[TextIO] = []  # This process's locks, held until released.


class LockedError(RuntimeError):
  """Another process (its pid in `holder`) is writing the directory."""

  def __init__(self, output_dir: str, holder: str):
    self.output_dir = output_dir
    self.holder = holder
    super().__init__(f'{output_dir} is being written by another process '
                     f'(pid {holder}).')


def acquire(output_dir: str) -> TextIO:
  """Takes `output_dir`'s lock (the directory must exist) for this process.

  Returns:
    The open lock file: closing it, or `release_all`, releases the lock.

  Raises:
    LockedError: If another holder has it.
  """
  lock = open(os.path.join(output_dir, LOCK_FILE), 'a+')  # pylint: disable=consider-using-with
  try:
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError as e:
    lock.seek(0)
    holder = lock.read().strip() or 'unknown'
    lock.close()
    raise LockedError(output_dir, holder) from e
  lock.seek(0)
  lock.truncate()
  lock.write(f'{os.getpid()}\n')
  lock.flush()
  _HELD.append(lock)
  return lock


def holder(output_dir: str) -> Optional[str]:
  """The pid (as written) of the process writing `output_dir`, else None.

  Asking takes the lock for an instant; a trainer starting at that very
  instant is refused and says so, as for any other holder.
  """
  path = os.path.join(output_dir, LOCK_FILE)
  try:
    lock = open(path)  # pylint: disable=consider-using-with
  except FileNotFoundError:
    return None
  with lock:
    try:
      fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
      return lock.read().strip() or 'unknown'
    return None  # Closing the file releases the shared lock.


def release_all() -> None:
  """Releases the locks this process took with `acquire`."""
  while _HELD:
    _HELD.pop().close()
