"""Where and how a run's rounds execute: workers, contexts, vectorized clients.

`binaries.train` settles these before it trains: the TFF workers a run
uses (or none), how many client computations run at once on this
machine, the GPU settings and the execution context, and whether the
round's clients are trained in vectorized groups. None of them changes what
a run computes (its checkpoints are the same bit for bit), so a run resumes
across them. The contexts themselves are `runtime`'s; this module checks
the settings against each other and against the process that will run.

The refusals are `RefusedError`s whose text is the one line the trainer
prints; it names the flags (`--workers=...`) the user gave.
"""

from collections.abc import Callable, Mapping

from tff_opt.program import runtime
from tff_opt.program import worker_env


class RefusedError(ValueError):
  """The settings cannot run; the message is one line."""


def max_concurrent_clients(given: int | None,
                           workers: str | None) -> int | None:
  """`--max_concurrent_clients`, or its default for a local run.

  The default caps a local run's concurrent client computations at its
  worker's TensorFlow inter-op threads when the environment sets them
  (TF_NUM_INTEROP_THREADS): more at once than that pool has threads run in
  turns that leave the core idle (`worker_env`'s docstring has the
  figures). It changes how a run computes, not what. With workers it is
  each worker's setting, so nothing is set here.

  Args:
    given: `--max_concurrent_clients`, or None when it was not given.
    workers: `--workers`, or None for a local run.

  Returns:
    The cap on concurrent client computations; None for no cap.

  Raises:
    RefusedError: If TF_NUM_INTEROP_THREADS is set to anything but a
      positive integer.
  """
  if given is not None or workers is not None:
    return given
  try:
    return worker_env.default_max_concurrent_clients()
  except ValueError as e:
    raise RefusedError(str(e)) from e


def resolve_workers(workers: str | None, *, tls_root_cert: str | None,
                    worker_settings: Mapping[str, int | None]) -> str | None:
  """Checks `--workers`; returns it normalized (`None`: run locally).

  Args:
    workers: `--workers` as given (HOST:PORT,...), or None.
    tls_root_cert: `--worker_tls_root_cert`, or None.
    worker_settings: `{flag name: value}` of the settings that belong to
      each worker (`--max_concurrent_clients`, `--intra_op_threads`), in the
      order they are checked; None where not given.

  Returns:
    The addresses as HOST:PORT,HOST:PORT, or None for a local run.

  Raises:
    RefusedError: If an address is malformed, a worker's setting is also
      given (it belongs to each worker), or a root certificate is given
      without workers.
  """
  if workers is None:
    if tls_root_cert is not None:
      raise RefusedError(f'--worker_tls_root_cert={tls_root_cert}'
                         ': needs --workers.')
    return None
  try:
    addresses = runtime.parse_workers(workers)
  except ValueError as e:
    raise RefusedError(f'--workers={workers}: ' +
                       str(e).removeprefix('workers: ')) from e
  for name, value in worker_settings.items():
    if value is not None:
      raise RefusedError(f'--{name}={value}: with --workers, set it on each '
                         f'worker (python -m binaries.worker --{name}=N).')
  return ','.join(f'{host}:{port}' for host, port in addresses)


def vectorize(process, vectorized_model, *, group_size: int, algorithm: str):
  """`process` with the round's clients trained in groups of `group_size`.

  The algorithm is the one `process` runs (`vectorized.vectorize` rebuilds
  it from its own arguments); its state is the same, so a run resumes
  across the setting.

  Args:
    process: The algorithm's process, as its builder made it.
    vectorized_model: The task's model in its vectorized form
      (`vectorized_training.VectorizedModel`).
    group_size: `--client_vectorization`, at least 1.
    algorithm: `--algorithm`, for the message.

  Returns:
    The vectorized process.

  Raises:
    RefusedError: If the algorithm has a part the vectorized client work
      cannot run (client state, a loss hook, a client optimizer with shared
      state).
  """
  from tff_opt.algorithms import vectorized  # pylint: disable=g-import-not-at-top
  try:
    return vectorized.vectorize(process, vectorized_model,
                                group_size=group_size)
  except ValueError as e:
    line = str(e)
    if algorithm == 'fedcurv' and 'client state' in line:
      line = (line.rstrip('.') + ' (FedCurv\'s Eq. 3 keeps each client\'s '
              'last Fisher terms; --fedcurv_exact=off runs its stateless '
              'variant).')
    raise RefusedError(f'--client_vectorization={group_size}: '
                       f'--algorithm={algorithm}: {line}') from e


def check_workers_can_run(process, *, workers: str | None, algorithm: str,
                          fedbn: bool = False) -> None:
  """Refuses workers for a process TFF 0.87's workers cannot run.

  Client states travel with each client's position in the round
  (`client_states.compose`), so client-stateful processes run there, FedCurv's
  Eq. 3 included (tests/test_workers_stateful.py compares every registered
  algorithm with a local run). Refused, before anything is written: a round
  that TFF's multi-worker compiler cannot split at a single aggregation
  (`runtime.check_runs_on_workers`; no registered algorithm has one). The
  compiled form is cached for the first round.

  Args:
    process: The process as it will run.
    workers: The run's workers (`resolve_workers`); empty or None: local.
    algorithm: `--algorithm`, for the message.
    fedbn: Whether `--fedbn` is set, for the message.

  Raises:
    RefusedError: If workers are set and `process` has such a round.
  """
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_opt.round import client_states  # pylint: disable=g-import-not-at-top
  if not workers:
    return
  stateful = client_states.is_client_stateful(process)
  head = (f'--workers={workers}: --algorithm={algorithm}'
          f'{" --fedbn" if fedbn else ""}')
  computation = process.next_computation if stateful else process.next
  if not isinstance(computation, tff.Computation):
    return
  try:
    runtime.check_runs_on_workers(computation)
  except runtime.NotMergeableError as e:
    raise RefusedError(f'{head} cannot run on TFF workers: {e}; run it '
                       'without --workers.') from e


def set_context(*, workers: str | None, max_concurrent_clients: int | None,
                intra_op_threads: int | None, tls_root_cert: str | None,
                worker_timeout: float, gpu_memory_growth: bool,
                logical_gpus: int | None, logical_gpu_memory_mb: int,
                log: Callable[[str], None]) -> None:
  """GPU settings, then TFF's local C++ context or the workers' context.

  Args:
    workers: The run's workers (`resolve_workers`); empty or None: local.
    max_concurrent_clients: The local context's cap (`max_concurrent_clients`).
    intra_op_threads: The local worker's TensorFlow intra-op threads.
    tls_root_cert: Path of the PEM root certificate of the workers, or None.
    worker_timeout: Seconds to wait for every worker at start-up.
    gpu_memory_growth: Allocate GPU memory as needed.
    logical_gpus: Split the first GPU into this many, or None.
    logical_gpu_memory_mb: Memory of each logical GPU.
    log: Takes the GPU settings' one-line notes.

  Raises:
    RefusedError: If the GPU settings are inconsistent, the root
      certificate cannot be read, or a worker does not answer.
  """
  try:
    runtime.configure_gpus(
        memory_growth=gpu_memory_growth, logical_gpus=logical_gpus,
        logical_gpu_memory_mb=logical_gpu_memory_mb, log=log)
  except ValueError as e:
    # The one refusal the flags' bounds let through: --logical_gpus with
    # --gpu_memory_growth.
    raise RefusedError(f'--logical_gpus={logical_gpus}: {e}') from e
  if not workers:
    runtime.set_local_execution_context(
        max_concurrent_clients, intra_op_threads=intra_op_threads)
    return
  root_cert = None
  if tls_root_cert:
    try:
      with open(tls_root_cert, 'rb') as f:
        root_cert = f.read()
    except OSError as e:
      raise RefusedError(f'--worker_tls_root_cert={tls_root_cert}: cannot '
                         f'read it: {e.strerror or e}.') from e
  try:
    runtime.set_remote_execution_context(
        workers, tls_root_certificates=root_cert,
        connect_timeout=worker_timeout)
  except runtime.WorkerError as e:
    raise RefusedError(f'--workers={workers}: {e}') from e
