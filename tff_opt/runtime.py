"""Execution context for tff-opt simulations, and clean-up of TFF's worker.

TFF 0.87's local C++ execution context runs computations in a child process,
`worker_binary`, started lazily on the first computation. TFF stops it from a
`__del__` that often fails at interpreter shutdown, so the child can outlive
Python, keep the parent's stdout/stderr open, and make `cmd | tail` (or CI)
hang. `set_local_execution_context` installs the context and registers an
exit hook that terminates every `worker_binary` this process started; SIGTERM
and SIGHUP are turned into a normal exit so the hook also runs then.
"""

import atexit
import os
import signal
import sys
import threading

import psutil
import tensorflow_federated as tff
from tensorflow_federated.python.core.impl.context_stack import runtime_error_context

_WORKER_NAME = 'worker_binary'
_lock = threading.Lock()
_hooks_installed = False


def _worker_children() -> list[psutil.Process]:
  workers = []
  try:
    children = psutil.Process(os.getpid()).children(recursive=True)
  except psutil.Error:
    return workers
  for child in children:
    try:
      if _WORKER_NAME in child.name() or any(
          _WORKER_NAME in part for part in child.cmdline()[:1]):
        workers.append(child)
    except psutil.Error:
      continue
  return workers


def stop_worker_processes(timeout: float = 5.0) -> int:
  """Terminates the `worker_binary` processes started by this process.

  Args:
    timeout: Seconds to wait for a graceful exit before killing.

  Returns:
    The number of worker processes that were stopped.
  """
  workers = _worker_children()
  for worker in workers:
    try:
      worker.send_signal(signal.SIGINT)
    except psutil.Error:
      pass
  _, alive = psutil.wait_procs(workers, timeout=timeout)
  for worker in alive:
    try:
      worker.kill()
    except psutil.Error:
      pass
  psutil.wait_procs(alive, timeout=timeout)
  return len(workers)


def _release_contexts() -> None:
  """Drops TFF's execution contexts while the interpreter is still whole.

  Importing TFF installs a default context whose service manager's
  `__del__` runs at interpreter teardown, when `subprocess` is already gone,
  and prints an "Exception ignored ... Traceback". Replacing the context at
  exit lets TFF release it (and stop its worker) normally.
  """
  tff.framework.set_default_context(runtime_error_context.RuntimeErrorContext())


def shutdown() -> None:
  """Stops this process's workers, then releases TFF's execution contexts.

  Runs at exit by itself; call it to end TFF's runtime earlier (a test
  session's teardown). A later computation needs a new context.

  The workers are stopped first, with a bounded wait (SIGINT, then SIGKILL
  after a few seconds): TFF's own clean-up sends SIGINT and then waits
  without a limit, which never returns if a worker ignores the signal.
  """
  stop_worker_processes()
  _release_contexts()


def _quiet_stopped_worker_hook(previous):
  """An unraisable-exception hook that drops one known, harmless report.

  When a context is released after its worker was stopped here, TFF's
  service manager `__del__` tries to signal the (gone) process and raises
  `ProcessLookupError` (or, at interpreter teardown, `AttributeError`),
  which Python prints as "Exception ignored ... Traceback". Anything else
  goes to the previous hook.
  """

  def hook(unraisable):
    where = getattr(unraisable.object, '__qualname__', '')
    if 'ServiceManager.__del__' in where and isinstance(
        unraisable.exc_value, (ProcessLookupError, AttributeError)):
      return
    previous(unraisable)

  return hook


def _exit_on_signal(signum, frame):
  del frame
  sys.exit(128 + signum)


def _install_hooks() -> None:
  global _hooks_installed
  with _lock:
    if _hooks_installed:
      return
    atexit.register(shutdown)
    sys.unraisablehook = _quiet_stopped_worker_hook(sys.unraisablehook)
    if threading.current_thread() is threading.main_thread():
      for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
          signal.signal(sig, _exit_on_signal)
    _hooks_installed = True


def set_local_execution_context(max_concurrent_clients: int | None = None):
  """Installs TFF's local C++ execution context with worker clean-up.

  The context replaces the current one; the workers this process started
  are stopped first.

  Args:
    max_concurrent_clients: At most this many client computations run at
      once (TFF's `max_concurrent_computation_calls`); `None` means no limit.

  Raises:
    ValueError: If `max_concurrent_clients` is given and is not positive.
  """
  if max_concurrent_clients is not None and max_concurrent_clients < 1:
    raise ValueError('max_concurrent_clients must be a positive integer or '
                     f'None, got {max_concurrent_clients!r}.')
  _install_hooks()
  # Stop the replaced context's worker ourselves, with a bounded wait (see
  # `shutdown`), before TFF releases that context.
  stop_worker_processes()
  tff.backends.native.set_sync_local_cpp_execution_context(
      max_concurrent_computation_calls=(max_concurrent_clients or -1))


# Registered on import so that any program using tff-opt exits cleanly, even
# one that fails before it sets a context (a bad flag, say).
_install_hooks()
