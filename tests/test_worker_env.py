"""Worker settings: TensorFlow threads and oneDNN reach TFF's C++ worker."""

import json
import os
import socket
import subprocess
import sys
import time

import portpicker
import psutil
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import binary
from tff_opt.program import runtime
from tff_opt.program import worker_env


def test_worker_environment_values():
  assert worker_env.worker_environment() == {}
  assert worker_env.worker_environment(intra_op_threads=3, onednn=True) == {
      'TF_NUM_INTRAOP_THREADS': '3', 'TF_ENABLE_ONEDNN_OPTS': '1'}
  assert worker_env.worker_environment(onednn=False) == {
      'TF_ENABLE_ONEDNN_OPTS': '0'}


@pytest.mark.parametrize('bad', [0, -1, True, '2', 1.0])
def test_worker_environment_rejects_bad_thread_counts(bad):
  with pytest.raises(ValueError) as e:
    worker_env.worker_environment(intra_op_threads=bad)
  assert str(e.value) == (f'intra_op_threads must be a positive integer or '
                          f'None, got {bad!r}.')


def test_thread_environment_sets_both_pools():
  assert worker_env.thread_environment(1) == {
      'TF_NUM_INTRAOP_THREADS': '1', 'TF_NUM_INTEROP_THREADS': '1'}
  with pytest.raises(ValueError) as e:
    worker_env.thread_environment(0)
  assert str(e.value) == 'threads must be a positive integer, got 0.'


def test_context_starts_its_worker_with_the_settings():
  before = {p.pid for p in runtime.worker_children()}
  own_env = dict(os.environ)
  context = runtime.create_local_execution_context(
      2, intra_op_threads=1, onednn=False)
  started = [p for p in runtime.worker_children() if p.pid not in before]
  try:
    # Started by the call itself, not by the first computation.
    assert len(started) == 1
    environ = started[0].environ()
    assert environ['TF_NUM_INTRAOP_THREADS'] == '1'
    assert environ['TF_ENABLE_ONEDNN_OPTS'] == '0'
    assert '--max_concurrent_computation_calls=2' in started[0].cmdline()
    # This process's environment is as it was.
    assert dict(os.environ) == own_env

    @tff.tensorflow.computation(tf.int32)
    def add_one(x):
      return x + 1

    with tff.framework.get_context_stack().install(context):
      assert add_one(41) == 42
  finally:
    for process in started:
      process.kill()
    psutil.wait_procs(started, timeout=10)


def test_binary_refuses_threads_with_workers(capsys, tmp_path):
  code = binary.run_train('--workers=127.0.0.1:9', '--intra_op_threads=1',
                          f'--output_dir={tmp_path / "remote"}')
  assert code == 2
  assert capsys.readouterr().err == (
      'train: error: --intra_op_threads=1: with --workers, set it on each '
      'worker (python -m binaries.worker --intra_op_threads=N).\n')


def test_binary_runs_with_and_records_the_settings(tmp_path):
  # No capsys here: TFF hands this process's stdout to the worker it starts.
  out = tmp_path / 'local'
  code = binary.run_train('--rounds=1', '--clients_per_round=2',
                          '--max_concurrent_clients=2', '--intra_op_threads=1',
                          '--eval_every=1', f'--output_dir={out}')
  assert code == 0
  with open(out / 'hparams.json') as f:
    hparams = json.load(f)
  assert hparams['intra_op_threads'] == 1
  assert hparams['max_concurrent_clients'] == 2
  # tests/conftest.py sets TF_ENABLE_ONEDNN_OPTS=1, as the binary does.
  assert hparams['onednn'] is True
  workers = runtime.worker_children()
  assert [w.environ().get('TF_NUM_INTRAOP_THREADS') for w in workers] == ['1']


@pytest.mark.parametrize('value, threads', [(None, None), ('', None),
                                            ('1', 1), ('4', 4)])
def test_inter_op_threads_from_environment(value, threads):
  environ = {} if value is None else {'TF_NUM_INTEROP_THREADS': value}
  assert worker_env.inter_op_threads_from_environment(environ) == threads


@pytest.mark.parametrize('bad', ['0', '-2', 'two', '1.5'])
def test_inter_op_threads_from_environment_refuses_non_counts(bad):
  with pytest.raises(ValueError) as e:
    worker_env.inter_op_threads_from_environment(
        {'TF_NUM_INTEROP_THREADS': bad})
  assert str(e.value) == (f'TF_NUM_INTEROP_THREADS={bad}: expected a '
                          "positive integer (TensorFlow's inter-op threads).")


def test_default_max_concurrent_clients_names_what_the_variable_sets():
  assert worker_env.default_max_concurrent_clients(
      {'TF_NUM_INTEROP_THREADS': '2'}) == 2
  assert worker_env.default_max_concurrent_clients({}) is None
  with pytest.raises(ValueError) as e:
    worker_env.default_max_concurrent_clients({'TF_NUM_INTEROP_THREADS': '-1'})
  assert str(e.value) == (
      "TF_NUM_INTEROP_THREADS=-1: expected a positive integer (TensorFlow's "
      "inter-op threads). It sets --max_concurrent_clients's default; unset "
      'it or give the flag.')


@pytest.mark.parametrize('env, argv, expected', [
    # --threads_per_run's environment caps a local run's clients at its
    # inter-op threads...
    ('1', (), 1),
    ('2', (), 2),
    # ...unless the flag says otherwise, or the run is remote (each
    # worker's own setting), or nothing caps the threads.
    ('1', ('--max_concurrent_clients=3',), 3),
    ('1', ('--workers=127.0.0.1:9',), None),
    (None, (), None),
])
def test_binary_caps_concurrent_clients_at_inter_op_threads(
    monkeypatch, env, argv, expected):
  if env is None:
    monkeypatch.delenv('TF_NUM_INTEROP_THREADS', raising=False)
  else:
    monkeypatch.setenv('TF_NUM_INTEROP_THREADS', env)
  assert binary.resolve_hparams(*argv)['max_concurrent_clients'] == expected


def test_binary_names_a_bad_inter_op_environment(monkeypatch):
  from binaries import train  # pylint: disable=g-import-not-at-top
  monkeypatch.setenv('TF_NUM_INTEROP_THREADS', 'all')
  with pytest.raises(train.UsageError) as e:
    binary.resolve_hparams()
  assert str(e.value) == (
      "TF_NUM_INTEROP_THREADS=all: expected a positive integer (TensorFlow's "
      "inter-op threads). It sets --max_concurrent_clients's default; unset "
      'it or give the flag.')


# --- Who holds a port ---------------------------------------------------------


def _listener(port=0, *, reuseport=True):
  sock = socket.socket(socket.AF_INET6)
  if reuseport:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
  sock.bind(('::', port))
  sock.listen()
  return sock


def test_sole_listener_sees_a_second_process_sharing_the_port():
  # What TFF's worker_binary does on a port another process took: it
  # listens with SO_REUSEPORT, and the bind succeeds beside the other.
  ours = _listener()
  port = ours.getsockname()[1]
  other = subprocess.Popen([
      sys.executable, '-c',
      'import socket, sys, time\n'
      's = socket.socket(socket.AF_INET6)\n'
      's.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)\n'
      f's.bind(("::", {port})); s.listen()\n'
      'print("bound", flush=True); time.sleep(60)\n'],
      stdout=subprocess.PIPE, text=True)
  try:
    assert other.stdout.readline() == 'bound\n'
    assert worker_env.port_held_by_another(other.pid, port)
    assert worker_env.port_held_by_another(os.getpid(), port)
    assert not worker_env.is_sole_listener(other.pid, port)
    assert not worker_env.is_sole_listener(os.getpid(), port)
    ours.close()
    assert worker_env.is_sole_listener(other.pid, port)
    assert not worker_env.port_held_by_another(other.pid, port)
  finally:
    other.kill()
    other.wait()
  assert not worker_env.port_held_by_another(os.getpid(), port)
  assert not worker_env.is_sole_listener(other.pid, port)


# --- Waiting for a starting worker (`wait_until_serving`) ---------------------


class _Process:
  """A started worker as `wait_until_serving` sees it: a pid and `poll()`."""

  def __init__(self, pid, *, exits_at_poll=None, status=3):
    self.pid = pid
    self._exits_at_poll = exits_at_poll
    self._status = status
    self.polls = 0

  def poll(self):
    self.polls += 1
    if self._exits_at_poll is not None and self.polls >= self._exits_at_poll:
      return self._status
    return None


def _probe(answers):
  """A probe answering from `answers` in turn (then no); counts its calls."""
  answers = list(answers)

  def serves():
    serves.calls += 1
    return answers.pop(0) if answers else False

  serves.calls = 0
  return serves


def _far():
  return time.monotonic() + 60


def test_a_worker_that_answers_alone_on_its_port_serves():
  ours = _listener()
  serves = _probe([False, False, True])
  try:
    assert worker_env.wait_until_serving(
        _Process(os.getpid()), ours.getsockname()[1], serves,
        _far()) is worker_env.Start.ALONE
  finally:
    ours.close()
  assert serves.calls == 3


def test_a_worker_answering_where_another_process_listens_is_taken():
  # The worker (here a pid that holds no socket) answers through a port
  # this test's process holds: a connection may reach either listener.
  ours = _listener()
  try:
    assert worker_env.wait_until_serving(
        _Process(os.getppid()), ours.getsockname()[1], _probe([True]),
        _far()) is worker_env.Start.PORT_TAKEN
  finally:
    ours.close()


def test_a_port_another_process_listens_on_is_found_while_waiting():
  # A probe that reaches the other process may never see the worker answer
  # (gRPC's readiness, say): the port is checked every HELD_CHECK_SECONDS.
  ours = _listener()
  worker = _Process(os.getppid())

  def serves():
    time.sleep(0.05)
    return False

  started = time.monotonic()
  try:
    assert worker_env.wait_until_serving(
        worker, ours.getsockname()[1], serves,
        _far()) is worker_env.Start.PORT_TAKEN
  finally:
    ours.close()
  waited = time.monotonic() - started
  assert worker_env.HELD_CHECK_SECONDS <= waited < 10
  assert worker.polls >= 2  # Polled while it waited, not found dead.


def test_a_worker_that_exits_on_a_free_port_has_exited():
  port = portpicker.pick_unused_port()
  serves = _probe([])
  worker = _Process(os.getpid(), exits_at_poll=2)
  assert worker_env.wait_until_serving(
      worker, port, serves, _far()) is worker_env.Start.EXITED
  assert (serves.calls, worker.polls) == (2, 2)


def test_a_worker_that_exits_because_another_process_took_its_port():
  # TFF's worker exits with status 0 when it cannot bind: a clash, not an
  # error.
  ours = _listener(reuseport=False)
  serves = _probe([])
  try:
    assert worker_env.wait_until_serving(
        _Process(os.getppid(), exits_at_poll=1, status=0),
        ours.getsockname()[1], serves,
        _far()) is worker_env.Start.PORT_TAKEN
  finally:
    ours.close()
  assert serves.calls == 1  # At its exit, not HELD_CHECK_SECONDS later.


def test_a_worker_that_never_answers_times_out_at_the_deadline():
  port = portpicker.pick_unused_port()

  def serves():
    time.sleep(0.02)
    return False

  started = time.monotonic()
  assert worker_env.wait_until_serving(
      _Process(os.getpid()), port, serves,
      started + 0.2) is worker_env.Start.TIMED_OUT
  assert 0.2 <= time.monotonic() - started < 5
