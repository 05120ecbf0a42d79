"""A run's output directory: refusals, hparams.json, clean-up."""

import json
import os

import pytest

from tff_opt.program import output_dir as output_dir_lib
from tff_opt.program import output_lock

RESUMABLE = ('rounds', 'output_dir')


def test_a_new_directory_is_created_and_not_resumed(tmp_path):
  run = str(tmp_path / 'a' / 'run')
  assert output_dir_lib.prepare({'output_dir': run}, RESUMABLE) is False
  assert os.listdir(run) == []


def test_a_saved_run_resumes_across_resumable_settings_only(tmp_path):
  run = str(tmp_path)
  output_dir_lib.write_hparams(
      {'output_dir': run, 'rounds': 3, 'seed': 0}, {'partition': 'p'})
  assert output_dir_lib.prepare(
      {'output_dir': run, 'rounds': 9, 'seed': 0}, RESUMABLE) is True
  with pytest.raises(output_dir_lib.RefusedError) as error:
    output_dir_lib.prepare({'output_dir': run, 'rounds': 3, 'seed': 1},
                           RESUMABLE)
  assert str(error.value) == (
      f'--output_dir={run} holds a run with other settings: --seed=1 (saved '
      'run: 0). Use another --output_dir, or the same settings to resume.')


def test_saved_extras_are_what_the_settings_lack_but_ignored_flags(tmp_path):
  run = str(tmp_path)
  output_dir_lib.write_hparams(
      {'output_dir': run, 'rounds': 3},
      {'partition': 'p', 'ignored_flags': {'mu': 1.0}})
  with open(os.path.join(run, 'hparams.json')) as f:
    assert json.load(f) == {'output_dir': run, 'rounds': 3, 'partition': 'p',
                            'ignored_flags': {'mu': 1.0}}
  assert output_dir_lib.saved_extras({'output_dir': run, 'rounds': 5}) == {
      'partition': 'p'}


def test_an_unreadable_hparams_json_is_refused(tmp_path):
  (tmp_path / 'hparams.json').write_text('{')
  with pytest.raises(output_dir_lib.RefusedError,
                     match='refusing to touch that directory'):
    output_dir_lib.prepare({'output_dir': str(tmp_path)}, RESUMABLE)


def test_a_locked_directory_is_refused_until_released(tmp_path):
  run = str(tmp_path)
  output_dir_lib.lock(run)
  try:
    with pytest.raises(output_dir_lib.RefusedError) as error:
      output_dir_lib.lock(run)
    assert str(error.value) == (
        f'--output_dir={run} is being written by another binaries.train '
        f'(pid {os.getpid()}); wait for it to end, or use another '
        '--output_dir.')
  finally:
    output_lock.release_all()


def test_remove_if_no_files_keeps_a_directory_with_a_file(tmp_path):
  empty = tmp_path / 'empty'
  (empty / 'sub').mkdir(parents=True)
  (empty / output_lock.LOCK_FILE).write_text('1\n')
  output_dir_lib.remove_if_no_files(str(empty))
  assert not empty.exists()
  kept = tmp_path / 'kept'
  (kept / 'sub').mkdir(parents=True)
  (kept / 'sub' / 'notes.txt').write_text('mine')
  output_dir_lib.remove_if_no_files(str(kept))
  assert (kept / 'sub' / 'notes.txt').read_text() == 'mine'
  output_dir_lib.remove_if_no_files(None)
