"""Tests for `tff_opt/program/files.py`: whole files or none."""

import json
import os
import stat

import pytest

from tff_opt.program import files


def _listing(folder):
  return sorted(os.listdir(folder))


def test_the_file_is_replaced_and_no_temporary_is_left(tmp_path):
  path = str(tmp_path / 'hparams.json')
  with open(path, 'w') as f:
    f.write('old')
  with files.replaced_atomically(path) as f:
    json.dump({'lr': 0.1}, f)
    # Until the block ends, readers see the old file.
    assert open(path).read() == 'old'
    assert f.name != path and os.path.dirname(f.name) == str(tmp_path)
  assert json.load(open(path)) == {'lr': 0.1}
  assert _listing(tmp_path) == ['hparams.json']


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(
    tmp_path):
  path = str(tmp_path / 'metrics.csv')
  with open(path, 'w') as f:
    f.write('round,loss\n1,2.0\n')
  with pytest.raises(ZeroDivisionError):
    with files.replaced_atomically(path, newline='') as f:
      f.write('round,loss\n')
      1 / 0  # pylint: disable=pointless-statement
  assert open(path).read() == 'round,loss\n1,2.0\n'
  assert _listing(tmp_path) == ['metrics.csv']


def test_two_writers_of_one_file_do_not_share_a_temporary(tmp_path):
  # With one shared temporary name (`<file>.tmp`), the inner writer would
  # rename the outer one's temporary away and the outer's rename would fail.
  path = str(tmp_path / 'claims.md')
  with files.replaced_atomically(path) as outer:
    outer.write('outer')
    with files.replaced_atomically(path) as inner:
      inner.write('inner')
    assert inner.name != outer.name
    assert str(os.getpid()) in inner.name
    assert open(path).read() == 'inner'
  assert open(path).read() == 'outer'  # The last to finish wins.
  assert _listing(tmp_path) == ['claims.md']


def test_bytes_and_the_permissions_a_plain_open_gives(tmp_path):
  plain = str(tmp_path / 'plain.png')
  with open(plain, 'wb') as f:
    f.write(b'x')
  path = str(tmp_path / 'curves.png')
  with files.replaced_atomically(path, 'wb') as f:
    f.write(b'\x89PNG')
  assert open(path, 'rb').read() == b'\x89PNG'
  assert (stat.S_IMODE(os.stat(path).st_mode)
          == stat.S_IMODE(os.stat(plain).st_mode))


def test_write_text(tmp_path):
  path = str(tmp_path / 'table.md')
  files.write_text(path, '| a |\n')
  files.write_text(path, '| b |\n')
  assert open(path).read() == '| b |\n'
  assert _listing(tmp_path) == ['table.md']


def test_a_mode_other_than_write_is_refused(tmp_path):
  with pytest.raises(ValueError, match="mode must be 'w' or 'wb', not 'a'"):
    with files.replaced_atomically(str(tmp_path / 'x'), 'a'):
      pass
  assert _listing(tmp_path) == []


@pytest.fixture
def old_database(tmp_path):
  path = str(tmp_path / 'population.sqlite')
  with open(path, 'w') as f:
    f.write('old')
  return path


def test_a_built_file_replaces_the_old_one_when_the_block_ends(
    tmp_path, old_database):
  with files.built_atomically(old_database) as tmp:
    assert not os.path.exists(tmp)
    assert os.path.dirname(tmp) == str(tmp_path)
    with open(tmp, 'w') as f:  # A library writing from the path.
      f.write('new')
    assert open(old_database).read() == 'old'
  assert open(old_database).read() == 'new'
  assert _listing(tmp_path) == ['population.sqlite']


@pytest.mark.parametrize('written', ['half', None])
def test_a_failed_or_empty_build_keeps_the_old_file_and_leaves_nothing(
    tmp_path, old_database, written):
  # A block that raises (even KeyboardInterrupt) after writing part of the
  # file, or one that wrote nothing (nothing to rename: an error).
  error = KeyboardInterrupt if written else FileNotFoundError
  with pytest.raises(error):
    with files.built_atomically(old_database) as tmp:
      if written:
        with open(tmp, 'w') as f:
          f.write(written)
        raise KeyboardInterrupt
  assert open(old_database).read() == 'old'
  assert _listing(tmp_path) == ['population.sqlite']
