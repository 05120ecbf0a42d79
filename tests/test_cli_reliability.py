"""Command-line behaviour users meet first: help exits 0, bad values refused."""

import os

import pytest

from binaries import claims
from binaries import sweep
from binaries import train
from tests import binary


@pytest.mark.parametrize('flag', ['--help', '--helpfull', '-h'])
def test_train_help_is_printed_and_is_a_success(flag, capsys):
  assert train._help_requested(['train', flag])  # pylint: disable=protected-access
  out = capsys.readouterr().out
  assert '--server_lr' in out and '--fedcurv_exact' in out
  assert not train._help_requested(['train', '--rounds=3'])  # pylint: disable=protected-access


def test_other_binaries_treat_helpfull_as_help(capsys):
  assert not sweep.parse_argv(['claims', '--helpfull'], claims.FLAGS,
                              'doc line', lambda m: pytest.fail(m))
  assert capsys.readouterr().out.startswith('doc line\n')


def test_zero_server_lr_is_refused_in_one_line_and_leaves_no_dir(
    tmp_path, capsys):
  out = tmp_path / 'run'
  assert binary.run_train('--task=digits', '--server_lr=0', '--rounds=1',
                          f'--output_dir={out}') == 2
  assert capsys.readouterr().err == (
      'train: error: --server_lr=0.0: learning_rate must be positive, got '
      '0.0.\n')
  assert not os.path.exists(out)


def test_ctrl_c_exits_130_with_one_line(tmp_path, capsys, monkeypatch):
  def interrupted(hparams):
    raise KeyboardInterrupt
  monkeypatch.setattr(train, 'run', interrupted)
  out = tmp_path / 'run'
  assert binary.run_train('--task=digits', f'--output_dir={out}') == 130
  assert capsys.readouterr().err == (
      f'train: interrupted; resume with the same command ({out}).\n')
