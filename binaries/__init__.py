"""The command-line programs (`python -m binaries.<name>`).

Importing this package first imports TensorFlow with its start-up noise
filtered: TF 2.14's CPU wheel prints "Unable to register cuDNN/cuFFT/cuBLAS
factory", "Could not find cuda drivers" and "Could not find TensorRT" from
C++ at import, on every start of every binary, although nothing is wrong.
While `tensorflow` is imported, file descriptor 2 goes through
`tff_opt.program.stderr_filter` (standard library only): the lines matching
its `NOISE` are dropped and every other line is written back to stderr, in
order. Afterwards only TFF's compilation of a computation is filtered so
(`tff_opt.program.runtime`); later C++ errors and every Python error print
as usual. `TFF_OPT_SHOW_TF_NOISE=1` turns the filter off.

A binary started with SIGINT ignored (a shell's background job, `cmd &`,
and every run such a sweep or claims process launches) gets Python's
Ctrl-C handler back: `binaries.sweep` and `binaries.claims` stop their runs
with SIGINT, which an ignored SIGINT would lose (the run was then killed 30
s later instead of stopping cleanly).

Python's cyclic garbage collector is paused while TensorFlow is imported,
and what the import made is then frozen (`gc.freeze`): TensorFlow and TFF
leave about 600,000 long-lived objects (modules, classes, functions), and
each full collection would re-scan all of them, 0.1 to 0.25 s each time, eight
times (1.1 s) before the first round of an EMNIST-CR run. A binary calls
`freeze_imports()` once its own imports are done, for those that came
after TensorFlow (TFF, tff-opt). Frozen objects are never collected;
import-time objects live as long as the process anyway. The collector
stays on for everything made afterwards.
"""

import gc
import os
import signal
import sys
import threading

from tff_opt.program import stderr_filter

# Set before TensorFlow is first imported (TFF's worker inherits them):
# C++ INFO/WARNING lines off; TensorFlow's oneDNN kernels unless the
# environment says otherwise (see tff_opt/program/worker_env.py).
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')


def _import_tensorflow_quietly() -> None:
  if 'tensorflow' in sys.modules:
    return
  with stderr_filter.filtered():
    _import_tensorflow()


def _import_tensorflow() -> None:
  """`import tensorflow` with the collector paused, then what it made frozen."""
  enabled = gc.isenabled()
  gc.disable()
  try:
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
  finally:
    freeze_imports()
    if enabled:
      gc.enable()


def freeze_imports() -> None:
  """Moves every object alive now out of the collector's reach (`gc.freeze`).

  Called by a binary once its imports are done; see the module docstring.
  """
  gc.freeze()


def restore_sigint() -> None:
  """Python's Ctrl-C handler where SIGINT is ignored (see the docstring)."""
  if (threading.current_thread() is threading.main_thread() and
      signal.getsignal(signal.SIGINT) is signal.SIG_IGN):
    signal.signal(signal.SIGINT, signal.default_int_handler)


restore_sigint()
_import_tensorflow_quietly()
