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


_POSITIVE = 'expected a positive integer.'


@pytest.mark.parametrize('argv, message', [
    (['--server_lr=-1'], '--server_lr=-1: expected a non-negative number.'),
    (['--client_lr=abc'], '--client_lr=abc: expected a non-negative number.'),
    (['--rounds=0'], f'--rounds=0: {_POSITIVE}'),
    (['--rounds', '0'], f'--rounds=0: {_POSITIVE}'),
    (['--rounds=1.5'], f'--rounds=1.5: {_POSITIVE}'),
    (['--clients_per_round=-1'],
     '--clients_per_round=-1: expected a non-negative integer.'),
    (['--client_batch_size=0'], f'--client_batch_size=0: {_POSITIVE}'),
    (['--eval_every=0'], f'--eval_every=0: {_POSITIVE}'),
    (['--checkpoint_every=0'], f'--checkpoint_every=0: {_POSITIVE}'),
    (['--client_epochs=0'], f'--client_epochs=0: {_POSITIVE}'),
    # An algorithm's hyper-parameter: its declaration's check, the
    # builder's sentence.
    (['--fedprox_mu=-1'],
     '--fedprox_mu=-1: mu must be a non-negative number, got -1.0.'),
    (['--fedfor_alpha=-1'],
     '--fedfor_alpha=-1: alpha must be a non-negative number, got -1.0.'),
    (['--slowmo_beta=1'], '--slowmo_beta=1: beta must be in [0, 1), got 1.0.'),
    (['--fedadc_beta=abc'], '--fedadc_beta=abc: expected a number.'),
    # Their earlier spellings, refused alike (a one-to-one one names the
    # flag it sets; --mu and --beta set the run's algorithm's).
    (['--mu=-1'], '--mu=-1: mu must be a non-negative number, got -1.0.'),
    (['--alpha=-1'], '--alpha=-1 (--fedfor_alpha): alpha must be a '
     'non-negative number, got -1.0.'),
    (['--ntd_beta', '-1'], '--ntd_beta=-1 (--fedntd_beta): beta must be a '
     'non-negative number, got -1.0.'),
    (['--beta=1'], '--beta=1: beta must be in [0, 1), got 1.0.'),
    (['--beta=abc'], '--beta=abc: expected a number.'),
    (['--lam=abc'], '--lam=abc (--fedcurv_lam): expected a number.'),
    (['--seed=-1'],
     '--seed=-1: expected an integer in the range [0, 4294967295].'),
    (['--task=nope'], '--task=nope: expected one of {tasks}.'),
    (['--algorithm=nope'], '--algorithm=nope: expected one of {algorithms}.'),
    (['--fedbn=3'], '--fedbn=3: expected true or false.'),
    (['--personalize_train_fraction=2'],
     '--personalize_train_fraction=2: must be in (0, 1)'),
    (['--rounds=3', '--rounds'], '--rounds: expected a value (--rounds=...).'),
    (['--nope=1'], '--nope: no such flag (python -m binaries.train --helpfull '
     'lists every flag).'),
    (['--mu_=1'], '--mu_: no such flag (python -m binaries.train --helpfull '
     'lists every flag). Did you mean --mu?'),
    (['--nofedbn=1'], '--nofedbn=1 does not take an argument'),
])
def test_bad_flag_is_one_line_naming_the_flag_and_what_it_takes(argv,
                                                                message):
  """One line and exit 2, not absl's `FATAL Flags parsing error` (exit 1)."""
  import tasks  # pylint: disable=g-import-not-at-top
  from tff_opt.program import registry  # pylint: disable=g-import-not-at-top
  train.FLAGS.unparse_flags()
  try:
    with pytest.raises(train.UsageError) as e:
      train.parse_flags(['train', *argv])
  finally:
    train.FLAGS.unparse_flags()
  assert str(e.value) == message.format(
      tasks=', '.join(tasks.TASK_NAMES),
      algorithms=', '.join(registry.ALGORITHMS))


def test_bad_flag_exits_2_in_one_line_and_creates_nothing(tmp_path):
  """The binary itself (absl's `app.run` and train's parser)."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  out = tmp_path / 'run'
  done = subprocess.run(
      [sys.executable, '-m', 'binaries.train', '--seed=-1',
       f'--output_dir={out}'], cwd=root, capture_output=True, text=True,
      timeout=120, check=False)
  assert done.returncode == 2
  assert done.stderr.splitlines()[-1] == (
      'train: error: --seed=-1: expected an integer in the range [0, '
      '4294967295].')
  assert 'Traceback' not in done.stderr and 'FATAL' not in done.stderr
  assert not os.path.exists(out)


@pytest.mark.parametrize('argv, ignored, note', [
    (['--algorithm=fedopt', '--mu=0.5'], {'mu': 0.5},
     '--mu does not apply to --algorithm=fedopt'),
    (['--algorithm=fedprox', '--mu=0.5', '--fedfor_alpha=3', '--beta=0.5'],
     {'fedfor_alpha': 3.0, 'beta': 0.5},
     '--fedfor_alpha, --beta do not apply to --algorithm=fedprox'),
    # A one-to-one earlier spelling is recorded under today's name.
    (['--algorithm=fedprox', '--fedprox_mu=0.5', '--alpha=3'],
     {'fedfor_alpha': 3.0},
     '--fedfor_alpha does not apply to --algorithm=fedprox'),
    (['--algorithm=slowmo', '--server_lr=0.3', '--beta=0.5'],
     {'server_lr': 0.3}, '--server_lr does not apply to --algorithm=slowmo'),
    (['--algorithm=fedprox', '--mu=0.5'], None, None),
    # Flags the chosen server optimizer or schedule does not read.
    (['--algorithm=fedopt', '--server_opt=sgd', '--mu=0.5',
      '--server_momentum=0.5', '--server_tau=0.1'],
     {'mu': 0.5, 'server_momentum': 0.5, 'server_tau': 0.1},
     '--mu does not apply to --algorithm=fedopt; --server_momentum, '
     '--server_tau do not apply to --server_opt=sgd'),
    (['--algorithm=fedopt', '--server_opt=adagrad', '--server_beta_2=0.9',
      '--server_beta_1=0.5'], {'server_beta_2': 0.9},
     '--server_beta_2 does not apply to --server_opt=adagrad'),
    (['--algorithm=fedopt', '--server_opt=sgdm', '--server_momentum=0.5',
      '--client_lr_decay_every=7'], {'client_lr_decay_every': 7},
     '--client_lr_decay_every does not apply to --client_lr_decay=none'),
    (['--algorithm=fedopt', '--client_lr_decay=staircase',
      '--client_lr_decay_every=7'], None, None),
    # A default is not a flag given: nothing is noted.
    (['--algorithm=fedopt'], None, None),
])
def test_flags_the_algorithm_does_not_read_are_noted_and_recorded(
    argv, ignored, note):
  """Recorded as `ignored_flags`, never compared on resume."""
  train.FLAGS.unparse_flags()
  try:
    train.parse_flags(['train', '--task=digits', *argv])
    hparams = train.resolve_hparams()
  finally:
    train.FLAGS.unparse_flags()
  assert hparams.get('ignored_flags') == ignored
  assert train.ignored_flags_note(hparams) == (
      None if note is None else
      f'train: note: {note}; ignored (recorded as ignored_flags in '
      'hparams.json).')
  assert 'ignored_flags' in train.RESUMABLE_CHANGES


def test_ctrl_c_exits_130_with_one_line(tmp_path, capsys, monkeypatch):
  def interrupted(hparams):
    raise KeyboardInterrupt
  monkeypatch.setattr(train, 'run', interrupted)
  out = tmp_path / 'run'
  assert binary.run_train('--task=digits', f'--output_dir={out}') == 130
  assert capsys.readouterr().err == (
      f'train: interrupted (results in {out}); resume with: python -m '
      f'binaries.train --task=digits --output_dir={out}\n')


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


def _shakespeare_file(data_dir, clients=40):
  """A TFF-format shakespeare.sqlite spanning many pages; returns its path."""
  from tasks import sqlite_data  # pylint: disable=g-import-not-at-top
  os.makedirs(data_dir, exist_ok=True)
  path = os.path.join(data_dir, 'shakespeare.sqlite')
  line = 'Now is the winter of our discontent made glorious summer. ' * 20
  sqlite_data.write_sqlite(path, {
      'train': {f'R{i:02d}': [{'snippets': line}] * 4 for i in range(clients)},
      'test': {f'R{i:02d}': [{'snippets': line}] for i in range(clients)}})
  return path


def _damage_after_first_page(path):
  """Overwrites every page but the schema page, as a bad disk would."""
  size = os.path.getsize(path)
  assert size > 20 * 4096  # Many pages: the damage is past the schema.
  with open(path, 'r+b') as f:
    f.seek(4096)
    f.write(bytes(range(256)) * ((size - 4096) // 256))


def test_sqlite_damaged_past_its_schema_is_one_line_at_start(tmp_path):
  import tasks  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tasks import data_errors  # pylint: disable=g-import-not-at-top
  path = _shakespeare_file(str(tmp_path))
  _damage_after_first_page(path)
  # The schema still reads: require_file's check passes, the rows do not.
  data_errors.check_tff_sqlite('shakespeare', path)
  spec = tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=2)
  with pytest.raises(data_errors.BadDataError) as e:
    tasks.create_task('shakespeare', train_client_spec=spec,
                      data_dir=str(tmp_path), lstm_units=4, lstm_layers=1)
  assert str(e.value) == (
      f"task 'shakespeare': {path} is damaged (database disk image is "
      'malformed); rebuild it or copy it again')


def test_sqlite_damaged_during_the_run_is_one_line_and_keeps_results(
    tmp_path, capfd, monkeypatch):
  """Damage found mid-run (TF reads the rows in the worker)."""
  from tff_opt.program import training_loop  # pylint: disable=g-import-not-at-top
  data_dir = str(tmp_path / 'data')
  path = _shakespeare_file(data_dir)
  run_training = training_loop.run_training

  def damaging_after_round_1(*args, **kwargs):
    log = kwargs['log']

    def log_and_damage(line):
      log(line)
      if line.startswith('round 1/'):
        _damage_after_first_page(path)
    kwargs['log'] = log_and_damage
    return run_training(*args, **kwargs)
  monkeypatch.setattr(training_loop, 'run_training', damaging_after_round_1)
  out = str(tmp_path / 'run')
  assert binary.run_train(
      '--task=shakespeare', f'--data_dir={data_dir}', '--rounds=3',
      '--clients_per_round=2', '--eval_every=10', '--checkpoint_every=1',
      '--task_option=lstm_units=4', '--task_option=lstm_layers=1',
      f'--output_dir={out}') == 2
  # capfd: the TFF worker started here needs real file descriptors.
  err = capfd.readouterr().err
  assert 'Traceback' not in err
  assert err.splitlines()[-1] + '\n' == (
      f'train: error: --task=shakespeare: a data file in --data_dir='
      f'{data_dir} became unreadable during the run (database disk image '
      f'is malformed). The results in {out} are intact: restore the file '
      'and run the same command again to resume from the last checkpoint.\n')
  with open(os.path.join(out, 'metrics.csv')) as f:
    assert [line.split(',')[0] for line in f][1:] == ['1']
  assert os.listdir(os.path.join(out, 'checkpoints')) == ['program_state_1']


@pytest.mark.parametrize('error, reason', [
    ('sqlite3', 'database disk image is malformed'),
    ('Failed to run computation: Step() failed: [26] file is not a '
     'database: SELECT serialized_example_proto FROM examples', 'file is '
     'not a database'),
    ('worker lost', None),
])
def test_damaged_sqlite_reason_reads_sqlite_and_worker_errors(error, reason):
  import sqlite3  # pylint: disable=g-import-not-at-top
  from tasks import data_errors  # pylint: disable=g-import-not-at-top
  if error == 'sqlite3':
    error = sqlite3.DatabaseError('database disk image is malformed')
  else:
    error = RuntimeError(error)
  assert data_errors.damaged_sqlite_reason(error) == reason


@pytest.mark.parametrize('package', ['binaries', 'tools'])
def test_binaries_import_tensorflow_without_its_start_up_noise(package):
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  code = (f'import {package}, tensorflow, os, sys; '
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


@pytest.mark.parametrize('collector', ['on', 'off'])
def test_binaries_freeze_what_tensorflow_made_and_keep_the_collector(
    collector):
  """`import binaries` freezes TensorFlow's objects (binaries/__init__.py).

  The collector is paused only during the import: it is on afterwards if
  it was on before (a binary left without it would never free cycles), and
  off if the caller had turned it off.
  """
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  code = ('import gc; ' + ('gc.disable(); ' if collector == 'off' else '') +
          'import binaries; frozen = gc.get_freeze_count(); '
          'import tensorflow_federated; binaries.freeze_imports(); '
          'print(gc.isenabled(), frozen > 100_000, '
          'gc.get_freeze_count() > frozen)')
  done = subprocess.run([sys.executable, '-c', code], cwd=root,
                        capture_output=True, text=True, timeout=120)
  assert done.returncode == 0, done.stderr
  assert done.stdout == f'{collector == "on"} True True\n'
