"""The package layout the README documents is the one on disk.

Every module of `tff_opt/round/`, `tff_opt/program/` and
`tff_opt/algorithms/` is in the README's library table, the public names
ARCHITECTURE.md and the README promise still import (`tff_opt.optimizers` re-exports the server
optimizers of `tff_opt/round/optimizers.py`), and the tests follow the
layout: each module of the library has its `tests/test_<module>.py`, bar a
few whose tests are elsewhere for a stated reason.
"""

import ast
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


# Modules without a tests/test_<module>.py: module -> (the files that test
# it, why there). Keep this short; a module with logic gets its own file.
TESTED_ELSEWHERE = {
    # The execution contexts need real TFF workers (child processes, gRPC,
    # signals): each concern has its own slow file.
    'program/runtime': (
        ('test_worker_env.py', 'test_local_worker.py',
         'test_remote_workers.py', 'test_worker_orphans.py'),
        'local and remote contexts, worker settings and orphaned workers '
        'are separate, slow set-ups'),
}


def _library_modules():
  """'<package>/<name>' of every module with a test file of its own."""
  modules = [f'{package}/{name}'
             for package in ('round', 'program', 'algorithms')
             for name in _modules(package)]
  # Top level: tff_opt/checks.py, tff_opt/tff_types.py, ... The shim
  # tff_opt/optimizers.py shares round/optimizers' name and so its
  # test_optimizers.py (its re-exports are checked above).
  modules += _modules('.')
  return modules


def _test_files():
  return set(os.listdir(os.path.join(REPO, 'tests')))


def test_every_library_module_has_its_test_file():
  files = _test_files()
  missing = [module for module in _library_modules()
             if module not in TESTED_ELSEWHERE
             and f'test_{module.split("/")[-1]}.py' not in files]
  assert not missing, (
      f'no tests/test_<module>.py for {missing}: add one, or an entry with '
      'its reason in TESTED_ELSEWHERE')


def test_exemptions_are_still_needed_and_name_real_test_files():
  files = _test_files()
  modules = _library_modules()
  for module, (elsewhere, reason) in TESTED_ELSEWHERE.items():
    assert module in modules, f'{module} is gone: drop its exemption'
    assert f'test_{module.split("/")[-1]}.py' not in files, (
        f'{module} has its own test file now: drop its exemption')
    assert elsewhere and reason
    assert set(elsewhere) <= files, (module, sorted(set(elsewhere) - files))


def _imports(package):
  """{module: the tff_opt packages it imports}, for `tff_opt/<package>/`."""
  found = {}
  for name in _modules(package):
    with open(os.path.join(REPO, 'tff_opt', package, name + '.py'),
              encoding='utf-8') as f:
      text = f.read()
    found[name] = set(re.findall(
        r'^\s*(?:from tff_opt(?:\.|\s+import\s+)|import tff_opt\.)'
        r'(\w+)', text, re.MULTILINE))
  return found


def test_imports_go_down_the_floors_only():
  """ARCHITECTURE.md: round/ < algorithms/ < program/."""
  upward = [f'round/{m} imports {p}' for m, ps in _imports('round').items()
            for p in ps & {'algorithms', 'program'}]
  upward += [f'algorithms/{m} imports {p}'
             for m, ps in _imports('algorithms').items()
             for p in ps & {'program'}]
  assert not upward, upward
  # The check reads real imports: round/ does import round/.
  assert 'round' in _imports('algorithms')['fed_prox']


def _sibling_uses(name):
  """{sibling: the attributes of it used}, for each `round/` sibling that
  `round/<name>.py` imports (`from tff_opt.round import <sibling>`)."""
  with open(os.path.join(REPO, 'tff_opt', 'round', name + '.py'),
            encoding='utf-8') as f:
    tree = ast.parse(f.read())
  aliases = {}
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module == 'tff_opt.round':
      for alias in node.names:
        aliases[alias.asname or alias.name] = alias.name
    if isinstance(node, ast.ImportFrom) and (node.module or '').startswith(
        'tff_opt.round.'):
      aliases[node.module] = node.module.split('.')[2]
  uses = {sibling: set() for sibling in aliases.values()}
  for node in ast.walk(tree):
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        and node.value.id in aliases):
      uses[aliases[node.value.id]].add(node.attr)
  return uses


# The (module, sibling) imports of `round/` that were there only for keys or
# small helpers, all in `round/ground.py`: none may come back. (The modules
# that moved to `algorithms/` with their algorithm -- contrastive, fisher,
# momentum -- are no longer round/ siblings.)
KEY_ONLY_IMPORTS = (
    ('aggregators', 'client_work'), ('client_work', 'optimizers'),
    ('distributors', 'client_work'), ('distributors', 'composers'),
    ('finalizers', 'aggregators'), ('finalizers', 'client_work'),
    ('losses', 'client_work'),
)


def test_round_imports_no_sibling_just_for_a_key():
  """ARCHITECTURE.md: shared keys and small helpers live in round/ground."""
  uses = {name: _sibling_uses(name) for name in _modules('round')}
  assert not uses['ground'], f'round/ground imports {sorted(uses["ground"])}'
  assert _imports('round')['ground'] == set()  # Nothing of tff_opt at all.
  back = [pair for pair in KEY_ONLY_IMPORTS if pair[1] in uses[pair[0]]]
  assert not back, f'imports for keys only are back: {back}'
  # In general: what a sibling is imported for is never keys alone.
  key_only = [f'round/{name} imports {sibling} for {sorted(names)}'
              for name, siblings in uses.items()
              for sibling, names in siblings.items()
              if sibling != 'ground' and all(n.isupper() for n in names)]
  assert not key_only, key_only
  # The check reads real imports: round/ does import round/ground.
  assert 'ground' in uses['client_work']
  assert 'client_work' in uses['vectorized_training']


def test_no_file_points_outside_the_repository_for_its_design():
  """The project's architecture is its own ARCHITECTURE.md."""
  offenders = []
  scanned = 0
  for folder, _, files in os.walk(REPO, followlinks=True):
    parts = os.path.relpath(folder, REPO).split(os.sep)
    if any(p in ('.venv', '.git', 'results', 'data', 'external') or
           p.startswith('bazel-') for p in parts):
      continue
    for name in files:
      path = os.path.join(folder, name)
      if (not name.endswith(('.py', '.md', '.ipynb')) or
          os.path.samefile(path, __file__)):
        continue
      scanned += 1
      with open(path, encoding='utf-8') as f:
        text = f.read()
      if '../shared/DESIGN.md' in text or '../DESIGN.md' in text:
        offenders.append(os.path.relpath(path, REPO))
  assert scanned > 1 and not offenders, offenders
  with open(os.path.join(REPO, 'ARCHITECTURE.md'), encoding='utf-8') as f:
    assert '## The floors' in f.read()


LONG_FUNCTION_LINES = 80
LONG_FUNCTION_REASON = '# Over 80 lines'


def _long_functions_without_a_reason(source):
  lines = source.splitlines()
  found = []
  for node in ast.walk(ast.parse(source)):
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      continue
    if node.end_lineno - node.lineno + 1 <= LONG_FUNCTION_LINES:
      continue
    body = lines[node.lineno - 1:node.end_lineno]
    if not any(line.strip().startswith(LONG_FUNCTION_REASON)
               for line in body):
      found.append(node.name)
  return found


def test_the_long_function_check_finds_one_without_a_reason():
  body = ''.join(f'  x{i} = {i}\n' for i in range(LONG_FUNCTION_LINES))
  assert _long_functions_without_a_reason(f'def f():\n{body}') == ['f']
  assert _long_functions_without_a_reason(
      f'def f():\n  {LONG_FUNCTION_REASON}: a reason.\n{body}') == []
  assert _long_functions_without_a_reason(
      f'def f():\n{body[:-len("  x79 = 79")-1]}') == []


def test_a_function_over_80_lines_states_why():
  missing = []
  for package in ('tff_opt', 'binaries', 'tasks', 'tools', 'benchmarks'):
    for folder, _, names in os.walk(os.path.join(REPO, package)):
      for name in names:
        if not name.endswith('.py'):
          continue
        path = os.path.join(folder, name)
        with open(path, encoding='utf-8') as f:
          missing += [f'{os.path.relpath(path, REPO)}:{function}'
                      for function in _long_functions_without_a_reason(
                          f.read())]
  assert not missing, (
      f'functions over {LONG_FUNCTION_LINES} lines without a '
      f'"{LONG_FUNCTION_REASON} ...: <why>" comment: {missing}')


ROUTE_LIMIT = 5
_NUMBERS = {'one': 1, 'two': 2, 'three': 3, 'four': 4, 'five': 5, 'six': 6,
            'seven': 7}


def _routes():
  """ARCHITECTURE.md's routes: flag -> (files it counts, files it lists)."""
  with open(os.path.join(REPO, 'ARCHITECTURE.md'), encoding='utf-8') as f:
    text = f.read()
  section = text[text.index('## Following a flag'):]
  routes = {}
  heading = r'^.*`(--\w+)`, (\w+) files:\n\n'
  items = r'((?:\d+\. .*\n(?: .*\n)*)+)'
  for m in re.finditer(heading + items, section, re.M):
    listed = re.findall(r'^\d+\. `([^`]+)`', m.group(3), re.M)
    routes[m.group(1)] = (_NUMBERS[m.group(2)], listed)
  return routes


def test_each_documented_route_is_short_and_names_real_files():
  routes = _routes()
  assert set(routes) == {'--fedcurv_lam', '--fedprox_mu', '--server_opt'}
  for flag, (count, listed) in routes.items():
    assert count == len(listed), (flag, count, listed)
    assert count <= ROUTE_LIMIT, (flag, listed)
    missing = [p for p in listed if not os.path.exists(os.path.join(REPO, p))]
    assert not missing, (flag, missing)
