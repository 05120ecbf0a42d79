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


@pytest.mark.parametrize('task, option, value, message', [
    ('digits', 'alpha', 'abc',
     "option alpha='abc': expected a number (default 0.5)"),
    ('digits', 'num_clients', 2.5,
     'option num_clients=2.5: expected an integer (default 100)'),
    ('digits', 'num_clients', True,
     'option num_clients=True: expected an integer (default 100)'),
    ('digits', 'partition', 3,
     "option partition=3: expected a string (default 'dirichlet')"),
    ('shakespeare', 'lstm_units', 'abc',
     "option lstm_units='abc': expected an integer (default 256)"),
])
def test_task_option_of_the_wrong_type_is_one_clear_error(task, option, value,
                                                         message):
  import tasks  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  spec = tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=1)
  with pytest.raises(ValueError) as e:
    tasks.create_task(task, train_client_spec=spec, **{option: value})
  assert str(e.value) == message


def test_task_option_given_as_int_where_a_number_is_expected_is_accepted():
  import tasks  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  spec = tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=1)
  task = tasks.create_task('digits', train_client_spec=spec, alpha=1,
                           num_clients=5)
  assert len(task.datasets.train_data.client_ids) == 5


def test_corrupt_or_foreign_sqlite_is_one_line(tmp_path):
  import sqlite3  # pylint: disable=g-import-not-at-top
  from tasks import data_errors  # pylint: disable=g-import-not-at-top
  path = tmp_path / 'shakespeare.sqlite'
  path.write_bytes(b'garbage, not a database' * 100)
  with pytest.raises(data_errors.BadDataError) as e:
    data_errors.require_file('shakespeare', str(tmp_path), path.name, 'x')
  assert str(e.value) == (
      f"task 'shakespeare': {path} is not a readable SQLite database (file "
      "is not a database); expected TFF's format (tables client_metadata and "
      'examples)')
  path.unlink()
  with sqlite3.connect(path) as db:
    db.execute('CREATE TABLE examples (x TEXT)')
  with pytest.raises(data_errors.BadDataError) as e:
    data_errors.require_file('shakespeare', str(tmp_path), path.name, 'x')
  assert str(e.value) == (
      f"task 'shakespeare': {path} has no table client_metadata; expected "
      "TFF's format (tables client_metadata and examples)")


def test_binaries_import_tensorflow_without_its_start_up_noise():
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  code = ('import binaries, os, sys; '
          "os.write(2, b'kept line\\n'); "
          "print(os.environ['TF_ENABLE_ONEDNN_OPTS'])")
  done = subprocess.run([sys.executable, '-c', code], cwd=root,
                        capture_output=True, text=True, timeout=120,
                        env={k: v for k, v in os.environ.items()
                             if k not in ('TF_ENABLE_ONEDNN_OPTS',
                                          'TF_CPP_MIN_LOG_LEVEL')})
  assert done.returncode == 0
  assert done.stdout == '1\n'
  assert 'Unable to register' not in done.stderr
  assert 'TensorRT' not in done.stderr
  assert done.stderr.endswith('kept line\n')
