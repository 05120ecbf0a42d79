"""Reading and writing federated data in TFF's SQLite format.

TFF's federated datasets (`tff.simulation.datasets.{emnist, shakespeare,
stackoverflow, cifar100}.load_data`) are one SQLite file each, with two tables
(see `tensorflow_federated/python/simulation/datasets/sql_client_data.py`):

    examples(split_name TEXT, client_id TEXT, serialized_example_proto BLOB)
    client_metadata(client_id TEXT, split_name TEXT, num_examples INTEGER)

Every row of `examples` is one serialized `tf.train.Example`; the loaders
parse fixed features (e.g. Shakespeare: `snippets` bytes; EMNIST: `pixels`
float [28, 28] and `label` int64). `write_sqlite` writes such a file from
plain Python/NumPy values, so tests and `tools/make_shakespeare_sqlite.py`
can feed the real loaders offline (they skip the download when the
uncompressed file is already in `cache_dir`).

`sample_examples` draws an evaluation sample from a (possibly huge, lazily
read) `ClientData` touching only the clients it needs; `pooled_examples`
is all of it, in one fixed client order. `ExampleSampler` is
Reddi et al.'s Stack Overflow validation: a uniform sample of examples (not
clients) of a split, drawn again at every evaluation from (seed, round),
read straight from the SQLite file by row id.
"""

import os
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt.program import files

# One element: feature name -> bytes/str (bytes feature), a float array
# (float feature, flattened) or an int array (int64 feature, flattened).
Element = Mapping[str, Any]

# The index `write_sqlite` creates on `examples(client_id)`.
EXAMPLES_INDEX = 'examples_client_id'


def _feature(value: Any) -> tf.train.Feature:
  if isinstance(value, str):
    value = value.encode('utf-8')
  if isinstance(value, bytes):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
  array = np.asarray(value)
  if np.issubdtype(array.dtype, np.floating):
    return tf.train.Feature(
        float_list=tf.train.FloatList(value=array.reshape(-1).tolist()))
  if np.issubdtype(array.dtype, np.integer):
    return tf.train.Feature(
        int64_list=tf.train.Int64List(value=array.reshape(-1).tolist()))
  raise TypeError(f'Cannot serialize a value of type {type(value)} '
                  f'(dtype {array.dtype}).')


def serialize_example(element: Element) -> bytes:
  """One element as a serialized `tf.train.Example` (TFF's encoding)."""
  return tf.train.Example(features=tf.train.Features(feature={
      name: _feature(value) for name, value in element.items()
  })).SerializeToString()


def write_sqlite(
    path: str,
    splits: Mapping[str, Mapping[str, Iterable[Element]]],
    *,
    index: bool = True,
) -> dict[str, dict[str, int]]:
  """Writes a federated dataset in TFF's SQLite format.

  The file is built next to `path` and renamed into place
  (`tff_opt.program.files.built_atomically`), so a reader never sees a
  half-written file and a failed write leaves no temporary behind. It
  also holds an index on `examples(client_id)` (named `EXAMPLES_INDEX`;
  `index=False` leaves it out, as TFF's own files do):
  TFF's reader fetches a client's examples with `SELECT ... FROM examples
  WHERE client_id = '...'`, which without an index scans the whole table
  for every client, so a round's cost grew with the population (a round
  on a 342,477-client file: 3.3 s without it, 0.65 s with it). TFF's
  reader ignores the extra entry in `sqlite_master`.

  Args:
    path: The SQLite file to write (replaced if it exists).
    splits: split name (e.g. 'train') -> client id -> the client's elements.
    index: Whether to add the index on `examples(client_id)`.

  Returns:
    split name -> client id -> number of examples written.
  """
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  counts: dict[str, dict[str, int]] = {}
  with files.built_atomically(path) as tmp:
    with sqlite3.connect(tmp) as con:
      con.execute('CREATE TABLE examples (split_name TEXT NOT NULL, '
                  'client_id TEXT NOT NULL, '
                  'serialized_example_proto BLOB NOT NULL);')
      con.execute('CREATE TABLE client_metadata (client_id TEXT NOT NULL, '
                  'split_name TEXT NOT NULL, num_examples INTEGER NOT NULL);')
      for split_name, clients in splits.items():
        counts[split_name] = {}
        for client_id, elements in clients.items():
          rows = [(split_name, client_id, serialize_example(e))
                  for e in elements]
          con.executemany(
              'INSERT INTO examples (split_name, client_id, '
              'serialized_example_proto) VALUES (?, ?, ?);', rows)
          con.execute(
              'INSERT INTO client_metadata (client_id, split_name, '
              'num_examples) VALUES (?, ?, ?);',
              (client_id, split_name, len(rows)))
          counts[split_name][client_id] = len(rows)
      if index:  # After the rows (one bulk build): see the docstring.
        con.execute(f'CREATE INDEX {EXAMPLES_INDEX} ON examples '
                    '(client_id);')
    con.close()
  return counts


def sample_examples(client_data: tff.simulation.datasets.ClientData,
                    num_examples: int, *, seed: int) -> tf.data.Dataset:
  """A seeded sample of `num_examples` elements, reading few clients.

  Clients are visited in a random order drawn from `seed` (NumPy), each
  client's elements in their stored order, and the first `num_examples`
  elements are kept: only the clients needed to fill the sample are read
  (for Stack Overflow's 204,088 test clients, about a hundred). This samples
  clients, not examples, uniformly: a choice made so that sampling never
  scans the whole (16-million-example) test split.

  Args:
    client_data: The population, e.g. a task's `test_data`.
    num_examples: Sample size, at least 1.
    seed: Seed of the client order.

  Returns:
    A `tf.data.Dataset` of unpreprocessed elements; iterating it twice gives
    the same elements.

  Raises:
    ValueError: If `num_examples < 1`.
  """
  if num_examples < 1:
    raise ValueError(f'num_examples must be at least 1, got {num_examples!r}.')
  client_ids: Sequence[str] = sorted(client_data.client_ids)
  order = np.random.default_rng(seed).permutation(len(client_ids))
  return _examples_of(client_data,
                      [client_ids[i] for i in order]).take(num_examples)


def pooled_examples(
    client_data: tff.simulation.datasets.ClientData) -> tf.data.Dataset:
  """Every element of every client, clients in sorted id order.

  The held-out data an evaluation pools. TFF's
  `ClientData.create_tf_dataset_from_all_clients()` shuffles the clients
  with an unseeded `np.random.RandomState`, so each call (each process, each
  run) sums the evaluation's per-batch losses in another order, and the
  mean loss differs in its last float32 bit from run to run. Sorted ids
  give one order everywhere: a resumed run logs the `eval_loss` of an
  uninterrupted one.

  Args:
    client_data: The clients, e.g. a task's `test_data`.

  Returns:
    A `tf.data.Dataset` of unpreprocessed elements, each client's in their
    stored order.
  """
  return _examples_of(client_data, sorted(client_data.client_ids))


def _examples_of(client_data: tff.simulation.datasets.ClientData,
                 client_ids: Sequence[str]) -> tf.data.Dataset:
  """The elements of `client_ids`' datasets, one client after the other."""
  ids = tf.data.Dataset.from_tensor_slices(
      np.array(list(client_ids), dtype=object).astype(str))
  return ids.flat_map(client_data.serializable_dataset_fn)


class ExampleSampler:
  """Uniform samples of a split's examples, one per evaluation round.

  Reddi et al. (Stack Overflow) evaluate on 10,000 test examples sampled
  afresh at each evaluation. Here the sample of round r is
  `numpy.random.default_rng([seed, r]).choice(N, size, replace=False)` over
  the split's N examples in row-id order, so a resumed run evaluates on the
  same examples as an uninterrupted one. Only the sampled rows are read
  (`SELECT ... WHERE rowid IN (...)`); the split's row ids are listed once
  (when they are not one contiguous range) and kept.

  Args:
    path: A TFF SQLite file (`examples` table).
    element_spec: `{feature: tf.TensorSpec}` of the parsed examples (the
      `ClientData`'s `element_type_structure`).
    num_examples: Sample size; the whole split when it has fewer.
    seed: Seed of every draw.
    split: The split's `split_name`.

  Raises:
    ValueError: If `num_examples < 1` or the split is empty.
  """

  _CHUNK = 900  # SQLite's default limit is 999 bound parameters.

  def __init__(self, path: str, element_spec: Mapping[str, tf.TensorSpec], *,
               num_examples: int, seed: int, split: str = 'test'):
    if num_examples < 1:
      raise ValueError(
          f'num_examples must be at least 1, got {num_examples!r}.')
    self._path, self._split, self._seed = path, split, seed
    self._element_spec = dict(element_spec)
    with sqlite3.connect(f'file:{path}?mode=ro', uri=True) as db:
      low, high, count = db.execute(
          'SELECT MIN(rowid), MAX(rowid), COUNT(*) FROM examples '
          'WHERE split_name = ?', (split,)).fetchone()
      if not count:
        raise ValueError(f'{path} has no example in split {split!r}.')
      self._rowids = None
      if high - low + 1 != count:
        self._rowids = np.fromiter(
            (r for (r,) in db.execute(
                'SELECT rowid FROM examples WHERE split_name = ? '
                'ORDER BY rowid', (split,))), dtype=np.int64, count=count)
    self._low, self.population = low, count
    self.size = min(num_examples, count)
    self.round_num = 0

  def row_ids(self, round_num: int) -> np.ndarray:
    """The sorted row ids of round `round_num`'s sample."""
    picks = np.sort(np.random.default_rng([self._seed, round_num]).choice(
        self.population, size=self.size, replace=False))
    return picks + self._low if self._rowids is None else self._rowids[picks]

  def serialized(self, round_num: int) -> list[bytes]:
    """The sampled rows' serialized `tf.train.Example`s, in row-id order."""
    rows = []
    ids = [int(i) for i in self.row_ids(round_num)]
    with sqlite3.connect(f'file:{self._path}?mode=ro', uri=True) as db:
      for start in range(0, len(ids), self._CHUNK):
        chunk = ids[start:start + self._CHUNK]
        marks = ','.join('?' * len(chunk))
        rows += db.execute(
            'SELECT rowid, serialized_example_proto FROM examples '
            f'WHERE rowid IN ({marks})', chunk).fetchall()
    return [proto for _, proto in sorted(rows)]

  def dataset(self) -> tf.data.Dataset:
    """Parsed examples of the sample of `self.round_num`, read per pass.

    Each new iterator (each evaluation pass) reads the sample of the
    `round_num` set at that moment.
    """
    specs = {k: tf.io.FixedLenFeature(
        v.shape, tf.string if v.dtype == tf.string else
        tf.float32 if v.dtype.is_floating else tf.int64)
             for k, v in self._element_spec.items()}

    def parse(proto):
      parsed = tf.io.parse_single_example(proto, specs)
      return {k: tf.cast(parsed[k], v.dtype)
              for k, v in self._element_spec.items()}

    return tf.data.Dataset.from_generator(
        lambda: iter(self.serialized(self.round_num)),
        output_signature=tf.TensorSpec((), tf.string)).map(parse)
