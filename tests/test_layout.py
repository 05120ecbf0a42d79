"""The package layout the README documents is the one on disk.

Every module of `tff_opt/round/`, `tff_opt/program/` and
`tff_opt/algorithms/` is in the README's library table, and the public
names DESIGN.md promises still import (`tff_opt.optimizers` re-exports the
server optimizers of `tff_opt/round/optimizers.py`).
"""

import os
import re

from tff_opt import algorithms
from tff_opt import optimizers
from tff_opt.round import optimizers as round_optimizers

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _modules(package):
  folder = os.path.join(REPO, 'tff_opt', package)
  return sorted(name[:-3] for name in os.listdir(folder)
                if name.endswith('.py') and not name.startswith('_'))


def _library_table():
  with open(os.path.join(REPO, 'README.md'), encoding='utf-8') as f:
    text = f.read()
  start = text.index('The library (`tff_opt/`)')
  return text[start:text.index('Tasks (`tasks/`):', start)]


def test_every_round_and_program_module_is_in_the_readme_table():
  table = _library_table()
  missing = [f'{package}/{name}' for package in ('round', 'program')
             for name in _modules(package)
             if not re.search(rf'`{package}/{name}`', table)]
  assert not missing, f'README library table lacks {missing}'


def test_the_readme_names_no_module_that_is_gone():
  table = _library_table()
  named = set(re.findall(r'`(round|program)/([a-z_]+)`', table))
  on_disk = {(p, n) for p in ('round', 'program') for n in _modules(p)}
  assert named <= on_disk, f'README names {sorted(named - on_disk)}'


def test_public_names_still_import():
  for name in ('build_fed_adagrad', 'build_fed_adam', 'build_fed_yogi',
               'build_server_optimizer', 'build_client_optimizer'):
    assert getattr(optimizers, name) is getattr(round_optimizers, name)
  for name in ('build_fed_opt', 'build_fed_prox', 'build_fed_for',
               'build_fed_curv', 'build_fed_adc', 'build_fed_ptr'):
    assert callable(getattr(algorithms, name))
