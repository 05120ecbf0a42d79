"""The command-line programs (`python -m binaries.<name>`).

Importing this package first imports TensorFlow with its start-up noise
filtered: TF 2.14's CPU wheel prints "Unable to register cuDNN/cuFFT/cuBLAS
factory", "Could not find cuda drivers" and "Could not find TensorRT" from
C++ at import, on every start of every binary, although nothing is wrong.
While `tensorflow` is imported, file descriptor 2 goes to a pipe; the lines
matching `_NOISE` are dropped and every other line is written back to
stderr, in order. Nothing is hidden afterwards: later C++ errors and every
Python error print as usual. `TFF_OPT_SHOW_TF_NOISE=1` turns the filter off.

A binary started with SIGINT ignored (a shell's background job, `cmd &`,
and every run such a sweep or claims process launches) gets Python's
Ctrl-C handler back: `binaries.sweep` and `binaries.claims` stop their runs
with SIGINT, which an ignored SIGINT would lose (the run was then killed 30
s later instead of stopping cleanly).

Python's cyclic garbage collector is paused while TensorFlow is imported,
and what the import made is then frozen (`gc.freeze`): TensorFlow and TFF
leave about 600,000 long-lived objects (modules, classes, functions), and
each full collection re-scanned all of them, 0.1 to 0.25 s each time, eight
times (1.1 s) before the first round of an EMNIST-CR run. A binary calls
`freeze_imports()` once its own imports are done, for those that came
after TensorFlow (TFF, tff-opt). Frozen objects are never collected;
import-time objects live as long as the process anyway. The collector
stays on for everything made afterwards.
"""

import gc
import os
import re
import signal
import sys
import threading

_NOISE = re.compile(
    r'(Unable to register (cuDNN|cuFFT|cuBLAS) factory'
    r'|Could not find cuda drivers on your machine'
    r'|TF-TRT Warning: Could not find TensorRT'
    r'|This TensorFlow binary is optimized to use available CPU instructions'
    r'|^To enable the following instructions: .*rebuild TensorFlow)')


# Set before TensorFlow is first imported (TFF's worker inherits them):
# C++ INFO/WARNING lines off; TensorFlow's oneDNN kernels unless the
# environment says otherwise (see tff_opt/program/worker_env.py).
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')


def _import_tensorflow_quietly() -> None:
  if 'tensorflow' in sys.modules:
    return
  if os.environ.get('TFF_OPT_SHOW_TF_NOISE') == '1':
    _import_tensorflow()
    return
  try:
    sys.stderr.flush()
    saved = os.dup(2)
  except (OSError, ValueError, AttributeError):
    _import_tensorflow()  # No real stderr (embedded): nothing to filter.
    return
  read_end, write_end = os.pipe()
  kept = []

  def drain():
    with os.fdopen(read_end, 'rb') as pipe:
      for line in pipe:
        if not _NOISE.search(line.decode('utf-8', 'replace')):
          kept.append(line)

  reader = threading.Thread(target=drain, daemon=True)
  reader.start()
  os.dup2(write_end, 2)
  os.close(write_end)
  try:
    _import_tensorflow()
  finally:
    os.dup2(saved, 2)
    os.close(saved)
    reader.join(timeout=5)
    for line in kept:
      os.write(2, line)


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
