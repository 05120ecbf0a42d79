"""Sweeps on fabricated runs: the paper's selection rule, resume, the grid.

No training here: every `metrics.csv` is written by the test, and the
sweep's launcher is replaced by one that records what would be launched
(and fabricates the run it stands for).
"""

import csv
import math
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from binaries import sweep
from tests import binary
from tff_opt.program import analysis
from tff_opt.program import output_lock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from tasks import paper_settings

ROUNDS = 150


def write_run(output_dir, train_losses, *, eval_every=10, accuracy=None):
  """Writes a `metrics.csv` like the training loop's.

  Round r has `train_losses[r - 1]`; every `eval_every` rounds (and the
  last) also `eval_accuracy = accuracy(r)`; other rounds leave it empty.
  """
  os.makedirs(output_dir, exist_ok=True)
  accuracy = accuracy or (lambda r: r / 1000)
  rounds = len(train_losses)
  with open(os.path.join(output_dir, 'metrics.csv'), 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['round', 'train_loss', 'train_accuracy', 'eval_loss',
                     'eval_accuracy', 'round_seconds'])
    for r, loss in enumerate(train_losses, start=1):
      evaluated = r % eval_every == 0 or r == rounds
      writer.writerow([r, loss, 0.5, 1.0 if evaluated else '',
                       accuracy(r) if evaluated else '', 0.1])


def drop_rounds(output_dir, rounds):
  """Removes the rows of `rounds` (ints) from `output_dir`'s metrics.csv."""
  path = os.path.join(output_dir, 'metrics.csv')
  with open(path, newline='') as f:
    kept = [line for line in f.read().splitlines(keepends=True)
            if line.split(',')[0] not in {str(r) for r in rounds}]
  with open(path, 'w', newline='') as f:
    f.writelines(kept)


def _run_main(args, launcher):
  try:
    sweep.main(['sweep', *args], launcher=launcher)
  except SystemExit as e:
    return e.code
  return 0


def _summary(sweep_dir):
  with open(os.path.join(sweep_dir, 'summary.csv')) as f:
    return list(csv.DictReader(f))


def _output_dir(argv):
  return next(a for a in argv if a.startswith('--output_dir=')).split('=',
                                                                     1)[1]


def _never(argv, log_path):
  raise AssertionError(f'nothing should be launched, got {argv}')


# --- the sweep binary on fabricated points -----------------------------------


def test_lowest_last_100_round_loss_wins_not_lowest_overall(tmp_path,
                                                            capsys):
  sweep_dir = str(tmp_path)
  points = sweep.explicit_grid([0.1, 0.01], [1.0])
  # clr=0.1: poor start, best last 100 rounds (0.30); overall mean 0.53.
  write_run(os.path.join(sweep_dir, points[0].name),
            [1.0] * 50 + [0.3] * 100, accuracy=lambda r: 0.8)
  # clr=0.01: best overall mean (0.35) and best last round (0.1), but a
  # worse last-100 mean (0.35).
  write_run(os.path.join(sweep_dir, points[1].name),
            [0.35] * 149 + [0.1], accuracy=lambda r: 0.6)
  assert _run_main(['--task=digits', '--server_opt=sgd',
                    '--client_lrs=0.1,0.01', '--server_lrs=1',
                    f'--rounds={ROUNDS}', f'--sweep_dir={sweep_dir}'],
                   _never) == 0
  summary = _summary(sweep_dir)
  assert [(r['client_lr'], r['selected']) for r in summary] == [
      ('0.1', '1'), ('0.01', '0')]
  assert float(summary[0]['train_loss_last100']) == pytest.approx(0.3)
  assert float(summary[1]['train_loss_last100']) == pytest.approx(
      (99 * 0.35 + 0.1) / 100)
  assert float(summary[0]['eval_accuracy_last100']) == pytest.approx(0.8)
  assert summary[0]['status'] == 'finished'
  assert summary[0]['server_tau'] == ''
  out = capsys.readouterr().out
  assert 'clr=0.1_slr=1: finished before, skipped' in out
  assert ('selected: client_lr=0.1 server_lr=1 (mean train_loss of the '
          'last 100 rounds 0.3000)') in out
  assert os.path.getsize(os.path.join(sweep_dir, 'heatmap.png')) > 1000


def test_dry_run_says_where_each_run_stands_and_launches_nothing(tmp_path,
                                                                 capsys):
  sweep_dir = str(tmp_path)
  finished, begun, _ = sweep.explicit_grid([0.1, 0.01, 0.001], [1.0])
  write_run(os.path.join(sweep_dir, finished.name), [0.5] * 20)
  write_run(os.path.join(sweep_dir, begun.name), [0.5] * 5)  # 0.1 s each.
  assert _run_main(['--task=digits', '--server_opt=sgd',
                    '--client_lrs=0.1,0.01,0.001', '--server_lrs=1',
                    '--rounds=20', f'--sweep_dir={sweep_dir}', '--dry_run'],
                   _never) == 0
  lines = capsys.readouterr().out.splitlines()
  assert [line.split('  # ')[1] for line in lines[1:4]] == [
      'finished, would be skipped',
      '5 rounds logged, 15 left (~2 s at the pace of its last rounds)',
      'not begun']
  assert all(line.startswith('python -m binaries.train --task=digits ')
             for line in lines[1:4])
  assert lines[4:] == [
      'sweep: 1 finished, 1 begun (~2 s of run time left by their own '
      'pace), 1 not begun']
  assert not os.path.exists(os.path.join(sweep_dir, 'summary.csv'))


@pytest.mark.parametrize('seconds, text', [
    (0.0, '0 s'), (40.4, '40 s'), (59.7, '1 min'), (1500.0, '25 min'),
    (3590.0, '1.0 h'), (11_160.0, '3.1 h'), (35_990.0, '10 h'),
    (187_200.0, '52 h')])
def test_describe_seconds_to_two_figures(seconds, text):
  assert sweep.describe_seconds(seconds) == text


def test_describe_progress_says_at_most_for_a_run_that_may_stop_early():
  assert sweep.describe_progress(analysis.Progress(
      logged=23, left=17, stops_early=True, seconds_left=3600.0)) == (
          '23 rounds logged, at most 17 left (~1.0 h at the pace of its '
          'last rounds)')
  assert sweep.describe_progress(analysis.Progress(
      logged=3, left=2, stops_early=False, seconds_left=None)) == (
          '3 rounds logged, 2 left')


def test_resumed_sweep_launches_only_unfinished_points(tmp_path):
  sweep_dir = str(tmp_path)
  points = sweep.explicit_grid([0.1, 0.01], [1.0, 0.1], [1e-3])
  finished, half, _, _ = points
  write_run(os.path.join(sweep_dir, finished.name), [0.5] * 20)
  write_run(os.path.join(sweep_dir, half.name), [0.5] * 10)
  launched = []

  def record(argv, log_path):
    output_dir = _output_dir(argv)
    launched.append((argv, log_path))
    write_run(output_dir, [0.9] * 20)  # What the real run would leave.
    return 0

  assert _run_main([
      '--task=digits', '--server_opt=yogi', '--client_lrs=0.1,0.01',
      '--server_lrs=1,0.1', '--taus=0.001', '--rounds=20',
      f'--sweep_dir={sweep_dir}', '--train_flag=--clients_per_round=5'
  ], record) == 0
  assert sorted(os.path.basename(log) for _, log in launched) == sorted(
      p.name + '.log' for p in points[1:])
  argv_of = {os.path.basename(log)[:-4]: argv for argv, log in launched}
  assert argv_of[half.name] == [
      '--task=digits', '--algorithm=fedopt', '--server_opt=yogi',
      '--client_lr=0.1', '--server_lr=0.1', '--server_tau=0.001',
      '--rounds=20', f'--output_dir={os.path.join(sweep_dir, half.name)}',
      '--clients_per_round=5'
  ]
  # The finished point kept its own numbers, and wins.
  summary = _summary(sweep_dir)
  assert summary[0]['output_dir'] == os.path.join(sweep_dir, finished.name)
  assert summary[0]['selected'] == '1'
  assert {r['status'] for r in summary} == {'finished'}

  # A second run of the same sweep launches nothing.
  assert _run_main([
      '--task=digits', '--server_opt=yogi', '--client_lrs=0.1,0.01',
      '--server_lrs=1,0.1', '--taus=0.001', '--rounds=20',
      f'--sweep_dir={sweep_dir}', '--train_flag=--clients_per_round=5'
  ], _never) == 0


@pytest.mark.parametrize('change, what', [
    (['--server_opt=adam', '--train_flag=--clients_per_round=5'],
     "server_opt 'yogi' there, 'adam' now"),
    (['--server_opt=yogi'], "train_flags ['--clients_per_round=5'] there, "
     '[] now'),
    (['--server_opt=yogi', '--algorithm=fedprox',
      '--train_flag=--clients_per_round=5'],
     "algorithm 'fedopt' there, 'fedprox' now"),
])
def test_sweep_dir_of_another_sweep_is_refused(tmp_path, capsys, change,
                                               what):
  """A point's identity is all of its settings."""
  sweep_dir = str(tmp_path)
  grid = ['--task=digits', '--client_lrs=0.1', '--server_lrs=1',
          '--taus=0.001', '--rounds=20', f'--sweep_dir={sweep_dir}']

  def record(argv, log_path):
    del log_path
    write_run(_output_dir(argv), [0.5] * 20)
    return 0

  assert _run_main([*grid, '--server_opt=yogi',
                    '--train_flag=--clients_per_round=5'], record) == 0
  before = _summary(sweep_dir)
  capsys.readouterr()
  assert _run_main([*grid, *change], _never) == 2
  assert capsys.readouterr().err == (
      f'sweep: error: --sweep_dir={sweep_dir} holds a sweep with other '
      f'settings ({what}); use another --sweep_dir (nothing was changed).\n')
  assert _summary(sweep_dir) == before


def test_failed_and_diverged_points(tmp_path, capsys):
  sweep_dir = str(tmp_path)
  points = sweep.explicit_grid([0.1, 0.01, 0.001], [1.0])
  diverged = [0.1] * 19 + [math.inf]
  write_run(os.path.join(sweep_dir, points[0].name), diverged)
  write_run(os.path.join(sweep_dir, points[1].name), [2.0] * 20)

  def fail(argv, log_path):
    del argv
    with open(log_path, 'a') as f:
      f.write('train: error: boom\n')
    return 1

  assert _run_main(['--task=digits', '--server_opt=sgd',
                    '--client_lrs=0.1,0.01,0.001', '--server_lrs=1',
                    '--rounds=20', f'--sweep_dir={sweep_dir}'], fail) == 2
  summary = _summary(sweep_dir)
  assert [(r['client_lr'], r['status'], r['selected']) for r in summary] == [
      ('0.01', 'finished', '1'), ('0.1', 'finished', '0'),
      ('0.001', 'failed', '0')]
  assert summary[1]['train_loss_last100'] == 'inf'
  err = capsys.readouterr().err
  assert err == (f'sweep: error: 1 points failed: clr=0.001_slr=1; see '
                 f'{os.path.join(sweep_dir, "logs")}.\n')


def test_a_run_another_process_is_writing_is_left_to_it(tmp_path):
  """Two sweeps (or claims) sharing runs: one runs each, none twice."""
  busy, free = str(tmp_path / 'busy'), str(tmp_path / 'free')
  os.makedirs(busy)
  output_lock.acquire(busy)  # As a trainer of another process holds it.
  launched, lines = [], []

  def launcher(argv, log_path):
    launched.append(argv[0])
    write_run(argv[0], [1.0] * 3)
    return 0

  try:
    outcome = sweep.run_jobs(
        [sweep.Job('busy', [busy], busy, 3), sweep.Job('free', [free], free,
                                                       3)],
        logs_dir=str(tmp_path / 'logs'), launcher=launcher, log=lines.append)
  finally:
    output_lock.release_all()
  assert outcome == {'busy': 'elsewhere', 'free': 'finished'}
  assert launched == [free]
  assert lines[0] == (f'busy: being run by another process (pid '
                      f'{os.getpid()}), skipped')


def test_a_run_ending_well_with_unlogged_rounds_fails_and_names_them(
    tmp_path):
  """Exit 0 is not enough: a run can exit 0 with rounds missing."""
  out = str(tmp_path / 'run')
  lines = []

  def launcher(argv, log_path):
    del argv, log_path
    write_run(out, [1.0] * 9)
    drop_rounds(out, (4, 5, 6, 8))
    return 0

  outcome = sweep.run_jobs([sweep.Job('run', (out,), out, 10)],
                           logs_dir=str(tmp_path / 'logs'), launcher=launcher,
                           log=lines.append)
  assert outcome == {'run': 'failed'}
  log_path = os.path.join(str(tmp_path / 'logs'), 'run.log')
  assert lines[-1] == ('run: FAILED (exit 0, but its metrics.csv lacks '
                       f'round(s) 4-6, 8, 10; see {log_path})')


def test_points_run_in_parallel_up_to_the_limit(tmp_path):
  points = sweep.explicit_grid([0.1, 0.01, 0.001, 0.0001], [1.0])
  barrier = threading.Barrier(2, timeout=60)
  running, peak = [0], [0]
  lock = threading.Lock()

  def launcher(argv, log_path):
    del log_path
    with lock:
      running[0] += 1
      peak[0] = max(peak[0], running[0])
    barrier.wait()  # Fails (BrokenBarrierError) unless two run at once.
    write_run(_output_dir(argv), [1.0] * 3)
    with lock:
      running[0] -= 1
    return 0

  outcome = sweep.run_sweep(points, sweep_dir=str(tmp_path), task='digits',
                            algorithm='fedopt', server_opt='sgd', rounds=3,
                            parallel=2, launcher=launcher, log=lambda _: None)
  assert outcome == {p: 'finished' for p in points}
  assert peak[0] == 2


def test_heatmap_values_are_last_window_means_at_selected_tau(tmp_path):
  sweep_dir = str(tmp_path)
  points = sweep.explicit_grid([0.1, 0.01], [1.0, 0.1], [1e-3, 1e-2])
  for i, point in enumerate(points):
    # tau=1e-2 at clr=0.01, slr=1 has the lowest loss.
    loss = 0.1 if (point.client_lr, point.server_lr, point.server_tau) == (
        0.01, 1.0, 1e-2) else 1.0 + i
    if point == sweep.GridPoint(0.1, 0.1, 1e-2):
      write_run(os.path.join(sweep_dir, point.name), [loss] * 5)  # Unfinished
      continue
    write_run(os.path.join(sweep_dir, point.name), [loss] * 10, eval_every=5,
              accuracy=lambda r, i=i: (i + r) / 100)
  results = sweep.collect(points, sweep_dir=sweep_dir, rounds=10, window=100)
  best = sweep.select(results)
  assert best.point == sweep.GridPoint(0.01, 1.0, 1e-2)
  values = sweep.plot_heatmap(results, best,
                              os.path.join(sweep_dir, 'h.png'))
  # A 100-round window on a 10-round run evaluated every 5: what it is.
  assert sweep.describe_window(best, 100) == (
      'the last 10 rounds (2 evaluations)')
  short = sweep.select(sweep.collect(points, sweep_dir=sweep_dir, rounds=10,
                                     window=5))
  assert sweep.describe_window(short, 5) == (
      'the last 5 rounds (1 evaluation)')
  # [server lr 0.1, 1] x [client lr 0.01, 0.1], tau = 1e-2, in percent:
  # the mean of rounds 5 and 10 of (i + r) / 100.
  index = {p: i for i, p in enumerate(points)}
  mean = lambda p: 100 * ((index[p] + 5) + (index[p] + 10)) / 2 / 100
  np.testing.assert_allclose(values, [
      [mean(sweep.GridPoint(0.01, 0.1, 1e-2)), np.nan],
      [mean(sweep.GridPoint(0.01, 1.0, 1e-2)),
       mean(sweep.GridPoint(0.1, 1.0, 1e-2))],
  ])


# --- grids -------------------------------------------------------------------


def test_paper_grid_for_adaptive_and_sgd_servers():
  grid = sweep.paper_grid('digits', 'yogi')
  assert len(grid) == 8 * 9 * 5
  assert sorted({round(math.log10(p.client_lr), 6) for p in grid}) == [
      -3, -2.5, -2, -1.5, -1, -0.5, 0, 0.5]
  assert sorted({round(math.log10(p.server_lr), 6) for p in grid}) == [
      -3, -2.5, -2, -1.5, -1, -0.5, 0, 0.5, 1]
  assert sorted({p.server_tau for p in grid}) == [1e-5, 1e-4, 1e-3, 1e-2,
                                                  1e-1]
  assert {p.server_tau for p in sweep.paper_grid('cifar10', 'sgdm')} == {None}
  ae = sweep.paper_grid('emnist_ae', 'sgd')
  assert (min(p.client_lr for p in ae), max(p.client_lr for p in ae)) == (
      pytest.approx(10**-1.5), pytest.approx(100.0))
  with pytest.raises(ValueError, match=r"^No paper grid for task 'mnist'"):
    sweep.paper_grid('mnist', 'sgd')


@pytest.mark.parametrize('task', sorted(paper_settings.PAPER_LRS))
def test_paper_grid_holds_every_best_point_of_table_8_and_9(task):
  """The recalled grids must contain the paper's own best points."""
  for server_opt, (log_client, log_server) in paper_settings.PAPER_LRS[
      task].items():
    grid = sweep.paper_grid(task, server_opt)
    logs = {(round(math.log10(p.client_lr), 6),
             round(math.log10(p.server_lr), 6)) for p in grid}
    assert (log_client, log_server) in logs, (task, server_opt)
  for server_opt, log_tau in paper_settings.PAPER_LOG10_TAU[task].items():
    taus = {p.server_tau for p in sweep.paper_grid(task, server_opt)}
    assert any(math.isclose(t, 10.0**log_tau) for t in taus), (task,
                                                                server_opt)


@pytest.mark.parametrize('args, message', [
    (['--grid=paper', '--client_lrs=0.1'],
     '--grid=paper sets the learning rates and taus; drop '
     '--client_lrs/--server_lrs/--taus, or drop --grid.'),
    (['--client_lrs=0.1'],
     'give --grid=paper, or both --client_lrs and --server_lrs.'),
    (['--client_lrs=0.1,x', '--server_lrs=1'],
     "--client_lrs=0.1,x: could not convert string to float: 'x'."),
    (['--client_lrs=0.1,0.1', '--server_lrs=1'],
     'client_lrs has a repeated value: [0.1, 0.1].'),
    (['--client_lrs=0.1', '--server_lrs=-1'],
     'server_lrs must hold positive numbers, got -1.0.'),
    (['--client_lrs=0.1,0.10001', '--server_lrs=1'],
     'values closer than 3 significant digits share a point directory '
     "name: ['clr=0.1_slr=1', 'clr=0.1_slr=1']."),
    (['--grid=paper', '--train_flag=--client_lr=3'],
     '--train_flag=--client_lr=3: the sweep sets --client_lr itself; use the '
     "sweep's own flag."),
    (['--grid=paper', '--train_flag=--stop_at=eval_accuracy:0.9'],
     '--train_flag=--stop_at=eval_accuracy:0.9: the sweep selects by the '
     "training loss of each run's last rounds, so every run goes to "
     '--rounds.'),
    (['--grid=paper', '--parallel=0'],
     'flag --parallel=0: 0 is not a positive integer'),
])
def test_usage_errors(tmp_path, capsys, args, message):
  assert _run_main(['--rounds=3', f'--sweep_dir={tmp_path}', *args],
                   _never) == 2
  assert capsys.readouterr().err == f'sweep: error: {message}\n'


def test_sweep_dir_is_required(capsys):
  assert _run_main(['--grid=paper'], _never) == 2
  assert capsys.readouterr().err == 'sweep: error: --sweep_dir is required.\n'


def test_ctrl_c_exits_130_with_one_line(tmp_path, capsys):
  # One line, no KeyboardInterrupt traceback.
  def interrupted(argv, log_path):
    raise KeyboardInterrupt

  assert _run_main([
      '--task=digits', '--server_opt=yogi', '--client_lrs=0.1',
      '--server_lrs=1', '--taus=0.001', '--rounds=20',
      f'--sweep_dir={tmp_path}'
  ], interrupted) == 130
  assert capsys.readouterr().err == (
      'sweep: interrupted; resume with: python -m binaries.sweep '
      '--task=digits --server_opt=yogi --client_lrs=0.1 --server_lrs=1 '
      f'--taus=0.001 --rounds=20 --sweep_dir={tmp_path}\n')


# --- Stopping: a sweep or claims process takes its runs down with it --------

# A stand-in for binaries.train: writes its pid, then sleeps; SIGINT (what
# stop_running sends) makes it exit 130, as binaries.train does.
_SLEEPER = ('import os, signal, sys, time; '
            'signal.signal(signal.SIGINT, lambda *a: sys.exit(130)); '
            'open(sys.argv[1], "w").write(str(os.getpid())); time.sleep(120)')
_RUN_JOBS = '''
import sys
sys.path.insert(0, {root!r})
from binaries import sweep
sweep.train_command = lambda argv: [sys.executable, '-c', {sleeper!r}, *argv]
try:
  sweep.run_jobs([sweep.Job(name, [pid], pid + '.out', 1) for name, pid in
                  (('first', {first!r}), ('second', {second!r}))],
                 logs_dir={logs!r}, log=lambda line: print(line, flush=True))
except KeyboardInterrupt as e:
  sweep.exit_interrupted('sweep', e)
'''


def _wait_for(path, seconds=60):
  deadline = time.monotonic() + seconds
  while not os.path.exists(path) or not open(path).read():
    assert time.monotonic() < deadline, f'{path} never appeared'
    time.sleep(0.05)
  return int(open(path).read())


def _gone(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return True
  return False


def test_sigterm_stops_the_runs_under_way_and_launches_no_more(tmp_path):
  first, second = str(tmp_path / 'first.pid'), str(tmp_path / 'second.pid')
  script = _RUN_JOBS.format(root=ROOT, sleeper=_SLEEPER, first=first,
                            second=second, logs=str(tmp_path / 'logs'))
  parent = subprocess.Popen([sys.executable, '-c', script], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
  try:
    child = _wait_for(first)
    # The run has a session of its own: the terminal's Ctrl-C reaches the
    # sweep alone, which interrupts the run once.
    assert os.getsid(child) == child != os.getsid(parent.pid)
    parent.send_signal(signal.SIGTERM)
    out, err = parent.communicate(timeout=30)
    assert parent.returncode == 143
  finally:
    parent.kill()
  assert _gone(child)  # Interrupted, not left running.
  assert not os.path.exists(second)  # The queued run never started.
  assert err.splitlines()[-1].startswith(
      'sweep: stopped by SIGTERM; resume with: python -m binaries.sweep')
  assert 'first: interrupted (exit 130; resumes with the same command)' in out
  assert 'FAILED' not in out


def test_a_binary_started_with_sigint_ignored_gets_ctrl_c_back():
  """A background job (`cmd &`) starts with SIGINT ignored."""
  code = ('import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); '
          'import binaries; '
          'print(signal.getsignal(signal.SIGINT) is '
          'signal.default_int_handler)')
  out = subprocess.run([sys.executable, '-c', code], cwd=ROOT, check=True,
                       capture_output=True, text=True).stdout
  assert out == 'True\n'


def test_an_interrupt_in_the_queue_stops_the_other_runs(tmp_path,
                                                          monkeypatch):
  """An exception (Ctrl-C) while runs are under way, in-process.

  The run under way is interrupted; a queued one is either never started
  or interrupted with it (the worker thread freed by the exception may
  reach it first): none is left running.
  """
  monkeypatch.setattr(sweep, 'train_command', lambda argv: [
      sys.executable, '-c', _SLEEPER, *argv])
  long_pid, queued_pid = str(tmp_path / 'long.pid'), str(tmp_path / 'q.pid')

  def launcher(argv, log_path):
    if argv[0] == 'x':
      _wait_for(long_pid)
      raise KeyboardInterrupt  # As Ctrl-C reaches the main thread.
    return sweep.subprocess_launcher(argv, log_path)

  jobs = [sweep.Job('interrupted', ['x'], str(tmp_path / 'x'), 1),
          sweep.Job('long', [long_pid], str(tmp_path / 'long'), 1),
          sweep.Job('queued', [queued_pid], str(tmp_path / 'q'), 1)]
  started = time.monotonic()
  lines = []
  with pytest.raises(KeyboardInterrupt):
    sweep.run_jobs(jobs, logs_dir=str(tmp_path / 'logs'), parallel=2,
                   launcher=launcher, log=lines.append)
  assert time.monotonic() - started < 60  # Not the sleeper's 120 s.
  assert _gone(_wait_for(long_pid))
  # Stopped by us is not a failure: it resumes with the same command.
  assert 'long: interrupted (exit 130; resumes with the same command)' in lines
  assert not [line for line in lines if 'FAILED' in line], lines
  if os.path.exists(queued_pid):
    assert _gone(_wait_for(queued_pid))


def test_threads_per_run_reaches_the_runs_environment(tmp_path, monkeypatch):
  def write(argv, log_path):
    del log_path
    write_run(_output_dir(argv), [1.0] * 3)
    return 0

  launcher, seen = binary.recording_threads(write, monkeypatch)
  assert _run_main(['--task=digits', '--server_opt=sgd', '--client_lrs=0.1',
                    '--server_lrs=1', '--rounds=3', f'--sweep_dir={tmp_path}',
                    '--parallel=2', '--threads_per_run=1'], launcher) == 0
  assert seen == [('1', '1')]


@pytest.mark.parametrize('kills, outcome', [(1, 'finished'),
                                            (3, 'failed')])
def test_a_run_killed_by_sigkill_is_started_again_twice_at_most(
    kills, outcome, tmp_path):
  """The OOM killer's SIGKILL: the run resumes, its queue does not move on."""
  out = str(tmp_path / 'run')
  logs = str(tmp_path / 'logs')
  statuses = [-signal.SIGKILL] * kills + [0]
  launches, lines = [], []

  def launcher(argv, log_path):
    del argv
    launches.append(log_path)
    status = statuses[len(launches) - 1]
    write_run(out, [1.0] * (len(launches) if status else 6))
    return status

  result = sweep.run_jobs([sweep.Job('run', (out,), out, 6)], logs_dir=logs,
                          launcher=launcher, log=lines.append)
  assert result == {'run': outcome}
  assert len(launches) == min(kills, sweep.KILLED_RETRIES) + 1 == (
      2 if kills == 1 else 3)
  notes = [f"run: killed by SIGKILL (the kernel's out-of-memory killer "
           f'sends it: see dmesg); started again from its last checkpoint '
           f'({i} of 2)' for i in range(1, len(launches))]
  assert lines[1:-1] == notes
  with open(os.path.join(logs, 'run.log')) as f:
    assert f.read() == ''.join(f'sweep: {n}\n' for n in notes)
  if outcome == 'failed':
    assert lines[-1] == (f'run: FAILED (exit -9; see '
                         f'{os.path.join(logs, "run.log")})')


def test_a_run_stopped_by_the_sweep_is_not_started_again(tmp_path):
  # stop_running's last resort is SIGKILL: that one is not a retry.
  out = str(tmp_path / 'run')
  launches, lines = [], []

  def launcher(argv, log_path):
    del argv, log_path
    launches.append(1)
    sweep._STOPPING.set()  # pylint: disable=protected-access
    return -signal.SIGKILL

  try:
    result = sweep.run_jobs([sweep.Job('run', (out,), out, 3)],
                            logs_dir=str(tmp_path / 'logs'),
                            launcher=launcher, log=lines.append)
  finally:
    sweep._STOPPING.clear()  # pylint: disable=protected-access
  assert result == {'run': 'interrupted'}
  assert len(launches) == 1
  assert lines[-1] == ('run: interrupted (exit -9; resumes with the same '
                       'command)')
