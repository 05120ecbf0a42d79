"""`binaries.train`, run as a child that a test SIGKILLs inside a round.

`main([MARKER, ROUND, *TRAIN_FLAGS])` (in a child of `tests.forked`, or
`python -m tests.kill_trainer MARKER ROUND TRAIN_FLAGS...`) runs train's
main with TRAIN_FLAGS; once the process's `next` has computed round ROUND
(1 is the first round this run trains), it creates the file MARKER and
sleeps, so the test kills it in the middle of that round: after the
checkpoint of the round before and the round's computation, before anything
of it is saved.
"""

import sys
import time
from typing import NoReturn, Sequence

from absl import app

from binaries import train
from tests import replay


def _pause_in_round(marker: str, pause_round: int):
  build = train._build_process  # pylint: disable=protected-access
  calls = []

  def pausing_next(next_fn, *args):
    output = next_fn(*args)
    calls.append(None)
    if len(calls) == pause_round:
      with open(marker, 'w') as f:
        f.write('in round\n')
      while True:
        time.sleep(60)
    return output

  def pausing_build(*args, **kwargs):
    process, shared = build(*args, **kwargs)
    return replay.wrap_next(process, pausing_next), shared

  train._build_process = pausing_build  # pylint: disable=protected-access


def main(argv: Sequence[str]) -> NoReturn:
  """Runs train until SIGKILLed; `app.run` exits with train's status."""
  _pause_in_round(argv[0], int(argv[1]))
  app.run(train.main, argv=['train', *argv[2:]],
          flags_parser=train.parse_flags_or_exit)


if __name__ == '__main__':
  main(sys.argv[1:])
