#!/bin/bash
# Start-up A/B/C, interleaved: benchmarks.startup (stages) and --binary.
# OLD, PREV: detached worktrees (git worktree add --detach DIR SHA; ln -s
# the main .venv into each), here 4d70e32 (start of session 24) and 7774ced
# (session 26's stop), each given benchmarks/startup.py as of 438d397
# (git show 438d397:benchmarks/startup.py > DIR/benchmarks/startup.py).
# MAIN: the checkout under test.
for i in 1 2 3; do
  for v in old prev main; do
    case $v in old) d=${OLD:-/tmp/wt_old};; prev) d=${PREV:-/tmp/wt_prev};; main) d=${MAIN:-/work/main};; esac
    echo "== $v stages run $i ($(cd $d && git rev-parse --short HEAD))"
    (cd $d && .venv/bin/python -m benchmarks.startup 2>&1 | tail -12)
    echo "== $v binary run $i"
    (cd $d && .venv/bin/python -m benchmarks.startup --binary --runs=2 2>&1 | tail -3)
  done
done
