"""Checkpoints of a training run: one NumPy file per saved round.

`NumpyProgramStateManager` is `tff.program.FileProgramStateManager` with
another file format. TFF's manager writes every version as a TensorFlow
SavedModel: each save wraps every array in a `tf.Variable` and traces a
`tf.Module`, and in a long-lived training process that left the Python
heap ~0.4 MiB larger after every save (measured with
`benchmarks.scaling --parts=memory --memory_checkpoint_every=1`: 640 -> 727
MiB over 200 rounds, still rising; the same loop without checkpoints stays
flat). Writing the leaves of the program state with NumPy needs no
TensorFlow at all, so nothing accumulates.

Layout (the directory names are TFF's, so `get_versions`, `keep_total`,
`keep_first` and the training loop's clean-up of interrupted saves work as
before):

    <root_dir>/program_state_<round>/state.npz

`state.npz` holds the leaves of the program state in `tree.flatten` order,
named `leaf_000000`, `leaf_000001`, ...; the structure is not stored: `load`
is given it (as TFF's manager is) and refuses a file whose number, shapes
or kinds of leaves do not match it. A save is written into
`program_state_<round>_temp<K>/` and renamed into place, so a kill during a
save leaves only a `_temp` directory, never a half-written checkpoint; the
file and both directories are synced to disk first (`files`), so a
machine that stops does not either.

Checkpoints written by TFF's manager (a `saved_model.pb` and no
`state.npz`, as earlier versions of this package saved them) are still read,
with TFF's reader, so a run checkpointed in TFF's format resumes.

Leaves are arrays or scalars (NumPy or Python numbers, bools, strings,
bytes); a leaf NumPy can only pickle (an object array, a
`tff.Serializable`) is refused when saving, with its position.
"""

import os
import random
from typing import Any

import numpy as np
import tensorflow_federated as tff
import tree

from tff_opt.program import files

STATE_FILE = 'state.npz'
_LEAF = 'leaf_{:06d}'


class CheckpointFormatError(ValueError):
  """A checkpoint file does not hold the program state asked for."""


def _as_array(position: int, value: Any) -> np.ndarray:
  array = np.asarray(value)
  if array.dtype == object:
    raise CheckpointFormatError(
        f'program state leaf {position} ({type(value).__name__}) is not an '
        'array, number or string; NumpyProgramStateManager saves only those.')
  return array


class NumpyProgramStateManager(tff.program.FileProgramStateManager):
  """`tff.program.FileProgramStateManager` saving NumPy files, not SavedModels.

  Same constructor, versions, retention (`keep_total`, `keep_first`,
  `keep_every_k`) and errors as TFF's; see the module docstring for the
  format.
  """

  async def save(self, program_state: Any, version: int) -> None:
    """Saves `program_state` as round `version`.

    Args:
      program_state: A structure (dicts, lists, tuples, attrs classes) of
        arrays and scalars, or value references to them.
      version: A strictly increasing integer.

    Raises:
      tff.program.ProgramStateExistsError: If `version` is already saved.
      CheckpointFormatError: If a leaf is not an array, number or string.
    """
    path = self._get_path_for_version(version)
    if os.path.exists(path):
      raise tff.program.ProgramStateExistsError(version=version,
                                                path=self._root_dir)
    state = await tff.program.materialize_value(program_state)
    arrays = {_LEAF.format(i): _as_array(i, leaf)
              for i, leaf in enumerate(tree.flatten(state))}
    temp = f'{path}_temp{random.randint(1000, 9999)}'
    os.makedirs(temp, exist_ok=True)
    with open(os.path.join(temp, STATE_FILE), 'wb') as f:
      np.savez(f, **arrays)
      f.flush()
      os.fsync(f.fileno())
    files.fsync_directory(temp)
    os.rename(temp, path)
    files.fsync_directory(self._root_dir)
    await self._remove_old_program_state()

  async def load(self, version: int, structure: Any) -> Any:
    """The program state saved as round `version`, shaped as `structure`.

    Args:
      version: A saved version (`get_versions`).
      structure: A program state of the same structure, shapes and kinds
        of leaves (e.g. the initial state).

    Returns:
      `structure` with the saved leaves (NumPy arrays and scalars), each of
      the dtype of `structure`'s leaf (a leaf saved at another width of the
      same kind, float64 for float32, is converted where every value fits
      exactly, refused otherwise).

    Raises:
      tff.program.ProgramStateNotFoundError: If `version` was not saved.
      CheckpointFormatError: If the file does not match `structure`.
      OSError, ValueError: If the file cannot be read.
    """
    path = self._get_path_for_version(version)
    if not os.path.isdir(path):
      raise tff.program.ProgramStateNotFoundError(version)
    file = os.path.join(path, STATE_FILE)
    if not os.path.exists(file):
      # Written by TFF's own manager (a SavedModel).
      return await super().load(version, structure)
    expected = tree.flatten(structure)
    with np.load(file, allow_pickle=False) as saved:
      if len(saved.files) != len(expected):
        raise CheckpointFormatError(
            f'{file} holds {len(saved.files)} arrays; the program state has '
            f'{len(expected)} leaves.')
      leaves = []
      for i, like in enumerate(expected):
        value = saved[_LEAF.format(i)]
        like = np.asarray(like)
        if value.shape != like.shape or value.dtype.kind != like.dtype.kind:
          raise CheckpointFormatError(
              f'{file}: leaf {i} is {value.dtype}{list(value.shape)}; the '
              f'program state has {like.dtype}{list(like.shape)} there.')
        if value.dtype != like.dtype:
          # Another width of the same kind (float64 for a float32 state):
          # the state's dtype, where that keeps every value exactly.
          cast = value.astype(like.dtype)
          if not np.array_equal(cast.astype(value.dtype), value,
                                equal_nan=value.dtype.kind in 'fc'):
            raise CheckpointFormatError(
                f'{file}: leaf {i} is {value.dtype}, and its values do not '
                f'all fit the program state\'s {like.dtype}.')
          value = cast
        leaves.append(value if value.ndim else value[()])
    return tree.unflatten_as(structure, leaves)
