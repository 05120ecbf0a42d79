"""Ctrl-C and SIGTERM, to a binary alone or to its process group.

A terminal's Ctrl-C reaches the whole process group (TFF's worker
included), a scheduler's SIGTERM the process or its group. Every way ends
in one line naming the command that resumes, exit 130 or 143, no
traceback, no process left, and a checkpoint of the last round logged.
Real subprocesses (a signal is what is tested), on `digits`, a few rounds.
"""

import csv
import os
import signal
import socket
import subprocess
import sys
import time

import psutil

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Rounds long enough (20 clients) that a signal lands inside one.
_TRAIN = [sys.executable, '-m', 'binaries.train', '--task=digits',
          '--rounds=40', '--clients_per_round=20', '--eval_every=100',
          '--checkpoint_every=100']
_WAIT = 240  # Seconds any wait may take on a loaded machine.


def _start(command, cwd=REPO):
  """`command` in a session (process group) of its own, output piped."""
  return subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True,
                          start_new_session=True)


def _wait_for_round(process, round_num):
  """Reads stdout up to round `round_num`'s line; the lines read."""
  lines = []
  deadline = time.monotonic() + _WAIT
  while time.monotonic() < deadline:
    line = process.stdout.readline()
    assert line, ''.join(lines) + process.stderr.read()
    lines.append(line)
    if line.startswith('round ') and f' {round_num}/' in line:
      return lines
  raise AssertionError(f'no round {round_num} in {_WAIT} s: {lines}')


def _descendants(pid):
  try:
    return psutil.Process(pid).children(recursive=True)
  except psutil.Error:
    return []


def _all_gone(processes, seconds=15):
  _, alive = psutil.wait_procs(processes, timeout=seconds)
  return [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def _last_logged_round(output_dir):
  with open(os.path.join(output_dir, 'metrics.csv'), newline='') as f:
    return int(list(csv.DictReader(f))[-1]['round'])


def _checkpoints(output_dir):
  return sorted(int(n.rsplit('_', 1)[1]) for n in os.listdir(
      os.path.join(output_dir, 'checkpoints')) if n[-1].isdigit())


def _stop(process, sig, *, group):
  if group:
    os.killpg(process.pid, sig)
  else:
    process.send_signal(sig)
  try:
    out, err = process.communicate(timeout=_WAIT)
  finally:
    if process.poll() is None:
      os.killpg(process.pid, signal.SIGKILL)
  return out, err


def _check_one_line(err, *, how, output_dir, status, returncode):
  lines = [line for line in err.splitlines() if line.strip()]
  assert returncode == status, err
  assert len(lines) == 1, err
  saved = _last_logged_round(output_dir)
  assert lines[0] == (
      f'train: {how} (round {saved} checkpointed in {output_dir}); resume '
      'with: python -m binaries.train ' + ' '.join(_TRAIN[3:]) +
      f' --output_dir={output_dir}')
  # Nothing logged is lost: the last round logged is checkpointed.
  assert _checkpoints(output_dir)[-1] == saved


def test_ctrl_c_to_the_group_and_sigterm_to_the_trainer(tmp_path):
  """A terminal's Ctrl-C (the worker gets it too) and a SIGTERM to the
  trainer alone, each inside a round: one line, no traceback, no worker
  left, the last logged round checkpointed (every 100 otherwise)."""
  runs = {}
  for name, sig, group in (('ctrl_c', signal.SIGINT, True),
                           ('sigterm', signal.SIGTERM, False)):
    output_dir = str(tmp_path / name)
    process = _start(_TRAIN + [f'--output_dir={output_dir}'])
    _wait_for_round(process, 2)
    children = _descendants(process.pid)
    assert any('worker_binary' in ' '.join(c.cmdline()) for c in children)
    runs[name] = (output_dir, _stop(process, sig, group=group),
                  process.returncode, children)
  output_dir, (_, err), code, children = runs['ctrl_c']
  _check_one_line(err, how='interrupted', output_dir=output_dir, status=130,
                  returncode=code)
  assert not _all_gone(children)
  output_dir, (_, err), code, children = runs['sigterm']
  _check_one_line(err, how='stopped by SIGTERM', output_dir=output_dir,
                  status=143, returncode=code)
  assert not _all_gone(children)


def _free_port():
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def test_sigterm_to_a_group_with_a_worker_is_one_line(tmp_path):
  """A scheduler's SIGTERM to a job's group: the trainer and its TFF
  worker (`binaries.worker`) both get it. No gRPC log line, no traceback,
  no TensorFlow fetch-node line from compiling the round for workers."""
  port = _free_port()
  output_dir = str(tmp_path / 'run')
  worker_log = tmp_path / 'worker.log'
  command = (f'{sys.executable} -m binaries.worker --port={port} '
             f'2>{worker_log} & exec ' + ' '.join(_TRAIN) +
             f' --output_dir={output_dir} --workers=127.0.0.1:{port}')
  process = _start(['bash', '-c', command])
  _wait_for_round(process, 2)
  children = _descendants(process.pid)
  _, err = _stop(process, signal.SIGTERM, group=True)
  lines = [line for line in err.splitlines() if line.strip()]
  assert process.returncode == 143, err
  assert len(lines) == 1, err
  saved = _last_logged_round(output_dir)
  assert lines[0].startswith(
      f'train: stopped by SIGTERM (round {saved} checkpointed in '
      f'{output_dir}); resume with: python -m binaries.train'), err
  assert _checkpoints(output_dir)[-1] == saved
  assert not _all_gone(children)
  assert worker_log.read_text() == ''


# A sweep over one point whose run is a stand-in for binaries.train that
# exits 130 on SIGINT (as train does), under the binary's own entry point.
_SWEEP = '''
import os, sys
import binaries
from binaries import sweep
sleeper = ('import os, signal, sys, time; '
           'signal.signal(signal.SIGINT, lambda *a: sys.exit(130)); '
           'print(os.getpid(), flush=True); time.sleep(120)')
sweep.train_command = lambda argv: [sys.executable, '-c', sleeper]
binaries.run_main('sweep', sweep.main, sys.argv[1:])
'''


def test_sweep_stops_on_sigterm_and_ctrl_c_to_its_group(tmp_path):
  """`binaries.run_main`, the entry of sweep, reproduce and claims: the
  runs are stopped, one line, 143 or 130, nothing else on stderr."""
  for sig, status, how in ((signal.SIGTERM, 143, 'stopped by SIGTERM'),
                           (signal.SIGINT, 130, 'interrupted')):
    sweep_dir = tmp_path / how.replace(' ', '_')
    args = ['sweep', '--task=digits', '--server_opt=yogi',
            '--client_lrs=0.1', '--server_lrs=1', '--taus=0.001',
            '--rounds=2', f'--sweep_dir={sweep_dir}']
    process = _start([sys.executable, '-c', _SWEEP, *args])
    log = sweep_dir / 'logs'
    deadline = time.monotonic() + _WAIT
    while not (log.is_dir() and any(
        f.read_text().strip() for f in log.iterdir())):
      assert time.monotonic() < deadline and process.poll() is None
      time.sleep(0.1)
    run = psutil.Process(int(next(
        f.read_text() for f in log.iterdir() if f.read_text().strip())))
    _, err = _stop(process, sig, group=True)
    assert process.returncode == status, err
    assert err == (f'sweep: {how}; resume with: python -m binaries.sweep '
                   + ' '.join(args[1:]) + '\n')
    assert not _all_gone([run])
