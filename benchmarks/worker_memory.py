r"""Resident memory of TFF's `worker_binary` over the rounds of a training run.

Starts `python -m binaries.train` (digits by default, a small fast round)
as a child process, finds its `worker_binary` child, and samples the
worker's `VmRSS` (`/proc/<pid>/status`) every `--every` seconds, next to
the round the trainer last logged. Prints a (round, seconds, RSS MiB)
table, the median round time (the trainer's own log) and the worker's CPU
seconds per round, then the first, the maximum and the last sample, and the
least-squares slope over the second half of the rounds in MiB per 100
rounds.

    .venv/bin/python -m benchmarks.worker_memory --rounds=400
    .venv/bin/python -m benchmarks.worker_memory --rounds=400 \
        --checkpoint_every=1
    .venv/bin/python -m benchmarks.worker_memory --rounds=400 \
        --env=MALLOC_ARENA_MAX=16

The local worker runs with `MALLOC_ARENA_MAX=2` (`worker_env.MALLOC_ENV`)
unless the environment sets it; `--env=MALLOC_ARENA_MAX=16` (glibc's own
limit on 2 cores, 8 per core) shows the growth this bound removed.
`--checkpoint_every=0` means no checkpoint but the one after the last
round (the binary always saves then). `--env NAME=VALUE` (repeatable) is
set in the trainer's environment, which its worker inherits (see
`tff_opt/program/runtime.py`). Everything after `--` goes to
`binaries.train` as it is. Not collected by pytest (results in
`results/perf/worker_memory.md`).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import psutil

_ROUND = re.compile(r'^round\s+(\d+)/(\d+).*\s([0-9.]+)s$')


def vm_rss_mib(pid: int) -> float | None:
  """`VmRSS` of `pid` in MiB, from /proc/<pid>/status; None once it is gone."""
  try:
    with open(f'/proc/{pid}/status') as f:
      for line in f:
        if line.startswith('VmRSS:'):
          return int(line.split()[1]) / 1024
  except OSError:
    return None
  return None


def worker_cpu_seconds(pid: int) -> float | None:
  """User + system CPU seconds of `pid` so far; None once it is gone."""
  try:
    times = psutil.Process(pid).cpu_times()
  except psutil.Error:
    return None
  return times.user + times.system


def find_worker(pid: int) -> int | None:
  """The pid of a `worker_binary` among `pid`'s descendants."""
  try:
    children = psutil.Process(pid).children(recursive=True)
  except psutil.Error:
    return None
  for child in children:
    try:
      if 'worker_binary' in child.name() or any(
          'worker_binary' in part for part in child.cmdline()[:1]):
        return child.pid
    except psutil.Error:
      continue
  return None


def measure(rounds: int, checkpoint_every: int, eval_every: int | None,
            every: float, env: dict[str, str], extra: list[str],
            python: str = sys.executable) -> list[tuple[int, float, float]]:
  """Runs the trainer; returns (round, seconds since start, worker MiB)."""
  output_dir = tempfile.mkdtemp(prefix='worker_memory_')
  cmd = [python, '-m', 'binaries.train', '--task=digits',
         f'--rounds={rounds}', f'--output_dir={output_dir}',
         f'--checkpoint_every={checkpoint_every or rounds + 1}']
  if eval_every:
    cmd.append(f'--eval_every={eval_every}')
  cmd += extra
  print('# ' + ' '.join(cmd), flush=True)
  if env:
    print('# env ' + ' '.join(f'{k}={v}' for k, v in env.items()), flush=True)
  last_round = [0]
  round_seconds = []
  process = subprocess.Popen(
      cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      env={**os.environ, **env},
      cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  tail = []

  def read():
    for line in process.stdout:
      match = _ROUND.match(line.strip())
      if match:
        last_round[0] = int(match.group(1))
        round_seconds.append(float(match.group(3)))
      tail.append(line)
      del tail[:-20]

  reader = threading.Thread(target=read, daemon=True)
  reader.start()
  samples = []
  cpu = []  # (round, worker CPU seconds)
  start = time.monotonic()
  worker = None
  try:
    while process.poll() is None:
      time.sleep(every)
      worker = worker or find_worker(process.pid)
      if worker is None or last_round[0] == 0:
        continue
      rss = vm_rss_mib(worker)
      if rss is not None and last_round[0] < rounds:
        samples.append((last_round[0], time.monotonic() - start, rss))
        cpu.append((last_round[0], worker_cpu_seconds(worker)))
        print(f'{last_round[0]:6d} {samples[-1][1]:8.1f} {rss:8.1f}',
              flush=True)
  finally:
    if process.poll() is None:
      process.terminate()
    process.wait()
    reader.join(timeout=5)
    shutil.rmtree(output_dir, ignore_errors=True)
  if process.returncode:
    sys.stdout.write(''.join(tail))
    raise SystemExit(f'binaries.train exited with {process.returncode}')
  if round_seconds:
    print(f'# median round {np.median(round_seconds):.3f} s over '
          f'{len(round_seconds)} rounds', flush=True)
  cpu = [(r, c) for r, c in cpu if c is not None]
  if len(cpu) > 1 and cpu[-1][0] > cpu[0][0]:
    print(f'# worker CPU {(cpu[-1][1] - cpu[0][1]) / (cpu[-1][0] - cpu[0][0]):.3f}'
          f' s per round (rounds {cpu[0][0]}-{cpu[-1][0]})', flush=True)
  return samples


def summarize(samples) -> str:
  if not samples:
    return 'no samples'
  rounds = [r for r, _, _ in samples]
  rss = [m for _, _, m in samples]
  half = [(r, m) for r, _, m in samples if r >= rounds[-1] / 2]
  slope = (np.polyfit([r for r, _ in half], [m for _, m in half], 1)[0]
           if len(half) > 1 else 0.0)
  return (f'first {rss[0]:.1f} MiB (round {rounds[0]}), max {max(rss):.1f}, '
          f'last {rss[-1]:.1f} MiB (round {rounds[-1]}); slope over rounds '
          f'{half[0][0]}-{half[-1][0]}: {100 * slope:+.2f} MiB per 100 rounds')


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--rounds', type=int, default=400)
  parser.add_argument('--checkpoint_every', type=int, default=0,
                      help='0: only after the last round')
  parser.add_argument('--eval_every', type=int, default=None,
                      help='default: the task\'s')
  parser.add_argument('--every', type=float, default=3.0,
                      help='seconds between samples')
  parser.add_argument('--env', action='append', default=[],
                      help='NAME=VALUE for the trainer and its worker')
  args, extra = parser.parse_known_args(argv)
  extra = [a for a in extra if a != '--']
  env = dict(item.split('=', 1) for item in args.env)
  print(f'{"round":>6} {"seconds":>8} {"RSS MiB":>8}')
  samples = measure(args.rounds, args.checkpoint_every, args.eval_every,
                    args.every, env, extra)
  print(summarize(samples), flush=True)


if __name__ == '__main__':
  main()
