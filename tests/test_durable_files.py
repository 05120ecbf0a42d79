"""Files read back at a resume: synced before they replace the old ones,
and a copy cut at any byte resumes (a partial last record set aside) or is
refused in one line with nothing overwritten."""

import csv
import json
import os
import shutil

import pytest
import tensorflow as tf
import tensorflow_federated as tff

from binaries import sweep
from tests import binary
from tests import tiny
from tff_opt import algorithms
from tff_opt.program import files
from tff_opt.program import training_loop

CLIENTS = {f'c{k}': c for k, c in enumerate(
    tiny.make_clients(num_clients=4, seed=2, sizes=(6, 9, 4, 7)))}
ROUNDS = 3


def _dataset(client_id):
  x, y = CLIENTS[client_id]
  return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(16).batch(4)


@pytest.fixture(scope='module')
def process():
  return algorithms.build_fed_opt(
      tiny.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.2),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))


def _train(process, output_dir, lines=None, **kwargs):
  initial = tiny.set_weights(process, process.initialize(),
                             tiny.initial_weights())
  return training_loop.run_training(
      process, client_ids=sorted(CLIENTS), client_dataset_fn=_dataset,
      clients_per_round=2, rounds=ROUNDS, seed=4, output_dir=output_dir,
      initial_state=initial, checkpoint_every=1,
      log=None if lines is None else lines.append, **kwargs)


def _rows(output_dir):
  """metrics.csv's rows without the timing column (it differs per run)."""
  with open(os.path.join(output_dir, 'metrics.csv'), newline='') as f:
    return [{k: v for k, v in row.items() if k != 'round_seconds'}
            for row in csv.DictReader(f)]


def test_a_write_is_synced_before_the_rename_and_the_directory_after(
    tmp_path, monkeypatch):
  events = []
  real_fsync, real_replace = os.fsync, os.replace

  def fsync(fd):
    events.append(('fsync', os.readlink(f'/proc/self/fd/{fd}')))
    real_fsync(fd)

  def replace(src, dst):
    events.append(('replace', str(dst)))
    real_replace(src, dst)

  monkeypatch.setattr(os, 'fsync', fsync)
  monkeypatch.setattr(os, 'replace', replace)
  path = tmp_path / 'metrics.csv'
  with files.replaced_atomically(str(path)) as f:
    f.write('round\n1\n')
    tmp = f.name
  assert events == [('fsync', tmp), ('replace', str(path)),
                    ('fsync', str(tmp_path))]
  assert path.read_text() == 'round\n1\n'


def test_a_metrics_csv_cut_at_any_byte_resumes_to_the_same_rows(
    process, tmp_path):
  whole = str(tmp_path / 'whole')
  _train(process, whole)
  expected = _rows(whole)
  text = open(os.path.join(whole, 'metrics.csv'), 'rb').read()
  header = text.index(b'\n') + 1
  second = text.index(b'\n', header) + 1
  # Empty or inside the header: no round left to resume from, refused
  # with the file as it was. Inside a row's round number, mid-row, one
  # byte short of whole: the partial last record set aside, resumed.
  for cut in (0, header // 2, second + 1, second + 12, len(text) - 1):
    run = str(tmp_path / f'cut_{cut}')
    shutil.copytree(whole, run)
    with open(os.path.join(run, 'metrics.csv'), 'wb') as f:
      f.write(text[:cut])
    kept = os.path.join(run, 'metrics.csv.partial')
    lines = []
    if cut < header:
      with pytest.raises(training_loop.MetricsGapError,
                         match='its metrics.csv logs no round 1'):
        _train(process, run, lines)
      with open(os.path.join(run, 'metrics.csv'), 'rb') as f:
        assert f.read() == text[:cut]
      assert not os.path.exists(kept)
      continue
    _train(process, run, lines)
    assert _rows(run) == expected, cut
    with open(kept, 'rb') as f:
      assert f.read() == text[:cut]  # The cut file, as it was.
    partial = text[text.rfind(b'\n', 0, cut) + 1:cut]
    assert (f'metrics.csv ended in a partial record ({len(partial)} bytes, '
            'cut short): set aside; the file as it was is kept as '
            'metrics.csv.partial.') in lines


def test_a_checkpoint_cut_short_resumes_from_the_one_before(process,
                                                           tmp_path):
  run = str(tmp_path / 'run')
  _train(process, run)
  expected = _rows(run)
  state = os.path.join(run, 'checkpoints', f'program_state_{ROUNDS}',
                       'state.npz')
  data = open(state, 'rb').read()
  with open(state, 'wb') as f:
    f.write(data[:len(data) // 2])
  # Rounds after the newest readable checkpoint are recomputed.
  _train(process, run)
  assert _rows(run) == expected
  assert os.path.isdir(os.path.join(
      run, 'checkpoints', f'program_state_{ROUNDS}.unreadable'))


def test_an_interrupted_round_leaves_the_last_logged_round_checkpointed(
    process, tmp_path):
  run = str(tmp_path / 'run')
  calls = []

  def interrupted(client_id):
    calls.append(client_id)
    if len(calls) > 2 * 2:  # Round 3's first client.
      raise KeyboardInterrupt
    return _dataset(client_id)

  with pytest.raises(KeyboardInterrupt) as e:
    training_loop.run_training(
        process, client_ids=sorted(CLIENTS), client_dataset_fn=interrupted,
        clients_per_round=2, rounds=ROUNDS, seed=4, output_dir=run,
        initial_state=tiny.set_weights(process, process.initialize(),
                                       tiny.initial_weights()),
        checkpoint_every=100, log=None)
  assert e.value.checkpointed_round == 2
  assert os.listdir(os.path.join(run, 'checkpoints')) == ['program_state_2']
  assert [r['round'] for r in _rows(run)] == ['1', '2']


def test_a_cut_hparams_json_is_refused_in_one_line(tmp_path, capsys):
  run = tmp_path / 'run'
  assert binary.run_train('--task=digits', '--rounds=1',
                          f'--output_dir={run}') == 0
  text = (run / 'hparams.json').read_bytes()
  before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
  capsys.readouterr()
  for cut in (0, 1, len(text) // 2, len(text) - 1):
    (run / 'hparams.json').write_bytes(text[:cut])
    assert binary.run_train('--task=digits', '--rounds=1',
                            f'--output_dir={run}') == 2
    err = capsys.readouterr().err
    assert err.startswith(f'train: error: --output_dir={run}: cannot read '
                          f'{run}/hparams.json (') and err.count('\n') == 1
    assert err.endswith('); refusing to touch that directory.\n')
    after = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert after == {**before, 'hparams.json': text[:cut]}


def test_a_cut_sweep_json_is_refused_in_one_line(tmp_path):
  sweep_dir = str(tmp_path)
  identity = {'task': 'digits', 'algorithm': 'fedopt', 'server_opt': 'yogi',
              'train_flags': []}
  sweep.claim_sweep_dir(sweep_dir, identity)
  path = os.path.join(sweep_dir, sweep.SWEEP_FILE)
  text = open(path, 'rb').read()
  assert json.loads(text) == identity
  for cut in (0, 1, len(text) // 2, len(text) - 1):
    with open(path, 'wb') as f:
      f.write(text[:cut])
    with pytest.raises(sweep.UsageError,
                       match=r'^--sweep_dir=.*: cannot read .*sweep\.json '
                       r'\(.*\); refusing to touch that directory \(nothing '
                       r'was changed\)\.$'):
      sweep.claim_sweep_dir(sweep_dir, identity)
    assert open(path, 'rb').read() == text[:cut]
