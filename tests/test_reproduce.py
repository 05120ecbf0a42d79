"""The paper-table reproducer on fabricated runs, and one real tiny run.

Most tests train nothing: the reproducer's launcher is replaced by one that
writes the `metrics.csv` a run would write (accuracy curves chosen here), so
the table's layout, its mean +- std and rounds-to-target numbers can be
checked against NumPy. One test trains two rounds of one point for real.
"""

import csv
import dataclasses
import os

import numpy as np
import pytest

from binaries import paper_tables
from binaries import reproduce
from binaries import tables
from tests import binary
from tff_opt.program import registry


def _flag(argv, name):
  values = [a.split('=', 1)[1] for a in argv if a.startswith(f'--{name}=')]
  return values[-1] if values else None


def _accuracy(argv, r):
  """The fabricated accuracy of a run at round r: a function of its flags."""
  base = {'fedopt': 0.50, 'fedprox': 0.45, 'feddyn': 0.55, 'fedcurv': 0.40,
          'fedfor': 0.60}.get(_flag(argv, 'algorithm'), 0.3)
  seed = int(_flag(argv, 'seed'))
  epochs = int(_flag(argv, 'client_epochs') or 1)
  return min(0.99, base + 0.02 * r + 0.03 * seed + 0.001 * epochs)


def fabricate(argv, log_path):
  """A launcher: writes the metrics.csv of the run `argv` stands for."""
  output_dir = _flag(argv, 'output_dir')
  rounds = int(_flag(argv, 'rounds'))
  os.makedirs(output_dir, exist_ok=True)
  with open(os.path.join(output_dir, 'metrics.csv'), 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(['round', 'train_loss', 'eval_accuracy'])
    for r in range(1, rounds + 1):
      writer.writerow([r, 1.0 / r, _accuracy(argv, r)])
  with open(log_path, 'a') as f:
    f.write('fabricated\n')
  return 0


def _never(argv, log_path):
  raise AssertionError(f'nothing should be launched, got {argv}')


def _main(args, launcher=fabricate, load_data=False):
  try:
    reproduce.main(['reproduce', *args], launcher=launcher,
                   load_data=load_data)
  except SystemExit as e:
    return e.code
  return 0


# --- The tables as data ------------------------------------------------------


@pytest.mark.parametrize('key', sorted(paper_tables.TABLES))
def test_every_table_is_consistent(key):
  table = paper_tables.TABLES[key]
  paper = table.paper_scale
  labels = {(m.label, s.label, x.label) for m in table.methods
            for s in paper.settings for x in s.measures}
  # Every printed number belongs to a cell of the table, and every cell of
  # a method that applies has its printed number (or None: illegible).
  assert set(table.printed) <= labels
  for method in table.methods:
    for setting in paper.settings:
      for measure in setting.measures:
        if reproduce.runs_in(method, setting):
          assert (method.label, setting.label,
                  measure.label) in table.printed, (method.label,
                                                    setting.label)
  assert paper.stand_in is None and table.small.stand_in
  assert 'STAND-IN' in table.small.stand_in
  assert 'STAND-IN' in table.scale('small').stand_in
  paper_settings = {s.label: s for s in paper.settings}
  for scale in (paper, table.small):
    for s in scale.settings:
      # The stand-in's settings are the paper's, with the same measures.
      assert s.label in paper_settings
      assert [m.label for m in s.measures] == [
          m.label for m in paper_settings[s.label].measures]
      for m in s.measures:
        if m.kind == 'best_up_to':
          assert 1 <= m.arg <= s.rounds
  for method in table.methods:
    assert (method.missing is None) == bool(method.flags)
  for scale in paper_tables.SCALES:
    # Every run has its own directory.
    points = reproduce.grid(table, scale, seeds=2, work_dir='w')
    assert len({p.output_dir for p in points}) == len(points)


def test_every_table_is_its_spec_expanded_and_names_known_names():
  from binaries import train  # pylint: disable=g-import-not-at-top
  assert sorted(paper_tables.SPECS) == sorted(paper_tables.TABLES)
  for key, spec in paper_tables.SPECS.items():
    assert paper_tables.TABLES[key] == paper_tables.expand(spec)
    paper_tables.check_names(spec, algorithms=registry.ALGORITHMS,
                             flag_names=train.FLAGS)


def _fedprox(*flags):
  """FedFOR Table 2 with its FedProx row's flags replaced by `flags`."""
  spec = paper_tables.SPECS[('fedfor', '2')]
  return dataclasses.replace(spec, methods=tuple(
      paper_tables.Method('FedProx', flags) if m.label == 'FedProx' else m
      for m in spec.methods))


_FEDFOR_T2_PRINTED = paper_tables.SPECS[('fedfor', '2')].printed


def _fedfor_t2(**changes):
  return dataclasses.replace(paper_tables.SPECS[('fedfor', '2')], **changes)


def _ptr_t2_small(**changes):
  spec = paper_tables.SPECS[('fedptr', '2')]
  return dataclasses.replace(
      spec, small=dataclasses.replace(spec.small, **changes))


@pytest.mark.parametrize('spec, message', [
    (_fedprox('--mu=0.01'),
     "fedfor table 2, method 'FedProx': needs one --algorithm= flag, has 0."),
    (_fedprox('--algorithm=fedprox', 'mu=0.01'),
     "fedfor table 2, method 'FedProx': 'mu=0.01' is not a --name=value "
     'flag.'),
    (_fedfor_t2(small=dataclasses.replace(
        paper_tables.SPECS[('fedfor', '2')].small,
        point_flags=('--client_epochs={epochs}',))),
     "fedfor table 2, point 'E=1' at small scale: '--client_epochs={epochs}' "
     "names no variable 'epochs' (variables: E, full, half, small_rounds)."),
    (_fedfor_t2(printed={**_FEDFOR_T2_PRINTED, 'FedFOR': (41.93,)}),
     "fedfor table 2, printed row 'FedFOR': 1 values for 10 cells."),
    (_fedfor_t2(printed={**_FEDFOR_T2_PRINTED, 'FedAVG': (1.0,) * 10}),
     "fedfor table 2, printed row 'FedAVG': no such method."),
    (_ptr_t2_small(only=({'dataset': 'FMNSIT'},)),
     "fedptr table 2, small scale: only {'dataset': 'FMNSIT'} matches no "
     'point.'),
])
def test_a_malformed_spec_is_refused_naming_the_table_and_the_part(spec,
                                                                   message):
  with pytest.raises(paper_tables.SpecError) as error:
    paper_tables.expand(spec)
  assert str(error.value) == message


@pytest.mark.parametrize('flags, message', [
    (('--algorithm=fedproxx', '--mu=0.01'),
     "fedfor table 2, method 'FedProx': --algorithm=fedproxx is not a "
     'registered algorithm.'),
    (('--algorithm=fedprox', '--muu=0.01'),
     "fedfor table 2, method 'FedProx': binaries.train has no flag --muu."),
])
def test_a_method_naming_an_unknown_algorithm_or_flag_is_refused(flags,
                                                                 message):
  from binaries import train  # pylint: disable=g-import-not-at-top
  spec = _fedprox(*flags)
  paper_tables.expand(spec)  # Well formed: only the names are unknown.
  with pytest.raises(paper_tables.SpecError) as error:
    paper_tables.check_names(spec, algorithms=registry.ALGORITHMS,
                             flag_names=train.FLAGS)
  assert str(error.value) == message


def test_printed_numbers_as_the_papers_print_them():
  t2 = paper_tables.get_table('fedfor', '2')
  assert t2.printed[('FedFOR', 'E=8', 't=100')] == (70.93, 0.94)
  assert t2.printed[('FedAvg', 'E=4', 't=50')] == (45.13, 0.01)
  t3 = paper_tables.get_table('fedfor', '3')
  # ACC40 has no std row entry; the stds shift past it.
  assert t3.printed[('FedFOR', 'E=16', 'ACC40')] == (13, None)
  assert t3.printed[('FedFOR', 'E=16', 't=50')] == (46.34, 1.86)
  assert t3.printed[('FedBN', 'E=1', 't=100')] == (45.87, 1.84)
  curv = paper_tables.get_table('fedcurv', '1')
  # The reading of the merged rows agrees with the paper's text: FedCurv
  # reaches 90% three times as fast as FedAvg at E=50, 95% twice as fast.
  fedcurv = curv.printed[('FedCurv, lambda=1.0', 'E=50', '0.90')][0]
  fedavg = curv.printed[('FedAvg', 'E=50', '0.90')][0]
  assert fedavg / fedcurv == pytest.approx(3.33, abs=0.01)
  assert curv.printed[('FedAvg', 'E=50', '0.95')][0] == 2 * curv.printed[
      ('FedCurv, lambda=1.0', 'E=50', '0.95')][0]
  assert curv.printed[('FedProx, mu=0.00025', 'E=10', '0.95')] is None
  adc = paper_tables.get_table('fedadc', '1')
  assert adc.printed[('FedADC+ (ours)', 'CIFAR-100 alpha=0.1 C=0.1',
                      'top-1')] == (56.9, 0.67)


def test_stand_ins_run_the_papers_grid_on_mnist5k_or_digits():
  import tasks  # pylint: disable=g-import-not-at-top
  from tasks import tfds_images  # pylint: disable=g-import-not-at-top
  mnist5k_models = tfds_images.DATASETS['mnist5k'].models
  for table in paper_tables.TABLES.values():
    digits = reproduce.grid(table, 'small', seeds=1, work_dir='w',
                            stand_in='digits')
    mnist = reproduce.grid(table, 'small', seeds=1, work_dir='w')
    assert len(digits) == len(mnist)
    for d, m in zip(digits, mnist):
      assert tables.flag_value(d.argv, 'task') == 'digits'
      assert tables.flag_value(m.argv, 'task') == 'mnist5k'
      # Only the task and the model differ.
      changed = [(a, b) for a, b in zip(d.argv, m.argv) if a != b]
      assert len(d.argv) == len(m.argv)
      assert all(a.startswith(('--task=', '--task_option=model='))
                 for a, _ in changed), changed
      model = tables.flag_value(
          [a.replace('--task_option=model', '--model', 1) for a in m.argv],
          'model')
      assert model is None or model in mnist5k_models
      digits_model = tables.flag_value(
          [a.replace('--task_option=model', '--model', 1) for a in d.argv],
          'model')
      assert digits_model in (None, 'cnn_bn', 'mtt_convnet', 'cnn_proj')
      assert model == {None: None, 'cnn_bn': 'fedbn_cnn',
                       'mtt_convnet': 'mtt_convnet',
                       'cnn_proj': 'small_cnn_proj'}[digits_model]
    assert _DIGITS_NOTE in table.scale('small', 'digits').stand_in
    note = table.scale('small').stand_in
    assert 'MNIST-5k (real 28x28 MNIST digits' in note
    assert _DIGITS_NOTE not in note
  assert tasks.task_options('mnist5k')['model'] == 'small_cnn'
  curv = paper_tables.get_table('fedcurv', '1')
  # 50 local epochs of 24 clients are too slow here: E/10 at small scale.
  assert [tables.flag_value(s.flags, 'client_epochs')
          for s in curv.small.settings] == ['5', '1']
  assert [tables.flag_value(s.flags, 'client_epochs')
          for s in curv.paper_scale.settings] == ['50', '10']
  assert 'E/10' in curv.small.stand_in


_DIGITS_NOTE = 'scikit-learn digits (8x8, 1,437 train examples)'


def test_the_stand_ins_have_their_own_directories_and_data_dir(tmp_path,
                                                                capsys):
  out = str(tmp_path)
  assert _main(['--paper=fedopt', '--table=11', '--dry_run',
                f'--out_dir={out}'], _never) == 0
  lines = [l for l in capsys.readouterr().out.splitlines()
           if l.startswith('python -m binaries.train ')]
  assert all(' --task=mnist5k ' in l and ' --data_dir=data ' in l and
             f'{out}/fedopt_table11_small/runs/' in l for l in lines), lines
  assert _main(['--paper=fedopt', '--table=11', '--dry_run',
                '--stand_in=digits', '--data_dir=D', f'--out_dir={out}'],
               _never) == 0
  lines = [l for l in capsys.readouterr().out.splitlines()
           if l.startswith('python -m binaries.train ')]
  assert all(' --task=digits ' in l and ' --data_dir=D ' in l and
             f'{out}/fedopt_table11_small_digits/runs/' in l for l in lines)


def test_unknown_stand_in_is_refused():
  table = paper_tables.get_table('fedopt', '1')
  with pytest.raises(ValueError, match="stand_in must be one of mnist5k, "
                     "digits, got 'emnist'"):
    table.scale('small', 'emnist')


def test_unknown_paper_and_table_are_refused(capsys):
  assert _main(['--paper=nope', '--table=1'], _never) == 2
  assert capsys.readouterr().err == (
      'reproduce: error: flag --paper=nope: value should be one of '
      '<fedfor|fedcurv|fedadc|fedptr|fedopt>\n')
  assert _main(['--paper=fedopt', '--table=7'], _never) == 2
  assert capsys.readouterr().err == (
      'reproduce: error: --table=7: fedopt has no reproducible table 7; its '
      'tables are 1, 11.\n')
  assert _main(['--paper=fedfor'], _never) == 2
  assert capsys.readouterr().err == (
      'reproduce: error: --table is required; fedfor\'s tables are 2, 3, 4, '
      '5.\n')


# --- Numbers and layout on fabricated runs ----------------------------------


def _expected(algorithm, epochs, seeds, fn):
  """mean, sample std over seeds of fn(accuracy curve)."""
  values = []
  for seed in range(seeds):
    argv = [f'--algorithm={algorithm}', f'--seed={seed}',
            f'--client_epochs={epochs}']
    values.append(fn(lambda r, a=argv: _accuracy(a, r)))
  return np.mean(values), np.std(values, ddof=1)


def _csv(path):
  with open(path) as f:
    return {row[next(iter(row))]: row for row in csv.DictReader(f)}


def test_table_layout_mean_std_and_rounds_to_target(tmp_path, capsys):
  out = str(tmp_path)
  assert _main(['--paper=fedfor', '--table=4', '--seeds=2',
                f'--out_dir={out}']) == 0
  work = os.path.join(out, 'fedfor_table4_small')
  table = _csv(os.path.join(work, 'table.csv'))
  # Rows as the paper's: methods; columns E x (ACC80, t=half, t=full).
  assert list(table) == ['FedBN', 'FedProx', 'FedDYN', 'FedCurv', 'FedFOR']
  with open(os.path.join(work, 'table.csv')) as f:
    header = next(csv.reader(f))
  assert header[:6] == ['Method', 'E=1 ACC80 ours', 'E=1 ACC80 ours std',
                        'E=1 ACC80 ours seeds', 'E=1 ACC80 paper',
                        'E=1 ACC80 paper std']
  assert header[6] == 'E=1 t=50 ours'
  # Stand-in E=1: 20 rounds; the paper's t=50 of 100 -> round 10.
  mean, std = _expected('fedfor', 1, 2, lambda acc: max(
      acc(r) for r in range(1, 11)))
  row = table['FedFOR']
  assert float(row['E=1 t=50 ours']) == pytest.approx(100 * mean)
  assert float(row['E=1 t=50 ours std']) == pytest.approx(100 * std)
  assert row['E=1 t=50 ours seeds'] == '2'
  assert float(row['E=1 t=50 paper']) == 85.52
  assert float(row['E=1 t=50 paper std']) == 0.15
  # Rounds to 80% (E=4: 10 rounds): first round with accuracy >= 0.8.
  mean, std = _expected('fedfor', 4, 2, lambda acc: next(
      r for r in range(1, 100) if acc(r) >= 0.8))
  assert (mean, std) == (9.5, pytest.approx(np.sqrt(0.5)))
  assert float(table['FedFOR']['E=4 ACC80 ours']) == pytest.approx(mean)
  assert float(table['FedFOR']['E=4 ACC80 ours std']) == pytest.approx(std)
  assert float(table['FedFOR']['E=4 ACC80 paper']) == 4
  # FedProx reaches 0.8 at round 18 or 17: not within 10 rounds.
  assert table['FedProx']['E=4 ACC80 ours'] == ''
  assert table['FedProx']['E=4 ACC80 ours seeds'] == '0'
  markdown = open(os.path.join(work, 'table.md')).read()
  assert '**--scale=small: STAND-IN:' in markdown
  assert markdown.count('\n| ') == 6  # header + five methods
  fedfor_row = next(line for line in markdown.splitlines()
                    if line.startswith('| FedFOR |'))
  cells = [c.strip() for c in fedfor_row.strip('|').split('|')]
  mean, std = _expected('fedfor', 1, 2, lambda acc: next(
      r for r in range(1, 100) if acc(r) >= 0.8))
  assert (mean, round(std, 1)) == (9.5, 0.7)  # Seeds reach 80% at 10, 9.
  assert cells[1] == '9.5 ± 0.7 (paper 8)'
  assert cells[2].endswith(' (paper 85.52 ± 0.15)')
  prox = next(line for line in markdown.splitlines()
              if line.startswith('| FedProx |'))
  assert prox.split('|')[8].strip() == 'not reached (paper 6)'  # E=4 ACC80
  assert 'STAND-IN' in capsys.readouterr().out


def test_target_not_reached_and_paper_only_rows(tmp_path):
  out = str(tmp_path)

  def slow(argv, log_path):
    # FedAvg never reaches 85%; FedCurv does.
    status = fabricate(argv, log_path)
    if _flag(argv, 'algorithm') == 'fedopt':
      path = os.path.join(_flag(argv, 'output_dir'), 'metrics.csv')
      rows = list(csv.reader(open(path)))
      with open(path, 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(rows[0])
        for row in rows[1:]:
          writer.writerow([row[0], row[1], 0.5])
    return status

  assert _main(['--paper=fedcurv', '--table=1', f'--out_dir={out}'],
               slow) == 0
  markdown = open(os.path.join(out, 'fedcurv_table1_small',
                               'table.md')).read()
  fedavg = next(line for line in markdown.splitlines()
                if line.startswith('| FedAvg |'))
  assert fedavg.split('|')[2].strip() == 'not reached (paper 76)'
  # FedProx mu=0.00025 ran at E=50 only: '—' at E=10.
  prox = next(line for line in markdown.splitlines()
              if line.startswith('| FedProx, mu=0.00025 |'))
  assert [c.strip() for c in prox.strip('|').split('|')][4:] == ['—'] * 3


# --- Resume, failures, dry run ----------------------------------------------


def test_finished_points_are_skipped_failed_ones_rerun(tmp_path, capsys):
  out = str(tmp_path)
  args = ['--paper=fedopt', '--table=1', f'--out_dir={out}']

  def fail_yogi(argv, log_path):
    if _flag(argv, 'server_opt') == 'yogi':
      return 1
    return fabricate(argv, log_path)

  assert _main(args, fail_yogi) == 2
  err = capsys.readouterr().err
  assert err.startswith('reproduce: error: 1 runs failed: '
                        'fedyogi__cifar_10__seed0; see ')
  markdown = open(os.path.join(out, 'fedopt_table1_small',
                               'table.md')).read()
  assert 'not run yet (paper 78.0)' in markdown  # FedYogi, CIFAR-10
  launched = []

  def record(argv, log_path):
    launched.append(_flag(argv, 'server_opt'))
    return fabricate(argv, log_path)

  assert _main(args, record) == 0
  assert launched == ['yogi']
  assert 'not run yet' not in open(os.path.join(
      out, 'fedopt_table1_small', 'table.md')).read()
  assert _main(args, _never) == 0
  assert 'fedavg__cifar_10__seed0: finished before, skipped' in (
      capsys.readouterr().out)


def test_ctrl_c_exits_130_with_one_line(tmp_path, capsys):
  def interrupted(argv, log_path):
    raise KeyboardInterrupt

  assert _main(['--paper=fedopt', '--table=1', f'--out_dir={tmp_path}'],
               interrupted) == 130
  assert capsys.readouterr().err == (
      'reproduce: interrupted; resume with: python -m binaries.reproduce '
      f'--paper=fedopt --table=1 --out_dir={tmp_path}\n')


def test_a_run_with_other_settings_is_refused_before_any_run(tmp_path,
                                                            capsys):
  point_dir = os.path.join(tmp_path, 'fedopt_table1_small', 'runs',
                           'fedavg__cifar_10__seed0')
  os.makedirs(point_dir)
  with open(os.path.join(point_dir, 'hparams.json'), 'w') as f:
    f.write('{"client_epochs": 50}')
  assert _main(['--paper=fedopt', '--table=1', f'--out_dir={tmp_path}'],
               _never) == 2
  err = capsys.readouterr().err
  assert err.startswith(
      'reproduce: error: fedopt table 1 (--scale=small, --stand_in=mnist5k): '
      'point '
      f'fedavg__cifar_10__seed0: --output_dir={point_dir} holds a run with '
      'other settings: ')
  assert "--client_epochs=1 (saved run: 50)" in err  # mnist5k: 1 epoch
  assert err.count('\n') == 1


def test_dry_run_prints_the_runs_and_launches_nothing(tmp_path, capsys):
  out = str(tmp_path)
  assert _main(['--paper=fedopt', '--table=11', '--dry_run',
                f'--out_dir={out}'], _never) == 0
  lines = [l for l in capsys.readouterr().out.splitlines()
           if l.startswith('python -m binaries.train ')]
  assert len(lines) == 10  # 5 optimizers x (constant, ExpDecay)
  assert any('--client_lr_decay=staircase' in l and '--server_opt=adam' in l
             for l in lines)
  assert not os.path.exists(os.path.join(out, 'fedopt_table11_small', 'runs'))


# --- Refusing up front -------------------------------------------------------


def test_unregistered_algorithm_is_refused_before_any_run(tmp_path, capsys,
                                                          monkeypatch):
  algorithms = dict(registry.ALGORITHMS)
  del algorithms['feddyn']
  monkeypatch.setattr(registry, 'ALGORITHMS', algorithms)
  assert _main(['--paper=fedfor', '--table=3', f'--out_dir={tmp_path}'],
               _never) == 2
  assert capsys.readouterr().err == (
      'reproduce: error: fedfor table 3 (--scale=small, --stand_in=mnist5k) '
      'cannot run here: '
      '--algorithm=feddyn is not registered (registered: ' +
      ', '.join(algorithms) + '), needed by FedDYN.\n')


def test_missing_dataset_at_paper_scale_is_refused(tmp_path, capsys):
  data_dir = str(tmp_path / 'data')
  assert _main(['--paper=fedopt', '--table=1', '--scale=paper',
                f'--data_dir={data_dir}', f'--out_dir={tmp_path}'], _never,
               load_data=True) == 2
  err = capsys.readouterr().err
  assert err.startswith(
      "reproduce: error: fedopt table 1 (--scale=paper): task 'cifar10' "
      f'needs {data_dir}/cifar10/')
  assert err.count('\n') == 1
  assert not os.path.exists(os.path.join(tmp_path, 'fedopt_table1_paper'))


# --- One real tiny run --------------------------------------------------------


def test_one_small_point_trains_for_real(tmp_path, monkeypatch):
  table = paper_tables.get_table('fedopt', '1')
  setting = dataclasses.replace(
      table.small.settings[0], rounds=2,
      measures=(paper_tables.Measure('last 100', 'last_mean', 2),))
  tiny = dataclasses.replace(
      table, methods=table.methods[-1:],  # FedAvg
      small=dataclasses.replace(table.small, settings=(setting,),
                                flags=('--eval_every=1',
                                       '--clients_per_round=3')))
  monkeypatch.setitem(paper_tables.TABLES, ('fedopt', '1'), tiny)

  def in_process(argv, log_path):
    del log_path
    return binary.run_train(*argv)

  assert _main(['--paper=fedopt', '--table=1', '--stand_in=digits',
                f'--out_dir={tmp_path}'], in_process, load_data=True) == 0
  work = os.path.join(tmp_path, 'fedopt_table1_small_digits')
  row = _csv(os.path.join(work, 'table.csv'))['CIFAR-10']
  accuracy = float(row['FedAvg ours'])
  assert 0 <= accuracy <= 100
  with open(os.path.join(work, 'runs', 'fedavg__cifar_10__seed0',
                         'metrics.csv')) as f:
    rows = list(csv.DictReader(f))
  assert [r['round'] for r in rows] == ['1', '2']
  assert accuracy == pytest.approx(
      50 * (float(rows[0]['eval_accuracy']) + float(rows[1]['eval_accuracy'])))
  assert 'FedAvg' in open(os.path.join(work, 'table.md')).read()


def test_a_later_task_option_replaces_the_earlier_one():
  """MOON's model with a projection head in a setting of another model."""
  assert reproduce.merged_flags(
      ('--task=mnist5k', '--task_option=model=small_cnn',
       '--task_option=partition=sort', '--client_lr=0.05'),
      ('--algorithm=moon', '--task_option=model=small_cnn_proj',
       '--client_lr=0.01')) == (
           '--task=mnist5k', '--task_option=partition=sort',
           '--client_lr=0.05', '--algorithm=moon',
           '--task_option=model=small_cnn_proj', '--client_lr=0.01')


def test_task_default_models_are_the_tasks():
  import tasks  # pylint: disable=g-import-not-at-top
  for task, model in paper_tables.TASK_DEFAULT_MODELS.items():
    assert tasks.task_options(task)['model'] == model, task


def test_moon_runs_its_settings_model_with_the_projection_head():
  table = paper_tables.get_table('fedadc', '1')

  def moon_models(scale, stand_in):
    return {tables.flag_value(
        [a.replace('--task_option=model', '--model', 1) for a in p.argv],
        'model') for p in reproduce.grid(table, scale, seeds=1, work_dir='w',
                                         stand_in=stand_in)
            if p.method.label == 'MOON'}

  assert moon_models('paper', 'mnist5k') == {'fedadc_cnn_proj',
                                             'resnet18_gn_proj'}
  assert moon_models('small', 'mnist5k') == {'small_cnn_proj'}
  assert moon_models('small', 'digits') == {'cnn_proj'}


def test_threads_per_run_reaches_the_runs_environment(tmp_path, monkeypatch):
  launcher, seen = binary.recording_threads(fabricate, monkeypatch)
  assert _main(['--paper=fedopt', '--table=1', f'--out_dir={tmp_path}',
                '--parallel=2', '--threads_per_run=1'], launcher) == 0
  assert set(seen) == {('1', '1')}
