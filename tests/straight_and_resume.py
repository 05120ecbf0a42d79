"""`binaries.train` run straight, then resuming a killed run, in one child.

`main([STRAIGHT_DIR, KILLED_DIR, *TRAIN_FLAGS])` (in a child of
`tests.forked`, or `python -m tests.straight_and_resume STRAIGHT_DIR
KILLED_DIR TRAIN_FLAGS...`) runs train's main with TRAIN_FLAGS into
STRAIGHT_DIR (a run from scratch), then into KILLED_DIR (which holds the
checkpoints of a run killed by `tests.kill_trainer`, so this run resumes),
the two sharing one built process (it is immutable). It exits with the
first non-zero exit code, or 0. Both run in a fresh process (forked after
the imports only), as the killed trainer did, so nothing a test process ran
before reaches their numbers.
"""

import sys
from typing import Sequence

from binaries import train
from tests import binary


def main(argv: Sequence[str]) -> int:
  straight, killed, flags = argv[0], argv[1], argv[2:]
  build = train._build_process  # pylint: disable=protected-access
  built = []

  def build_once(*args, **kwargs):
    if not built:
      built.append(build(*args, **kwargs))
    return built[0]

  train._build_process = build_once  # pylint: disable=protected-access
  for output_dir in (straight, killed):
    code = binary.run_train(*flags, f'--output_dir={output_dir}')
    if code:
      return code
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
