"""Runs `binaries.train` in-process, as its tests do."""

from binaries import train


def run_train(*args) -> int:
  """Parses `args` as train's flags, runs its main; returns the exit code."""
  train.FLAGS.unparse_flags()
  train.FLAGS(['train', *args])
  try:
    train.main(['train'])
  except SystemExit as e:
    return e.code
  finally:
    train.FLAGS.unparse_flags()
  return 0
