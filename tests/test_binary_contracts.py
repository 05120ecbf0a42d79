"""What every binary keeps: quiet workers, help and bad flags, no side
effects, pointers to the one command that builds the data."""

import os
import subprocess
import sys
import time

import pytest

from binaries import claims
from binaries import report
from tasks import data_errors
from tasks import shakespeare
from tff_opt.program import stderr_filter

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# As TensorFlow prints it while TFF compiles a round for its workers.
_FETCH_NODE = (b'2026-12-02 11:12:05.897170: E tensorflow/core/grappler/'
               b'grappler_item_builder.cc:435] Failed to detect the fetch '
               b'node(s), skipping this input\n')

# Writes the fetch-node line and a real error to fd 2 inside the filter.
_WRITE = '''
import os
from tff_opt.program import stderr_filter
with stderr_filter.filtered():
  os.write(2, {line!r})
  os.write(2, b'E real error\\n')
'''


@pytest.mark.parametrize('show', [False, True])
def test_workers_fetch_node_lines_are_filtered_unless_asked(show):
  env = dict(os.environ)
  env.pop('TFF_OPT_SHOW_TF_NOISE', None)
  if show:
    env['TFF_OPT_SHOW_TF_NOISE'] = '1'
  err = subprocess.run(
      [sys.executable, '-c', _WRITE.format(line=_FETCH_NODE)], cwd=REPO,
      env=env, capture_output=True, check=True).stderr
  assert err == (_FETCH_NODE if show else b'') + b'E real error\n'
  # Another grappler error is not noise.
  assert not stderr_filter.NOISE.search(
      b'E tensorflow/core/grappler/grappler_item_builder.cc:435] Failed to '
      b'build the graph')


# Each command line parsed as `python -m binaries.worker` parses it, in one
# process (its flags cannot share one with binaries.train's).
_WORKER_FLAGS = '''
import sys
from binaries import worker
for argv in {cases!r}:
  try:
    worker.parse_flags_or_exit(['worker', *argv])
    code = 0
  except SystemExit as e:
    code = e.code
  worker.FLAGS.unparse_flags()
  print('exit', code, flush=True)
'''


def test_worker_help_exits_0_and_a_bad_flag_is_one_line_exit_2():
  cases = [['--help'], ['--helpfull'], ['--port=abc'], ['--port=-1'],
           ['--prot=8000']]
  done = subprocess.run(
      [sys.executable, '-c', _WORKER_FLAGS.format(cases=cases)], cwd=REPO,
      capture_output=True, text=True, check=True, timeout=240)
  codes = [line for line in done.stdout.splitlines()
           if line.startswith('exit ')]
  assert codes == ['exit 0', 'exit 0', 'exit 2', 'exit 2', 'exit 2']
  assert '--port: Port to serve' in done.stdout  # The help was printed.
  expected = 'expected an integer in the range [1, 65535].'
  assert done.stderr.splitlines()[-3:] == [
      f'worker: error: --port=abc: {expected}',
      f'worker: error: --port=-1: {expected}',
      'worker: error: --prot: no such flag (python -m binaries.worker '
      '--helpfull lists every flag). Did you mean --port?']


def test_report_without_output_writes_no_file(tmp_path, monkeypatch, capsys):
  run = tmp_path / 'run'
  run.mkdir()
  (run / 'metrics.csv').write_text(
      'round,train_loss,eval_accuracy\n1,2.0,0.5\n2,1.0,0.7\n')
  monkeypatch.chdir(tmp_path)
  report.main(['report', str(run)])
  report.FLAGS.unparse_flags()
  assert sorted(os.listdir(tmp_path)) == ['run']
  assert sorted(os.listdir(run)) == ['metrics.csv']
  assert capsys.readouterr().out.endswith(
      '\nplot: none (--output=FILE.png draws one)\n')


def test_claims_report_only_writes_only_to_report_dir(tmp_path, capsys):
  out, report_dir = tmp_path / 'claims', tmp_path / 'report'
  out.mkdir()
  (out / 'claims.md').write_text('tracked\n')
  args = ['claims', '--claims=fedadc', f'--out_dir={out}', '--seeds=2',
          '--report_only']
  claims.main(args, launcher=None, load_data=False)
  assert os.listdir(out) == ['claims.md']
  assert (out / 'claims.md').read_text() == 'tracked\n'
  printed = capsys.readouterr().out
  assert printed.startswith('# The papers\' claims on real data')
  claims.main(args + [f'--report_dir={report_dir}'], launcher=None,
              load_data=False)
  claims.FLAGS.unparse_flags()
  assert (report_dir / 'claims.md').read_text() == printed.rstrip('\n') + '\n'
  assert (out / 'claims.md').read_text() == 'tracked\n'


def test_missing_shakespeare_names_the_make_target(tmp_path):
  with pytest.raises(data_errors.MissingDataError) as e:
    shakespeare.load_shakespeare(str(tmp_path), use_synthetic_data=False)
  assert (f'Run `make data-shakespeare DATA={tmp_path}` in the repository '
          'root') in str(e.value)
  assert shakespeare.instructions(None).startswith(
      'Run `make data-shakespeare` in the repository root')


@pytest.mark.parametrize('statement', [
    'import tasks', 'from binaries import claims',
    'from tff_opt.algorithms import fed_prox'])
def test_importing_ends_without_a_traceback(statement):
  err = subprocess.run([sys.executable, '-c', statement], cwd=REPO,
                       capture_output=True, text=True, check=True,
                       timeout=240).stderr
  assert 'Exception ignored' not in err and 'Traceback' not in err, err


def test_a_stop_raised_inside_a_destructor_is_raised_again_after_it():
  # SIGTERM handled while a `__del__` runs: Python swallows what the handler
  # raised there ("Exception ignored"); the signal is sent again and its
  # handler stops the code that follows, here the wait.
  import signal  # pylint: disable=g-import-not-at-top
  import binaries  # pylint: disable=g-import-not-at-top
  ran_on = []

  class SignalledWhileDeleted:

    def __del__(self):
      signal.raise_signal(signal.SIGTERM)
      ran_on.append('after the signal, inside __del__')

  previous = binaries.stop_on_signals()
  try:
    with pytest.raises(binaries.Terminated) as stopped:
      SignalledWhileDeleted()
      ran_on.append('after __del__')
      for _ in range(500):
        time.sleep(0.01)
      ran_on.append('after the wait')
  finally:
    binaries.restore_signals(previous)
  assert stopped.value.signum == signal.SIGTERM
  assert ran_on == ['after __del__']


def test_sighup_stops_like_sigterm_with_status_129(capsys):
  # The handlers the binaries install, in this process: SIGHUP (a closed
  # terminal) raises `Terminated` in the main thread, and the line it ends in
  # names the signal and exits 128 + 1.
  import signal  # pylint: disable=g-import-not-at-top
  import binaries  # pylint: disable=g-import-not-at-top
  # The harness may run under nohup (SIGHUP ignored): start from the default.
  harness = signal.signal(signal.SIGHUP, signal.SIG_DFL)
  try:
    previous = binaries.stop_on_signals()
    try:
      assert set(previous) == {signal.SIGTERM, signal.SIGHUP}
      with pytest.raises(binaries.Terminated) as stopped:
        os.kill(os.getpid(), signal.SIGHUP)
        signal.sigtimedwait([], 0)  # Lets the handler run if not yet.
    finally:
      binaries.restore_signals(previous)
    # Under nohup SIGHUP stays ignored: only SIGTERM is taken over.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    previous = binaries.stop_on_signals()
    binaries.restore_signals(previous)
    assert set(previous) == {signal.SIGTERM}
  finally:
    signal.signal(signal.SIGHUP, harness)
  assert stopped.value.signum == signal.SIGHUP
  with pytest.raises(SystemExit) as exited:
    binaries.exit_interrupted('train', stopped.value,
                              argv=['--rounds=3', '--output_dir=d'],
                              done='round 2 checkpointed in d')
  binaries._interrupted.clear()  # pylint: disable=protected-access
  assert exited.value.code == 129
  assert capsys.readouterr().err == (
      'train: stopped by SIGHUP (round 2 checkpointed in d); resume with: '
      'python -m binaries.train --rounds=3 --output_dir=d\n')
