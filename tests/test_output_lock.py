"""One writer per run directory: the lock, across processes and after a kill."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tff_opt.program import output_lock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A holder in another process: takes the lock, says so, then sleeps.
_HOLD = ('import sys, time; from tff_opt.program import output_lock; '
         'output_lock.acquire(sys.argv[1]); print("held", flush=True); '
         'time.sleep(60)')


@pytest.fixture(name='other_holder')
def fixture_other_holder(tmp_path):
  process = subprocess.Popen([sys.executable, '-c', _HOLD, str(tmp_path)],
                             cwd=ROOT, stdout=subprocess.PIPE, text=True)
  try:
    assert process.stdout.readline() == 'held\n'
    yield process
  finally:
    process.kill()
    process.wait()


def test_no_lock_file_means_no_holder(tmp_path):
  assert output_lock.holder(str(tmp_path)) is None


def test_another_process_holds_it_until_it_is_killed(tmp_path, other_holder):
  assert output_lock.holder(str(tmp_path)) == str(other_holder.pid)
  with pytest.raises(output_lock.LockedError) as e:
    output_lock.acquire(str(tmp_path))
  assert e.value.holder == str(other_holder.pid)
  assert str(e.value) == (f'{tmp_path} is being written by another process '
                          f'(pid {other_holder.pid}).')
  # SIGKILL: no clean-up runs, the kernel drops the lock all the same.
  os.kill(other_holder.pid, signal.SIGKILL)
  other_holder.wait()
  assert output_lock.holder(str(tmp_path)) is None
  output_lock.acquire(str(tmp_path))
  try:
    assert open(tmp_path / output_lock.LOCK_FILE).read() == f'{os.getpid()}\n'
  finally:
    output_lock.release_all()


def test_a_second_acquire_in_one_process_is_refused_until_released(tmp_path):
  output_lock.acquire(str(tmp_path))
  try:
    with pytest.raises(output_lock.LockedError):
      output_lock.acquire(str(tmp_path))
    assert output_lock.holder(str(tmp_path)) == str(os.getpid())
  finally:
    output_lock.release_all()
  assert output_lock.holder(str(tmp_path)) is None
  # Free again: a new acquire takes it (it would raise LockedError, the
  # request being non-blocking, had the release left the lock held).
  output_lock.acquire(str(tmp_path))
  try:
    assert output_lock.holder(str(tmp_path)) == str(os.getpid())
    with pytest.raises(output_lock.LockedError):
      output_lock.acquire(str(tmp_path))
  finally:
    output_lock.release_all()
