"""Set-up the benchmark scripts share.

The benchmarks (`round_time`, `scaling`, `startup`, ...) time rounds and
read memory, each from the same initial model for every algorithm. The
pieces:

- `initial_weights(model_fn, seed)`: the same starting model for every
  algorithm (NumPy `ModelWeights`).
- `Table`: fixed-width columns, printed row by row as results arrive.
- `process_round_fn`: one round of a process as a no-arg callable.
- `time_calls`, `median`: timing of repeated calls (rounds).
- `cpu_seconds()`: CPU time of this process and its workers.
- `rss_mb()`: resident memory of this process and of its TFF
  `worker_binary` children (psutil).
- `synthetic_clients(...)`: seeded random `(x, y)` client datasets.
- `load_average()`: the machine's load, printed with every speed figure.
"""

import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import psutil
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.program import runtime
from tff_opt.round import client_states


def load_average() -> str:
  """The 1/5/15-minute load averages and the core count, as one string."""
  one, five, fifteen = os.getloadavg()
  return (f'load average {one:.2f} {five:.2f} {fifteen:.2f} on '
          f'{os.cpu_count()} cores')


def initial_weights(model_fn: Callable[[], Any],
                    seed: int) -> tff.learning.models.ModelWeights:
  """A seeded initial model as NumPy `ModelWeights` (for `set_model_weights`).

  Args:
    model_fn: A no-arg callable returning a `tff.learning.models.VariableModel`.
    seed: Seed of Keras' initialisers.

  Returns:
    The model's `ModelWeights`, every leaf a NumPy array.
  """
  tf.keras.utils.set_random_seed(seed)
  weights = tff.learning.models.ModelWeights.from_model(model_fn())
  return tf.nest.map_structure(lambda v: np.asarray(v.numpy()), weights)


class Table:
  """A fixed-width text table printed one row at a time.

  Each column is `(header, width, format)`; `format` is a format spec
  (e.g. '.4f') applied to numbers; strings and `None` (printed '-') are
  right-aligned as they are. The first column is left-aligned.
  """

  def __init__(self, columns: Sequence[tuple[str, int, str]]):
    self._columns = list(columns)

  def _cell(self, index: int, text: str) -> str:
    width = self._columns[index][1]
    return f'{text:<{width}}' if index == 0 else f'{text:>{width}}'

  def format_header(self) -> str:
    return ' '.join(self._cell(i, c[0]) for i, c in enumerate(self._columns))

  def format_row(self, values: Sequence[Any]) -> str:
    """One row; raises ValueError if the number of values is wrong."""
    if len(values) != len(self._columns):
      raise ValueError(f'Expected {len(self._columns)} values, got '
                       f'{len(values)}.')
    cells = []
    for i, (value, (_, _, spec)) in enumerate(zip(values, self._columns)):
      if value is None:
        text = '-'
      elif isinstance(value, (int, float, np.number)) and not isinstance(
          value, bool) and spec:
        text = format(value, spec)
      else:
        text = str(value)
      cells.append(self._cell(i, text))
    return ' '.join(cells)

  def print_header(self) -> None:
    print(self.format_header(), flush=True)

  def print_row(self, *values: Any) -> None:
    print(self.format_row(values), flush=True)


def median(values: Sequence[float]) -> float:
  """The median; raises ValueError on an empty sequence."""
  if not values:
    raise ValueError('median of no values.')
  return float(statistics.median(values))


def time_calls(fn: Callable[[], Any], *, warmup: int,
               repeats: int) -> list[float]:
  """Seconds of each of `repeats` calls of `fn`, after `warmup` untimed ones.

  Raises:
    ValueError: If `warmup < 0` or `repeats < 1`.
  """
  if warmup < 0:
    raise ValueError(f'warmup must be >= 0, got {warmup}.')
  if repeats < 1:
    raise ValueError(f'repeats must be >= 1, got {repeats}.')
  for _ in range(warmup):
    fn()
  seconds = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    seconds.append(time.perf_counter() - start)
  return seconds


def process_round_fn(process: tff.learning.templates.LearningProcess,
                     datasets: Sequence[tf.data.Dataset],
                     initial: tff.learning.models.ModelWeights
                     ) -> Callable[[], None]:
  """A no-arg callable running one round of `process` on `datasets`.

  The server state (and, for a client-stateful process such as SCAFFOLD,
  the clients' states) is kept inside, so repeated calls are consecutive
  rounds on the same clients.

  Args:
    process: The `LearningProcess` (or `client_states` process).
    datasets: The clients' datasets, the same every round.
    initial: The starting model (`initial_weights`).

  Returns:
    The round function.
  """
  holder = {'state': process.set_model_weights(process.initialize(), initial)}
  stateful = client_states.is_client_stateful(process)
  if stateful:
    holder['clients'] = [process.initial_client_state()] * len(datasets)

  def run_round():
    if stateful:
      output, holder['clients'] = process.next(holder['state'], datasets,
                                               holder['clients'])
    else:
      output = process.next(holder['state'], datasets)
    holder['state'] = output.state

  return run_round


def worker_processes() -> list[psutil.Process]:
  """This process's TFF `worker_binary` descendants."""
  return runtime.worker_children()


def rss_mb() -> tuple[float, float]:
  """(this process's RSS, its `worker_binary` children's total RSS) in MiB."""
  own = psutil.Process(os.getpid()).memory_info().rss
  workers = 0
  for worker in worker_processes():
    try:
      workers += worker.memory_info().rss
    except psutil.Error:
      continue
  return own / 2**20, workers / 2**20


def cpu_seconds() -> float:
  """CPU seconds (user + system) used so far by this process and its workers.

  On a loaded machine a round's CPU seconds vary far less than its wall
  time, so they compare the work two processes do even when wall times are
  noisy (they do not show parallelism).
  """
  total = 0.0
  for proc in [psutil.Process(os.getpid())] + worker_processes():
    try:
      times = proc.cpu_times()
    except psutil.Error:
      continue
    total += times.user + times.system
  return total


def synthetic_clients(num_clients: int, examples_per_client: int, *,
                      x_shape: Sequence[int], num_classes: int,
                      batch_size: int, seed: int = 0,
                      x_dtype=np.float32) -> list[tf.data.Dataset]:
  """Seeded random `(x, y)` client datasets, batched, one epoch each.

  Args:
    num_clients: Number of clients.
    examples_per_client: Examples per client.
    x_shape: Shape of one example's `x`.
    num_classes: Labels are drawn uniformly from `[0, num_classes)`.
    batch_size: Batch size.
    seed: NumPy seed.
    x_dtype: dtype of `x` (float: uniform [0, 1); integer: uniform ids
      `[0, num_classes)`).

  Returns:
    A list of `num_clients` datasets of `(x, y)` batches, `y` int32 of
    shape `[batch]`.

  Raises:
    ValueError: If a count is below 1.
  """
  for name, value in (('num_clients', num_clients),
                      ('examples_per_client', examples_per_client),
                      ('batch_size', batch_size),
                      ('num_classes', num_classes)):
    if value < 1:
      raise ValueError(f'{name} must be at least 1, got {value}.')
  rng = np.random.default_rng(seed)
  datasets = []
  for _ in range(num_clients):
    shape = (examples_per_client, *x_shape)
    if np.issubdtype(x_dtype, np.integer):
      x = rng.integers(0, num_classes, size=shape).astype(x_dtype)
    else:
      x = rng.random(shape).astype(x_dtype)
    y = rng.integers(0, num_classes, size=examples_per_client).astype(np.int32)
    datasets.append(tf.data.Dataset.from_tensor_slices((x, y)).batch(
        batch_size))
  return datasets
