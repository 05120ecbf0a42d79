"""The local context's worker: started with the context, waited for once.

`runtime.create_local_execution_context` starts TFF's `worker_binary` when
the context is made and lets the first computation wait for it; these tests
pin what that changes and what it keeps from TFF's lazily started worker.
"""

import gc
import os
import socket
import stat
import subprocess
import sys
import time
import types

import grpc
import psutil
import pytest
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.core.impl.executors import remote_executor_grpc_stub

from tff_opt.program import runtime
from tff_opt.program import worker_env

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@tff.tensorflow.computation(tf.int32)
def _add_one(x):
  return x + 1


def _new_workers(before):
  return [p for p in runtime.worker_children() if p.pid not in before]


def _gone(process):
  try:
    return process.status() == psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return True


def _wait_gone(process, seconds=10.0):
  deadline = time.monotonic() + seconds
  while not _gone(process) and time.monotonic() < deadline:
    time.sleep(0.05)
  return _gone(process)


@pytest.fixture(name='context')
def fixture_context():
  before = {p.pid for p in runtime.worker_children()}
  context = runtime.create_local_execution_context()
  started = _new_workers(before)
  yield context, started
  for process in runtime.worker_children():
    if process.pid not in before:
      process.kill()


def test_worker_starts_with_the_context_and_a_computation_finds_it(context):
  context, started = context
  before = {p.pid for p in runtime.worker_children()}
  # Running before any computation, as a direct child, without settings.
  assert len(started) == 1
  assert started[0].ppid() == os.getpid()
  assert started[0].cmdline()[0] == runtime.WORKER_BINARY
  with tff.framework.get_context_stack().install(context):
    assert _add_one(41) == 42
  # The computation used that worker; it started no other.
  assert not _new_workers(before | {started[0].pid})


def test_a_dead_worker_is_started_anew_on_the_next_computation(context):
  context, started = context
  with tff.framework.get_context_stack().install(context):
    assert _add_one(1) == 2
    started[0].kill()
    assert _wait_gone(started[0])
    before = {p.pid for p in runtime.worker_children()}
    assert _add_one(2) == 3
    (restarted,) = _new_workers(before)
  assert restarted.pid != started[0].pid
  assert restarted.cmdline()[0] == runtime.WORKER_BINARY


def test_a_dropped_context_stops_its_worker():
  before = {p.pid for p in runtime.worker_children()}
  context = runtime.create_local_execution_context()
  (worker,) = _new_workers(before)
  del context
  gc.collect()
  assert _wait_gone(worker)


def test_a_worker_that_exits_while_starting_is_an_error(tmp_path,
                                                        monkeypatch):
  fake = tmp_path / 'worker_binary'
  fake.write_text('#!/bin/sh\nexit 3\n')
  fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
  monkeypatch.setattr(runtime, 'WORKER_BINARY', str(fake))
  context = runtime.create_local_execution_context()
  with tff.framework.get_context_stack().install(context):
    with pytest.raises(RuntimeError) as e:
      _add_one(1)
  message = str(e.value)
  assert message.startswith("TFF's worker_binary (pid ")
  assert ') exited with status 3 before it answered on port ' in message
  assert message.endswith("; its own messages, if any, are above on "
                          'stderr.')


def test_a_worker_that_never_answers_times_out_and_is_stopped(tmp_path,
                                                              monkeypatch):
  fake = tmp_path / 'worker_binary'
  fake.write_text('#!/bin/sh\nexec sleep 60\n')
  fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
  monkeypatch.setattr(runtime, 'WORKER_BINARY', str(fake))
  monkeypatch.setattr(runtime, 'WORKER_START_TIMEOUT', 0.5)
  context = runtime.create_local_execution_context()
  started = time.monotonic()
  with tff.framework.get_context_stack().install(context):
    with pytest.raises(RuntimeError) as e:
      _add_one(1)
  assert time.monotonic() - started < 30  # Not TFF's own minutes.
  message = str(e.value)
  assert message.startswith("TFF's worker_binary (pid ")
  assert message.endswith(' within 0.5 s; it was stopped.')
  pid = int(message.split('(pid ')[1].split(')')[0])
  assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == (
      psutil.STATUS_ZOMBIE)


def test_worker_streams_fall_back_to_the_process_streams_when_captured(
    capsys):
  # Under capsys, sys.stdout/sys.stderr are in-memory: no file descriptor
  # for a child process, so the worker gets the original streams.
  del capsys
  out, err = runtime._worker_streams()  # pylint: disable=protected-access
  assert out is sys.__stdout__ and err is sys.__stderr__


def test_worker_streams_are_this_process_streams_when_they_are_files(
    tmp_path, monkeypatch):
  with open(tmp_path / 'out', 'w') as out, open(tmp_path / 'err', 'w') as err:
    monkeypatch.setattr(sys, 'stdout', out)
    monkeypatch.setattr(sys, 'stderr', err)
    assert runtime._worker_streams() == [out, err]  # pylint: disable=protected-access


class _RpcError(grpc.RpcError):
  pass


def _unraisable(error, raised_in):
  """The report `sys.unraisablehook` gets for `error` raised in `raised_in`.

  `raised_in` names the function, e.g. TFF's `RemoteExecutor._dispose`.
  """
  def raise_it():
    raise error
  raise_it.__code__ = raise_it.__code__.replace(co_name=raised_in)
  try:
    raise_it()
  except Exception as e:  # pylint: disable=broad-except
    return types.SimpleNamespace(exc_type=type(e), exc_value=e,
                                 exc_traceback=e.__traceback__,
                                 err_msg=None, object=None)


@pytest.mark.parametrize('error, raised_in, dropped', [
    # A remote value freed after its worker is gone: nothing to free.
    (_RpcError(), '_dispose', True),
    (_RpcError(), 'create_value', False),
    (ValueError('x'), '_dispose', False),
])
def test_a_gone_workers_dispose_error_is_not_printed(error, raised_in,
                                                     dropped):
  passed_on = []
  hook = runtime._quiet_stopped_worker_hook(passed_on.append)  # pylint: disable=protected-access
  report = _unraisable(error, raised_in)
  hook(report)
  assert passed_on == ([] if dropped else [report])


def _listener(*, reuseport):
  sock = socket.socket(socket.AF_INET6)
  if reuseport:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
  sock.bind(('::', 0))
  sock.listen()
  return sock


def _port_of(process):
  (flag,) = [a for a in process.cmdline() if a.startswith('--port=')]
  return int(flag[len('--port='):])


# A port another process took after portpicker chose it: TFF's worker
# shares it (SO_REUSEPORT, as this listener) or exits, unable to bind.
@pytest.mark.parametrize('reuseport', [True, False])
def test_a_worker_whose_port_was_taken_starts_anew_on_another(
    reuseport, monkeypatch):
  taken = _listener(reuseport=reuseport)
  port = taken.getsockname()[1]
  picks = iter([port])
  pick = runtime.portpicker.pick_unused_port
  monkeypatch.setattr(runtime.portpicker, 'pick_unused_port',
                      lambda: next(picks, None) or pick())
  before = {p.pid for p in runtime.worker_children()}
  context = runtime.create_local_execution_context()
  try:
    with tff.framework.get_context_stack().install(context):
      assert _add_one(41) == 42
    (worker,) = [p for p in _new_workers(before) if not _gone(p)]
    assert _port_of(worker) != port
    assert worker_env.is_sole_listener(worker.pid, _port_of(worker))
    assert worker_env.is_sole_listener(os.getpid(), port)  # Left alone.
  finally:
    del context
    gc.collect()
    taken.close()


def test_a_worker_that_keeps_finding_its_port_taken_is_an_error(monkeypatch):
  taken = _listener(reuseport=True)
  port = taken.getsockname()[1]
  monkeypatch.setattr(runtime.portpicker, 'pick_unused_port', lambda: port)
  before = {p.pid for p in runtime.worker_children()}
  context = runtime.create_local_execution_context()
  try:
    with tff.framework.get_context_stack().install(context):
      with pytest.raises(RuntimeError) as e:
        _add_one(1)
    assert str(e.value) == (
        "TFF's worker_binary found its port taken by another process 3 "
        f'times (the last: {port}); it was stopped.')
    assert all(_wait_gone(p) for p in _new_workers(before))
  finally:
    taken.close()


def test_a_value_the_trainer_drops_is_disposed_of_on_the_worker_at_once(
    context, monkeypatch):
  # TFF's RemoteExecutor disposes of values 20 at a time: a worker then
  # keeps the arguments and results of several rounds (FedCurv's: GBs).
  stub_class = remote_executor_grpc_stub.RemoteExecutorGrpcStub
  disposed = []
  dispose = stub_class.dispose

  def recording(self, request):
    disposed.append(len(request.value_ref))
    return dispose(self, request)

  monkeypatch.setattr(stub_class, 'dispose', recording)
  context, _ = context
  with tff.framework.get_context_stack().install(context):
    assert _add_one(41) == 42
    gc.collect()
    # One call makes a handful of values (the computation, its argument,
    # its result), each disposed of by itself, none left waiting.
    assert disposed and set(disposed) == {1}
    count = len(disposed)
    assert _add_one(1) == 2
    gc.collect()
    assert len(disposed) == 2 * count


# --- The same numbers in every process (`runtime.grappler_config`) ------------

# One trajectory-matching step of FedPTR-S's server
# (`fed_ptr_mtt.matching_gradients`: second-order gradients through the claim's
# ConvNet, GroupNorm included, at width 64), compiled by the local context and
# run on its worker, in a process of its own; it prints a digest of the
# gradients' bytes.
_MTT_STEP_DIGEST = '''
import hashlib
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tasks import models
from tff_opt.algorithms import fed_ptr_mtt
from tff_opt.program import runtime
runtime.set_local_execution_context(intra_op_threads=1)
shape = (28, 28, 1)
spec = (tf.TensorSpec([None, *shape], tf.float32),
        tf.TensorSpec([None], tf.int32))
def keras_model():
  return models.create_mtt_convnet(shape, 10, width=64, depth=3)
def model_fn():
  return tff.learning.models.from_keras_model(
      keras_model(), input_spec=spec,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
tf.keras.utils.set_random_seed(0)
start = keras_model().get_weights()
rng = np.random.default_rng(0)
target = [w + np.float32(0.01) * rng.standard_normal(w.shape, np.float32)
          for w in start]
images = rng.standard_normal((50, *shape), np.float32)
@tff.tensorflow.computation(tff.types.TensorType(np.float32, images.shape))
def step(x):
  return fed_ptr_mtt.matching_gradients(
      fed_ptr_mtt.forward_from_model_fn(model_fn),
      [tf.constant(w) for w in start], [tf.constant(w) for w in target], x,
      fed_ptr_mtt.synthetic_labels(10, 5),
      tf.constant(0.01), 2)
digest = hashlib.sha1()
for value in tf.nest.flatten(step(images)):
  digest.update(np.asarray(value).tobytes())
print(digest.hexdigest())
'''


def test_a_computation_gives_the_same_numbers_in_every_process():
  # Under TFF's own Grappler options (memory optimisation HEURISTICS) these
  # 3 processes printed 3 different digests: the scheduling heuristic.
  processes = [
      subprocess.Popen([sys.executable, '-c', _MTT_STEP_DIGEST], cwd=REPO,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True) for _ in range(3)]
  outputs = [process.communicate(timeout=600) for process in processes]
  for process, (_, stderr) in zip(processes, outputs):
    assert process.returncode == 0, stderr[-2000:]
  digests = {stdout.strip() for stdout, _ in outputs}
  assert len(digests) == 1, digests


def test_grappler_runs_as_in_tff_but_without_the_scheduling_heuristic():
  options = runtime.grappler_config().graph_options.rewrite_options
  aggressive = options.AGGRESSIVE
  assert (options.constant_folding, options.arithmetic_optimization,
          options.loop_optimization, options.function_optimization) == (
              aggressive,) * 4
  assert options.memory_optimization == options.RECOMPUTATION_HEURISTICS
  assert not options.disable_meta_optimizer
