"""The command-line programs (`python -m binaries.<name>`).

Importing this package first imports TensorFlow with its start-up noise
filtered: TF 2.14's CPU wheel prints "Unable to register cuDNN/cuFFT/cuBLAS
factory", "Could not find cuda drivers" and "Could not find TensorRT" from
C++ at import, on every start of every binary, although nothing is wrong.
While `tensorflow` is imported, file descriptor 2 goes to a pipe; the lines
matching `_NOISE` are dropped and every other line is written back to
stderr, in order. Nothing is hidden afterwards: later C++ errors and every
Python error print as usual. `TFF_OPT_SHOW_TF_NOISE=1` turns the filter off.
"""

import os
import re
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
  if os.environ.get('TFF_OPT_SHOW_TF_NOISE') == '1' or (
      'tensorflow' in sys.modules):
    return
  try:
    sys.stderr.flush()
    saved = os.dup(2)
  except (OSError, ValueError, AttributeError):
    return  # No real stderr (embedded): nothing to filter.
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
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
  finally:
    os.dup2(saved, 2)
    os.close(saved)
    reader.join(timeout=5)
    for line in kept:
      os.write(2, line)


_import_tensorflow_quietly()
