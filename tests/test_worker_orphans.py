"""A trainer killed by SIGKILL leaves no `worker_binary` behind;
`runtime.wait_for_worker` fails fast on a closed port and names the reason.
"""

import os
import signal
import subprocess
import sys
import time

import grpc
import psutil
import pytest

# A trainer as binaries.train runs one: local context, one round of the
# training loop (which gives the worker its watchdog), then still busy.
_TRAINER = """
import time
import tensorflow as tf
import tensorflow_federated as tff
from tests import tiny
from tff_opt import algorithms
from tff_opt.program import runtime
from tff_opt.program import training_loop
runtime.set_local_execution_context()
process = algorithms.build_fed_opt(
    tiny.model_fn,
    client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
    server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))
x, y = tiny.make_clients(num_clients=1)[0]
training_loop.run_training(
    process, client_ids=['a'], clients_per_round=1, rounds=1,
    client_dataset_fn=lambda _: tf.data.Dataset.from_tensor_slices(
        (x, y)).batch(4), initial_state=process.initialize(), log=None)
print(' '.join(str(w.pid) for w in runtime.worker_children()), flush=True)
time.sleep(600)
"""


def _alive_worker(pid):
  try:
    process = psutil.Process(pid)
    return (process.status() != psutil.STATUS_ZOMBIE and
            'worker_binary' in ' '.join(process.cmdline()))
  except psutil.Error:
    return False


def test_sigkilled_trainer_takes_its_worker_down():
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  trainer = subprocess.Popen(
      [sys.executable, '-c', _TRAINER], cwd=root, stdout=subprocess.PIPE,
      stderr=subprocess.DEVNULL, text=True)
  try:
    workers = [int(p) for p in trainer.stdout.readline().split()]
    assert len(workers) == 1 and _alive_worker(workers[0])
    trainer.send_signal(signal.SIGKILL)
    trainer.wait()
    deadline = time.monotonic() + 15
    while _alive_worker(workers[0]) and time.monotonic() < deadline:
      time.sleep(0.2)
    assert not _alive_worker(workers[0])
  finally:
    trainer.kill()
    trainer.wait()


def test_watchdog_exits_when_its_worker_stops_first():
  from tff_opt.program import runtime  # pylint: disable=g-import-not-at-top
  worker = subprocess.Popen(['sleep', '30'])
  watchdog = subprocess.Popen(
      ['sh', '-c', runtime._WATCHDOG, 'wd', str(os.getpid()),  # pylint: disable=protected-access
       str(worker.pid)])
  try:
    time.sleep(1.5)
    assert watchdog.poll() is None  # Both alive: it keeps watching.
    worker.kill()
    worker.wait()
    assert watchdog.wait(timeout=5) == 0
  finally:
    worker.kill()
    watchdog.kill()


def test_closed_port_fails_fast_instead_of_waiting_the_timeout(monkeypatch):
  """A refused connection is not retried for the full timeout."""
  import socket  # pylint: disable=g-import-not-at-top
  from tff_opt.program import runtime  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(runtime, 'REFUSED_GRACE', 1.0)
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]  # Closed once the block ends.
  address = f'127.0.0.1:{port}'
  started = time.monotonic()
  try:
    runtime.wait_for_worker(runtime.worker_channel(address), address,
                            timeout=30)
  except runtime.WorkerError as e:
    message = str(e)
  assert time.monotonic() - started < 10
  assert message.startswith(f'worker {address} refuses connections (nothing '
                            'listens on that port; UNAVAILABLE: ')
  assert message.endswith('Start one there with `python -m binaries.worker '
                          '--port=PORT`, or check the port.')



class _FailedProbe(grpc.RpcError, grpc.Call):
  """What a gRPC call raises: an error with a status code and details."""

  def __init__(self, code, details):
    super().__init__()
    self._code, self._details = code, details

  def code(self):
    return self._code

  def details(self):
    return self._details

  # grpc.Call's other abstract methods; the probe reads none of them.
  def initial_metadata(self):
    return None

  def trailing_metadata(self):
    return None

  def is_active(self):
    return False

  def time_remaining(self):
    return None

  def cancel(self):
    return False

  def add_callback(self, callback):
    return False


class _Channel:
  """A channel whose probes fail with `errors` in turn (then the last)."""

  def __init__(self, errors):
    self.errors = list(errors)
    self.calls = 0

  def unary_unary(self, method):
    del method

    def probe(request, timeout):
      del request, timeout
      self.calls += 1
      raise self.errors[min(self.calls, len(self.errors)) - 1]

    return probe


def test_a_probe_cut_short_by_the_deadline_keeps_the_reason_seen_before():
  # A loaded machine: the last probe before the deadline times out on its
  # own before the TLS handshake fails again; the report still names the
  # certificate, not the timeout.
  from tff_opt.program import runtime  # pylint: disable=g-import-not-at-top
  handshake = _FailedProbe(grpc.StatusCode.UNAVAILABLE,
                           'Ssl handshake failed: CERTIFICATE_VERIFY_FAILED')
  cut = _FailedProbe(grpc.StatusCode.DEADLINE_EXCEEDED, 'Deadline Exceeded')
  channel = _Channel([handshake, cut])
  with pytest.raises(runtime.WorkerError) as e:
    runtime.wait_for_worker(channel, 'h:1', timeout=0.5)
  assert channel.calls >= 2
  assert str(e.value).startswith(
      'worker h:1 is not reachable within 0.5 s (UNAVAILABLE: Ssl handshake '
      'failed: CERTIFICATE_VERIFY_FAILED). Start one there with ')
  # With no reason before it, the timeout is the reason.
  with pytest.raises(runtime.WorkerError, match=r'^worker h:1 is not '
                     r'reachable within 0.3 s \(DEADLINE_EXCEEDED: Deadline '
                     r'Exceeded\)\. '):
    runtime.wait_for_worker(_Channel([cut]), 'h:1', timeout=0.3)
