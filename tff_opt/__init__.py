"""Federated optimization on TensorFlow Federated, as `tff.learning` pieces.

`round` holds the four slots of a federated round (broadcast, local
objective, local work, report and server update), `algorithms` one recipe
per algorithm that fills them and returns a learning process, and `program`
what runs a process (training loop, checkpoints, evaluation, registry,
workers). `checks`, `tff_types` and `layers` sit under all three;
`optimizers` re-exports the server optimizers of `round.optimizers`.
"""

import atexit
import sys


def _release_tff_at_exit() -> None:
  """Releases TFF's execution contexts at exit, the interpreter still whole.

  Importing TFF installs a default context whose clean-up, left to the
  interpreter's teardown, prints TFF's "Exception ignored ... Popen"
  traceback. `program.runtime` releases it at exit once imported; a program
  that used TFF through the library without it (`binaries.claims`, a
  notebook) gets it imported here, at exit, for the same.
  """
  if ('tensorflow_federated' in sys.modules and
      'tff_opt.program.runtime' not in sys.modules):
    from tff_opt.program import runtime  # pylint: disable=g-import-not-at-top
    runtime.shutdown()


atexit.register(_release_tff_at_exit)
