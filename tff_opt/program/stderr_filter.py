"""TensorFlow's stderr lines that report nothing wrong, filtered out.

Two moments make TensorFlow write error-looking lines to this process's
stderr although nothing is wrong:

- `import tensorflow`, from C++, on every start of every binary with TF
  2.14's CPU wheel: "Unable to register cuDNN/cuFFT/cuBLAS factory", "Could
  not find cuda drivers", "Could not find TensorRT", the CPU-instructions
  notice (`binaries/__init__.py`);
- TFF's compilation of a computation for its C++ runtime
  (`tff_opt.program.runtime`): TFF runs Grappler on every TensorFlow graph
  with aggressive memory optimisation, whose recomputation rewrites a
  gradient taken inside a dataset loop (FedCurv's Fisher pass, FedPTR's
  trajectory matching) so that the function optimiser then gives up on
  that graph: `E ... meta_optimizer.cc:961] function_optimizer failed:
  INVALID_ARGUMENT: ... has inputs from different frames`, once per
  compiled computation. That graph is used without the function
  optimisation: speed, not results (the same Fisher code matches a NumPy
  Fisher in tests/test_fed_curv.py);
- TFF's compilation of a round for its workers (`--workers`,
  `runtime.set_remote_execution_context`), which hands Grappler graphs
  without fetch nodes (the parts of a round split at its aggregation):
  `E ... grappler_item_builder.cc:435] Failed to detect the fetch node(s),
  skipping this input`, some 30 lines a run. Grappler leaves such a graph
  as it is; the round's results equal a local run's
  (tests/test_workers_stateful.py).

`filtered()` sends file descriptor 2 through a pipe while it is open; a
reader thread writes every line that does not match `NOISE` back to the
real stderr as it comes, in order, and on exit fd 2 is restored after the
last line is out. Nested or concurrent uses share one redirection. Nothing
is filtered outside it, and `TFF_OPT_SHOW_TF_NOISE=1` turns it off. This
module imports nothing beyond the standard library, so that a binary can
use it before TensorFlow is imported.
"""

import contextlib
import os
import re
import sys
import threading

NOISE = re.compile(
    rb'(Unable to register (cuDNN|cuFFT|cuBLAS) factory'
    rb'|Could not find cuda drivers on your machine'
    rb'|TF-TRT Warning: Could not find TensorRT'
    rb'|This TensorFlow binary is optimized to use available CPU instructions'
    rb'|^To enable the following instructions: .*rebuild TensorFlow'
    rb'|function_optimizer failed: INVALID_ARGUMENT: .*has inputs from '
    rb'different frames'
    rb'|grappler_item_builder\.cc:\d+\] Failed to detect the fetch node)')

_lock = threading.Lock()
_depth = 0
_active = None  # (saved fd 2, reader thread) while redirected.


def _copy_lines(read_fd: int, out_fd: int) -> None:
  with os.fdopen(read_fd, 'rb') as pipe:
    for line in pipe:
      if not NOISE.search(line):
        with contextlib.suppress(OSError):
          os.write(out_fd, line)


def _start():
  try:
    sys.stderr.flush()
    saved = os.dup(2)
  except (OSError, ValueError, AttributeError):
    return None  # No real stderr (embedded): nothing to filter.
  read_fd, write_fd = os.pipe()
  reader = threading.Thread(target=_copy_lines, args=(read_fd, saved),
                            name='stderr-filter', daemon=True)
  reader.start()
  os.dup2(write_fd, 2)
  os.close(write_fd)
  return saved, reader


def _stop(active) -> None:
  saved, reader = active
  with contextlib.suppress(OSError, ValueError, AttributeError):
    sys.stderr.flush()
  os.dup2(saved, 2)  # The pipe's last writer is gone: the reader ends...
  reader.join(timeout=5)
  if not reader.is_alive():
    os.close(saved)
  # ...unless a child started meanwhile holds the pipe as its stderr: the
  # reader then goes on passing the child's lines to the real stderr.


@contextlib.contextmanager
def filtered():
  """While open, stderr lines matching `NOISE` are dropped (see above)."""
  global _depth, _active
  if os.environ.get('TFF_OPT_SHOW_TF_NOISE') == '1':
    yield
    return
  with _lock:
    _depth += 1
    if _depth == 1:
      _active = _start()
  try:
    yield
  finally:
    with _lock:
      _depth -= 1
      if _depth == 0 and _active is not None:
        active, _active = _active, None
        _stop(active)
