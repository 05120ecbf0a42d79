"""Execution context for tff-opt simulations, and clean-up of TFF's worker.

TFF 0.87's local C++ execution context runs computations in a child process,
`worker_binary`, started lazily on the first computation. TFF stops it from a
`__del__` that often fails at interpreter shutdown, so the child can outlive
Python, keep the parent's stdout/stderr open, and make `cmd | tail` (or CI)
hang. `set_local_execution_context` installs the context and registers an
exit hook that terminates every `worker_binary` this process started; SIGTERM
and SIGHUP are turned into a normal exit so the hook also runs then.

Nothing runs in a process killed by SIGKILL (or the OOM killer), so each
worker gets a watchdog (the local context's when it starts it; a worker
started by a TFF context, through `watch_workers`, called by
`start_worker` and by `training_loop.run_training` after its first
round): a small
`sh` loop, in its own session and with no open pipes, that checks every
second whether this process is alive and, once it is gone, stops the worker
(SIGTERM, then SIGKILL) if that pid is still a `worker_binary`; it exits by
itself when the worker stops first. A worker
cannot outlive its trainer by more than ~3 s, whatever killed the trainer.
(A parent-death signal set between fork and exec would be lighter, but
Linux sends it when the forking *thread* exits, and TFF forks its worker
from whichever thread runs the first computation.)

`set_remote_execution_context` runs the computations on TFF workers on
other hosts instead (`python -m binaries.worker`), over gRPC channels, with
TLS when given root certificates. SECURITY: a TFF worker executes whatever
computation it is sent, so an exposed worker is remote code execution: run
workers only on a private network or behind an authenticated tunnel.

The local context's worker starts when the context is made, not on the
first computation as in TFF, and is waited for differently. TFF makes its
gRPC channel as it spawns the worker; the channel's first connect comes
before the worker listens and fails, and gRPC tries again only after its
reconnect back-off, 1 s, so each start takes 1 to 2 s although the worker
accepts connections ~60 ms after it is spawned. Here `subprocess.Popen`
returns at once, and the first computation probes the worker's port every
`WORKER_POLL_SECONDS` (50 ms) before it makes the channel; a worker that
exits while starting is an error naming its status instead of an endless
wait. Unlike TFF, the worker that answers is checked to be the only process
on its port (`worker_env.is_sole_listener`): TFF's worker listens with
SO_REUSEPORT, so on a port another process took after `portpicker` chose
it (two workers starting at once can choose the same one) it would share
that process's connections silently; it is started anew on another port
instead. The rest is TFF's local context: the same executor service, stub,
channel options and compiler, and a worker found dead is started anew on
the next computation.

Both contexts compile a computation as TFF's own do, Grappler included,
but with `grappler_config()`: TFF's options without Grappler's scheduling
heuristic, which made FedPTR-S's trajectory matching give other numbers in
every process (a resumed run did not repeat the rounds it recomputed).

`configure_gpus` applies GPU memory growth and logical GPUs; without a GPU
it logs one line and does nothing.
"""

import atexit
from collections.abc import Callable, Sequence
import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref

import grpc
import portpicker
import psutil
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import executor_pb2_grpc
from tensorflow_federated.python.core.backends.native import compiler as native_compiler
from tensorflow_federated.python.core.backends.native import mergeable_comp_compiler
from tensorflow_federated.python.core.environments.tensorflow_backend import tensorflow_tree_transformations
from tensorflow_federated.python.core.environments.tensorflow_frontend import tensorflow_computation
from tensorflow_federated.python.core.impl.computation import computation_impl
from tensorflow_federated.python.core.impl.context_stack import context_stack_impl
from tensorflow_federated.python.core.impl.context_stack import runtime_error_context
from tensorflow_federated.python.core.impl.execution_contexts import async_execution_context
from tensorflow_federated.python.core.impl.execution_contexts import mergeable_comp_execution_context
from tensorflow_federated.python.core.impl.execution_contexts import sync_execution_context
from tensorflow_federated.python.core.impl.executor_stacks import python_executor_stacks
from tensorflow_federated.python.core.impl.executors import remote_executor
from tensorflow_federated.python.core.impl.executors import remote_executor_grpc_stub
from tensorflow_federated.python.core.impl.executors import remote_executor_stub

from tff_opt.program import stderr_filter
from tff_opt.program import worker_env

_WORKER_NAME = 'worker_binary'
# TFF's C++ executor service, as TFF's local context finds it.
WORKER_BINARY = os.path.join(os.path.dirname(tff.__file__), 'data',
                             _WORKER_NAME)
# How often a starting local worker is checked for an answer (TFF: 1 s).
WORKER_POLL_SECONDS = 0.05
# How long a local worker may take to answer before it is an error.
WORKER_START_TIMEOUT = 300.0
# Ports tried before a worker that keeps finding its port taken is an error.
WORKER_PORT_ATTEMPTS = 3
# Values the trainer no longer holds that the worker keeps until they are
# disposed of together. TFF's default, 20, kept ~20 values alive on the
# worker: a round's arguments and results for several rounds. FedCurv's
# claim runs (96 devices, each with its Fisher terms, ~1.3 GB of client
# state in and out of every round) grew their worker to 14-16 GB, and the
# kernel's OOM killer ended it every few rounds on a 23 GB machine; with 1,
# each value goes as soon as the trainer drops it (10 clients x 10 MB per
# call: worker RSS 1.8-2.6 GB over 30 calls with 20, 0.46-0.56 GB with 1;
# results/perf/worker_memory.md). One more small RPC per value.
DISPOSE_BATCH_SIZE = 1
_lock = threading.Lock()
_hooks_installed = False


def worker_children() -> list[psutil.Process]:
  """This process's TFF `worker_binary` descendants (any depth)."""
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
  workers = worker_children()
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
  """An unraisable-exception hook that drops two known, harmless reports.

  Python prints each as "Exception ignored ... Traceback":
  - when a context is released after its worker was stopped here, TFF's
    service manager `__del__` tries to signal the (gone) process and raises
    `ProcessLookupError` (or, at interpreter teardown, `AttributeError`);
  - when the worker is gone (stopped at exit, or by the Ctrl-C that reached
    its process group), the weakref finalizers of TFF's remote values still
    ask it to free them (`RemoteExecutor._dispose`), and the call fails
    with a gRPC error: there is nothing left to free.
  Anything else goes to the previous hook.
  """

  def hook(unraisable):
    where = getattr(unraisable.object, '__qualname__', '')
    if 'ServiceManager.__del__' in where and isinstance(
        unraisable.exc_value, (ProcessLookupError, AttributeError)):
      return
    if isinstance(unraisable.exc_value, grpc.RpcError) and '_dispose' in (
        _frame_names(unraisable.exc_traceback)):
      return
    previous(unraisable)

  return hook


def _frame_names(traceback) -> list[str]:
  """The function names of a traceback's frames, outermost first."""
  names = []
  while traceback is not None:
    names.append(traceback.tb_frame.f_code.co_name)
    traceback = traceback.tb_next
  return names


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


class _LocalWorker:
  """One `worker_binary` child serving TFF's executor service on localhost.

  Started when made, without waiting for it; `stub()` waits until it
  answers. Like TFF's own service manager, a worker found dead (crashed, or
  stopped by `stop_worker_processes`) is started anew on the next call.
  """

  def __init__(self, max_concurrent_clients: int | None,
               env: dict[str, str]):
    self._max_calls = max_concurrent_clients or -1
    self._env = env
    self._lock = threading.Lock()
    # A list, so that the finalizer below sees the current process.
    self._process: list[subprocess.Popen] = []
    weakref.finalize(self, _interrupt_worker, self._process)
    self._start()

  def _start(self) -> None:
    self._port = portpicker.pick_unused_port()
    stdout, stderr = _worker_streams()
    process = subprocess.Popen(  # pylint: disable=consider-using-with
        [WORKER_BINARY, f'--port={self._port}',
         f'--max_concurrent_computation_calls={self._max_calls}'],
        stdout=stdout, stderr=stderr, env=_worker_process_env(self._env))
    self._process[:] = [process]
    _watch(process.pid)
    self._stub = None

  def _wait(self) -> None:
    """Waits until the worker answers on its port, alone there.

    A port that another process took after `portpicker` chose it
    (`worker_env.is_sole_listener`: the worker would share it, or fail to
    bind and exit) gets the worker started anew on another port, at most
    `WORKER_PORT_ATTEMPTS` times in all.
    """
    for attempt in range(1, WORKER_PORT_ATTEMPTS + 1):
      if self._answers_alone():
        break
      if attempt == WORKER_PORT_ATTEMPTS:
        raise RuntimeError(
            f'TFF\'s worker_binary found its port taken by another process '
            f'{attempt} times (the last: {self._port}); it was stopped.')
      self._start()
    channel = grpc.insecure_channel(f'localhost:{self._port}',
                                    worker_env.GRPC_OPTIONS)
    self._stub = remote_executor_grpc_stub.RemoteExecutorGrpcStub(channel)

  def _answers_alone(self) -> bool:
    """Waits for the worker to answer; False (it is stopped) on a clash.

    Raises:
      RuntimeError: If the worker exits before it answers on a port no
        other process holds, or does not answer within
        `WORKER_START_TIMEOUT` (it is stopped).
    """
    process = self._process[0]
    outcome = worker_env.wait_until_serving(
        process, self._port, self._accepts,
        time.monotonic() + WORKER_START_TIMEOUT)
    if outcome is worker_env.Start.ALONE:
      return True
    # A worker that never answered, or shares its port, is of no use:
    # stopped, not left behind (the next computation starts a new one).
    process.kill()
    process.wait()
    if outcome is worker_env.Start.EXITED:
      raise RuntimeError(
          f'TFF\'s worker_binary (pid {process.pid}) exited with status '
          f'{process.returncode} before it answered on port {self._port}; '
          'its own messages, if any, are above on stderr.')
    if outcome is worker_env.Start.TIMED_OUT:
      raise RuntimeError(
          f'TFF\'s worker_binary (pid {process.pid}) did not answer on '
          f'port {self._port} within {WORKER_START_TIMEOUT:g} s; it was '
          'stopped.')
    return False

  def _accepts(self) -> bool:
    """Whether the worker's port accepts a connection (else waits a poll)."""
    try:
      with socket.create_connection(('localhost', self._port),
                                    timeout=WORKER_POLL_SECONDS):
        return True
    except OSError:
      time.sleep(WORKER_POLL_SECONDS)
      return False

  def stub(self) -> remote_executor_grpc_stub.RemoteExecutorGrpcStub:
    """The worker's stub, once it answers; a dead worker is started anew."""
    with self._lock:
      if self._process[0].poll() is not None:
        self._start()
      if self._stub is None:
        self._wait()
      return self._stub


def _worker_process_env(env: dict[str, str]) -> dict[str, str]:
  """The local worker's environment: this process's, `env`, glibc's bound.

  `MALLOC_ARENA_MAX` (`worker_env.MALLOC_ENV`) is added unless this process's
  environment sets it (`MALLOC_ARENA_MAX=8 python -m binaries.train ...`
  restores more arenas); `env` (TensorFlow's settings) comes last.
  """
  return {**worker_env.MALLOC_ENV, **os.environ, **env}


def _interrupt_worker(processes: list[subprocess.Popen]) -> None:
  """Stops a dropped context's worker, as TFF's service manager does."""
  for process in processes:
    if process.poll() is None:
      with contextlib.suppress(OSError):
        process.send_signal(signal.SIGINT)


def _worker_streams():
  """stdout/stderr for a worker: this process's, or its original streams.

  The worker writes to file descriptors; a captured stream (pytest's
  capsys, an in-memory log) has none, so the process's original stream
  stands in for it, or the worker inherits the descriptor.
  """
  streams = []
  for stream, original in ((sys.stdout, sys.__stdout__),
                           (sys.stderr, sys.__stderr__)):
    streams.append(stream if _has_fileno(stream) else
                   original if _has_fileno(original) else None)
  return streams


def create_local_execution_context(max_concurrent_clients: int | None = None,
                                   *,
                                   intra_op_threads: int | None = None,
                                   onednn: bool | None = None):
  """TFF's local C++ execution context, its worker already starting.

  The worker (with a watchdog, see the module docstring) is started here,
  with the given TensorFlow settings in its environment
  (`tff_opt.program.worker_env`; this process's own environment is left as
  it is), and not waited for: the first computation waits until it answers.
  Several such contexts (each with its own worker) can live side by side,
  installed in turn with `tff.framework.get_context_stack().install(
  context)`; a context that is dropped stops its worker.

  Args:
    max_concurrent_clients: At most this many client computations run at
      once (TFF's `max_concurrent_computation_calls`); `None` means no limit.
    intra_op_threads: TensorFlow intra-op threads of the worker; `None`:
      TensorFlow's default (one per core).
    onednn: TensorFlow's oneDNN kernels on or off in the worker; `None`:
      TensorFlow's default for this CPU (or the environment's
      `TF_ENABLE_ONEDNN_OPTS`).

  Returns:
    The context (a `tff.framework.SyncExecutionContext`).

  Raises:
    ValueError: If `max_concurrent_clients` or `intra_op_threads` is given
      and is not positive.
  """
  if max_concurrent_clients is not None and max_concurrent_clients < 1:
    raise ValueError('max_concurrent_clients must be a positive integer or '
                     f'None, got {max_concurrent_clients!r}.')
  env = worker_env.worker_environment(intra_op_threads=intra_op_threads,
                                      onednn=onednn)
  _install_hooks()
  return _worker_context(sync_execution_context.SyncExecutionContext,
                         _LocalWorker(max_concurrent_clients, env).stub)


def grappler_config() -> tf.compat.v1.ConfigProto:
  """Grappler's options for the TensorFlow graphs this package compiles.

  TFF's compiler for its C++ runtime (`native_compiler.
  desugar_and_transform_to_native`) runs Grappler once, here in the
  trainer, on every TensorFlow graph, with constant folding and
  arithmetic, loop and function optimisation AGGRESSIVE, and
  `memory_optimization = AGGRESSIVE`, which as Grappler's `MemOptType` (the
  same number, 3) means HEURISTICS: swapping, recomputation and scheduling
  heuristics (the worker itself runs no Grappler). The scheduling heuristic
  makes a run's numbers differ from process to process: FedPTR-S's
  trajectory matching (second-order gradients through GroupNorm) gave a
  resumed claim run another round 41 than the uninterrupted run had
  (train loss 0.0369930 against 0.0369935, MTT loss 0.559160 against
  0.559147), and each fresh process another again. One MTT step of the
  claim's ConvNet compiled with each of the heuristics alone, 3 processes
  each: scheduling gave 3 different results from one graph, recomputation
  differing graphs with the same result, swapping and MANUAL one graph
  and one result in all 3, the same result as recomputation's
  (`python -m benchmarks.grappler_memopt`; docs/performance.md).

  So this is TFF's configuration with memory optimisation at
  RECOMPUTATION_HEURISTICS: the memory the recomputation heuristic saves
  is kept and the scheduling heuristic, the one whose numbers vary, is
  left out (swapping moves tensors to a GPU's host memory; it does nothing
  on the CPU). The graphs of this package's other claims come out with the
  same numbers as under TFF's own configuration (`tools.same_results`;
  README, "Repeatable runs"); tests/test_local_worker.py checks that
  one MTT step gives the same numbers in 3 processes.
  """
  config = tf.compat.v1.ConfigProto()
  options = config.graph_options.rewrite_options
  for name in ('constant_folding', 'arithmetic_optimization',
               'loop_optimization', 'function_optimization'):
    setattr(options, name, options.AGGRESSIVE)
  options.memory_optimization = options.RECOMPUTATION_HEURISTICS
  return config


def _native_form(computation):
  """TFF's compilation for its C++ runtime, with `grappler_config()`.

  As `native_compiler.desugar_and_transform_to_native`: the intrinsics
  replaced by their TensorFlow bodies, then TFF's native form with Grappler
  run on every TensorFlow graph, here in this process. Its function
  optimiser logs an error that reports nothing wrong for FedCurv's and
  FedPTR's graphs (`stderr_filter`).
  """
  with stderr_filter.filtered():
    desugared, _ = (
        tensorflow_tree_transformations.replace_intrinsics_with_bodies(
            computation.to_building_block()))
    return native_compiler.transform_to_native_form(
        computation_impl.ConcreteComputation(
            computation_proto=desugared.proto,
            context_stack=context_stack_impl.context_stack),
        grappler_config=grappler_config())


def _worker_context(context_class, stub_fn):
  """A TFF context of `context_class` running everything on one worker.

  As TFF's local context is made, with the stub from `stub_fn()` for each
  new executor, except that each value the trainer drops is disposed of on
  the worker at once (`DISPOSE_BATCH_SIZE`).
  """

  def executor_fn(cardinalities):
    # As TFF's local factory: a computation with no client-placed argument
    # still names the clients placement (with no clients).
    if cardinalities.get(tff.CLIENTS) is None:
      cardinalities[tff.CLIENTS] = 0
    executor = remote_executor.RemoteExecutor(
        stub_fn(), dispose_batch_size=DISPOSE_BATCH_SIZE)
    executor.set_cardinalities(cardinalities)
    return executor

  return context_class(
      executor_fn=python_executor_stacks.ResourceManagingExecutorFactory(
          executor_stack_fn=executor_fn),
      compiler_fn=_native_form,
      transform_args=tensorflow_computation.transform_args,
      transform_result=tensorflow_computation.transform_result,
  )


def set_local_execution_context(max_concurrent_clients: int | None = None,
                                *,
                                intra_op_threads: int | None = None,
                                onednn: bool | None = None):
  """Installs TFF's local C++ execution context with worker clean-up.

  The context replaces the current one; the workers this process started
  are stopped first. The arguments are `create_local_execution_context`'s.

  Raises:
    ValueError: If `max_concurrent_clients` or `intra_op_threads` is given
      and is not positive.
  """
  # Stop the replaced context's worker ourselves, with a bounded wait (see
  # `shutdown`), before TFF releases that context.
  stop_worker_processes()
  tff.framework.set_default_context(create_local_execution_context(
      max_concurrent_clients, intra_op_threads=intra_op_threads,
      onednn=onednn))


def start_worker(context) -> None:
  """Returns once `context`'s worker answers.

  Runs a trivial computation under `context`: a context of TFF's starts its
  worker then, one of `create_local_execution_context` waits for the worker
  it started. The worker gets a watchdog (`watch_workers`).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  @tff.tensorflow.computation
  def noop():
    return tf.constant(0)

  with _streams_with_fileno(), tff.framework.get_context_stack().install(
      context):
    noop()
  watch_workers()


def _has_fileno(stream) -> bool:
  try:
    stream.fileno()
    return True
  except (AttributeError, OSError, ValueError):
    return False


@contextlib.contextmanager
def _streams_with_fileno():
  """sys.stdout/err with a file descriptor while TFF starts its worker.

  TFF passes `sys.stdout`/`sys.stderr` to the worker's `Popen`, which needs
  their file descriptors; a captured stream (pytest's capsys, an in-memory
  log) has none, so the process's original streams stand in for it.
  """
  saved = sys.stdout, sys.stderr
  stdout, stderr = _worker_streams()
  sys.stdout = saved[0] if stdout is None else stdout
  sys.stderr = saved[1] if stderr is None else stderr
  try:
    yield
  finally:
    sys.stdout, sys.stderr = saved


_watched: set[int] = set()

# $1: this process, $2: the worker. Exits when the worker is gone first;
# once the parent is gone, stops the worker, only if that pid still runs a
# worker binary (pids are reused). The pattern is bracketed so that the
# watchdog's own command line does not match `pgrep -f worker_binary`.
_WATCHDOG = (
    'while kill -0 "$1" 2>/dev/null; do '
    'kill -0 "$2" 2>/dev/null || exit 0; sleep 1; done; '
    'if grep -q "worker_[b]inary" "/proc/$2/cmdline" 2>/dev/null; then '
    'kill -TERM "$2" 2>/dev/null; sleep 2; '
    'if grep -q "worker_[b]inary" "/proc/$2/cmdline" 2>/dev/null; then '
    'kill -KILL "$2" 2>/dev/null; fi; fi')


def _watch(pid: int) -> bool:
  """Gives worker `pid` a watchdog unless it has one; True if it got one."""
  if pid in _watched:
    return False
  subprocess.Popen(  # pylint: disable=consider-using-with
      ['sh', '-c', _WATCHDOG, 'tff-opt-watchdog', str(os.getpid()), str(pid)],
      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
  _watched.add(pid)
  return True


def watch_workers() -> list[int]:
  """Gives each unwatched `worker_binary` child a watchdog; returns pids.

  The watchdog (see the module docstring) stops the worker once this
  process is gone, however it died. The local context's workers have one
  from their start; this covers workers TFF's own contexts start.
  """
  return [w.pid for w in worker_children() if _watch(w.pid)]


# Registered on import so that any program using tff-opt exits cleanly, even
# one that fails before it sets a context (a bad flag, say).
_install_hooks()


# --- Several hosts: TFF workers over gRPC ------------------------------------
#
# TFF 0.87 runs a computation on other machines through its C++ executor
# service, the same `worker_binary` the local context starts: each worker gets
# an asynchronous execution context over a gRPC channel (a `RemoteExecutor`),
# and `tff.backends.native.create_mergeable_comp_execution_context` splits
# every computation at its aggregation (`compile_to_mergeable_comp_form`):
# the clients of a round are partitioned into one sub-round per worker, each
# worker runs its clients up to the aggregation, the partial aggregates are
# merged, and the rest of the round (the server update) runs on one of them.
#
# A computation whose round has two aggregations, one computed from the
# other's result, has no such form: `check_runs_on_workers` says so in one
# line before a run starts (the trainer's usage error). Client-placed results
# come back in the order the workers finish; `client_states.compose` tags
# each client's new state with its position in the round for that reason.
#
# SECURITY: a TFF worker executes whatever computation it is sent (arbitrary
# TensorFlow graphs, which can read and write files). A worker reachable from
# an untrusted network is remote code execution on its host. Run workers only
# on a private network or behind an authenticated tunnel (SSH port
# forwarding, a VPN); TLS (`tls_root_certificates`) authenticates the worker
# to the client and encrypts the traffic, but does not authenticate clients.

# gRPC codes that mean the worker cannot be reached (stopped, crashed,
# network down) rather than that it refused a computation.
_UNREACHABLE_CODES = ('UNAVAILABLE', 'DEADLINE_EXCEEDED', 'CANCELLED')


class WorkerError(grpc.RpcError, RuntimeError):
  """A TFF worker failed or could not be reached; names its address.

  Not one of TFF's retryable errors: TFF's asynchronous context retries
  those forever (a dead worker would hang the run), while this one ends the
  computation at once. It is a `grpc.RpcError`, so TFF's clean-up paths that
  ignore RPC errors on a broken connection still ignore it.

  Attributes:
    address: The worker's `host:port`.
  """

  def __init__(self, address: str, message: str):
    super().__init__(message)
    self.address = address


def parse_workers(text: str) -> list[tuple[str, int]]:
  """Parses `host:port,host:port,...` (IPv6 hosts in brackets: `[::1]:80`).

  Args:
    text: The comma-separated worker addresses.

  Returns:
    `(host, port)` pairs, in the given order.

  Raises:
    ValueError: If an address has no host or port, a port is not an integer
      in [1, 65535], or an address repeats.
  """
  workers = []
  for item in text.split(','):
    item = item.strip()
    if not item:
      raise ValueError(f'workers: empty address in {text!r}; expected '
                       'HOST:PORT[,HOST:PORT...].')
    host, sep, port_text = item.rpartition(':')
    if not sep or not host:
      raise ValueError(f'workers: {item!r} has no port; expected HOST:PORT '
                       '(IPv6 hosts in brackets, e.g. [::1]:8000).')
    if ':' in host and not (host.startswith('[') and host.endswith(']')):
      raise ValueError(f'workers: {item!r}: an IPv6 host goes in brackets, '
                       'e.g. [::1]:8000.')
    if not port_text.isdigit():
      raise ValueError(f'workers: {item!r}: port {port_text!r} is not an '
                       'integer.')
    port = int(port_text)
    if not 1 <= port <= 65535:
      raise ValueError(f'workers: {item!r}: port {port} is not in '
                       '[1, 65535].')
    if (host, port) in workers:
      raise ValueError(f'workers: {item} is given twice.')
    workers.append((host, port))
  return workers


def _error_line(error: grpc.RpcError) -> str:
  code = error.code() if isinstance(error, grpc.Call) else None
  details = (error.details() if isinstance(error, grpc.Call) else
             str(error)) or ''
  details = ' '.join(details.split())
  return f'{code.name}: {details}' if code is not None else details


class _WorkerStub(remote_executor_stub.RemoteExecutorStub):
  """TFF's executor-service stub for one worker, with errors naming it."""

  def __init__(self, channel: grpc.Channel, address: str):
    self._channel = channel
    self._address = address
    self._stub = executor_pb2_grpc.ExecutorGroupStub(channel)
    self._connectivity = None
    channel.subscribe(self._on_connectivity, try_to_connect=True)

  def _on_connectivity(self, connectivity):
    self._connectivity = connectivity

  def _call(self, method, request):
    try:
      return method(request)
    except grpc.RpcError as e:
      code = e.code() if isinstance(e, grpc.Call) else None
      if code is not None and code.name in _UNREACHABLE_CODES:
        raise WorkerError(
            self._address,
            f'worker {self._address} stopped answering ({_error_line(e)}); '
            'is it still running?') from None
      raise WorkerError(self._address, f'worker {self._address} failed: '
                        f'{_error_line(e)}') from None

  def get_executor(self, request):
    return self._call(self._stub.GetExecutor, request)

  def create_value(self, request):
    return self._call(self._stub.CreateValue, request)

  def create_struct(self, request):
    return self._call(self._stub.CreateStruct, request)

  def create_call(self, request):
    return self._call(self._stub.CreateCall, request)

  def create_selection(self, request):
    return self._call(self._stub.CreateSelection, request)

  def compute(self, request):
    return self._call(self._stub.Compute, request)

  def dispose(self, request):
    return self._call(self._stub.Dispose, request)

  def dispose_executor(self, request):
    return self._call(self._stub.DisposeExecutor, request)

  @property
  def is_ready(self) -> bool:
    return self._connectivity == grpc.ChannelConnectivity.READY


REFUSED_GRACE = 10.0  # Seconds a refused port is retried (a worker starting).
_NO_ANSWER = 'no answer'


def wait_for_worker(channel: grpc.Channel, address: str,
                    timeout: float) -> None:
  """Waits until `channel` reaches a TFF worker, or raises.

  Probes with a method no server implements: any answer (UNIMPLEMENTED)
  proves that the connection, and its TLS handshake, work. An unreachable
  host is retried until `timeout`; a refused connection (the host answers,
  nothing listens on the port) only for `REFUSED_GRACE` seconds, enough for
  a worker that is starting, so a wrong port fails fast. The last gRPC error
  that says why (e.g. a certificate that does not verify) is reported: a
  probe cut short by its own timeout (DEADLINE_EXCEEDED, as the last probe
  before the deadline may be on a loaded machine) does not replace an
  earlier reason.

  Raises:
    WorkerError: If the worker does not answer within `timeout` seconds, or
      refuses connections for `REFUSED_GRACE` seconds.
  """
  probe = channel.unary_unary('/tff_opt.Probe/Ping')
  deadline = time.monotonic() + timeout
  last = _NO_ANSWER
  refused_since = None
  while True:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
      break
    try:
      probe(b'', timeout=min(remaining, 5.0))
      return
    except grpc.RpcError as e:
      code = e.code() if isinstance(e, grpc.Call) else None
      if code is not None and code not in (
          grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return
      if code != grpc.StatusCode.DEADLINE_EXCEEDED or last == _NO_ANSWER:
        last = _error_line(e)
      if 'refused' in last.lower():
        refused_since = refused_since or time.monotonic()
        if time.monotonic() - refused_since >= REFUSED_GRACE:
          raise WorkerError(
              address, f'worker {address} refuses connections (nothing '
              f'listens on that port; {last}). Start one there with '
              '`python -m binaries.worker --port=PORT`, or check the port.'
          ) from e
      else:
        refused_since = None
    time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
  raise WorkerError(
      address, f'worker {address} is not reachable within {timeout:g} s '
      f'({last}). Start one there with `python -m binaries.worker '
      f'--port=PORT`; with TLS, check that the root certificate is the one '
      'that signed the worker\'s certificate.')


# A worker lost without a TCP reset (host down, network cut) is noticed by
# keepalive pings during a call: one every 5 minutes, the most often that a
# gRPC server with default settings (TFF's C++ worker) accepts.
_KEEPALIVE_OPTIONS = (
    ('grpc.keepalive_time_ms', 300_000),
    ('grpc.keepalive_timeout_ms', 20_000),
)


def worker_channel(address: str, *,
                   tls_root_certificates: bytes | None = None
                   ) -> grpc.Channel:
  """A gRPC channel to a TFF worker: TLS when root certificates are given."""
  options = worker_env.GRPC_OPTIONS + _KEEPALIVE_OPTIONS
  if tls_root_certificates is None:
    return grpc.insecure_channel(address, options)
  credentials = grpc.ssl_channel_credentials(
      root_certificates=tls_root_certificates)
  return grpc.secure_channel(address, credentials, options)


def _remote_context(channel: grpc.Channel, address: str):
  """An asynchronous TFF context running everything on one remote worker."""
  stub = _WorkerStub(channel, address)
  return _worker_context(async_execution_context.AsyncExecutionContext,
                         lambda: stub)


def set_remote_execution_context(
    workers: Sequence[tuple[str, int]] | str,
    *,
    tls_root_certificates: bytes | None = None,
    connect_timeout: float = 30.0,
) -> None:
  """Runs TFF computations on TFF workers over gRPC, one sub-round each.

  Each worker (started with `python -m binaries.worker --port=PORT`) gets
  TFF's remote executor over its own channel; TFF's mergeable-computation
  context splits every round's clients into one sub-round per worker and
  merges the partial aggregates, so a round gives the same result as on one
  machine up to the order of float additions.

  Limitations (TFF 0.87): results placed at the clients come back
  concatenated in the order the workers finish, not in the clients' order
  (`client_states.compose` returns each client's position with its state,
  and `ClientStatefulProcess.next` files the states by position); a round
  must split at a single aggregation (`check_runs_on_workers`). The partial
  aggregates of the workers are added together, so results equal a local
  run's up to the order of float additions.

  SECURITY: a worker executes whatever computation it is sent; one exposed
  to an untrusted network is remote code execution. Use workers only on a
  private network or behind an authenticated tunnel.

  Args:
    workers: `(host, port)` pairs, or `'host:port,...'`.
    tls_root_certificates: PEM root certificate(s) that signed the workers'
      certificates: the channels then use TLS. `None`: plain TCP.
    connect_timeout: Seconds to wait for every worker to answer.

  Raises:
    ValueError: If `workers` is empty or malformed, or `connect_timeout` is
      not positive.
    WorkerError: If a worker does not answer within `connect_timeout`.
  """
  if isinstance(workers, str):
    workers = parse_workers(workers)
  workers = list(workers)
  if not workers:
    raise ValueError('workers must name at least one HOST:PORT.')
  if not connect_timeout > 0:
    raise ValueError(f'connect_timeout must be positive, got '
                     f'{connect_timeout!r}.')
  _install_hooks()
  # The replaced local context's worker is a direct child; a worker_binary
  # further down (under a `binaries.worker` this process started) is one of
  # the remote workers and stays.
  own = [w for w in worker_children() if w.ppid() == os.getpid()]
  for worker in own:
    with contextlib.suppress(psutil.Error):
      worker.terminate()
  for worker in psutil.wait_procs(own, timeout=5.0)[1]:
    with contextlib.suppress(psutil.Error):
      worker.kill()
  contexts = []
  for host, port in workers:
    address = f'{host}:{port}'
    channel = worker_channel(address,
                             tls_root_certificates=tls_root_certificates)
    wait_for_worker(channel, address, connect_timeout)
    contexts.append(_remote_context(channel, address))
  tff.framework.set_default_context(
      mergeable_comp_execution_context.MergeableCompExecutionContext(
          async_contexts=contexts, compiler_fn=_mergeable_form))


@functools.lru_cache(maxsize=32)
def _mergeable_form(computation):
  """TFF's compiler for its multi-worker context, cached (see below).

  Its Grappler noise is filtered as `_native_form`'s is (`stderr_filter`).
  """
  with stderr_filter.filtered():
    return mergeable_comp_compiler.compile_to_mergeable_comp_form(computation)


class NotMergeableError(ValueError):
  """A computation cannot run on TFF workers (`check_runs_on_workers`)."""


def check_runs_on_workers(computation: tff.Computation) -> None:
  """Raises unless `computation` compiles for TFF's multi-worker context.

  TFF 0.87's multi-worker context splits a round at its one aggregation
  (`mergeable_comp_compiler`); a round with an aggregate computed from
  another aggregate's result cannot be split. The compiled form is cached:
  the context set by `set_remote_execution_context` reuses it on the first
  call, so checking first costs nothing.

  Args:
    computation: The `tff.Computation` to run, e.g. a process's `next`.

  Raises:
    NotMergeableError: With one line saying why, if it does not compile.
  """
  try:
    _mergeable_form(computation)
  except (ValueError, TypeError) as e:
    text = ' '.join(str(e).split())
    if text.startswith('Detected one aggregate dependent on another'):
      reason = ('one of its aggregates is computed from another aggregate\'s '
                'result in the same round, and TFF 0.87\'s multi-worker '
                'context splits a round at a single aggregation')
    else:
      reason = ('TFF 0.87\'s multi-worker compiler refuses its round: '
                f'{type(e).__name__}: {text[:200]}')
    raise NotMergeableError(reason) from e


# --- GPUs --------------------------------------------------------------------


def configure_gpus(*, memory_growth: bool = False,
                   logical_gpus: int | None = None,
                   logical_gpu_memory_mb: int = 2048,
                   log: Callable[[str], None] = print) -> list[str]:
  """Applies GPU settings; on a machine without a GPU, logs one line.

  Call before TensorFlow touches a GPU and before TFF starts its worker.

  TFF 0.87's C++ runtime has no device-placement option (the Python
  executor stacks' `client_tf_devices` are gone): its worker places every
  client computation where TensorFlow's placer puts it, the first visible
  GPU. Clients are spread over several physical GPUs by running one worker
  per GPU (`python -m binaries.worker --port=P --gpu=K`) and listing them in
  `set_remote_execution_context`.

  Args:
    memory_growth: Allocate GPU memory as needed instead of all at once:
      `tf.config.experimental.set_memory_growth` on every GPU of this
      process, and `TF_FORCE_GPU_ALLOW_GROWTH=true` in the environment of the
      TFF workers it starts from now on.
    logical_gpus: Split the first GPU into this many logical GPUs
      (`tf.config.set_logical_device_configuration`) for the TensorFlow code
      of this process (evaluation, data pipelines).
    logical_gpu_memory_mb: Memory limit of each logical GPU.
    log: Called with one line describing what was done.

  Returns:
    The names of this process's logical GPUs (empty without a GPU).

  Raises:
    ValueError: If `logical_gpus` or `logical_gpu_memory_mb` is not
      positive, or both `memory_growth` and `logical_gpus` are asked (TF
      refuses memory growth on a GPU split into logical devices).
  """
  if logical_gpus is not None and logical_gpus < 1:
    raise ValueError(f'logical_gpus must be a positive integer, got '
                     f'{logical_gpus!r}.')
  if logical_gpu_memory_mb < 1:
    raise ValueError(f'logical_gpu_memory_mb must be a positive integer, '
                     f'got {logical_gpu_memory_mb!r}.')
  if memory_growth and logical_gpus is not None:
    raise ValueError('logical_gpus cannot be combined with memory_growth: '
                     'TensorFlow gives logical GPUs fixed memory limits.')
  if not memory_growth and logical_gpus is None:
    return []
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  gpus = tf.config.list_physical_devices('GPU')
  if not gpus:
    log('no GPU found: GPU settings (memory growth, logical GPUs) ignored.')
    return []
  if memory_growth:
    os.environ['TF_FORCE_GPU_ALLOW_GROWTH'] = 'true'
    for gpu in gpus:
      tf.config.experimental.set_memory_growth(gpu, True)
  if logical_gpus is not None:
    tf.config.set_logical_device_configuration(gpus[0], [
        tf.config.LogicalDeviceConfiguration(
            memory_limit=logical_gpu_memory_mb)
    ] * logical_gpus)
  names = [d.name for d in tf.config.list_logical_devices('GPU')]
  log(f'GPUs: {len(gpus)} physical, logical {", ".join(names)}'
      + ('; memory growth on' if memory_growth else ''))
  return names
