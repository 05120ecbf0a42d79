#!/usr/bin/env bash
# Continues the claims' runs in the background, as this 2-core machine runs
# them: two chains, one per core, each run with one TensorFlow thread.
#
#   core 1: Reddi et al.'s seed 0 (fedopt: every optimizer, one at a
#           time); then FedPTR-S with a fixed mu (its tuning and 5 seeds);
#           then whatever FedPTR and FedCurv runs are left; then Reddi et
#           al.'s seed 1;
#   core 2: FedFOR (3 seeds); FedPTR's FedAvg and FedProx runs (5 seeds);
#           FedCurv (its lambda tuning, 3 seeds); the rest of FedPTR
#           (FedPTR-S with the layer-adaptive mu, and what core 1 left);
#           then Reddi et al.'s seed 1 with core 1.
#
# Reddi et al.'s seed 1 goes last: one 1,500-round run of each optimizer
# is what that claim's setting asks first, while FedPTR-S has no run yet
# (~50 core-hours); the verdict needs seed 1, and gets it at the end.
#
# Both chains end on queues they share: a run one process is writing is
# skipped by the other (its trainer holds the directory's lock), so the
# core that finishes first helps the other instead of idling. A chain left
# with only the layer-adaptive mu's runs while the other runs one of their
# tuning candidates waits for it (binaries.claims --wait_for_tunings, the
# default) and then shares those runs, rather than moving on to Reddi et
# al.'s seed 1 and leaving all five seeds to the other core.
#
# FedPTR's cheap runs go before FedCurv because their checkpoints are small
# enough to commit, so they survive a change of machine between sessions.
# The FedCurv method's are not (~0.9 GB each: Eq. 3 keeps every device's
# last Fisher diagonal and Fisher * w), so a FedCurv run resumes only on
# the machine that started it; on a new machine it starts again from
# round 1. The FedAvg and FedProx runs of that claim keep the model only
# (~4.6 MB) and are committed like the others.
#
# Every run resumes from its last checkpoint and a finished run is skipped,
# so this is safe to start again after the processes ended (they end with
# each working session). A claim whose driver fails does not stop the chain
# (its log says why). It refuses to start while a claims process runs.
#
# Usage, from a checkout whose results/ and data/ hold the runs (the
# sessions use a detached worktree with links to the main checkout's):
#   bash results/claims/continue.sh            # logs in /tmp/claims
#   LOG_DIR=... PYTHON=... bash results/claims/continue.sh
# Stop both chains gracefully: pkill -TERM -f 'binaries\.claims'. SIGTERM
# ends each chain's bash at once and makes its binaries.claims stop its
# run (which keeps its last checkpoint) and exit 143. SIGINT is not
# enough: the claims process exits 130 and its chain starts the next one.
# Commit progress (before a session ends too: a new machine resumes only
# from committed checkpoints), from the main checkout, never `commit -a`:
#   .venv/bin/python -m tools.stage_checkpoints && git commit -m ...
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-.venv/bin/python}
log_dir=${LOG_DIR:-/tmp/claims}
if pgrep -f "binaries\.claims" > /dev/null; then
  echo "continue.sh: a binaries.claims process is running already:" >&2
  pgrep -af "binaries\.claims" >&2
  exit 1
fi
mkdir -p "$log_dir"
claims="nice -n 10 $python -m binaries.claims --parallel=1 --threads_per_run=1 --data_dir=data"
nohup setsid bash -c "$claims --claims=fedopt --runs='fedopt__*__seed0' \
  > $log_dir/fedopt_seed0.out 2>&1; \
$claims --claims=fedptr --runs='fedptr__fedptr_s_fixed_mu*' \
  > $log_dir/fedptr_fixed.out 2>&1; \
$claims --claims=fedptr > $log_dir/fedptr_core1.out 2>&1; \
$claims --claims=fedcurv > $log_dir/fedcurv_core1.out 2>&1; \
$claims --claims=fedopt > $log_dir/fedopt.out 2>&1" > /dev/null 2>&1 &
nohup setsid bash -c "$claims --claims=fedfor > $log_dir/fedfor.out 2>&1; \
$claims --claims=fedptr --runs='fedptr__fedavg__*,fedptr__fedprox*' \
  > $log_dir/fedptr_baselines.out 2>&1; \
$claims --claims=fedcurv > $log_dir/fedcurv.out 2>&1; \
$claims --claims=fedptr > $log_dir/fedptr.out 2>&1; \
$claims --claims=fedopt > $log_dir/fedopt_core2.out 2>&1" > /dev/null 2>&1 &
echo "continue.sh: started; progress in $log_dir/*.out"
