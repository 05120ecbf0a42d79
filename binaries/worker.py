r"""A TFF worker for `binaries.train --workers=...`: TFF's C++ executor service.

    python -m binaries.worker --port=8000                # serves 127.0.0.1:8000
    python -m binaries.worker --port=8000 --host=10.0.0.5 \
        --tls_cert=worker.pem --tls_key=worker.key       # TLS, private LAN
    python -m binaries.worker --port=8001 --gpu=1        # one worker per GPU

and on the machine that trains:

    python -m binaries.train --workers=10.0.0.5:8000,10.0.0.6:8000 \
        --worker_tls_root_cert=ca.pem ...

SECURITY: a TFF worker executes whatever computation it is sent (TensorFlow
graphs can read and write files and run for ever); anyone who can connect to
it can run code on this host. The worker listens on 127.0.0.1 unless --host
says otherwise. Run workers only on a private network or behind an
authenticated tunnel (e.g. `ssh -L 8000:127.0.0.1:8000 worker-host` and
`--workers=127.0.0.1:8000` on the training machine). TLS (--tls_cert,
--tls_key) proves the worker's identity to the trainer and encrypts the
traffic; it does not authenticate the trainer to the worker.

What TFF 0.87 ships, and why this wraps it: TFF's executor service is the C++
`worker_binary` (in the package's `data/`; the Python `tff.simulation.
run_server` of older TFF is gone). Its flags are only --port,
--max_concurrent_computation_calls and --grpc_max_message_length_megabytes:
it always listens on `[::]:PORT` (every interface) with insecure credentials
(worker_main.cc: "TODO: Add option for secure server connections"). So this
program starts `worker_binary` on an internal port picked at random (and
on another if a process took that one first: the C++ worker would share it
silently, `start_worker_binary`) and serves the public --host:--port
itself: a gRPC relay that forwards TFF's
ExecutorGroup calls (all unary) unchanged, with TLS when asked, and answers
UNIMPLEMENTED to anything else. The internal port is still open on every
interface of this host, as it is for TFF's own local execution context,
which starts the same binary the same way: the host must still be on a
private network or firewalled. The C++ worker is killed when this program
ends, however it ends (SIGKILL included, via the parent-death signal).
"""

import concurrent.futures
import ctypes
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Optional

from absl import app
from absl import flags

import binaries  # pylint: disable=g-bad-import-order
from tff_opt.program import worker_env

flags.DEFINE_integer('port', None, 'Port to serve TFF\'s executor service '
                     'on.', lower_bound=1, upper_bound=65535)
flags.DEFINE_string('host', '127.0.0.1', 'Address to listen on. Anything '
                    'other than loopback exposes remote code execution to '
                    'that network: use a private network or a tunnel.')
flags.DEFINE_string('tls_cert', None, 'PEM certificate (chain) of this '
                    'worker: serve TLS. Needs --tls_key.')
flags.DEFINE_string('tls_key', None, 'PEM private key of --tls_cert.')
flags.DEFINE_integer('max_concurrent_clients', None, 'At most this many '
                     'client computations at once on this worker (TFF\'s '
                     'max_concurrent_computation_calls). Default: '
                     'TF_NUM_INTEROP_THREADS where the environment sets it '
                     '(as binaries.train does for a local run), else no '
                     'limit.', lower_bound=1)
flags.DEFINE_string('gpu', None, 'Run the computations on this GPU only '
                    '(CUDA_VISIBLE_DEVICES for the C++ worker), e.g. one '
                    'worker per GPU: --gpu=0, --gpu=1. Default: as TensorFlow '
                    'chooses (the first GPU).')
flags.DEFINE_boolean('gpu_memory_growth', False, 'Let the C++ worker '
                     'allocate GPU memory as needed '
                     '(TF_FORCE_GPU_ALLOW_GROWTH=true).')
flags.DEFINE_integer('intra_op_threads', None, 'TensorFlow intra-op threads '
                     'of the C++ worker (TF_NUM_INTRAOP_THREADS); e.g. 1 '
                     'with --max_concurrent_clients equal to the cores. '
                     'Default: TensorFlow\'s (one per core).', lower_bound=1)
flags.DEFINE_boolean('onednn', True, 'TensorFlow\'s oneDNN kernels in the C++ '
                     'worker (TF_ENABLE_ONEDNN_OPTS): about a quarter fewer '
                     'CPU seconds on CNNs here; --noonednn for Eigen\'s.')
flags.DEFINE_integer('threads', 32, 'Relay threads: concurrent calls in '
                     'flight.', lower_bound=1)
flags.DEFINE_float('start_timeout', 120.0, 'Seconds to wait for TFF\'s C++ '
                   'worker to start.', lower_bound=1.0)
flags.DEFINE_string('call_log', None, 'Append the name of each executor call '
                    'this worker relays to this file, one line a call (shows '
                    'which work reached this worker). Default: none.')

FLAGS = flags.FLAGS

_PR_SET_PDEATHSIG = 1
_LOOPBACK = ('127.0.0.1', 'localhost', '::1', '[::1]')
# Internal ports tried before a worker that keeps finding its port taken
# is an error (`start_worker_binary`).
PORT_ATTEMPTS = 3


class UsageError(Exception):
  """A bad flag: reported in one line."""


def worker_binary_path() -> str:
  """TFF's `worker_binary`, found without importing TFF (seconds saved)."""
  spec = importlib.util.find_spec('tensorflow_federated')
  if spec is None or not spec.submodule_search_locations:
    raise UsageError('tensorflow_federated is not installed.')
  path = os.path.join(list(spec.submodule_search_locations)[0], 'data',
                      'worker_binary')
  if not os.access(path, os.X_OK):
    raise UsageError(f'TFF\'s worker_binary is missing or not executable at '
                     f'{path}.')
  return path


def _read(flag: str) -> bytes:
  path = FLAGS[flag].value
  try:
    with open(path, 'rb') as f:
      return f.read()
  except OSError as e:
    raise UsageError(f'--{flag}={path}: cannot read it: '
                     f'{e.strerror or e}.') from e


def _die_with_parent() -> None:
  """In the child: SIGKILL it when this process dies (Linux)."""
  try:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
  except (OSError, AttributeError):
    pass


def listen_address(host: str, port: int) -> str:
  """`host:port` for gRPC, an IPv6 host in brackets (`[::1]:8000`)."""
  if ':' in host and not host.startswith('['):
    host = f'[{host}]'
  return f'{host}:{port}'


class _Relay:
  """gRPC generic handler: forwards TFF's ExecutorGroup calls as bytes."""

  def __init__(self, channel, call_log=None):
    import grpc  # pylint: disable=g-import-not-at-top
    self._grpc = grpc
    self._channel = channel
    self._callables = {}
    self._lock = threading.Lock()
    self._call_log = call_log
    self._log_lock = threading.Lock()

  def _note(self, method: str) -> None:
    with self._log_lock, open(self._call_log, 'a') as f:
      f.write(method.rsplit('/', 1)[-1] + '\n')

  def service(self, handler_call_details):
    method = handler_call_details.method
    if not method.startswith(worker_env.EXECUTOR_SERVICE_PREFIX):
      return None  # UNIMPLEMENTED: the trainer's connection probe.
    with self._lock:
      forward = self._callables.get(method)
      if forward is None:
        forward = self._channel.unary_unary(method)
        self._callables[method] = forward

    def behavior(request: bytes, context):
      if self._call_log:
        self._note(method)
      try:
        return forward(request)
      except self._grpc.RpcError as e:
        context.abort(e.code(), e.details() or '')

    return self._grpc.unary_unary_rpc_method_handler(behavior)


def max_concurrent_calls(env: dict[str, str]) -> int:
  """`worker_binary`'s --max_concurrent_computation_calls (-1: no limit).

  --max_concurrent_clients, or by default the TensorFlow inter-op threads
  `env` (the C++ worker's environment) caps it at, as `binaries.train`
  caps a local run: more client computations at once than that pool has
  threads run in turns that leave the cores idle (`worker_env`).

  Raises:
    UsageError: If TF_NUM_INTEROP_THREADS is set to anything but a
      positive integer.
  """
  if FLAGS.max_concurrent_clients is not None:
    return FLAGS.max_concurrent_clients
  try:
    threads = worker_env.default_max_concurrent_clients(env)
  except ValueError as e:
    raise UsageError(str(e)) from e
  return -1 if threads is None else threads


def _stop(child: subprocess.Popen) -> None:
  """Stops the C++ worker: SIGINT, then SIGKILL after 5 s."""
  if child.poll() is None:
    child.send_signal(signal.SIGINT)
    try:
      child.wait(timeout=5)
    except subprocess.TimeoutExpired:
      child.kill()
      child.wait()


def start_worker_binary(binary: str, env: dict[str, str], *, max_calls: int,
                        start_timeout: float,
                        pick_port: Optional[Callable[[], int]] = None):
  """Starts TFF's C++ worker on an internal port; waits until it serves.

  The port is `portpicker`'s; one that another process took before the
  worker bound it (the worker would share it silently: it listens with
  SO_REUSEPORT, `worker_env.is_sole_listener`; or fail to bind and exit
  with status 0) gets the worker started anew on another port, at most
  `PORT_ATTEMPTS` times in all.

  Args:
    binary: The `worker_binary` path.
    env: Its environment.
    max_calls: Its --max_concurrent_computation_calls (-1: no limit).
    start_timeout: Seconds it may take to serve (--start_timeout).
    pick_port: Returns a port to try (default `portpicker.pick_unused_port`).

  Returns:
    `(child, channel)`: the worker's process and a gRPC channel to it.

  Raises:
    UsageError: If the worker exits while starting on a port nobody else
      holds, does not serve within --start_timeout, or found its port taken
      `PORT_ATTEMPTS` times.
  """
  import grpc  # pylint: disable=g-import-not-at-top
  import portpicker  # pylint: disable=g-import-not-at-top
  pick_port = pick_port or portpicker.pick_unused_port
  deadline = time.monotonic() + start_timeout
  for _ in range(PORT_ATTEMPTS):
    port = pick_port()
    # A process group of its own: a Ctrl-C or SIGTERM sent to this
    # program's group (a terminal's, a scheduler's) reaches this program
    # alone, which stops the relay and then the C++ worker, rather than
    # the worker dying under calls in flight.
    child = subprocess.Popen(
        [binary, f'--port={port}',
         f'--max_concurrent_computation_calls={max_calls}'],
        env=env, preexec_fn=_die_with_parent, process_group=0)
    channel = grpc.insecure_channel(f'127.0.0.1:{port}',
                                    worker_env.GRPC_OPTIONS)
    try:
      if _serves_alone(grpc, channel, child, port, deadline, start_timeout):
        return child, channel
    except BaseException:
      channel.close()
      _stop(child)
      raise
    channel.close()
    _stop(child)
  raise UsageError(f'TFF\'s worker_binary found its internal port taken by '
                   f'another process {PORT_ATTEMPTS} times (the last: '
                   f'{port}).')


def _serves_alone(grpc, channel, child: subprocess.Popen, port: int,
                  deadline: float, start_timeout: float) -> bool:
  """Waits until `child` serves on `port`; False if another process is there.

  Raises:
    UsageError: If the child exits on a port nobody else holds, or the
      deadline passes first.
  """
  ready = grpc.channel_ready_future(channel)

  def serves() -> bool:
    try:
      ready.result(timeout=0.5)
      return True
    except grpc.FutureTimeoutError:
      return False

  outcome = worker_env.wait_until_serving(child, port, serves, deadline)
  if outcome is worker_env.Start.EXITED:
    raise UsageError(f'TFF\'s worker_binary exited with code '
                     f'{child.returncode} while starting.')
  if outcome is worker_env.Start.TIMED_OUT:
    raise UsageError(f'TFF\'s worker_binary did not start within '
                     f'--start_timeout={start_timeout:g} s.')
  return outcome is worker_env.Start.ALONE


def _checked_flags() -> Optional[tuple[bytes, bytes]]:
  """Refuses bad flags in one line; the TLS (key, certificate) pair, if any."""
  if FLAGS.port is None:
    raise UsageError('--port is required (the port to serve on).')
  if bool(FLAGS.tls_cert) != bool(FLAGS.tls_key):
    raise UsageError('--tls_cert and --tls_key go together (got only '
                     f'--{"tls_cert" if FLAGS.tls_cert else "tls_key"}).')
  credentials_pair = None
  if FLAGS.tls_cert:
    credentials_pair = (_read('tls_key'), _read('tls_cert'))
  if FLAGS.call_log:
    try:
      with open(FLAGS.call_log, 'a'):
        pass
    except OSError as e:
      raise UsageError(f'--call_log={FLAGS.call_log}: cannot append to it '
                       f'({e.strerror}).') from e
  return credentials_pair


def _worker_binary_env() -> dict[str, str]:
  """The environment TFF's worker_binary starts with, from the flags."""
  env = {**worker_env.MALLOC_ENV, **os.environ}  # Flat memory (worker_env.MALLOC_ENV).
  env.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  env.update(worker_env.worker_environment(
      intra_op_threads=FLAGS.intra_op_threads, onednn=FLAGS.onednn))
  if FLAGS.gpu is not None:
    env['CUDA_VISIBLE_DEVICES'] = FLAGS.gpu
  if FLAGS.gpu_memory_growth:
    env['TF_FORCE_GPU_ALLOW_GROWTH'] = 'true'
  return env


def serve() -> int:
  """Starts the C++ worker and the relay; returns the exit code."""
  credentials_pair = _checked_flags()
  binary = worker_binary_path()

  import grpc  # pylint: disable=g-import-not-at-top

  env = _worker_binary_env()
  child, channel = start_worker_binary(
      binary, env, max_calls=max_concurrent_calls(env),
      start_timeout=FLAGS.start_timeout)
  stopping = threading.Event()
  server = None
  try:
    # No SO_REUSEPORT (gRPC's default): a second server on a port in use
    # is refused instead of sharing its connections.
    server = grpc.server(
        concurrent.futures.ThreadPoolExecutor(max_workers=FLAGS.threads),
        handlers=[_Relay(channel, FLAGS.call_log)],
        options=worker_env.GRPC_OPTIONS + (('grpc.so_reuseport', 0),))
    address = listen_address(FLAGS.host, FLAGS.port)
    try:
      if credentials_pair:
        bound = server.add_secure_port(
            address, grpc.ssl_server_credentials([credentials_pair]))
      else:
        bound = server.add_insecure_port(address)
    except RuntimeError as e:
      raise UsageError(f'--port={FLAGS.port}: cannot listen on {address} '
                       f'({e}); is the port in use?') from e
    if not bound:
      raise UsageError(f'--port={FLAGS.port}: cannot listen on {address}; '
                       'is the port in use?')
    server.start()

    def on_signal(signum, frame):
      del signum, frame
      stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
      signal.signal(sig, on_signal)

    def watch_child():
      child.wait()
      stopping.set()

    threading.Thread(target=watch_child, daemon=True).start()
    if FLAGS.host not in _LOOPBACK:
      print(f'tff-opt worker: WARNING: --host={FLAGS.host} is not loopback: '
            'anyone who can reach it can run code on this host.',
            file=sys.stderr, flush=True)
    print(f'tff-opt worker: serving TFF\'s executor on {address} '
          f'({"TLS" if credentials_pair else "no TLS"}). It runs any '
          'computation it is sent: keep it on a private network or behind '
          'an authenticated tunnel.', flush=True)
    stopping.wait()
    if child.poll() is not None:
      print(f'worker: error: TFF\'s worker_binary exited with code '
            f'{child.returncode}.', file=sys.stderr, flush=True)
      return 1
    return 0
  finally:
    if server is not None:
      server.stop(grace=None)
    _stop(child)


def main(argv):
  if len(argv) > 1:
    _fail(f'unexpected arguments: {" ".join(argv[1:])} (flags take the form '
          '--name=value).')
  try:
    code = serve()
  except UsageError as e:
    _fail(str(e))
  sys.exit(code)


def _fail(message: str) -> None:
  print(f'worker: error: {message}', file=sys.stderr, flush=True)
  sys.exit(2)


HELP_FLAGS = ('--help', '-h', '-?', '--helpfull', '--helpshort')


def parse_flags_or_exit(argv: list[str]) -> list[str]:
  """Parses `argv` into `FLAGS`; a bad flag is one line and exit 2.

  absl's own parser would print `FATAL Flags parsing error` and exit 1, as
  it exits 1 after --help; here --help and --helpfull print the flags'
  help and exit 0, as the other binaries do.
  """
  if any(arg in HELP_FLAGS for arg in argv[1:]):
    print((__doc__ or '') + '\n' + (
        FLAGS.get_help() if '--helpfull' in argv
        else FLAGS.module_help(sys.modules[__name__])))
    sys.exit(0)
  try:
    return FLAGS(argv)
  except (flags.Error, ValueError) as e:
    _fail(binaries.flag_error_line(
        e, argv, FLAGS, 'python -m binaries.worker --helpfull lists every '
        'flag'))


if __name__ == '__main__':
  app.run(main, flags_parser=parse_flags_or_exit)
