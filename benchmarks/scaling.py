r"""Scaling: round time against clients per round, memory over many rounds,
and a Stack-Overflow-sized population in TFF's SQLite format.

    .venv/bin/python -m benchmarks.scaling                  # all three parts
    .venv/bin/python -m benchmarks.scaling --parts=memory --memory_rounds=500
    .venv/bin/python -m benchmarks.scaling --quick          # smoke run

Three parts (`--parts`, comma-separated):

time        tff-opt's FedOpt (client SGD 0.1, server SGD 1) on the `digits`
            CNN (`tasks/models.create_digits_cnn`, 8x8x1 inputs) with
            synthetic clients of 20 examples, batch 10, one epoch (2 local
            steps each), at `--clients` clients per round (10, 50, 200):
            median seconds per round over `--rounds` rounds after one
            warm-up, and seconds per client (flat = linear growth).
memory      `--memory_rounds` rounds (500) of the same FedOpt through
            `training_loop.run_training` (10 clients per round sampled from
            1,000, their datasets built anew every round, as the binary
            does); the resident memory of this process and of its TFF
            `worker_binary` children (psutil) is read after every round and
            printed every `--memory_every` rounds, with its peak and the
            least-squares slope over the second half of the rounds (MiB per
            100 rounds; ~0 = flat).
population  A population of `--population` clients (342,477, Stack
            Overflow's train split) in TFF's SQLite format
            (`tasks/sqlite_data.write_sqlite`; one synthetic example per
            client: 64 floats and a label), read with TFF's own
            `load_and_parse_sql_client_data`. It reports the seconds and
            memory to open it (TFF reads and sorts every client id), then,
            for `--sample_rounds` rounds, the seconds to sample a round's 10
            clients, build their datasets and read them, and the number of
            examples read, which equals the sampled clients' examples: a
            round reads only its clients. TFF's `SqlClientData` queries
            `examples WHERE client_id = ...` and the format has no index
            (`write_sqlite(..., index=False)`), so SQLite scans the table
            for each client; the same rounds are then timed on a copy of
            the file with an index on `examples(client_id)`, as
            `write_sqlite` writes it by default, to show that cost. The files are kept in
            `--sqlite_dir` and reused.

`--quick` runs 2 timed rounds at 2, 5 and 10 clients, 30 memory rounds and
a 20,000-client population, to check the script runs.
"""

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
# TensorFlow's oneDNN kernels unless the environment says otherwise (see
# tff_opt/program/worker_env.py); TFF's worker inherits the setting.
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

from benchmarks import common  # pylint: disable=g-import-not-at-top
from tasks import models  # pylint: disable=g-import-not-at-top
from tasks import sqlite_data  # pylint: disable=g-import-not-at-top
from tff_opt import algorithms  # pylint: disable=g-import-not-at-top
from tff_opt.program import files  # pylint: disable=g-import-not-at-top
from tff_opt.program import runtime  # pylint: disable=g-import-not-at-top
from tff_opt.program import training_loop  # pylint: disable=g-import-not-at-top

PARTS = ('time', 'memory', 'population')
EXAMPLES_PER_CLIENT = 20
BATCH_SIZE = 10
NUM_CLASSES = 10
MEMORY_POPULATION = 1000
MEMORY_CLIENTS_PER_ROUND = 10
INPUT_SPEC = (tf.TensorSpec([None, 8, 8, 1], tf.float32),
              tf.TensorSpec([None], tf.int32))


def model_fn() -> tff.learning.models.VariableModel:
  return tff.learning.models.from_keras_model(
      models.create_digits_cnn(NUM_CLASSES),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=INPUT_SPEC,
      metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name='accuracy')])


def build_fed_opt():
  return algorithms.build_fed_opt(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))


def clients(num_clients: int, seed: int = 0):
  return common.synthetic_clients(
      num_clients, EXAMPLES_PER_CLIENT, x_shape=(8, 8, 1),
      num_classes=NUM_CLASSES, batch_size=BATCH_SIZE, seed=seed)


def time_part(process, initial, counts, rounds):
  """Seconds per round at each number of clients per round."""
  print(f'\n[time] FedOpt, digits CNN, {EXAMPLES_PER_CLIENT} examples per '
        f'client, batch {BATCH_SIZE}; median of {rounds} rounds after 1 '
        f'warm-up; {common.load_average()}', flush=True)
  table = common.Table([('clients', 7, ''), ('s/round', 8, '.3f'),
                        ('s/client', 9, '.4f'), ('examples/s', 10, '.0f')])
  table.print_header()
  for count in counts:
    seconds = common.median(common.time_calls(
        common.process_round_fn(process, clients(count), initial),
        warmup=1, repeats=rounds))
    table.print_row(count, seconds, seconds / count,
                    count * EXAMPLES_PER_CLIENT / seconds)


def _slope(xs, ys) -> float:
  """Least-squares slope of ys against xs (0 for fewer than 2 points)."""
  if len(xs) < 2:
    return 0.0
  return float(np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)[0])


def memory_part(process, initial, rounds, every, checkpoint_every=10):
  """Resident memory over `rounds` rounds of `training_loop.run_training`.

  Checkpoints are saved every `checkpoint_every` rounds into a temporary
  output directory, as `binaries.train` does (0: no output directory).
  """
  print(f'\n[memory] FedOpt, {MEMORY_CLIENTS_PER_ROUND} of '
        f'{MEMORY_POPULATION} clients per round, datasets built every round, '
        f'{rounds} rounds, checkpoint every {checkpoint_every or "never"}; '
        f'RSS in MiB after the round (python + worker_binary); '
        f'{common.load_average()}', flush=True)
  output_dir = (tempfile.mkdtemp(prefix='scaling_memory_')
                if checkpoint_every else None)
  population = clients(MEMORY_POPULATION, seed=1)
  ids = [f'c{i:04d}' for i in range(MEMORY_POPULATION)]
  by_id = dict(zip(ids, population))
  samples = []  # (round, python MiB, workers MiB)
  table = common.Table([('round', 6, ''), ('python', 8, '.1f'),
                        ('workers', 8, '.1f'), ('total', 8, '.1f'),
                        ('s/round', 8, '.3f')])
  table.print_header()
  last = {'time': time.perf_counter(), 'round': 0}

  def on_round(line):
    del line  # One call per round (and one summary, skipped below).
    if len(samples) >= rounds:
      return
    own, workers = common.rss_mb()
    samples.append((len(samples) + 1, own, workers))
    round_num = len(samples)
    if round_num == 1 or round_num % every == 0 or round_num == rounds:
      now = time.perf_counter()
      table.print_row(round_num, own, workers, own + workers,
                      (now - last['time']) / (round_num - last['round']))
      last.update(time=now, round=round_num)

  training_loop.run_training(
      process,
      client_ids=ids,
      client_dataset_fn=lambda cid: by_id[cid],
      clients_per_round=MEMORY_CLIENTS_PER_ROUND,
      rounds=rounds,
      seed=0,
      output_dir=output_dir,
      checkpoint_every=checkpoint_every or 1,
      initial_state=process.set_model_weights(process.initialize(), initial),
      log=on_round)
  if output_dir:
    shutil.rmtree(output_dir, ignore_errors=True)
  half = samples[len(samples) // 2:]
  totals = [own + workers for _, own, workers in samples]
  slope = _slope([r for r, _, _ in half], [o + w for _, o, w in half])
  print(f'peak total RSS {max(totals):.1f} MiB (python '
        f'{max(o for _, o, _ in samples):.1f}, workers '
        f'{max(w for _, _, w in samples):.1f}); slope over rounds '
        f'{half[0][0]}-{half[-1][0]}: {100 * slope:+.2f} MiB per 100 rounds; '
        f'{common.load_average()}', flush=True)


ELEMENT_SPEC = {'pixels': tf.TensorSpec([64], tf.float32),
                'label': tf.TensorSpec([], tf.int64)}


def write_population(path: str, population: int) -> float:
  """Writes (if missing) `population` one-example clients; returns seconds.

  The file has no index on `examples(client_id)`, as TFF's own SQLite
  files, so that it shows the cost the index saves.
  """
  if os.path.exists(path):
    return 0.0
  start = time.perf_counter()
  rng = np.random.default_rng(0)

  def client_elements():
    for i in range(population):
      yield f'{i:08d}', [{'pixels': rng.random(64).astype(np.float32),
                          'label': np.array([i % NUM_CLASSES])}]

  sqlite_data.write_sqlite(path, {'train': dict(client_elements())},
                           index=False)
  return time.perf_counter() - start


def _sample_rounds(client_data, rounds: int, clients_per_round: int):
  """[(seconds, examples read, examples the sampled clients hold)]."""
  results = []
  ids = client_data.client_ids
  for round_num in range(1, rounds + 1):
    start = time.perf_counter()
    sampled = training_loop.sample_clients(ids, clients_per_round, seed=0,
                                           round_num=round_num)
    read = 0
    for cid in sampled:
      dataset = client_data.create_tf_dataset_for_client(cid).batch(
          BATCH_SIZE)
      for batch in dataset:
        read += int(batch['label'].shape[0])
    results.append((time.perf_counter() - start, read, len(sampled)))
  return results


def population_part(population: int, sqlite_dir: str, rounds: int):
  """Opening a huge TFF SQLite population and sampling rounds from it."""
  os.makedirs(sqlite_dir, exist_ok=True)
  # `_noindex`: files of this name before were written with write_sqlite's
  # index, and must not be reused as the unindexed file.
  path = os.path.join(sqlite_dir, f'population_{population}_noindex.sqlite')
  written = write_population(path, population)
  print(f'\n[population] {population:,} clients x 1 example in TFF\'s SQLite '
        f'format: {path} ({os.path.getsize(path) / 2**20:.1f} MiB'
        + (f', written in {written:.1f} s' if written else ', reused')
        + f'); 10 clients per round; {common.load_average()}', flush=True)
  indexed = os.path.join(sqlite_dir, f'population_{population}_indexed.sqlite')
  if not os.path.exists(indexed):
    with files.built_atomically(indexed) as tmp:
      shutil.copyfile(path, tmp)
      with sqlite3.connect(tmp) as con:
        con.execute(f'CREATE INDEX {sqlite_data.EXAMPLES_INDEX} ON examples '
                    '(client_id);')
      con.close()
  table = common.Table([('file', 9, ''), ('open s', 7, '.2f'),
                        ('open MiB', 8, '+.1f'), ('round s', 8, '.3f'),
                        ('rounds MiB', 10, '+.1f'), ('read', 5, ''),
                        ('held', 5, '')])
  table.print_header()
  for label, file in (('no index', path), ('indexed', indexed)):
    before, _ = common.rss_mb()
    start = time.perf_counter()
    client_data = tff.simulation.datasets.load_and_parse_sql_client_data(
        file, ELEMENT_SPEC, split_name='train')
    num_ids = len(client_data.client_ids)
    opened = time.perf_counter() - start
    after_open, _ = common.rss_mb()
    results = _sample_rounds(client_data, rounds, 10)
    after_rounds, _ = common.rss_mb()
    if num_ids != population:
      raise RuntimeError(f'{file}: {num_ids} client ids, expected '
                         f'{population}.')
    table.print_row(label, opened, after_open - before,
                    common.median([s for s, _, _ in results]),
                    after_rounds - after_open,
                    sum(r for _, r, _ in results),
                    sum(h for _, _, h in results))
    del client_data


def _parse_args(argv):
  parser = argparse.ArgumentParser(prog='scaling',
                                   description=__doc__.split('\n')[0])
  parser.add_argument('--parts', default=','.join(PARTS),
                      help=f'Comma-separated parts: {", ".join(PARTS)}.')
  parser.add_argument('--clients', default='10,50,200',
                      help='Clients per round for the time part.')
  parser.add_argument('--rounds', type=int, default=5,
                      help='Timed rounds per client count.')
  parser.add_argument('--memory_rounds', type=int, default=500)
  parser.add_argument('--memory_every', type=int, default=50)
  parser.add_argument('--memory_checkpoint_every', type=int, default=10,
                      help='save checkpoints every N rounds in the memory '
                      'part, as binaries.train does (0: none)')
  parser.add_argument('--population', type=int, default=342477)
  parser.add_argument('--sample_rounds', type=int, default=20)
  parser.add_argument('--sqlite_dir', default='/tmp/tff_opt_bench')
  parser.add_argument('--max_concurrent_clients', type=int, default=None)
  parser.add_argument('--quick', action='store_true',
                      help='Small sizes, to check the script runs.')
  args = parser.parse_args(argv)
  args.parts = [p.strip() for p in args.parts.split(',') if p.strip()]
  unknown = [p for p in args.parts if p not in PARTS]
  if unknown or not args.parts:
    parser.error(f'--parts={",".join(args.parts)}: expected some of '
                 f'{", ".join(PARTS)}')
  try:
    args.clients = [int(c) for c in args.clients.split(',')]
  except ValueError:
    args.clients = [0]
  if min(args.clients) < 1:
    parser.error(f'--clients={args.clients}: expected comma-separated '
                 'positive integers')
  for flag in ('rounds', 'memory_rounds', 'memory_every', 'population',
               'sample_rounds'):
    if getattr(args, flag) < 1:
      parser.error(f'--{flag}={getattr(args, flag)}: expected a positive '
                   'integer')
  if args.population < 10:
    parser.error(f'--population={args.population}: expected at least 10 '
                 '(one round\'s clients)')
  concurrency = args.max_concurrent_clients
  if concurrency is not None and concurrency < 1:
    parser.error(f'--max_concurrent_clients={args.max_concurrent_clients}: '
                 'expected a positive integer')
  if args.quick:
    args.clients = [2, 5, 10]
    args.rounds = min(args.rounds, 2)
    args.memory_rounds = min(args.memory_rounds, 30)
    args.memory_every = min(args.memory_every, 10)
    args.population = min(args.population, 20000)
    args.sample_rounds = min(args.sample_rounds, 5)
  return args


def main(argv=None):
  args = _parse_args(argv)
  print(f'scaling: parts {", ".join(args.parts)}; max_concurrent_clients '
        f'{args.max_concurrent_clients or "none"}', flush=True)
  runtime.set_local_execution_context(
      max_concurrent_clients=args.max_concurrent_clients)
  try:
    if 'time' in args.parts or 'memory' in args.parts:
      process = build_fed_opt()
      initial = common.initial_weights(model_fn, 0)
      if 'time' in args.parts:
        time_part(process, initial, args.clients, args.rounds)
      if 'memory' in args.parts:
        memory_part(process, initial, args.memory_rounds, args.memory_every,
                    args.memory_checkpoint_every)
    if 'population' in args.parts:
      population_part(args.population, args.sqlite_dir, args.sample_rounds)
  finally:
    runtime.shutdown()
  sys.stdout.flush()


if __name__ == '__main__':
  main()
