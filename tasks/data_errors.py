"""The one error a task raises when its dataset files are not there.

No task ever tries a download when its file is missing (the machines this
runs on may be offline, and TFF's and TFDS's downloaders can hang or print a
traceback there): it checks for the file first and raises `MissingDataError`,
whose message names the task, the path looked for and how to obtain the file.
The binary prints that message as one `train: error: ...` line.
"""

import os


class MissingDataError(Exception):
  """A task's dataset file is not in its data directory."""

  def __init__(self, task: str, path: str, how_to_obtain: str):
    self.task = task
    self.path = path
    super().__init__(
        f'task {task!r} needs {path}, which does not exist (no download is '
        f'attempted). {how_to_obtain}')


def default_data_dir() -> str:
  """TFF's own cache directory (`~/.tff`), used when `data_dir` is None."""
  return os.path.join(os.path.expanduser('~'), '.tff')


def require_file(task: str, data_dir: str | None, filename: str,
                 how_to_obtain: str) -> str:
  """Returns `<data_dir>/<filename>` if it is a file; raises otherwise.

  Args:
    task: The task's name (for the message).
    data_dir: The task's data directory; `None` means `default_data_dir()`.
    filename: The file's path relative to `data_dir`.
    how_to_obtain: A sentence telling the user how to get the file.

  Returns:
    The file's path.

  Raises:
    MissingDataError: If the file does not exist.
  """
  path = os.path.join(data_dir or default_data_dir(), filename)
  if not os.path.isfile(path):
    raise MissingDataError(task, path, how_to_obtain)
  return path


def tff_sqlite_instructions(filename: str) -> str:
  """How to obtain one of TFF's `<name>.sqlite` files."""
  return (f'Download https://storage.googleapis.com/tff-datasets-public/'
          f'{filename}.lzma on a machine with internet access, decompress it '
          f'(xz -d {filename}.lzma) and put {filename} in --data_dir.')
