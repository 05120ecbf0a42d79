"""Environment a TFF `worker_binary` reads when it starts: threads, oneDNN.

TFF 0.87's C++ worker runs each client computation in a TensorFlow session
of its own process, so the knobs that matter for speed are TensorFlow's
environment variables, read once, when the worker starts:

- `TF_ENABLE_ONEDNN_OPTS=1`: TensorFlow's oneDNN kernels for convolutions
  and matrix products. TensorFlow 2.14 turns them on by itself only on CPUs
  with AVX-512 VNNI/BF16/AMX: on an AVX CPU without AVX2 they are off by
  default, yet they cut the worker's CPU seconds per EMNIST-CR round by
  about a quarter (`benchmarks/round_time.py`, docs/performance.md); with
  AVX-512 VNNI they are on anyway.
  Setting the variable makes a run compute the same way on either.
  oneDNN sums in another order than Eigen, so results differ from the
  Eigen kernels' in the last bits (float32 round-off), not more; a run is
  as repeatable with it as without it.
- `TF_NUM_INTRAOP_THREADS=T`: threads one operation may use. With N
  clients running at once (`max_concurrent_clients`) on C cores, T = C / N
  avoids N x T threads competing for C cores.
- `TF_NUM_INTEROP_THREADS=T`: the pool that runs a computation's
  operations. A worker asked to run more client computations at once than
  this pool has threads runs them in turns that leave the core idle
  between them (FedCurv's claim setting, 96 devices on one thread: 47-73 s
  a round with no cap on concurrent clients, 20-22 s with one at a time,
  the same checkpoints bit for bit); `binaries.train` therefore caps
  `max_concurrent_clients` at this count when the environment sets it
  (`inter_op_threads_from_environment`).

It also says whether a starting worker serves alone on its port
(`is_sole_listener`, `wait_until_serving`): the same wait for the local
context's worker (`runtime`) and the one behind `binaries.worker`'s relay.

Kept free of TensorFlow imports: `binaries.worker` builds the environment of
the C++ worker it starts without loading TensorFlow.
"""

import enum
import os
from collections.abc import Callable, Mapping
import subprocess
import time
from typing import Optional

# How TFF's executor service is reached, by the trainer's channels
# (`runtime`) and by the TLS relay in front of a worker (`binaries.worker`):
# every RPC path starts with the service's name, and messages (model
# weights, datasets) may be up to TFF's own 2 GB.
EXECUTOR_SERVICE_PREFIX = '/tensorflow_federated.v0.ExecutorGroup/'
MAX_MESSAGE_BYTES = 2 * 1000 * 1000 * 1000
GRPC_OPTIONS = (
    ('grpc.max_message_length', MAX_MESSAGE_BYTES),
    ('grpc.max_receive_message_length', MAX_MESSAGE_BYTES),
    ('grpc.max_send_message_length', MAX_MESSAGE_BYTES),
)

ONEDNN_ENV = 'TF_ENABLE_ONEDNN_OPTS'
INTRA_OP_THREADS_ENV = 'TF_NUM_INTRAOP_THREADS'
INTER_OP_THREADS_ENV = 'TF_NUM_INTEROP_THREADS'


# glibc malloc settings of every TFF worker this package starts (the
# measurements in results/perf/worker_memory.md). Each of the worker's
# threads (TFF's pool of 4 per core, TensorFlow's inter- and intra-op
# pools, tf.data's) gets its own malloc arena, up to 8 per core; each arena
# keeps the freed, fragmented memory of the client computations and
# datasets it served, so the worker's RSS rose round after round (digits: 170 -> 297 MiB over 400
# rounds, still +7 to +10 MiB per 100 rounds at the end). Two arenas keep
# it at 175-185 MiB from round ~50 on, at no measured cost in round time.
# A setting in the starting process's own environment wins.
MALLOC_ENV = {'MALLOC_ARENA_MAX': '2'}


def thread_environment(threads: int) -> dict[str, str]:
  """Both of TensorFlow's thread pools at `threads`, as environment variables.

  For a process that starts training processes (`binaries.claims`): each
  trainer and the worker it starts inherit them, so P runs at once on C
  cores can each use C / P threads instead of one per core.

  Raises:
    ValueError: If `threads` is not a positive integer.
  """
  if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
    raise ValueError(f'threads must be a positive integer, got {threads!r}.')
  return {INTRA_OP_THREADS_ENV: str(threads),
          INTER_OP_THREADS_ENV: str(threads)}


def inter_op_threads_from_environment(
    environ: Optional[Mapping[str, str]] = None) -> Optional[int]:
  """TensorFlow's inter-op threads as the environment caps them, or None.

  Reads `INTER_OP_THREADS_ENV` (what `thread_environment` sets).

  Args:
    environ: The environment; default `os.environ`.

  Returns:
    The thread count, or None when the variable is unset or empty.

  Raises:
    ValueError: If it is set to anything but a positive integer.
  """
  value = (os.environ if environ is None else environ).get(
      INTER_OP_THREADS_ENV, '')
  if not value:
    return None
  try:
    threads = int(value)
  except ValueError:
    threads = 0
  if threads < 1:
    raise ValueError(f'{INTER_OP_THREADS_ENV}={value}: expected a positive '
                     'integer (TensorFlow\'s inter-op threads).')
  return threads


def default_max_concurrent_clients(
    environ: Optional[Mapping[str, str]] = None) -> Optional[int]:
  """`--max_concurrent_clients`' default: the inter-op threads, or None.

  `binaries.train` (for a local run) and `binaries.worker` both run at most
  as many client computations at once as the inter-op pool has threads
  when the environment caps it (see this module's docstring).

  Args:
    environ: The environment; default `os.environ`.

  Returns:
    `inter_op_threads_from_environment(environ)`.

  Raises:
    ValueError: If `INTER_OP_THREADS_ENV` is set to anything but a positive
      integer; the message says what it sets and how to avoid it.
  """
  try:
    return inter_op_threads_from_environment(environ)
  except ValueError as e:
    raise ValueError(f'{e} It sets --max_concurrent_clients\'s default; '
                     'unset it or give the flag.') from e


def worker_environment(*, intra_op_threads: Optional[int] = None,
                       onednn: Optional[bool] = None) -> dict[str, str]:
  """The environment variables to set for a worker, as a new dict.

  Args:
    intra_op_threads: TensorFlow intra-op threads of the worker; `None`
      leaves TensorFlow's default (one per core, or what the environment
      already says).
    onednn: Turn TensorFlow's oneDNN kernels on (`True`) or off (`False`);
      `None` leaves TensorFlow's default (or the environment's setting).

  Returns:
    `{name: value}` for the variables to set; empty when both are `None`.

  Raises:
    ValueError: If `intra_op_threads` is not a positive integer.
  """
  env = {}
  if intra_op_threads is not None:
    if (isinstance(intra_op_threads, bool) or
        not isinstance(intra_op_threads, int) or intra_op_threads < 1):
      raise ValueError(f'intra_op_threads must be a positive integer or '
                       f'None, got {intra_op_threads!r}.')
    env[INTRA_OP_THREADS_ENV] = str(intra_op_threads)
  if onednn is not None:
    env[ONEDNN_ENV] = '1' if onednn else '0'
  return env



# Where Linux lists every TCP socket of this network namespace; a listening
# one has state 0A, its local port is the hex after the colon of field 1,
# and field 9 is its inode.
_PROC_TCP_TABLES = ('/proc/net/tcp', '/proc/net/tcp6')
_TCP_LISTEN = '0A'


def _listening_inodes(port: int) -> Optional[set[str]]:
  """Inodes of the TCP sockets listening on `port`; None without /proc."""
  inodes = set()
  tables = 0
  for table in _PROC_TCP_TABLES:
    try:
      with open(table, encoding='ascii') as f:
        lines = f.read().splitlines()[1:]
    except OSError:
      continue
    tables += 1
    for line in lines:
      fields = line.split()
      if (len(fields) > 9 and fields[3] == _TCP_LISTEN and
          int(fields[1].rsplit(':', 1)[1], 16) == port):
        inodes.add(fields[9])
  return inodes if tables else None


def _socket_inodes(pid: int) -> set[str]:
  """Inodes of the sockets process `pid` holds open (none once it ended)."""
  inodes = set()
  fd_dir = f'/proc/{pid}/fd'
  try:
    fds = os.listdir(fd_dir)
  except OSError:
    return inodes
  for fd in fds:
    try:
      target = os.readlink(os.path.join(fd_dir, fd))
    except OSError:
      continue
    if target.startswith('socket:['):
      inodes.add(target[len('socket:['):-1])
  return inodes


def port_held_by_another(pid: int, port: int) -> bool:
  """Whether a process other than `pid` listens on TCP `port`.

  Any process, once `pid` has ended. False where the sockets cannot be
  listed (no /proc: macOS).
  """
  listening = _listening_inodes(port)
  return bool(listening) and not listening <= _socket_inodes(pid)


def is_sole_listener(pid: int, port: int) -> bool:
  """Whether process `pid` listens on TCP `port` and no other process does.

  TFF's `worker_binary` listens with SO_REUSEPORT (gRPC's default), so one
  started on a port another process took after `portpicker` chose it (a
  second worker that chose the same port, say) shares that port silently,
  and a connection to it reaches either. A worker that answers on its port
  is the one that was started only when this holds. Without Linux's /proc
  (macOS), where the sockets cannot be listed, it says True.
  """
  listening = _listening_inodes(port)
  if listening is None:
    return True
  return bool(listening) and listening <= _socket_inodes(pid)


# How often a worker that has not answered yet is checked for another
# process on its port: each check reads /proc (~10 ms here), more than a
# start takes to answer (~70 ms).
HELD_CHECK_SECONDS = 0.5


class Start(enum.Enum):
  """How the wait for a starting worker ended (`wait_until_serving`)."""
  ALONE = 'serves on its port, the only process there'
  PORT_TAKEN = 'another process holds its port'
  EXITED = 'exited before it served'
  TIMED_OUT = 'did not serve by the deadline'


def wait_until_serving(process: subprocess.Popen, port: int,
                       serves: Callable[[], bool], deadline: float) -> Start:
  """Waits until a starting worker serves on `port`, alone there.

  Shared by the local context's worker (`runtime`) and the worker behind
  `binaries.worker`'s relay; each turns an outcome other than `ALONE` into
  its own error, or a start on another port, and stops the process.

  Args:
    process: The worker's process, just started.
    port: The port it was told to listen on.
    serves: One probe of the port: whether the worker answers there. It
      waits (up to its own timeout, or a pause) before it says no: this
      loop does not sleep between probes.
    deadline: A `time.monotonic()` past which the worker is given up.

  Returns:
    `Start.ALONE` once it answers and no other process listens on its port
    (`is_sole_listener`). `Start.PORT_TAKEN` when another process listens
    there: found once it answers, when it exits (TFF's worker exits with
    status 0 when it cannot bind), or every `HELD_CHECK_SECONDS` while it
    does not answer (a connection that reached the other process may never
    answer as the worker would). Otherwise `Start.EXITED` when it ended,
    `Start.TIMED_OUT` past `deadline`.
  """
  next_check = time.monotonic() + HELD_CHECK_SECONDS
  while not serves():
    if process.poll() is not None:
      return (Start.PORT_TAKEN if port_held_by_another(process.pid, port)
              else Start.EXITED)
    now = time.monotonic()
    if now >= next_check:
      if port_held_by_another(process.pid, port):
        return Start.PORT_TAKEN
      next_check = now + HELD_CHECK_SECONDS
    if now > deadline:
      return Start.TIMED_OUT
  return Start.ALONE if is_sole_listener(process.pid, port) else (
      Start.PORT_TAKEN)
