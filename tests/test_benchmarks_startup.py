"""Tests of `benchmarks/startup.py`'s clock (the benchmark itself is not run)."""

import os
import subprocess
import sys


def test_startup_reads_this_process_age_from_proc():
  """'python start' is read from /proc, not from psutil.

  psutil's create time adds a boot time rounded to the second; the two
  /proc fields share the boot, so a process that has run for a known time
  reads that time, to the kernel's 10 ms ticks.
  """
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  code = ('import time; time.sleep(1.5); from benchmarks import startup; '
          'print(startup._seconds_since_process_start())')
  done = subprocess.run([sys.executable, '-c', code], cwd=root,
                        capture_output=True, text=True, timeout=60,
                        check=True)
  assert 1.5 <= float(done.stdout) < 2.5
