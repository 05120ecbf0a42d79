"""NumpyProgramStateManager: exact round trip, TFF's old format, refusals."""

import asyncio
import collections
import os

import attrs
import numpy as np
import pytest
import tensorflow_federated as tff

from tff_opt.program import checkpoints


@attrs.define(frozen=True)
class _ServerState:
  weights: list
  optimizer: collections.OrderedDict
  round_num: int


def _state(scale=1.0):
  return {'process_state': _ServerState(
      weights=[np.arange(6, dtype=np.float32).reshape(2, 3) * scale,
               np.float32(0.5) * scale],
      optimizer=collections.OrderedDict(
          lr=np.float64(0.1), count=np.int64(7), name='yogi',
          history=np.zeros((0, 4), np.float32)),
      round_num=3)}


def _run(coroutine):
  return asyncio.run(coroutine)


def _assert_same(got, want):
  got_leaves = attrs.asdict(got['process_state'], recurse=False)
  want_leaves = attrs.asdict(want['process_state'], recurse=False)
  np.testing.assert_array_equal(got_leaves['weights'][0],
                                want_leaves['weights'][0])
  assert got_leaves['weights'][0].dtype == np.float32
  assert got_leaves['weights'][1] == want_leaves['weights'][1]
  assert got_leaves['optimizer'] .keys() == want_leaves['optimizer'].keys()
  assert got_leaves['optimizer']['lr'] == 0.1
  assert got_leaves['optimizer']['count'] == 7
  assert got_leaves['optimizer']['name'] == 'yogi'
  assert got_leaves['optimizer']['history'].shape == (0, 4)
  assert got_leaves['round_num'] == 3


def test_round_trip_is_exact_and_one_numpy_file(tmp_path):
  manager = checkpoints.NumpyProgramStateManager(str(tmp_path))
  _run(manager.save(_state(2.0), 4))
  assert os.listdir(tmp_path) == ['program_state_4']
  assert os.listdir(tmp_path / 'program_state_4') == ['state.npz']
  with np.load(tmp_path / 'program_state_4' / 'state.npz') as saved:
    assert saved.files == [f'leaf_{i:06d}' for i in range(7)]
    np.testing.assert_array_equal(saved['leaf_000000'],
                                  np.arange(6).reshape(2, 3) * 2.0)
  loaded = _run(manager.load(4, _state()))
  assert isinstance(loaded['process_state'], _ServerState)
  _assert_same(loaded, _state(2.0))


def test_retention_and_versions_are_tffs(tmp_path):
  manager = checkpoints.NumpyProgramStateManager(str(tmp_path), keep_total=3,
                                                 keep_first=True)
  for version in range(1, 7):
    _run(manager.save(_state(version), version))
  assert _run(manager.get_versions()) == [1, 5, 6]
  with pytest.raises(tff.program.ProgramStateExistsError):
    _run(manager.save(_state(), 6))
  with pytest.raises(tff.program.ProgramStateNotFoundError):
    _run(manager.load(2, _state()))


def test_checkpoints_written_by_tffs_manager_still_load(tmp_path):
  """Runs checkpointed in TFF's SavedModel format resume."""
  _run(tff.program.FileProgramStateManager(str(tmp_path)).save(
      {'process_state': [np.full((2, 2), 3.0, np.float32), np.int32(9)]}, 2))
  assert 'saved_model.pb' in os.listdir(tmp_path / 'program_state_2')
  manager = checkpoints.NumpyProgramStateManager(str(tmp_path))
  loaded = _run(manager.load(
      2, {'process_state': [np.zeros((2, 2), np.float32), np.int32(0)]}))
  np.testing.assert_array_equal(loaded['process_state'][0],
                                np.full((2, 2), 3.0))
  assert loaded['process_state'][1] == 9
  # And the next save in the same directory is a NumPy one.
  _run(manager.save({'process_state': [np.ones((2, 2), np.float32),
                                       np.int32(1)]}, 3))
  assert os.listdir(tmp_path / 'program_state_3') == ['state.npz']


def test_a_file_of_another_state_is_refused_naming_it(tmp_path):
  manager = checkpoints.NumpyProgramStateManager(str(tmp_path))
  _run(manager.save({'w': [np.zeros(3, np.float32)]}, 1))
  file = os.path.join(tmp_path, 'program_state_1', 'state.npz')
  with pytest.raises(checkpoints.CheckpointFormatError) as e:
    _run(manager.load(1, {'w': [np.zeros(3, np.float32), np.zeros(1)]}))
  assert str(e.value) == (f'{file} holds 1 arrays; the program state has 2 '
                          'leaves.')
  with pytest.raises(checkpoints.CheckpointFormatError) as e:
    _run(manager.load(1, {'w': [np.zeros(4, np.float32)]}))
  assert str(e.value) == (f'{file}: leaf 0 is float32[3]; the program state '
                          'has float32[4] there.')


def test_a_leaf_of_another_width_comes_back_as_the_states(tmp_path):
  manager = checkpoints.NumpyProgramStateManager(str(tmp_path))
  exact = np.array([0.5, -2.0, np.nan], np.float64)
  _run(manager.save({'w': [exact, np.float64(0.25)]}, 1))
  loaded = _run(manager.load(
      1, {'w': [np.zeros(3, np.float32), np.float32(0.0)]}))
  assert loaded['w'][0].dtype == np.float32
  np.testing.assert_array_equal(loaded['w'][0],
                                exact.astype(np.float32))
  assert loaded['w'][1].dtype == np.float32 and loaded['w'][1] == 0.25
  # A value float32 cannot hold is refused, not rounded.
  _run(manager.save({'w': [np.array([0.1, 1.0]), np.float64(0.0)]}, 2))
  file = os.path.join(tmp_path, 'program_state_2', 'state.npz')
  with pytest.raises(checkpoints.CheckpointFormatError) as e:
    _run(manager.load(2, {'w': [np.zeros(2, np.float32), np.float32(0)]}))
  assert str(e.value) == (f'{file}: leaf 0 is float64, and its values do not '
                          "all fit the program state's float32.")


def test_a_leaf_numpy_cannot_store_is_refused_before_writing(tmp_path):
  manager = checkpoints.NumpyProgramStateManager(str(tmp_path))
  with pytest.raises(checkpoints.CheckpointFormatError,
                     match=r'^program state leaf 1 \(object\) is not an '):
    _run(manager.save({'w': [np.zeros(1), object()]}, 1))
  assert os.listdir(tmp_path) == []
