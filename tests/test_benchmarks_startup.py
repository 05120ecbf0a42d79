"""Tests of `benchmarks/startup.py`'s clock (the benchmark itself is not run)."""

import os
import subprocess
import sys
import time

# The kernel counts a process's start in 10 ms ticks.
TICK = 0.01


def test_startup_reads_this_process_age_from_proc():
  """'python start' is read from /proc, not from psutil.

  psutil's create time adds a boot time rounded to the second, an error of
  up to a second either way; the two /proc fields share the boot, so the
  age is right to the kernel's ticks. The child reads its age twice, around
  a sleep; its ages must lie within what the parent saw elapse from just
  before the child's start to just after its end, and grow by what the
  child's own monotonic clock saw between the two reads.
  """
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  code = ('import time; from benchmarks import startup; '
          'a = startup._seconds_since_process_start(); t = time.monotonic(); '
          'time.sleep(1.0); '
          'b = startup._seconds_since_process_start(); '
          'print(a, b, time.monotonic() - t)')
  started = time.monotonic()
  done = subprocess.run([sys.executable, '-c', code], cwd=root,
                        capture_output=True, text=True, timeout=60,
                        check=True)
  elapsed = time.monotonic() - started
  first, second, between = map(float, done.stdout.split())
  assert -TICK <= first <= second <= elapsed + TICK
  assert abs((second - first) - between) <= 2 * TICK
  assert between >= 1.0
