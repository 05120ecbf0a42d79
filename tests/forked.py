"""Fresh trainer processes without paying TensorFlow's import each time.

A child started by `subprocess` imports TensorFlow, TFF and the binaries
(~7-10 s of CPU) before it trains. A child forked from a server process
that imported them and ran nothing else starts where a fresh interpreter
stands after its imports: no TensorFlow runtime, no TFF context, nothing a
test ran. A digits run forked this way wrote the same checkpoint bytes as
`python -m binaries.train` with the same flags.

The server is multiprocessing's forkserver, one per test process, started
at the first `start`; it exits once the test process has exited (a few
seconds later).
"""

import functools
import multiprocessing
import os
import sys
from typing import Callable, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What the server imports once; a forked child finds them in sys.modules.
PRELOAD = ('tensorflow', 'tensorflow_federated', 'binaries.train',
           'tests.binary', 'tests.kill_trainer', 'tests.straight_and_resume')

@functools.cache
def _forkserver():
  context = multiprocessing.get_context('forkserver')
  context.set_forkserver_preload(list(PRELOAD))
  return context


def _run(main: Callable[[Sequence[str]], int], argv: Sequence[str],
         log_path: str):
  """In the child: the repository as cwd, stdout and stderr to `log_path`."""
  os.chdir(REPO)
  log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
  os.dup2(log, 1)
  os.dup2(log, 2)
  os.close(log)
  sys.exit(main(list(argv)))


def start(main: Callable[[Sequence[str]], int], argv: Sequence[str],
          log_path: str) -> multiprocessing.Process:
  """Forks a child that runs `main(argv)` and exits with its return value.

  Args:
    main: A module-level function of a module in `PRELOAD` (it is pickled by
      name).
    argv: Its arguments.
    log_path: The file that receives the child's stdout and stderr.

  Returns:
    The started child: `exitcode` is its status (`-9` after SIGKILL).
  """
  child = _forkserver().Process(target=_run, args=(main, list(argv),
                                                   log_path))
  child.start()
  return child
