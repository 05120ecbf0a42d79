"""Runs `binaries.train` in-process, as its tests do."""

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
