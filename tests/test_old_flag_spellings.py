"""Every algorithm flag's earlier spelling still sets it.

The flags are named `<algorithm>_<hyper-parameter>` (`--fedcurv_lam`);
command lines, scripts and recorded runs written with the earlier names
(`--lam`, `--mu`, `hparams.json`'s `mu`) must keep doing what they did.
"""

import dataclasses
import json
import os
import re

from absl import flags
import pytest

from binaries import train
from tests import binary
from tff_opt.algorithms import hparams as hparams_lib
from tff_opt.program import output_dir as output_dir_lib
from tff_opt.program import registry


def _algorithm_reading(flag):
  """The first registered algorithm that reads `flag`."""
  return next(a.name for a in registry.ALGORITHMS.values()
              if flag in a.flags)


def _valid_text(hparam):
  """A value inside `hparam`'s range other than its default, as text."""
  if hparam.kind == 'boolean':
    return str(not hparam.default).lower()
  if hparam.kind == 'enum':
    return next(c for c in hparam.choices if c != hparam.default)
  lower = hparam.lower if hparam.lower is not None else 0
  if hparam.kind == 'integer':
    value = lower + 1
    return str(value + 1 if value == hparam.default else value)
  value = (lower + hparam.upper) / 4 if hparam.upper is not None else (
      lower + 0.75)
  return repr(value + 0.125 if value == hparam.default else value)


# (old spelling, its declaration): every alias that a declaration lists.
OLD_SPELLINGS = [(alias, h) for h in registry.algorithm_hparams()
                 for alias in h.aliases]


def test_every_renamed_flag_keeps_its_old_spelling():
  # The renamed flags, each with the spelling it had.
  old = {h.flag: h.aliases for h in registry.algorithm_hparams()
         if h.aliases}
  assert old['fedcurv_lam'] == ('lam',)
  assert old['fedprox_mu'] == old['fedptr_mu'] == ('mu',)
  assert old['fedadc_beta'] == old['slowmo_beta'] == ('beta',)
  assert old['fedntd_beta'] == ('ntd_beta',)
  assert old['fedgkd_buffer_size'] == ('gkd_buffer_size',)
  assert old['fedfor_alpha'] == ('alpha',)
  assert len(OLD_SPELLINGS) == 25


@pytest.mark.parametrize('name', sorted(registry.ALGORITHMS))
def test_every_algorithm_flag_is_named_after_its_algorithm(name):
  # FedADC+ (fedadc_plus) is FedADC's family, FedPTR-S (fedptr_s) FedPTR's.
  family = name.split('_')[0]
  for flag in registry.ALGORITHMS[name].flags:
    assert flag.startswith(f'{family}_'), flag


@pytest.mark.parametrize('alias, hparam', OLD_SPELLINGS,
                         ids=[f'{a}-{h.flag}' for a, h in OLD_SPELLINGS])
def test_old_spelling_sets_the_new_flag(alias, hparam):
  algorithm = _algorithm_reading(hparam.flag)
  text = _valid_text(hparam)
  settings = binary.resolve_hparams(f'--algorithm={algorithm}',
                                    f'--{alias}={text}')
  want = train.FLAGS[hparam.flag].parser.parse(text)
  assert want != hparam.default
  assert settings[hparam.flag] == want
  assert alias not in settings
  assert 'ignored_flags' not in settings  # It was read, not ignored.


def test_negated_old_boolean_spelling_sets_the_new_flag():
  settings = binary.resolve_hparams('--algorithm=fedptr_s', '--mu=0.1',
                                    '--layer_adaptive', '--nolayer_adaptive')
  assert settings['fedptr_layer_adaptive'] is False
  settings = binary.resolve_hparams('--algorithm=fedptr_s', '--mu=0.1',
                                    '--layer_adaptive')
  assert settings['fedptr_layer_adaptive'] is True


@pytest.mark.parametrize('algorithm, flag', [
    ('fedprox', 'fedprox_mu'), ('fedptr', 'fedptr_mu'),
    ('fedptr_s', 'fedptr_mu')])
def test_mu_goes_to_the_runs_algorithm(algorithm, flag):
  settings = binary.resolve_hparams(f'--algorithm={algorithm}', '--mu=0.1')
  assert settings[flag] == 0.1
  assert {'mu', 'fedprox_mu', 'fedptr_mu'} & set(settings) == {flag}


@pytest.mark.parametrize('algorithm, flag', [
    ('fedadc', 'fedadc_beta'), ('fedadc_plus', 'fedadc_beta'),
    ('slowmo', 'slowmo_beta')])
def test_beta_goes_to_the_runs_algorithm(algorithm, flag):
  settings = binary.resolve_hparams(f'--algorithm={algorithm}', '--beta=0.5',
                                    '--client_opt=sgd')
  assert settings[flag] == 0.5


def test_old_and_new_spelling_with_one_value_is_accepted():
  settings = binary.resolve_hparams('--algorithm=fedprox', '--mu=0.1',
                                    '--fedprox_mu=0.1')
  assert settings['fedprox_mu'] == 0.1


def test_old_and_new_spelling_with_two_values_is_one_line_and_exit_2(
    tmp_path, capsys):
  out = tmp_path / 'run'
  assert binary.run_train('--task=digits', '--algorithm=fedprox', '--mu=0.1',
                          '--fedprox_mu=0.2', f'--output_dir={out}') == 2
  assert capsys.readouterr().err == (
      'train: error: --mu=0.1 and --fedprox_mu=0.2: --mu is the old '
      'spelling of --fedprox_mu; give one value.\n')
  assert not out.exists()


@pytest.mark.parametrize('argv, line', [
    (['--algorithm=fedcurv', '--lam=-1'],
     '--lam=-1 (--fedcurv_lam): lam must be a non-negative number, got '
     '-1.0.'),
    (['--algorithm=fedprox', '--mu=-1'],
     '--mu=-1: mu must be a non-negative number, got -1.0.'),
    # Refused while parsing, whichever algorithm would read it.
    (['--algorithm=fedopt', '--beta=1.5'],
     '--beta=1.5: beta must be in [0, 1), got 1.5.'),
    (['--algorithm=fedptr_s', '--update_every=-2'],
     '--update_every=-2 (--fedptr_update_every): update_every must be an '
     'integer >= 0, got -2.'),
])
def test_old_spelling_out_of_range_is_refused_naming_the_flag(
    argv, line, tmp_path, capsys):
  out = tmp_path / 'run'
  assert binary.run_train('--task=digits', *argv,
                          f'--output_dir={out}') == 2
  assert capsys.readouterr().err == f'train: error: {line}\n'
  assert not out.exists()


@pytest.mark.parametrize('recorded, current', [
    ({'algorithm': 'fedprox', 'mu': 0.1},
     {'algorithm': 'fedprox', 'fedprox_mu': 0.1}),
    ({'algorithm': 'fedptr_s', 'mu': 0.1, 'layer_adaptive': True},
     {'algorithm': 'fedptr_s', 'fedptr_mu': 0.1,
      'fedptr_layer_adaptive': True}),
    ({'algorithm': 'fedcurv', 'lam': 1.0, 'fedcurv_exact': 'auto'},
     {'algorithm': 'fedcurv', 'fedcurv_lam': 1.0, 'fedcurv_exact': 'auto'}),
    ({'algorithm': 'slowmo', 'beta': 0.9},
     {'algorithm': 'slowmo', 'slowmo_beta': 0.9}),
    # Today's names are left as they are; an unknown algorithm too.
    ({'algorithm': 'fedprox', 'fedprox_mu': 0.2},
     {'algorithm': 'fedprox', 'fedprox_mu': 0.2}),
    ({'algorithm': 'gone', 'mu': 0.1}, {'algorithm': 'gone', 'mu': 0.1}),
])
def test_with_current_names_renames_a_recorded_runs_settings(recorded,
                                                             current):
  assert registry.with_current_names(recorded) == current


def _old_run(tmp_path, **settings):
  """A run directory whose hparams.json has the earlier flag names."""
  output_dir = tmp_path / 'run'
  output_dir.mkdir()
  saved = {'algorithm': 'fedcurv', 'lam': 1.0, 'fedcurv_exact': 'auto',
           'rounds': 3, 'output_dir': str(output_dir), **settings}
  (output_dir / 'hparams.json').write_text(json.dumps(saved))
  return str(output_dir)


def test_a_run_recorded_with_old_names_resumes(tmp_path):
  output_dir = _old_run(tmp_path)
  assert output_dir_lib.prepare(
      {'algorithm': 'fedcurv', 'fedcurv_lam': 1.0, 'fedcurv_exact': 'auto',
       'rounds': 5, 'output_dir': output_dir},
      train.RESUMABLE_CHANGES) is True


def test_a_run_recorded_with_old_names_refuses_another_value(tmp_path):
  output_dir = _old_run(tmp_path)
  with pytest.raises(output_dir_lib.RefusedError, match=(
      r'holds a run with other settings: --fedcurv_lam=3\.0 '
      r'\(saved run: 1\.0\)\. ')):
    output_dir_lib.prepare(
        {'algorithm': 'fedcurv', 'fedcurv_lam': 3.0, 'fedcurv_exact': 'auto',
         'rounds': 3, 'output_dir': output_dir}, train.RESUMABLE_CHANGES)


def test_an_old_spelling_that_is_also_a_flag_is_refused():
  clash = hparams_lib.HParam('x_lam', 1.0, 'x.', aliases=('fedcurv_lam',))
  with pytest.raises(ValueError, match=r'^--fedcurv_lam is both a flag and '
                     r'an old spelling of --x_lam\.$'):
    hparams_lib.old_spelling_targets(
        (*registry.algorithm_hparams(), clash))


def test_a_shared_old_spelling_must_name_float_flags():
  values = flags.FlagValues()
  one = hparams_lib.HParam('a_n', 1, 'n.', kind='integer', aliases=('n',))
  two = hparams_lib.HParam('b_n', 1, 'n.', kind='integer', aliases=('n',))
  with pytest.raises(ValueError, match=r'^--n: an old spelling shared by '):
    hparams_lib.define_flags((one, two), values)


def test_the_readme_algorithm_table_lists_each_algorithms_flags():
  readme = os.path.join(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))), 'README.md')
  with open(readme, encoding='utf-8') as f:
    rows = [line.split(' | ') for line in f
            if line.startswith('| [') and '(docs/algorithms/' in line]
  listed = set()
  for row in rows:
    names = re.findall(r'`([a-z_]+)', row[2])
    flags_listed = re.findall(r'`--([a-z_]+)`', row[4])
    if row[2].startswith('`--fedbn'):
      assert flags_listed == ['fedbn']
      continue
    want = {f for n in names for f in registry.ALGORITHMS[n].flags}
    assert set(flags_listed) == want, row[0]
    listed.update(names)
  assert listed == set(registry.ALGORITHMS)


def test_registry_reads_a_setting_under_its_old_spelling(monkeypatch):
  # A program that calls `registry.build_process` with the earlier names.
  seen = {}
  monkeypatch.setitem(registry.ALGORITHMS, 'fedcurv', dataclasses.replace(
      registry.ALGORITHMS['fedcurv'],
      builder=lambda model_fn, **kwargs: seen.update(kwargs)))
  registry.build_process('fedcurv', None, client_optimizer_fn=None,
                         server_optimizer_fn=None, client_weighting=None,
                         client_lr_schedule=None, num_clients=4, lam=0.3)
  assert seen['lam'] == 0.3
  # Today's name wins where both are given.
  registry.build_process('fedcurv', None, client_optimizer_fn=None,
                         server_optimizer_fn=None, client_weighting=None,
                         client_lr_schedule=None, num_clients=4, lam=0.3,
                         fedcurv_lam=0.7)
  assert seen['lam'] == 0.7
