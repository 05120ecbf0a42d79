"""What runs a learning process: the pieces around the round.

`training_loop` (sampling, rounds, evaluation, metrics and the per-client
state store), `checkpoints` (the program state on disk), `evaluation` and
`personalization` (final and per-client evaluation), `registry` (algorithm
name -> builder, as the binaries use it), `runtime` and `worker_env` (TFF's
execution context and its worker process), `analysis` (the numbers read
off a run's metrics), `output_lock` (one writer per run directory),
`files` (files replaced whole or not at all).
"""
