"""The claims runner: verdicts computed by hand, reports on fabricated runs.

Nothing here trains: the launcher writes the `metrics.csv` a run would write
(accuracy curves chosen here as functions of the run's flags), so every
number and verdict in the reports can be checked against values worked out
in the test. The claims' real points are checked against `binaries.train`'s
flags and the tasks' options without reading data.
"""

import csv
import dataclasses
import logging
import math
import os

import pytest

from binaries import claims
from binaries import paper_tables
from binaries import reproduce
from binaries import train
from tests import binary
from tff_opt.program import output_dir as output_dir_lib
from tff_opt.program import output_lock

Measure = paper_tables.Measure


def _flag(argv, name):
  values = [a.split('=', 1)[1] for a in argv if a.startswith(f'--{name}=')]
  return values[-1] if values else None


# Final accuracy of a fabricated run, by algorithm and seed: FedADC beats
# FedAvg on every seed; SlowMo beats FedADC on seed 1 only.
_FINAL = {
    'fedopt': (0.60, 0.62, 0.61),
    'slowmo': (0.65, 0.80, 0.66),
    'fedadc': (0.70, 0.75, 0.72),
    'fedprox': (0.61, 0.63, 0.60),
    'fedptr_s': (0.62, 0.64, 0.63),
    'fedfor': (0.50, 0.52, 0.51),
    # The FedADC claim's other baselines: FedADC beats each on every seed.
    'fedgkd': (0.62, 0.64, 0.63),
    'fedntd': (0.66, 0.70, 0.68),
    'fedrs': (0.55, 0.57, 0.56),
    'moon': (0.50, 0.53, 0.52),
    'feddyn': (0.60, 0.62, 0.61),
}


def _accuracy(argv, r, rounds):
  seed = int(_flag(argv, 'seed')) % 3  # Tuning runs: seed 100 -> 1.
  return _FINAL[_flag(argv, 'algorithm')][seed] * r / rounds


def fabricate(argv, log_path):
  output_dir = _flag(argv, 'output_dir')
  rounds = int(_flag(argv, 'rounds'))
  os.makedirs(output_dir, exist_ok=True)
  with open(os.path.join(output_dir, 'metrics.csv'), 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['round', 'train_loss', 'eval_accuracy'])
    for r in range(1, rounds + 1):
      writer.writerow([r, 1.0 / r, _accuracy(argv, r, rounds)])
  with open(log_path, 'a') as f:
    f.write('fabricated\n')
  return 0


def _main(args, launcher=fabricate):
  try:
    claims.main(['claims', *args], launcher=launcher, load_data=False)
  except SystemExit as e:
    return e.code
  return 0


# --- Values read from the runs ---------------------------------------------


def _claim(measures, rounds=10, settings=('S',), flags=()):
  return claims.Claim(
      name='fedadc', statement='s', setting_text='t', methods=(),
      settings=tuple(paper_tables.Setting(label, (), rounds, measures)
                     for label in settings),
      flags=flags, checks=())


def test_eval_sizes_are_read_from_the_runs(tmp_path):
  claim = claims.CLAIMS['fedopt']
  points = claims.points_of(claim, seeds=1, out_dir=str(tmp_path),
                            data_dir='d')
  p = points[0]
  os.makedirs(p.output_dir)
  with open(os.path.join(p.output_dir, 'metrics.csv'), 'w') as f:
    f.write('round,eval_accuracy,eval_num_tokens,eval_num_examples\n')
    for r in range(1, p.rounds + 1):
      last = r == p.rounds
      f.write(f'{r},0.5,{123456 if last else ""},{3559 if last else ""}\n')
  assert claims.eval_sizes_of(claims.read_logs(points)) == {
      p.setting.label: 123456}


def test_run_values_of_a_run_stopped_at_its_target():
  # Stopped at round 6 of 10, having reached 50 % at round 4 and not 80 %:
  # only the target it reached keeps a value; the final accuracy and the
  # unreached target would change with the rounds it did not run.
  setting = claims.Setting('s', (), 10, (
      Measure('50%', 'rounds_to', 0.5, scale=1.0),
      Measure('80%', 'rounds_to', 0.8, scale=1.0),
      Measure('final', 'final')))
  rows = [{'round': r, 'eval_accuracy': 0.15 * r} for r in range(1, 4)]
  rows += [{'round': r, 'eval_accuracy': 0.55} for r in range(4, 7)]
  assert claims.run_values(rows, setting, 10) == {'50%': 4}
  full = rows + [{'round': r, 'eval_accuracy': 0.6} for r in range(7, 11)]
  assert claims.run_values(full, setting, 10) == {
      '50%': 4, '80%': None, 'final': pytest.approx(60.0)}


def test_eval_size_reads_the_last_evaluated_row():
  assert claims.eval_size([{'eval_num_examples': 10},
                           {'eval_num_examples': 20},
                           {'eval_num_examples': None}]) == 20
  assert claims.eval_size([{'eval_num_tokens': 500,
                            'eval_num_examples': 20}]) == 500
  assert claims.eval_size([{'round': 1}]) is None


def test_at_round_reads_the_last_evaluation_up_to_the_round():
  rows = [{'round': r, 'eval_accuracy': (r / 100 if r % 25 == 0 else None)}
          for r in range(1, 101)]
  m = Measure('acc@60', 'at_round', 60)
  assert reproduce.measure_value(rows, m, 100) == pytest.approx(50.0)
  assert reproduce.measure_value(
      rows, Measure('acc@10', 'at_round', 10), 100) is None


# --- The runner ------------------------------------------------------------------


def test_points_run_seed_by_seed_across_claims(tmp_path):
  by_claim = {name: claims.points_of(claims.CLAIMS[name], seeds=2,
                                     out_dir=str(tmp_path), data_dir='d')
              for name in ('fedadc', 'fedfor')}
  ordered = claims.seed_major(by_claim)
  seeds = [p.seed for _, p in ordered]
  # The tunings' candidates first (seed 100), then seed by seed.
  assert seeds == sorted(seeds, key=lambda s: (s != claims.TUNING_SEED, s))
  assert claims.TUNING_SEED in seeds and seeds[-1] == 1
  first = [(name, p.method.label) for name, p in ordered if p.seed == 0]
  assert first[:3] == [('fedadc', 'FedAvg'), ('fedadc', 'SlowMo'),
                       ('fedadc', 'FedADC')]
  assert ('fedfor', 'FedFOR') in first


def test_reports_on_fabricated_runs(tmp_path, capsys, monkeypatch):
  # FedADC registering 3 seeds: every check decided, on fewer runs.
  monkeypatch.setitem(claims.CLAIMS, 'fedadc', dataclasses.replace(
      claims.CLAIMS['fedadc'], seeds=3))
  out = str(tmp_path / 'claims')
  assert _main(['--claims=fedadc', f'--out_dir={out}', '--parallel=2']) == 0
  table = open(os.path.join(out, 'fedadc', 'table.md')).read()
  # 'final' is the accuracy at the last round, in %: FedADC 70, 75, 72.
  assert '| FedADC | 72.33 ± 2.52 |' in table
  # FedADC beats FedAvg on every seed; SlowMo wins on seed 1.
  assert '**Verdict: inconclusive** (' in table
  assert ('- FedADC better than FedAvg (s=2 C=0.2, last 10): **reproduced**'
          in table)
  assert ('- FedADC better than SlowMo (s=2 C=0.2, last 10): '
          '**inconclusive**' in table)
  summary = open(os.path.join(out, 'claims.md')).read()
  # 9 methods x 3 seeds, and the tunings' candidates (MOON 2, FedDyn 3,
  # FedProx 3) on their seed.
  assert '**inconclusive**' in summary and '35/35 runs finished' in summary
  assert os.path.exists(os.path.join(out, 'fedadc', 'curves.png'))
  with open(os.path.join(out, 'claims.csv')) as f:
    rows = list(csv.DictReader(f))
  assert [r['check_verdict'] for r in rows] == [
      'reproduced', 'inconclusive'] + ['reproduced'] * 6
  assert [r['role'] for r in rows] == ['primary'] * 2 + ['secondary'] * 6
  assert [r['check'] for r in rows][2:] == [
      f'FedADC better than {m} (s=2 C=0.2, last 10)'
      for m in ('FedGKD', 'FedNTD', 'FedRS', 'MOON', 'FedDyn', 'FedProx')]
  # The mean of the last 10 of 100 rounds is 0.955 x the final accuracy:
  # FedADC - FedAvg = 0.955 x (10, 13, 11) points.
  assert float(rows[0]['estimate']) == pytest.approx(0.955 * 34 / 3,
                                                     abs=1e-4)
  assert (rows[0]['seeds'], rows[0]['seeds_registered'],
          rows[0]['delta']) == ('3', '3', '1')
  # Every report went through a temporary of its own (`program/files`),
  # renamed over it: none is left.
  left = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs
          if '.tmp' in f]
  assert not left, left
  # The same command again launches nothing.
  def never(argv, log_path):
    raise AssertionError(f'nothing should run, got {argv}')
  assert _main(['--claims=fedadc', f'--out_dir={out}'],
               launcher=never) == 0


def test_runs_keeps_the_matching_runs_only(tmp_path, capsys):
  out = str(tmp_path / 'claims')
  launched = []

  def record(argv, log_path):
    launched.append(os.path.basename(log_path))
    return fabricate(argv, log_path)

  assert _main(['--claims=fedfor', f'--out_dir={out}', '--seeds=2',
                '--runs=fedfor__fedavg__e_8__*,*fedfor__e_1__seed1'],
               launcher=record) == 0
  assert sorted(launched) == [
      'fedfor__fedavg__e_8__seed0.log', 'fedfor__fedavg__e_8__seed1.log',
      'fedfor__fedfor__e_1__seed1.log']
  capsys.readouterr()
  assert _main(['--claims=fedfor', f'--out_dir={out}',
                '--runs=fedfor__nothing*']) == 2
  assert capsys.readouterr().err == (
      'claims: error: --runs=fedfor__nothing*: no run of fedfor matches '
      f'(names as in {out}/logs, e.g. '
      'fedfor__fedfor_tuned_alpha_0.05__e_8__seed100).\n')


def test_ctrl_c_exits_130_with_one_line(tmp_path, capsys):
  def interrupted(argv, log_path):
    raise KeyboardInterrupt

  assert _main(['--claims=fedadc', f'--out_dir={tmp_path}', '--seeds=1'],
               launcher=interrupted) == 130
  assert capsys.readouterr().err == (
      'claims: interrupted; resume with: python -m binaries.claims '
      f'--claims=fedadc --out_dir={tmp_path} --seeds=1\n')


def test_a_run_of_one_claim_keeps_the_others_in_the_summary(tmp_path):
  out = str(tmp_path / 'claims')
  assert _main(['--claims=fedadc', f'--out_dir={out}', '--seeds=2']) == 0
  fedadc_table = open(os.path.join(out, 'fedadc', 'table.md')).read()
  assert _main(['--claims=fedptr', f'--out_dir={out}', '--seeds=2']) == 0
  summary = open(os.path.join(out, 'claims.md')).read()
  rows = [line for line in summary.splitlines() if line.startswith('| ')]
  assert [r.split(' | ')[0] for r in rows[1:]] == [
      '| FedADC', '| Federated Learning with Projected Trajectory '
      'Regularization']
  # FedADC's runs are counted against the 5 seeds it registers (8 tuning
  # runs: MOON 2, FedDyn 3, FedProx 3; and 9 methods x 5 seeds), not the 2
  # of the command that wrote the summary last (8 + 9 x 2 = 26 finished);
  # FedPTR's, run now, against that command's 2 (9 tuning runs and 4
  # methods x 2 seeds).
  assert claims.CLAIMS['fedadc'].seeds == 5
  assert '26/53 runs finished' in rows[1]
  assert '17/17 runs finished' in rows[2]
  with open(os.path.join(out, 'claims.csv')) as f:
    assert {r['claim'] for r in csv.DictReader(f)} == {'fedadc', 'fedptr'}
  # Only the claims run are re-rendered; the others' tables stay as they were.
  assert open(os.path.join(out, 'fedadc', 'table.md')).read() == fedadc_table


def test_a_claim_with_a_run_begun_stays_in_the_summary(tmp_path):
  # A claim whose only runs are still going (FedCurv's first lambda
  # candidate at round 1) has a row however the summary is written: not
  # only by the process running it.
  out = str(tmp_path / 'claims')
  assert _main(['--claims=fedadc', f'--out_dir={out}', '--seeds=2']) == 0
  summary_path = os.path.join(out, 'claims.md')
  statement = claims.CLAIMS['fedcurv'].statement
  assert statement not in open(summary_path).read()
  first = claims.points_of(claims.CLAIMS['fedcurv'], seeds=3, out_dir=out,
                           data_dir=None)[0]
  os.makedirs(first.output_dir)
  with open(os.path.join(first.output_dir, 'metrics.csv'), 'w') as f:
    f.write('round,train_loss,eval_accuracy\n1,1.0,0.3\n')
  assert _main(['--claims=fedadc', f'--out_dir={out}', '--seeds=2',
                '--report_only', f'--report_dir={out}'], launcher=None) == 0
  rows = [line for line in open(summary_path).read().splitlines()
          if statement in line]
  assert len(rows) == 1
  assert '(0/10 runs finished;' in rows[0] and '**pending**' in rows[0]


def test_report_only_names_the_command_that_made_the_runs(tmp_path):
  out = str(tmp_path / 'claims')
  assert _main(['--claims=fedadc', f'--out_dir={out}', '--seeds=2']) == 0
  summary_path = os.path.join(out, 'claims.md')
  made = open(summary_path).read()
  assert (f'last written by `python -m binaries.claims --claims=fedadc '
          f'--out_dir={out} --seeds=2`' in made)
  assert ('on the seeds it registers (fedadc 5, fedptr 5, fedfor 5, '
          'fedopt 2, fedcurv 3)' in made)
  assert _main(['--claims=fedadc', f'--out_dir={out}', '--seeds=2',
                '--report_only', f'--report_dir={out}'], launcher=None) == 0
  assert open(summary_path).read() == made


def test_a_claim_registers_at_least_two_seeds():
  with pytest.raises(ValueError, match=r'^claim c: seeds=1, but a verdict '
                     r'needs at least 2 seeds\.$'):
    dataclasses.replace(_claim(()), name='c', seeds=1)


def test_seeds_default_to_the_claims_own(tmp_path, capsys):
  out = str(tmp_path / 'claims')
  assert _main(['--claims=fedadc', f'--out_dir={out}', '--dry_run']) == 0
  printed = capsys.readouterr().out
  assert 'runs of fedadc (5 seed(s)), 1 at a time' in printed
  assert {_flag(line.split(), 'seed') for line in printed.splitlines()
          if line.startswith('python -m binaries.train')} == {
              '0', '1', '2', '3', '4', str(claims.TUNING_SEED)}
  runs = [line for line in printed.splitlines()
          if line.startswith('python -m binaries.train')]
  assert all(line.endswith('  # not begun') for line in runs)
  assert printed.splitlines()[-1] == (
      f'claims: 0 finished, 0 begun, {len(runs)} not begun')


def test_one_seed_is_pending(tmp_path):
  out = str(tmp_path / 'claims')
  assert _main(['--claims=fedadc', f'--out_dir={out}', '--seeds=1']) == 0
  assert '**Verdict: pending** (' in open(
      os.path.join(out, 'fedadc', 'table.md')).read()


def test_unknown_claim_is_one_line(capsys):
  assert _main(['--claims=fedadc,moon']) == 2
  assert capsys.readouterr().err.strip().splitlines() == [
      'claims: error: --claims: no claim moon (claims: fedadc, fedptr, '
      'fedfor, fedopt, fedcurv).']


@pytest.mark.parametrize('name', sorted(claims.CLAIMS))
def test_every_claim_runs_binaries_train_flags(name, tmp_path):
  claim = claims.CLAIMS[name]
  points = claims.points_of(claim, seeds=1, out_dir=str(tmp_path),
                            data_dir=str(tmp_path))
  reproduce.check_points(points, where=f'claim {name}', load_data=False)
  labels = {m.label for m in claim.methods}
  for check in claim.checks:  # Every check reads methods of the grid.
    named = {getattr(check, a) for a in ('method', 'other')
             if hasattr(check, a)} | set(getattr(check, 'methods', ()))
    named |= set(getattr(check, 'others', ()))
    assert named <= labels


# --- Tuning ----------------------------------------------------------------------


def _tuned_claim(rounds=4, measures=(Measure('final', 'final'),),
                 tuned_by='final'):
  """FedProx against FedAvg, FedProx's mu tuned by `tuned_by`."""
  setting = paper_tables.Setting('S', ('--task=mnist5k',), rounds, measures)
  return claims.Claim(
      name='fedadc', statement='s', setting_text='t',
      methods=(paper_tables.Method('FedAvg', ('--algorithm=fedopt',)),
               paper_tables.Method('FedProx', ('--algorithm=fedprox',))),
      settings=(setting,), flags=('--eval_every=1',),
      checks=(claims.Better('FedProx', 'FedAvg', 'S', 'final', 1.0),),
      tunings=(claims.Tuning('FedProx', 'mu', ('0.1', '0.01', '1.0'), 'S',
                             tuned_by),),
      seeds=2)


# Final accuracy by (algorithm, mu): mu 0.01 is the best candidate.
_TUNED = {('fedopt', None): 0.60, ('fedprox', '0.1'): 0.62,
          ('fedprox', '0.01'): 0.65, ('fedprox', '1.0'): 0.50}


def _write_tuned_run(argv, rounds_logged=None):
  """The metrics.csv of a `_tuned_claim` run, its first `rounds_logged`."""
  rounds = int(_flag(argv, 'rounds'))
  final = _TUNED[(_flag(argv, 'algorithm'), _flag(argv, 'mu'))]
  final += int(_flag(argv, 'seed')) / 1000  # Seeds differ a little.
  out = _flag(argv, 'output_dir')
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, 'metrics.csv'), 'w') as f:
    f.write('round,eval_accuracy\n')
    f.writelines(f'{r},{final * r / rounds}\n'
                 for r in range(1, (rounds_logged or rounds) + 1))


def _tuned_launcher(launched):
  def launcher(argv, log_path):
    del log_path
    launched.append(argv)
    _write_tuned_run(argv)
    return 0
  return launcher


def _runs(launched):
  return [(_flag(a, 'algorithm'), _flag(a, 'mu'), _flag(a, 'seed'))
          for a in launched]


def test_a_tuned_method_runs_with_the_value_its_tuning_picked(
    tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(claims, 'CLAIMS', {'fedadc': _tuned_claim()})
  launched = []
  launcher = _tuned_launcher(launched)
  out = str(tmp_path / 'claims')
  assert _main(['--claims=fedadc', f'--out_dir={out}', '--seeds=2'],
               launcher=launcher) == 0
  printed = capsys.readouterr().out
  assert 'fedadc: FedProx waits for its tuning' in printed
  assert 'claims: 2 more runs, their tunings finished' in printed
  runs = _runs(launched)
  # The candidates first (seed 100), then FedAvg's seeds, then FedProx's
  # at the value picked.
  assert runs == [('fedprox', '0.1', '100'), ('fedprox', '0.01', '100'),
                  ('fedprox', '1.0', '100'), ('fedopt', None, '0'),
                  ('fedopt', None, '1'), ('fedprox', '0.01', '0'),
                  ('fedprox', '0.01', '1')]
  table = open(os.path.join(out, 'fedadc', 'table.md')).read()
  # Seed 100 adds 0.1 to each candidate's final accuracy.
  assert ('Tuning (FedProx: --mu over 0.1, 0.01, 1.0, the best final in S on '
          'seed 100; fixed before the runs): 0.1: 72.00, 0.01: 75.00, 1.0: '
          '60.00; picked **0.01**.\n') in table
  assert '**Verdict: reproduced** (' in table
  # Nothing more to run: the same command launches nothing.
  launched.clear()
  assert _main(['--claims=fedadc', f'--out_dir={out}', '--seeds=2'],
               launcher=launcher) == 0
  assert launched == []


def _candidate(out, mu):
  """The `_tuned_claim` candidate's point for `mu` (seed 100)."""
  claim = claims.CLAIMS['fedadc']
  [point] = [p for p in claims.points_of(claim, seeds=2, out_dir=out,
                                         data_dir=None)
             if p.seed == claims.TUNING_SEED and f'--mu={mu}' in p.argv]
  return point


@pytest.mark.parametrize('finishes', [True, False])
def test_a_process_waits_for_the_candidate_another_process_runs(
    finishes, tmp_path, monkeypatch, capsys):
  # Two processes share the queue: another one runs candidate mu = 0.01.
  # This one runs the other two candidates and FedAvg's seeds, then waits
  # for it (the tuned method's runs need every candidate) instead of
  # leaving FedProx's runs to that process alone. If that process stops
  # before the candidate finished, this one resumes the candidate itself.
  monkeypatch.setattr(claims, 'CLAIMS', {'fedadc': _tuned_claim()})
  out = str(tmp_path / 'claims')
  other = _candidate(out, '0.01')
  os.makedirs(other.output_dir)
  held = output_lock.acquire(other.output_dir)
  _write_tuned_run(other.argv, rounds_logged=2)
  sleeps = []

  def other_process_ends(seconds):
    sleeps.append(seconds)
    if finishes:
      _write_tuned_run(other.argv)
    held.close()  # Its lock goes with it.

  monkeypatch.setattr(claims, '_sleep', other_process_ends)
  launched = []
  try:
    assert _main(['--claims=fedadc', f'--out_dir={out}', '--seeds=2'],
                 launcher=_tuned_launcher(launched)) == 0
  finally:
    held.close()
  name = claims.run_name('fedadc', other)
  printed = capsys.readouterr().out
  assert (f'claims: FedProx waits for its tuning; another process runs '
          f'{name}; checking every 60 s') in printed
  assert sleeps == [claims.TUNING_POLL_SECONDS]
  resumed = [('fedprox', '0.01', '100')] if not finishes else []
  assert _runs(launched) == [
      ('fedprox', '0.1', '100'), ('fedprox', '1.0', '100'),
      ('fedopt', None, '0'), ('fedopt', None, '1'), *resumed,
      ('fedprox', '0.01', '0'), ('fedprox', '0.01', '1')]
  assert (f'claims: 1 tuning run(s) another process left unfinished, '
          f'resumed here: {name}' in printed) == (not finishes)
  assert '**Verdict: reproduced** (' in open(
      os.path.join(out, 'fedadc', 'table.md')).read()


def test_nowait_for_tunings_leaves_the_tuned_runs_to_the_other_process(
    tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(claims, 'CLAIMS', {'fedadc': _tuned_claim()})
  out = str(tmp_path / 'claims')
  other = _candidate(out, '0.01')
  os.makedirs(other.output_dir)
  launched = []
  with output_lock.acquire(other.output_dir):
    monkeypatch.setattr(claims, '_sleep', lambda s: pytest.fail('slept'))
    assert _main(['--claims=fedadc', f'--out_dir={out}', '--seeds=2',
                  '--nowait_for_tunings'],
                 launcher=_tuned_launcher(launched)) == 0
  assert _runs(launched) == [
      ('fedprox', '0.1', '100'), ('fedprox', '1.0', '100'),
      ('fedopt', None, '0'), ('fedopt', None, '1')]
  assert 'fedadc: FedProx waits for its tuning' in capsys.readouterr().out


def test_a_begun_candidate_says_how_far_it_got_not_that_it_never_ran(
    tmp_path, monkeypatch):
  # Candidate 0.1 finished, 0.01 stopped at round 3 of 4, 1.0 never began;
  # FedAvg's two seeds stopped at rounds 1 and 2.
  monkeypatch.setattr(claims, 'CLAIMS', {'fedadc': _tuned_claim()})
  out = str(tmp_path / 'claims')
  _write_tuned_run(_candidate(out, '0.1').argv)
  _write_tuned_run(_candidate(out, '0.01').argv, rounds_logged=3)
  os.makedirs(_candidate(out, '1.0').output_dir)  # Begun, no round logged.
  claim = claims.CLAIMS['fedadc']
  for p in claims.points_of(claim, seeds=2, out_dir=out, data_dir=None):
    if p.method.label == 'FedAvg':
      _write_tuned_run(p.argv, rounds_logged=p.seed + 1)
  assert _main(['--claims=fedadc', f'--out_dir={out}', '--seeds=2',
                '--report_only', f'--report_dir={out}'], launcher=None) == 0
  table = open(os.path.join(out, 'fedadc', 'table.md')).read()
  assert ('0.1: 72.00, 0.01: not finished yet (round 3/4), 1.0: not run '
          'yet; FedProx\'s runs wait for it.\n') in table
  assert ('| FedAvg | not finished yet (2 seeds begun, the furthest at '
          'round 2/4) |\n| FedProx | not run yet |\n') in table


def test_the_reports_read_each_runs_metrics_once(tmp_path, monkeypatch):
  # The values, evaluation sizes, begun cells, curves and the summary's
  # count of finished runs all come from one read of each metrics.csv
  # (they were five reads a run).
  monkeypatch.setattr(claims, 'CLAIMS', {'fedadc': _tuned_claim()})
  out = str(tmp_path / 'claims')
  _write_tuned_run(_candidate(out, '0.1').argv)
  _write_tuned_run(_candidate(out, '0.01').argv, rounds_logged=3)
  claim = claims.CLAIMS['fedadc']
  points = claims.points_of(claim, seeds=2, out_dir=out, data_dir=None)
  for p in points:
    if p.method.label == 'FedAvg':
      _write_tuned_run(p.argv, rounds_logged=4 if p.seed else 2)
  reads = []
  read = claims.analysis.read_metrics_if_any
  monkeypatch.setattr(claims.analysis, 'read_metrics_if_any',
                      lambda run_dir: reads.append(run_dir) or read(run_dir))
  claims.write_reports([claim], {'fedadc': points}, out_dir=out, seeds=2,
                       command='c')
  assert sorted(reads) == sorted(p.output_dir for p in points)
  table = open(os.path.join(out, 'fedadc', 'table.md')).read()
  assert '| FedAvg | 60.10 [1/2 seeds] |' in table
  assert '(2/5 runs finished;' in open(os.path.join(out, 'claims.md')).read()


@pytest.mark.parametrize('finals, picked', [
    ({'0.1': 60.0, '0.01': 65.0, '1.0': 50.0}, '0.01'),
    ({'0.1': 65.0, '0.01': 65.0, '1.0': 50.0}, '0.1'),  # Ties: the first.
    ({'0.1': None, '0.01': float('nan'), '1.0': 50.0}, '1.0'),
    ({'0.1': 60.0, '1.0': 50.0}, None),  # 0.01 has not finished.
])
def test_pick(finals, picked):
  claim = _tuned_claim()
  t = claim.tunings[0]
  values = {(t.candidate(v), 'S', 'final'): {claims.TUNING_SEED: x}
            for v, x in finals.items()}
  assert claims.pick(t, claim, values) == picked


def _rounds_to_tuned_claim():
  return _tuned_claim(
      rounds=10,
      measures=(Measure('rounds to 90%', 'rounds_to', 0.9, scale=1.0),
                Measure('final', 'final')),
      tuned_by='rounds to 90%')


# Accuracy gain per round by mu: 0.1 reaches 90% at round 5, 0.01 at 4, and
# 1.0 never (0.08 a round: 80% at round 10).
_SLOPES = {'0.1': 0.2, '0.01': 0.25, '1.0': 0.08, None: 0.095}


def test_a_rounds_to_tuning_stops_each_candidate_at_its_target(
    tmp_path, monkeypatch):
  monkeypatch.setattr(claims, 'CLAIMS', {'fedadc': _rounds_to_tuned_claim()})
  launched = []

  def launcher(argv, log_path):
    # What binaries.train writes: hparams.json with stop_at; rows to the
    # first round reaching it.
    launched.append(argv)
    stop = _flag(argv, 'stop_at')
    out = _flag(argv, 'output_dir')
    os.makedirs(out, exist_ok=True)
    train.FLAGS.unparse_flags()
    try:
      train.FLAGS(['train', *argv])
      output_dir_lib.write_hparams(train.resolve_hparams(), {})
    finally:
      train.FLAGS.unparse_flags()
    slope = _SLOPES[_flag(argv, 'mu')]
    with open(os.path.join(out, 'metrics.csv'), 'w') as f:
      f.write('round,eval_accuracy\n')
      for r in range(1, int(_flag(argv, 'rounds')) + 1):
        f.write(f'{r},{min(slope * r, 0.99)}\n')
        if stop and slope * r >= 0.9:
          break
    return 0

  out = str(tmp_path / 'claims')
  assert _main(['--claims=fedadc', f'--out_dir={out}', '--seeds=2'],
               launcher=launcher) == 0
  stops = [(_flag(a, 'mu'), _flag(a, 'seed'), _flag(a, 'stop_at'))
           for a in launched]
  assert stops == [('0.1', '100', 'eval_accuracy:0.9'),
                   ('0.01', '100', 'eval_accuracy:0.9'),
                   ('1.0', '100', 'eval_accuracy:0.9'),
                   (None, '0', None), (None, '1', None),
                   ('0.01', '0', None), ('0.01', '1', None)]
  table = open(os.path.join(out, 'fedadc', 'table.md')).read()
  assert ('the best rounds to 90% in S on seed 100; fixed before the runs): '
          '0.1: 5.0, 0.01: 4.0, 1.0: not reached; picked **0.01**.') in table
  points = claims.points_of(claims.CLAIMS['fedadc'], seeds=2, out_dir=out,
                            data_dir=None)
  values = claims.values_of(claims.read_logs(points))
  # A stopped candidate has its rounds to 90% and no final accuracy; the
  # one that never reached it ran every round and has both.
  assert values[('FedProx mu=0.01', 'S', 'rounds to 90%')] == {100: 4.0}
  assert ('FedProx mu=0.01', 'S', 'final') not in values
  assert values[('FedProx mu=1.0', 'S', 'rounds to 90%')] == {100: None}
  assert values[('FedProx mu=1.0', 'S', 'final')] == {100: 80.0}
  launched.clear()
  assert _main(['--claims=fedadc', f'--out_dir={out}', '--seeds=2'],
               launcher=launcher) == 0
  assert launched == []


@pytest.mark.parametrize('args, threads', [
    (['--threads_per_run=1'], ('1', '1')),
    ([], (None, None)),
])
def test_threads_per_run_reaches_every_runs_environment(args, threads,
                                                        tmp_path,
                                                        monkeypatch):
  launcher, seen = binary.recording_threads(fabricate, monkeypatch)
  assert _main(['--claims=fedadc', f'--out_dir={tmp_path}', '--seeds=1',
                '--runs=fedadc__fedavg__*', *args], launcher=launcher) == 0
  assert set(seen) == {threads}


def test_curves_of_a_claim_with_no_rows_write_nothing_and_warn_nothing(
    tmp_path, caplog):
  # FedCurv while only its tuning runs: no method has a row yet.
  out = str(tmp_path / 'claims')
  points = claims.points_of(claims.CLAIMS['fedcurv'], seeds=3, out_dir=out,
                            data_dir=None)
  path = str(tmp_path / 'curves.png')
  with caplog.at_level(logging.WARNING):
    assert not claims.plot_curves(claims.CLAIMS['fedcurv'],
                                  claims.read_logs(points), path)
  assert not os.path.exists(path)
  assert not caplog.records


def test_curves_average_finished_seeds_and_draw_an_unfinished_one_apart(
    tmp_path):
  # FedPTR's grid on 3 seeds: seeds 0-1 finished (60 rounds), seed 2 at
  # round 22. The mean is over the two finished seeds on all 60 rounds; the
  # unfinished seed is kept apart with its 22 rounds, not cutting the mean.
  claim = claims.CLAIMS['fedptr']
  out = str(tmp_path / 'claims')
  points = [p for p in claims.points_of(claim, seeds=3, out_dir=out,
                                        data_dir=None)
            if p.method.label == 'FedAvg']
  assert [p.seed for p in points] == [0, 1, 2]
  for p, last in zip(points, (60, 60, 22)):
    os.makedirs(p.output_dir)
    with open(os.path.join(p.output_dir, 'metrics.csv'), 'w') as f:
      f.write('round,eval_accuracy\n')
      f.writelines(f'{r},{(p.seed + 1) * r / 1000}\n'
                   for r in range(1, last + 1))
  logs = claims.read_logs(points)
  finished, unfinished = claims.seed_curves(logs, 'eval_accuracy')
  assert [sorted(c) for c in finished] == [list(range(1, 61))] * 2
  assert finished[1][60] == pytest.approx(0.12)
  assert [(p.seed, sorted(c)) for p, c in unfinished] == [
      (2, list(range(1, 23)))]
  # A run with no logged value of the metric is in neither list.
  assert claims.seed_curves(logs, 'train_loss') == ([], [])
  path = str(tmp_path / 'curves.png')
  assert claims.plot_curves(claim, logs, path)
  with open(path, 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'
