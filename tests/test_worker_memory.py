"""The local worker's malloc bound: it reaches `worker_binary`.

Without `MALLOC_ARENA_MAX` the worker's RSS rose round after round (glibc
arenas, one per thread, each keeping its freed, fragmented memory):
`benchmarks/worker_memory.py` and `results/perf/worker_memory.md` have the
400-round measurements; these tests only pin that the setting is passed.
"""

import os

import psutil
import pytest

from tff_opt.program import runtime
from tff_opt.program import worker_env


def _start_worker():
  """Starts a local context's worker; returns (context, its process)."""
  before = {p.pid for p in runtime.worker_children()}
  context = runtime.create_local_execution_context()
  started = [p for p in runtime.worker_children() if p.pid not in before]
  assert len(started) == 1
  return context, started[0]


def _stop(process):
  try:
    process.kill()
    process.wait(timeout=10)
  except psutil.Error:
    pass


def test_worker_gets_two_malloc_arenas_and_this_process_is_unchanged(
    monkeypatch):
  monkeypatch.delenv('MALLOC_ARENA_MAX', raising=False)
  own_env = dict(os.environ)
  context, worker = _start_worker()
  try:
    assert worker_env.MALLOC_ENV == {'MALLOC_ARENA_MAX': '2'}
    assert worker.environ().get('MALLOC_ARENA_MAX') == '2'
    assert dict(os.environ) == own_env
  finally:
    del context
    _stop(worker)


def test_the_environment_overrides_the_workers_malloc_setting(monkeypatch):
  monkeypatch.setenv('MALLOC_ARENA_MAX', '8')
  context, worker = _start_worker()
  try:
    assert worker.environ().get('MALLOC_ARENA_MAX') == '8'
  finally:
    del context
    _stop(worker)


@pytest.mark.parametrize('own, expected', [({}, '2'), ({'MALLOC_ARENA_MAX':
                                                        '4'}, '4')])
def test_worker_process_env_order(monkeypatch, own, expected):
  monkeypatch.delenv('MALLOC_ARENA_MAX', raising=False)
  for name, value in own.items():
    monkeypatch.setenv(name, value)
  env = runtime._worker_process_env({'TF_NUM_INTRAOP_THREADS': '1'})  # pylint: disable=protected-access
  assert env['MALLOC_ARENA_MAX'] == expected
  assert env['TF_NUM_INTRAOP_THREADS'] == '1'
  assert env['PATH'] == os.environ['PATH']
