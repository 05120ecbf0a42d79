"""Runs `binaries.train` in-process, as its tests do, and reads its files."""

import os

import numpy as np

from binaries import train


def run_train(*args) -> int:
  """Parses `args` as train's flags, runs its main; returns the exit code.

  As `python -m binaries.train` does (`app.run` with train's parser): a bad
  flag is one `train: error: ...` line and exit code 2.
  """
  train.FLAGS.unparse_flags()
  try:
    train.main(train.parse_flags_or_exit(['train', *args]))
  except SystemExit as e:
    return e.code
  finally:
    train.FLAGS.unparse_flags()
  return 0


def checkpoint(output_dir: str, round_num: int) -> dict[str, np.ndarray]:
  """The arrays of a run's checkpoint of round `round_num`, by name, in the
  order the file holds them."""
  path = os.path.join(output_dir, 'checkpoints', f'program_state_{round_num}',
                      'state.npz')
  with np.load(path) as saved:
    return {name: saved[name] for name in saved.files}


def resolve_hparams(*args) -> dict:
  """The hparams `binaries.train` resolves from `--task=digits` and `args`,
  without running anything (train's flags are reset after)."""
  train.FLAGS.unparse_flags()
  try:
    train.FLAGS(['train', '--task=digits', *args])
    return train.resolve_hparams()
  finally:
    train.FLAGS.unparse_flags()


THREAD_VARIABLES = ('TF_NUM_INTRAOP_THREADS', 'TF_NUM_INTEROP_THREADS')


def recording_threads(launch, monkeypatch):
  """`(launcher, seen)`: `launch` that first notes the runs' thread settings.

  For the binaries that launch runs (`--threads_per_run`): both variables
  are cleared first (`monkeypatch` restores them after the test), and each
  launch appends their values, as the run would inherit them, to `seen`.
  """
  for name in THREAD_VARIABLES:
    monkeypatch.delenv(name, raising=False)
  seen = []

  def launcher(argv, log_path):
    seen.append(tuple(os.environ.get(name) for name in THREAD_VARIABLES))
    return launch(argv, log_path)

  return launcher, seen
