"""Every Bazel target has at run time the project files its files import.

A `py_test` gets in its runfiles only its own sources, its deps' sources
and its data, so a test file that imports another one (a shared NumPy
reference, fabricated runs) must list that file, and the files it imports in
turn, as data; a missing one is an ImportError under `bazel test` only.
This reads the BUILD files (tests/build_graph.py) and the imports (`ast`) and
fails on the first gap, in a second, where `bazel test //...` takes long.
"""

import ast
import os
import re
import textwrap

import pytest

from tests import build_graph


@pytest.fixture(scope='module')
def targets():
  if not os.path.isfile(os.path.join(build_graph.REPO, 'tests', 'BUILD')):
    pytest.skip('reads the checkout\'s BUILD files, which Bazel\'s runfiles '
                'lack; make test runs it from the checkout')
  return build_graph.read_targets()


def test_every_target_has_what_its_files_import(targets):
  gaps = {label: build_graph.missing_imports(label, targets)
          for label, target in targets.items()
          if target.kind in ('py_library', 'py_test')}
  gaps = {label: pairs for label, pairs in gaps.items() if pairs}
  assert not gaps, (
      'add the imported files to the target\'s data (or deps): ' +
      '; '.join(f'{label}: ' + ', '.join(f'{a} imports {b}' for a, b in pairs)
                for label, pairs in sorted(gaps.items())))


def _root_documents():
  """The Markdown files at the root that the root BUILD exports to tests."""
  with open(os.path.join(build_graph.REPO, 'BUILD'), encoding='utf-8') as f:
    text = f.read()
  exported = text[text.index('exports_files(['):]
  return tuple(re.findall(r'"([^"/]+\.md)"', exported[:exported.index('])')]))


def _names_in(path, names):
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read())
  return sorted({node.value for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and node.value in names})


def test_every_test_that_names_a_root_document_has_it_as_data(targets):
  documents = _root_documents()
  assert len(documents) >= 2 and all(
      os.path.isfile(os.path.join(build_graph.REPO, d)) for d in documents)
  gaps = []
  for label, target in sorted(targets.items()):
    if target.kind != 'py_test' or not label.startswith('//tests:'):
      continue
    path = os.path.join(build_graph.REPO, 'tests',
                        label.split(':')[1] + '.py')
    gaps += [f'{label} reads {name}' for name in _names_in(path, documents)
             if f'//:{name}' not in target.data]
  assert not gaps, 'add //:<file> to the target\'s data: ' + '; '.join(gaps)


def test_every_test_file_has_its_target(targets):
  tests = sorted(name[:-len('.py')]
                 for name in os.listdir(os.path.dirname(__file__))
                 if name.startswith('test_') and name.endswith('.py'))
  bazel = sorted(label.split(':')[1] for label, t in targets.items()
                 if t.kind == 'py_test' and label.startswith('//tests:'))
  assert tests == bazel
  assert len(tests) > 90


def test_known_targets_and_tags_are_read(targets):
  assert targets['//tests:test_notebooks'].tags == ['notebooks']
  assert '//notebooks:notebooks' in targets['//tests:test_notebooks'].data
  assert targets['//tff_opt:algorithms'].deps == ['//tff_opt:tff_opt']
  assert targets['//tools:tools'].deps == ['//binaries:binaries']
  assert 'tff_opt/round/optimizers.py' in targets['//tff_opt:tff_opt'].srcs
  # tests/BUILD's glob leaves the test files and the runner out of :support.
  assert sorted(targets['//tests:support'].srcs) == sorted(
      f'tests/{n}' for n in os.listdir(os.path.dirname(__file__))
      if n.endswith('.py') and not n.startswith('test_') and
      n != 'pytest_main.py')


def _write(root, path, text):
  full = os.path.join(root, path)
  os.makedirs(os.path.dirname(full), exist_ok=True)
  with open(full, 'w', encoding='utf-8') as f:
    f.write(textwrap.dedent(text))


@pytest.fixture
def toy_repo(tmp_path):
  """lib/ (modules, one nested, and a subpackage) and tests/."""
  root = str(tmp_path)
  _write(root, 'lib/BUILD', '''
      py_library(name = "lib", srcs = glob(["**/*.py"]))
  ''')
  _write(root, 'lib/__init__.py', '')
  _write(root, 'lib/a.py', 'from . import b\n')
  _write(root, 'lib/deep/b.py', '')
  _write(root, 'lib/b.py', '')
  # A package of its own: not in lib's glob.
  _write(root, 'lib/sub/BUILD', 'py_library(name = "sub", srcs = ["c.py"])')
  _write(root, 'lib/sub/c.py', '')
  _write(root, 'tests/__init__.py', '')
  _write(root, 'tests/test_one.py', '''
      def test():
        from tests import test_two
        import lib.a
  ''')
  _write(root, 'tests/test_two.py', 'from tests import test_three\n')
  _write(root, 'tests/test_three.py', '')
  return root


def _toy_build(root, data):
  _write(root, 'tests/BUILD', f'''
      load(":pytest.bzl", "pytest_tests")
      py_library(name = "support", srcs = ["__init__.py"])
      pytest_tests(
          srcs = glob(["test_*.py"]),
          overrides = {{"test_one.py": {{"data": {data!r}, "tags": ["slow"]}}}},
          deps = [":support", "//lib"],
      )
  ''')
  _write(root, 'tests/pytest_main.py', '')
  return build_graph.read_targets(root)


def test_a_file_imported_two_steps_away_must_be_data(toy_repo):
  targets = _toy_build(toy_repo, ['test_two.py'])
  assert targets['//lib:lib'].srcs == ['lib/__init__.py', 'lib/a.py',
                                       'lib/b.py', 'lib/deep/b.py']
  assert targets['//lib/sub:sub'].srcs == ['lib/sub/c.py']
  assert targets['//tests:test_one'].tags == ['slow']
  assert build_graph.missing_imports('//tests:test_one', targets,
                                     toy_repo) == [
                                         ('tests/test_two.py',
                                          'tests/test_three.py')]
  targets = _toy_build(toy_repo, ['test_two.py', 'test_three.py'])
  assert build_graph.missing_imports('//tests:test_one', targets,
                                     toy_repo) == []


def test_a_missing_library_dep_is_reported(toy_repo):
  _write(toy_repo, 'tests/BUILD', '''
      load(":pytest.bzl", "pytest_tests")
      pytest_tests(srcs = ["test_three.py"], deps = [])
      py_library(name = "support", srcs = ["__init__.py", "test_one.py"],
                 data = ["test_two.py", "test_three.py"])
  ''')
  targets = build_graph.read_targets(toy_repo)
  assert build_graph.missing_imports('//tests:support', targets,
                                     toy_repo) == [
                                         ('tests/test_one.py', 'lib/__init__.py'),
                                         ('tests/test_one.py', 'lib/a.py')]
