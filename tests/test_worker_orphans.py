"""A trainer killed by SIGKILL leaves no `worker_binary` behind (issue 16.3)."""

import os
import signal
import subprocess
import sys
import time

import psutil

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
  """Issue 16.7: a refused connection is not retried for the full timeout."""
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

