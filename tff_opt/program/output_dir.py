"""A run's output directory: created or resumed, locked, its hparams.json.

`binaries.train` writes one run into one directory. Running it again with
the same directory resumes that run, so a directory made with other
settings, or holding files that are not a run's, is refused before
anything is written there; so is a directory another trainer is writing
(`output_lock`). A directory this invocation created and then refused is
removed again, so that a refusal leaves nothing behind.

The refusals are `RefusedError`s whose text is the one line the trainer
prints; it names the flags (`--output_dir=...`) the user gave.
"""

import json
import os
import tempfile
from typing import Collection, TextIO

from tff_opt.program import analysis
from tff_opt.program import files
from tff_opt.program import output_lock
from tff_opt.program import registry


class RefusedError(ValueError):
  """The directory cannot take this run; the message is one line."""


def prepare(hparams: dict, resumable: Collection[str]) -> bool:
  """Creates or checks `hparams['output_dir']`; returns True when resuming.

  Args:
    hparams: The run's settings; `output_dir` names the directory.
    resumable: The settings that may differ from the saved run's when it
      is resumed (they change how the run computes, not what).

  Returns:
    True when the directory holds this run's hparams.json (a resume),
    False when it is new or empty.

  Raises:
    RefusedError: If the directory is not writable, holds results made with
      other settings, or holds results without their hparams.json.
  """
  output_dir = hparams['output_dir']
  path = os.path.join(output_dir, analysis.HPARAMS_FILE)
  try:
    os.makedirs(output_dir, exist_ok=True)
    # A probe of its own: processes checking the same directory at once
    # (two claims chains validating a claim's runs) must not remove each
    # other's.
    fd, probe = tempfile.mkstemp(prefix='.write_test.', dir=output_dir)
    os.close(fd)
    os.remove(probe)
  except OSError as e:
    raise RefusedError(
        f'--output_dir={output_dir} is not a writable directory: '
        f'{e.strerror or e}.') from e
  if os.path.exists(path):
    try:
      with open(path) as f:
        saved = json.load(f)
    except (OSError, ValueError) as e:
      raise RefusedError(f'--output_dir={output_dir}: cannot read {path} '
                         f'({e}); refusing to touch that directory.') from e
    # A run recorded before the flags were renamed (`mu`, not `fedprox_mu`).
    saved = registry.with_current_names(saved)
    differences = [
        f'--{k}={hparams.get(k)!r} (saved run: {saved.get(k)!r})'
        for k in sorted(hparams)
        if k not in resumable and not same_setting(
            k, saved.get(k), hparams[k])
    ]
    if differences:
      raise RefusedError(
          f'--output_dir={output_dir} holds a run with other settings: ' +
          '; '.join(differences) +
          '. Use another --output_dir, or the same settings to resume.')
    return True
  leftovers = [n for n in os.listdir(output_dir) if not n.startswith('.')]
  if leftovers:
    raise RefusedError(
        f'--output_dir={output_dir} is not empty and has no '
        f'{analysis.HPARAMS_FILE} '
        f'(found {", ".join(sorted(leftovers)[:3])}); refusing to write '
        'into it. Use an empty or new directory.')
  return False


def same_setting(name: str, saved, value) -> bool:
  """Whether a saved run's setting `saved` is the run's `value`.

  A declared integer hyper-parameter that an older run recorded as the
  text of that integer (`--fedfor_grad_at_zero` was an enum of '0' and '1')
  is the same setting, so that such a run still resumes.

  Args:
    name: The setting's name (its flag's).
    saved: Its value in the saved hparams.json.
    value: Its value in this run.

  Returns:
    True when the two are the same setting.
  """
  if saved == value:
    return True
  declared = {h.flag: h for h in registry.algorithm_hparams()}.get(name)
  return (declared is not None and declared.kind == 'integer' and
          isinstance(saved, str) and isinstance(value, int) and
          saved == str(value))


def lock(output_dir: str) -> TextIO:
  """Takes `output_dir`'s lock until this process exits (`output_lock`).

  Args:
    output_dir: The run's directory; it must exist.

  Returns:
    The open lock file (closing it, or `output_lock.release_all`, releases
    the lock).

  Raises:
    RefusedError: If another process is writing the directory.
  """
  try:
    return output_lock.acquire(output_dir)
  except output_lock.LockedError as e:
    raise RefusedError(
        f'--output_dir={output_dir} is being written by another '
        f'binaries.train (pid {e.holder}); wait for it to end, or use another '
        '--output_dir.') from e


def write_hparams(hparams: dict, extra: dict) -> None:
  """Writes `hparams` and `extra` as the run's hparams.json, atomically.

  Args:
    hparams: The run's settings; `output_dir` names the directory.
    extra: What the file records beside them (the partition, the number of
      clients); a key of both takes `extra`'s value.
  """
  path = os.path.join(hparams['output_dir'], analysis.HPARAMS_FILE)
  with files.replaced_atomically(path) as f:
    json.dump({**hparams, **extra}, f, indent=2, sort_keys=True)


def saved_extras(hparams: dict) -> dict:
  """What the saved hparams.json holds beside `hparams` (the partition...).

  A resumed run rewrites its hparams.json with these, since they were
  computed when the run began. `ignored_flags` is this invocation's, never
  an earlier one's.

  Args:
    hparams: The run's settings; `output_dir` names the directory.

  Returns:
    `{key: saved value}` for each key of the saved file not in `hparams`
    but `ignored_flags`.
  """
  path = os.path.join(hparams['output_dir'], analysis.HPARAMS_FILE)
  with open(path) as f:
    saved = json.load(f)
  return {k: v for k, v in saved.items()
          if k not in hparams and k != 'ignored_flags'}


def remove_if_no_files(path: str | None) -> None:
  """Removes `path` (created by this run) if no file was written under it.

  A refused run leaves nothing behind; a directory holding any file (even
  one written by someone else meanwhile) but this run's `.lock` is kept.

  Args:
    path: The directory this invocation created, or None (nothing to do).
  """
  if not path or not os.path.isdir(path):
    return
  lock_file = output_lock.LOCK_FILE
  if any(names for root, _, names in os.walk(path)
         if names != ([lock_file] if root == path else [])):
    return
  if os.path.exists(os.path.join(path, lock_file)):
    os.remove(os.path.join(path, lock_file))
  for root, _, _ in sorted(os.walk(path), key=lambda w: -len(w[0])):
    os.rmdir(root)
