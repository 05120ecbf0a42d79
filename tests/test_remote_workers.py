"""Rounds on TFF workers over gRPC (loopback only): results, TLS, failures.

Every worker here is a `python -m binaries.worker` child listening on
127.0.0.1; the module's fixture stops each one (and so its C++ worker) at
the end, and puts TFF's local context back.
"""

import csv
import datetime
import os
import signal
import subprocess
import sys
import time
import types

import numpy as np
import portpicker
import psutil
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import binary
from tests import replay
from tests import tiny
from tff_opt import algorithms
from tff_opt.program import registry
from tff_opt.program import runtime
from tff_opt.program import training_loop

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = ['--task=digits', '--clients_per_round=4', '--client_epochs=1',
        '--eval_every=1', '--checkpoint_every=1', '--seed=5', '--rounds=3']
ROUNDS = 3
WORKER_START_SECONDS = 90
READY_LINE = 'tff-opt worker: serving'
INTER_OP = 'TF_NUM_INTEROP_THREADS'
PORT_RETRIES = 3


# --- Certificates ------------------------------------------------------------


def _self_signed(directory, name):
  """Writes a self-signed certificate for 127.0.0.1; returns (cert, key)."""
  from cryptography import x509  # pylint: disable=g-import-not-at-top
  from cryptography.hazmat.primitives import hashes  # pylint: disable=g-import-not-at-top
  from cryptography.hazmat.primitives import serialization  # pylint: disable=g-import-not-at-top
  from cryptography.hazmat.primitives.asymmetric import ec  # pylint: disable=g-import-not-at-top
  import ipaddress  # pylint: disable=g-import-not-at-top

  key = ec.generate_private_key(ec.SECP256R1())
  subject = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, name)])
  now = datetime.datetime.now(datetime.timezone.utc)
  cert = (
      x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
      .public_key(key.public_key()).serial_number(x509.random_serial_number())
      .not_valid_before(now - datetime.timedelta(minutes=5))
      .not_valid_after(now + datetime.timedelta(days=1))
      .add_extension(x509.SubjectAlternativeName(
          [x509.IPAddress(ipaddress.ip_address('127.0.0.1')),
           x509.DNSName('localhost')]), critical=False)
      .add_extension(x509.BasicConstraints(ca=True, path_length=None),
                     critical=True)
      .sign(key, hashes.SHA256()))
  cert_path = os.path.join(directory, f'{name}.pem')
  key_path = os.path.join(directory, f'{name}.key')
  with open(cert_path, 'wb') as f:
    f.write(cert.public_bytes(serialization.Encoding.PEM))
  with open(key_path, 'wb') as f:
    f.write(key.private_bytes(serialization.Encoding.PEM,
                              serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))
  return cert_path, key_path


@pytest.fixture(scope='module')
def certs(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp('certs'))
  worker_cert, worker_key = _self_signed(directory, 'worker')
  other_cert, _ = _self_signed(directory, 'other')
  return {'cert': worker_cert, 'key': worker_key, 'other': other_cert}


# --- Workers -----------------------------------------------------------------


class Workers:
  """`binaries.worker` children on loopback, by name; stopped by `stop_all`."""

  def __init__(self, log_dir):
    self._log_dir = log_dir
    self.procs = {}
    self.ports = {}
    self._args = {}

  def start(self, name, *flags, port=None, env=None):
    """Starts worker `name`; `env`: variables to set (None: to unset).

    A port picked here (no `port`) is picked again if another process took
    it before the worker bound it (`wait_ready`): two test processes, or a
    worker picking its C++ worker's internal port, can pick the same free
    port at once.
    """
    self._args[name] = (flags, port, env)
    port = port or portpicker.pick_unused_port()
    environ = dict(os.environ)
    for key, value in (env or {}).items():
      environ.pop(key, None)
      if value is not None:
        environ[key] = value
    log = open(os.path.join(self._log_dir, f'{name}.log'), 'w')
    self.procs[name] = subprocess.Popen(
        [sys.executable, '-m', 'binaries.worker', f'--port={port}',
         f'--call_log={self._call_log(name)}', *flags],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=environ)
    log.close()
    self.ports[name] = port

  def restart(self, name):
    """Starts worker `name` again as before, on the port it had."""
    flags, _, env = self._args[name]
    self.start(name, *flags, port=self.ports[name], env=env)

  def address(self, name):
    return f'127.0.0.1:{self.ports[name]}'

  def _call_log(self, name):
    return os.path.join(self._log_dir, f'{name}.calls')

  def computations(self, name):
    """How many computations worker `name` has been asked to run so far
    (its `--call_log`: one `CreateCall` line each)."""
    try:
      with open(self._call_log(name)) as f:
        return sum(line.strip() == 'CreateCall' for line in f)
    except FileNotFoundError:
      return 0

  def ran_on(self, *names):
    """A context that fails unless each worker in `names` ran computations
    inside it: a silently missing remote context computes locally."""
    return _RanOn(self, names)

  def wait_ready(self, *names):
    deadline = time.monotonic() + WORKER_START_SECONDS
    for name in names:
      path = os.path.join(self._log_dir, f'{name}.log')
      retries = PORT_RETRIES
      while True:
        with open(path) as f:
          text = f.read()
        if READY_LINE in text:
          break
        flags, port, env = self._args[name]
        if (self.procs[name].poll() is not None and port is None and
            'is the port in use?' in text and retries):
          retries -= 1
          self.start(name, *flags, env=env)
          continue
        assert self.procs[name].poll() is None, f'worker {name} died: {text}'
        assert time.monotonic() < deadline, f'worker {name} not ready: {text}'
        time.sleep(0.2)

  def kill(self, name):
    self.procs[name].kill()
    self.procs[name].wait(timeout=30)

  def stop_all(self):
    for proc in self.procs.values():
      if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    for proc in self.procs.values():
      try:
        proc.wait(timeout=15)
      except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)


class _RanOn:

  def __init__(self, workers, names):
    self._workers, self._names = workers, names

  def __enter__(self):
    self._before = [self._workers.computations(n) for n in self._names]

  def __exit__(self, exc_type, *_):
    if exc_type is None:
      after = [self._workers.computations(n) for n in self._names]
      idle = [n for n, b, a in zip(self._names, self._before, after) if a <= b]
      assert not idle, f'no computation ran on worker(s) {idle}'


# --- Local references (before any worker exists) -----------------------------


@pytest.fixture(scope='module')
def tiny_process():
  return algorithms.build_fed_opt(
      tiny.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0, momentum=0.9))


def _tiny_rounds(process):
  clients = tiny.make_clients(5, seed=2)
  state = tiny.set_weights(process, process.initialize(),
                           tiny.initial_weights())
  for _ in range(ROUNDS):
    state = process.next(state, tiny.full_batch_datasets(clients, 2)).state
  return tiny.trainable(process, state)


def _rows(output_dir):
  with open(os.path.join(output_dir, 'metrics.csv')) as f:
    return list(csv.DictReader(f))


@pytest.fixture(scope='module')
def local_results(tiny_process, tmp_path_factory):
  """The tiny process's weights and the binary's metrics, run locally."""
  weights = _tiny_rounds(tiny_process)
  output_dir = str(tmp_path_factory.mktemp('local') / 'run')
  assert binary.run_train(*FAST, f'--output_dir={output_dir}') == 0
  return {'weights': weights, 'rows': _rows(output_dir)}


@pytest.fixture(scope='module')
def vectorized_local():
  """FedProx with its clients in groups of 2 (`vectorized.vectorize`; the
  small Shakespeare LSTM and clients of 9, 5, 0, 4, 6 snippets of
  tests/test_vectorized.py), 2 rounds locally: (process, datasets, start,
  final state)."""
  from tests import test_vectorized  # pylint: disable=g-import-not-at-top
  from tff_opt.algorithms import vectorized  # pylint: disable=g-import-not-at-top
  process = vectorized.vectorize(
      algorithms.build_fed_prox(
          test_vectorized.model_fn, mu=1.0,
          client_optimizer_fn=test_vectorized.SGD,
          server_optimizer_fn=test_vectorized.SERVER_SGD),
      test_vectorized.vectorized_model(), group_size=2)
  datasets = test_vectorized.test_vectorized_training.client_datasets(
      test_vectorized.SIZES)
  start = test_vectorized.initial_weights()
  state, _ = test_vectorized.run(
      process, process.set_model_weights(process.initialize(), start),
      datasets)
  return process, datasets, start, state


@pytest.fixture(scope='module')
def workers(local_results, vectorized_local, certs, tmp_path_factory):
  # Computed first: a local context stops TFF workers.
  del local_results, vectorized_local
  pool = Workers(str(tmp_path_factory.mktemp('workers')))
  try:
    # The inter-op threads set (or not) the workers' default cap on
    # concurrent clients (`test_worker_caps_concurrent_clients`); a cap
    # changes no result.
    pool.start('a', env={INTER_OP: '1'})
    pool.start('b', '--max_concurrent_clients=3', env={INTER_OP: '1'})
    pool.start('tls', f'--tls_cert={certs["cert"]}', f'--tls_key={certs["key"]}',
               env={INTER_OP: None})
    pool.wait_ready('a', 'b', 'tls')
    yield pool
  finally:
    pool.stop_all()
    runtime.set_local_execution_context()


# --- Flags -------------------------------------------------------------------


@pytest.mark.parametrize('value, message', [
    ('localhost', "--workers=localhost: 'localhost' has no port; expected "
     'HOST:PORT (IPv6 hosts in brackets, e.g. [::1]:8000).'),
    ('127.0.0.1:abc', "--workers=127.0.0.1:abc: '127.0.0.1:abc': port 'abc' "
     'is not an integer.'),
    ('127.0.0.1:70000', "--workers=127.0.0.1:70000: '127.0.0.1:70000': port "
     '70000 is not in [1, 65535].'),
    ('127.0.0.1:1,', "--workers=127.0.0.1:1,: empty address in "
     "'127.0.0.1:1,'; expected HOST:PORT[,HOST:PORT...]."),
    ('::1:80', "--workers=::1:80: '::1:80': an IPv6 host goes in brackets, "
     'e.g. [::1]:8000.'),
])
def test_bad_workers_flag_is_one_exact_line(value, message, capsys, tmp_path):
  code = binary.run_train(f'--workers={value}',
                          f'--output_dir={tmp_path / "run"}')
  assert code == 2
  assert capsys.readouterr().err == f'train: error: {message}\n'


def test_parse_workers_accepts_bracketed_ipv6_and_rejects_repeats():
  assert runtime.parse_workers('127.0.0.1:80, [::1]:81') == [
      ('127.0.0.1', 80), ('[::1]', 81)]
  with pytest.raises(ValueError, match=r'^workers: 127.0.0.1:80 is given '
                     r'twice\.$'):
    runtime.parse_workers('127.0.0.1:80,127.0.0.1:80')


def test_max_concurrent_clients_belongs_to_each_worker(capsys, tmp_path):
  code = binary.run_train('--workers=127.0.0.1:9', '--max_concurrent_clients=2',
                          f'--output_dir={tmp_path / "run"}')
  assert code == 2
  assert capsys.readouterr().err == (
      'train: error: --max_concurrent_clients=2: with --workers, set it on '
      'each worker (python -m binaries.worker --max_concurrent_clients=N).\n')


def test_worker_caps_concurrent_clients(workers):
  # As binaries.train caps a local run: at TF_NUM_INTEROP_THREADS by
  # default, the flag winning, no limit (-1) without either.
  def calls(name):
    [child] = [c for c in psutil.Process(workers.procs[name].pid).children()
               if 'worker_binary' in c.name()]
    [value] = [a.split('=', 1)[1] for a in child.cmdline()
               if a.startswith('--max_concurrent_computation_calls=')]
    return value

  assert [calls(n) for n in ('a', 'b', 'tls')] == ['1', '3', '-1']


def test_worker_names_a_bad_inter_op_environment():
  result = subprocess.run(
      [sys.executable, '-m', 'binaries.worker', '--port=9'], cwd=REPO,
      capture_output=True, text=True, timeout=60,
      env={**os.environ, INTER_OP: '0'})
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1] == (
      "worker: error: TF_NUM_INTEROP_THREADS=0: expected a positive integer "
      "(TensorFlow's inter-op threads). It sets --max_concurrent_clients's "
      'default; unset it or give the flag.')


def test_worker_refuses_half_a_tls_pair(certs):
  result = subprocess.run(
      [sys.executable, '-m', 'binaries.worker', '--port=9',
       f'--tls_cert={certs["cert"]}'], cwd=REPO, capture_output=True,
      text=True, timeout=60)
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1] == (
      'worker: error: --tls_cert and --tls_key go together (got only '
      '--tls_cert).')


def test_worker_names_a_call_log_it_cannot_write(tmp_path):
  path = tmp_path / 'missing' / 'calls'
  result = subprocess.run(
      [sys.executable, '-m', 'binaries.worker', '--port=9',
       f'--call_log={path}'], cwd=REPO, capture_output=True, text=True,
      timeout=60)
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1] == (
      f'worker: error: --call_log={path}: cannot append to it (No such file '
      'or directory).')
  assert not path.parent.exists()


# --- GPUs on a CPU-only machine ----------------------------------------------

_HAS_GPU = bool(tf.config.list_physical_devices('GPU'))


@pytest.mark.skipif(_HAS_GPU, reason='checks the CPU-only behaviour')
def test_gpu_settings_without_gpu_log_one_line_and_do_nothing(monkeypatch):
  monkeypatch.delenv('TF_FORCE_GPU_ALLOW_GROWTH', raising=False)
  lines = []
  assert runtime.configure_gpus(memory_growth=True, log=lines.append) == []
  assert runtime.configure_gpus(logical_gpus=4, log=lines.append) == []
  assert lines == [
      'no GPU found: GPU settings (memory growth, logical GPUs) ignored.'] * 2
  assert 'TF_FORCE_GPU_ALLOW_GROWTH' not in os.environ
  assert tf.config.list_logical_devices('GPU') == []
  assert runtime.configure_gpus(log=lines.append) == []  # Nothing asked.
  assert len(lines) == 2


def test_gpu_settings_are_validated():
  with pytest.raises(ValueError, match=r'^logical_gpus must be a positive '
                     r'integer, got 0\.$'):
    runtime.configure_gpus(logical_gpus=0)
  with pytest.raises(ValueError, match=r'^logical_gpus cannot be combined '
                     'with memory_growth'):
    runtime.configure_gpus(memory_growth=True, logical_gpus=2)


# --- Rounds on workers -------------------------------------------------------


def test_two_workers_give_the_local_weights(workers, tiny_process,
                                            local_results):
  runtime.set_remote_execution_context(
      [('127.0.0.1', workers.ports['a']), ('127.0.0.1', workers.ports['b'])])
  with workers.ran_on('a', 'b'):
    weights = _tiny_rounds(tiny_process)
  for got, want in zip(weights, local_results['weights']):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_vectorized_clients_on_two_workers_give_the_local_state(
    workers, vectorized_local):
  """`--client_vectorization`'s process on workers: each worker trains
  whole groups (3 groups of at most 2 clients: 2 and 1 on the workers)."""
  from tests import test_vectorized  # pylint: disable=g-import-not-at-top
  process, datasets, start, want = vectorized_local
  runtime.set_remote_execution_context(
      [('127.0.0.1', workers.ports['a']), ('127.0.0.1', workers.ports['b'])])
  with workers.ran_on('a', 'b'):
    got, _ = test_vectorized.run(
        process, process.set_model_weights(process.initialize(), start),
        datasets)
  for a, b in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5,
                               atol=1e-6)


def test_tls_worker_with_its_self_signed_root(workers, certs, tiny_process,
                                              local_results):
  with open(certs['cert'], 'rb') as f:
    root = f.read()
  runtime.set_remote_execution_context(workers.address('tls'),
                                       tls_root_certificates=root)
  with workers.ran_on('tls'):
    weights = _tiny_rounds(tiny_process)
  for got, want in zip(weights, local_results['weights']):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_wrong_root_certificate_is_a_clear_error(workers, certs, capsys,
                                                 tmp_path):
  address = workers.address('tls')
  code = binary.run_train(*FAST, f'--workers={address}',
                          f'--worker_tls_root_cert={certs["other"]}',
                          '--worker_timeout=3',
                          f'--output_dir={tmp_path / "run"}')
  assert code == 2
  err = capsys.readouterr().err
  assert err.count('\n') == 1
  assert err.startswith(f'train: error: --workers={address}: worker {address} '
                        'is not reachable within 3 s (UNAVAILABLE: ')
  assert 'CERTIFICATE_VERIFY_FAILED' in err or 'handshake' in err.lower()
  # Plain TCP to a TLS worker fails the same clear way.
  with pytest.raises(runtime.WorkerError, match=f'^worker {address} is not '
                     r'reachable within 2 s \(UNAVAILABLE: '):
    runtime.set_remote_execution_context(address, connect_timeout=2)


def test_client_stateful_algorithm_runs_on_workers(workers, capsys,
                                                   tmp_path, monkeypatch):
  # Client states travel with each client's position in the round
  # (tff_opt/round/client_states.py); tests/test_workers_stateful.py
  # compares them, algorithm by algorithm, with a local run's.
  addresses = f'{workers.address("a")},{workers.address("b")}'
  output_dir = str(tmp_path / 'run')
  recorder = replay.Recorder(monkeypatch)
  with workers.ran_on('a', 'b'):
    code = binary.run_train(*FAST, '--algorithm=scaffold',
                            f'--workers={addresses}',
                            f'--output_dir={output_dir}')
  assert code == 0, capsys.readouterr().err
  rows = _rows(output_dir)
  assert [r['round'] for r in rows] == ['1', '2', '3']
  # The rounds the workers ran are SCAFFOLD's as its builder makes it from
  # the run's optimizers and population N, bit for bit, and not FedAvg's.
  shared = registry.shared_arguments(recorder.hparams)
  scaffold = algorithms.build_scaffold(
      recorder.model_fn, num_clients=recorder.num_clients, **shared)
  assert len(recorder.rounds) == ROUNDS
  for got, want in zip(recorder.replay(scaffold), recorder.recorded_states()):
    replay.assert_same_bits(got, want)
  fed_avg = algorithms.build_fed_opt(recorder.model_fn, **shared)
  state, (datasets, _), want = recorder.rounds[-1]
  start = fed_avg.set_model_weights(fed_avg.initialize(),
                                    scaffold.get_model_weights(state))
  assert replay.max_difference(
      fed_avg.get_model_weights(fed_avg.next(start, datasets).state),
      scaffold.get_model_weights(want)) > 1e-4


def two_dependent_aggregates(value_type, weight_type) -> tff.Computation:
  """A round TFF's multi-worker compiler cannot split: the clients' mean
  broadcast back to them, then a second sum (their dot products with it)."""

  @tff.tensorflow.computation(value_type, value_type)
  def dot(value, mean):
    return tf.add_n([tf.reduce_sum(a * b) for a, b in zip(
        tf.nest.flatten(value), tf.nest.flatten(mean))])

  @tff.federated_computation(tff.FederatedType(value_type, tff.CLIENTS),
                             tff.FederatedType(weight_type, tff.CLIENTS))
  def next_fn(value, weight):
    mean = tff.federated_mean(value, weight)
    return tff.federated_sum(tff.federated_map(
        dot, (value, tff.federated_broadcast(mean))))

  return next_fn


def test_round_that_does_not_split_is_refused_in_one_line():
  # No registered algorithm has such a round any more (FedPTR's cosine is
  # one aggregation); the trainer checks before anything runs.
  from tff_opt.program import execution  # pylint: disable=g-import-not-at-top
  process = types.SimpleNamespace(next=two_dependent_aggregates(
      tff.types.to_type((np.float32, [2])), tff.types.to_type(np.float32)))
  with pytest.raises(execution.RefusedError) as error:
    execution.check_workers_can_run(
        process, workers='127.0.0.1:1', algorithm='fedptr_s')
  assert str(error.value) == (
      '--workers=127.0.0.1:1: --algorithm=fedptr_s cannot run on TFF '
      'workers: one of its aggregates is computed from another aggregate\'s '
      'result in the same round, and TFF 0.87\'s multi-worker context splits '
      'a round at a single aggregation; run it without --workers.')
  execution.check_workers_can_run(process, workers='', algorithm='fedptr_s')


def test_worker_killed_mid_run_then_resume_loses_nothing(
    workers, local_results, capsys, tmp_path, monkeypatch):
  output_dir = str(tmp_path / 'run')
  args = [*FAST, f'--workers={workers.address("a")},{workers.address("b")}',
          '--gpu_memory_growth', f'--output_dir={output_dir}']
  append = training_loop.MetricsLog.append

  def append_then_kill_b_after_round_2(self, row):
    append(self, row)
    if int(row['round']) == 2:
      workers.kill('b')

  monkeypatch.setattr(training_loop.MetricsLog, 'append',
                      append_then_kill_b_after_round_2)
  assert binary.run_train(*args) == 2
  captured = capsys.readouterr()
  if not _HAS_GPU:
    assert ('no GPU found: GPU settings (memory growth, logical GPUs) '
            'ignored.\n') in captured.out
  address = workers.address('b')
  assert captured.err.count('\n') == 1
  assert captured.err.startswith(
      f'train: error: worker {address} stopped answering (UNAVAILABLE: ')
  assert captured.err.endswith(
      f'The results in {output_dir} are intact: run the same command again '
      '(with the worker back) to resume from the last checkpoint.\n')
  before = _rows(output_dir)
  assert [r['round'] for r in before] == ['1', '2']
  assert sorted(os.listdir(os.path.join(output_dir, 'checkpoints'))) == [
      'program_state_1', 'program_state_2']

  monkeypatch.setattr(training_loop.MetricsLog, 'append', append)
  workers.restart('b')
  workers.wait_ready('b')
  assert binary.run_train(*args) == 0
  assert 'Resuming after round 2' in capsys.readouterr().out
  after = _rows(output_dir)
  assert after[:2] == before  # Nothing written is lost.
  expected = local_results['rows']
  assert [r['round'] for r in after] == [r['round'] for r in expected]
  for got, want in zip(after, expected):
    for column in ('train_loss', 'train_accuracy', 'eval_loss',
                   'eval_accuracy'):
      np.testing.assert_allclose(float(got[column]), float(want[column]),
                                 rtol=1e-5, atol=1e-6, err_msg=column)


# `binaries.worker.start_worker_binary` in a process of its own (the worker's
# flags would clash with the trainer's in this one): its internal port is
# taken by a listener with SO_REUSEPORT, as TFF's worker_binary listens, on
# the first `sys.argv[1]` picks.
_START_ON_A_TAKEN_PORT = '''
import os, socket, sys
import portpicker, psutil
from absl import flags
from binaries import worker
from tff_opt.program import worker_env
flags.FLAGS.mark_as_parsed()
taken = socket.socket(socket.AF_INET6)
taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
taken.bind(("::", 0))
taken.listen()
port = taken.getsockname()[1]
picks = [port] * int(sys.argv[1])
try:
  child, channel = worker.start_worker_binary(
      worker.worker_binary_path(), dict(os.environ), max_calls=-1,
      start_timeout=120,
      pick_port=lambda: picks.pop() if picks else portpicker.pick_unused_port())
except worker.UsageError as e:
  print("error:", str(e).replace(str(port), "PORT"))
else:
  (arg,) = [a for a in psutil.Process(child.pid).cmdline()
            if a.startswith("--port=")]
  own = int(arg[len("--port="):])
  print("started:", own != port, worker_env.is_sole_listener(child.pid, own),
        worker_env.is_sole_listener(os.getpid(), port))
  channel.close()
  child.kill()
  child.wait()
print("children:", len(psutil.Process().children()))
'''


@pytest.mark.parametrize('taken_picks, expected', [
    (1, 'started: True True True\nchildren: 0\n'),
    (3, "error: TFF's worker_binary found its internal port taken by another "
        'process 3 times (the last: PORT).\nchildren: 0\n'),
], ids=['taken_once', 'taken_every_time'])
def test_worker_starts_its_cpp_worker_on_a_port_nobody_else_holds(
    taken_picks, expected):
  result = subprocess.run(
      [sys.executable, '-c', _START_ON_A_TAKEN_PORT, str(taken_picks)],
      cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
  assert result.stdout == expected, result.stderr[-2000:]


# `start_worker_binary` with a stand-in for TFF's worker_binary that exits,
# or never serves, as a process of its own (as above).
_START_A_FAKE = '''
import os, sys
import psutil
from absl import flags
from binaries import worker
flags.FLAGS.mark_as_parsed()
try:
  worker.start_worker_binary(sys.argv[1], dict(os.environ), max_calls=-1,
                             start_timeout=float(sys.argv[2]))
except worker.UsageError as e:
  print("error:", e)
print("children:", len(psutil.Process().children()))
'''


@pytest.mark.parametrize('script, timeout, expected', [
    ('exit 3', 60, "error: TFF's worker_binary exited with code 3 while "
     'starting.\nchildren: 0\n'),
    ('exec sleep 60', 1.5, "error: TFF's worker_binary did not start within "
     '--start_timeout=1.5 s.\nchildren: 0\n'),
], ids=['exits', 'never_serves'])
def test_a_cpp_worker_that_does_not_serve_is_a_clear_error(
    tmp_path, script, timeout, expected):
  fake = tmp_path / 'worker_binary'
  fake.write_text(f'#!/bin/sh\n{script}\n')
  fake.chmod(0o755)
  result = subprocess.run(
      [sys.executable, '-c', _START_A_FAKE, str(fake), str(timeout)],
      cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
  assert result.stdout == expected, result.stderr[-2000:]
