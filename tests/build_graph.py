"""The repository's Bazel targets read in Python, and what their files import.

The BUILD files are Starlark, whose syntax is Python's; they are evaluated
here with stand-ins for the few rules and functions they use (`glob`,
`py_library`, `filegroup`, `alias`, `exports_files`, `package`, `load` and
tests/pytest.bzl's `pytest_tests`), so that a test can check each target
against the imports of its files and conftest.py can turn the Bazel tags of
a test file into pytest markers. Nothing here runs Bazel.
"""

import ast
import dataclasses
import fnmatch
import functools
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Folders whose BUILD files belong to Bazel's own stand-ins, not the project.
_SKIPPED = ('third_party', '.venv', 'data', 'bazel-')


@dataclasses.dataclass
class Target:
  """One rule instance: its label, files and what it depends on.

  Attributes:
    label: `//package:name`.
    kind: The rule (`py_library`, `py_test`, `filegroup`, `alias`, `file`).
    srcs: Repository-relative paths of its sources.
    data: Labels of its data, made absolute.
    deps: Labels of its deps (an alias's `actual`), made absolute.
    tags: Its Bazel tags.
  """
  label: str
  kind: str
  srcs: list[str] = dataclasses.field(default_factory=list)
  data: list[str] = dataclasses.field(default_factory=list)
  deps: list[str] = dataclasses.field(default_factory=list)
  tags: list[str] = dataclasses.field(default_factory=list)


def _packages(repo):
  found = []
  for root, dirs, files in os.walk(repo):
    rel = os.path.relpath(root, repo)
    dirs[:] = sorted(d for d in dirs if not d.startswith('.') and not (
        rel == '.' and d.startswith(_SKIPPED)))
    if 'BUILD' in files:
      found.append('' if rel == '.' else rel.replace(os.sep, '/'))
  return found


def _absolute(label, package):
  if label.startswith('//'):
    return label if ':' in label else f'{label}:{label.rsplit("/", 1)[-1]}'
  return f'//{package}:{label.lstrip(":")}'


class _Package:
  """Evaluates one BUILD file, collecting its targets."""

  def __init__(self, repo, package, subpackages):
    self.repo = repo
    self.package = package
    self.folder = os.path.join(repo, package)
    self.subpackages = [p for p in subpackages if p != package and
                        (not package or p.startswith(package + '/'))]
    self.targets = {}

  def glob(self, include, exclude=()):
    names = []
    for root, dirs, files in os.walk(self.folder):
      rel_root = os.path.relpath(root, self.folder)
      full = os.path.relpath(root, self.repo).replace(os.sep, '/')
      if rel_root != '.' and (full in self.subpackages or
                              '/.' in '/' + rel_root):
        dirs[:] = []
        continue
      for name in files:
        rel = name if rel_root == '.' else f'{rel_root}/{name}'
        rel = rel.replace(os.sep, '/')
        if name == 'BUILD':
          continue
        if (any(_match(rel, p) for p in include) and
            not any(_match(rel, p) for p in exclude)):
          names.append(rel)
    return sorted(names)

  def _add(self, kind, name, srcs=(), data=(), deps=(), tags=()):
    label = f'//{self.package}:{name}'
    self.targets[label] = Target(
        label=label, kind=kind,
        srcs=[self._path(s) for s in srcs],
        data=[_absolute(d, self.package) for d in data],
        deps=[_absolute(d, self.package) for d in deps],
        tags=list(tags))

  def _path(self, src):
    return f'{self.package}/{src}' if self.package else src

  def globals(self):
    def py_library(name, srcs=(), deps=(), data=(), **_):
      self._add('py_library', name, srcs, data, deps)

    def filegroup(name, srcs=(), **_):
      self._add('filegroup', name, srcs)

    def alias(name, actual, **_):
      self._add('alias', name, deps=[actual])

    def exports_files(names, **_):
      for name in names:
        self._add('file', name, [name])

    def pytest_tests(srcs, deps=(), data=(), overrides=None, **_):
      for src in srcs:
        extra = (overrides or {}).get(src, {})
        self._add('py_test', src[:-len('.py')],
                  [src, 'pytest_main.py'],
                  list(data) + list(extra.get('data', [])), deps,
                  extra.get('tags', []))

    return {
        'load': lambda *_: None,
        'package': lambda **_: None,
        'glob': self.glob,
        'py_library': py_library,
        'filegroup': filegroup,
        'alias': alias,
        'exports_files': exports_files,
        'pytest_tests': pytest_tests,
    }


def _match(path, pattern):
  """Bazel's glob: `*` stays within a folder, `**` spans any number."""
  return _match_parts(path.split('/'), pattern.split('/'))


def _match_parts(parts, pattern):
  if not pattern:
    return not parts
  if pattern[0] == '**':
    return any(_match_parts(parts[i:], pattern[1:])
               for i in range(len(parts) + 1))
  return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and \
      _match_parts(parts[1:], pattern[1:])


def read_targets(repo=REPO):
  """Returns every target of the project's BUILD files, by label.

  Args:
    repo: The repository root.

  Returns:
    A dict from label (`//package:name`) to `Target`. A source file that a
    rule names is also a target of kind `file`, labelled by its path.
  """
  packages = _packages(repo)
  targets = {}
  for package in packages:
    evaluator = _Package(repo, package, packages)
    with open(os.path.join(repo, package, 'BUILD'), encoding='utf-8') as f:
      code = compile(f.read(), os.path.join(package, 'BUILD'), 'exec')
    exec(code, evaluator.globals())  # pylint: disable=exec-used
    targets.update(evaluator.targets)
  return targets


def test_tags(repo=REPO):
  """Returns the Bazel tags of each tests/test_*.py, keyed by file name."""
  return {t.label.split(':')[1] + '.py': t.tags
          for t in read_targets(repo).values()
          if t.kind == 'py_test' and t.label.startswith('//tests:')}


def runfiles(label, targets):
  """Returns the repository paths a target has at run time.

  Args:
    label: The target's label.
    targets: `read_targets()`'s result.

  Returns:
    The set of paths in the target's sources and data and those of its
    dependencies, transitively (a label that names no rule is a file of its
    package).
  """
  paths, seen, stack = set(), set(), [label]
  while stack:
    current = stack.pop()
    if current in seen:
      continue
    seen.add(current)
    target = targets.get(current)
    if target is None:
      package, name = current[2:].split(':')
      paths.add(f'{package}/{name}' if package else name)
      continue
    paths.update(target.srcs)
    stack.extend(target.deps)
    stack.extend(target.data)
  return paths


@functools.lru_cache(maxsize=None)
def first_party_imports(path, repo=REPO):
  """Returns the repository files that the module at `path` imports.

  Args:
    path: A repository-relative `.py` path.
    repo: The repository root.

  Returns:
    The frozenset of repository-relative paths of the project's own modules
    (and the `__init__.py` of each package on the way) that any `import` or
    `from ... import` statement of the file names, wherever it sits.
  """
  with open(os.path.join(repo, path), encoding='utf-8') as f:
    tree = ast.parse(f.read(), path)
  package = os.path.dirname(path).replace(os.sep, '/').split('/')
  names = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names.extend(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      if node.level:
        base = package[:len(package) - node.level + 1]
        module = '.'.join(base + ([node.module] if node.module else []))
      else:
        module = node.module
      names.append(module)
      names.extend(f'{module}.{alias.name}' for alias in node.names)
  found = set()
  for name in names:
    parts = name.split('.')
    for i in range(1, len(parts) + 1):
      stem = os.path.join(*parts[:i])
      for candidate in (stem + '.py', os.path.join(stem, '__init__.py')):
        if os.path.isfile(os.path.join(repo, candidate)):
          found.add(candidate.replace(os.sep, '/'))
  return frozenset(found)


def missing_imports(label, targets, repo=REPO):
  """Returns what a target's Python files import but its runfiles lack.

  Args:
    label: A `py_library` or `py_test` label.
    targets: `read_targets()`'s result.
    repo: The repository root.

  Returns:
    A sorted list of `(importing file, imported file)` pairs, following the
    imports of every project file the target has.
  """
  available = runfiles(label, targets)
  missing = set()
  stack = [p for p in targets[label].srcs if p.endswith('.py')]
  seen = set()
  while stack:
    path = stack.pop()
    if path in seen:
      continue
    seen.add(path)
    for imported in first_party_imports(path, repo):
      if imported in available:
        stack.append(imported)
      else:
        missing.add((path, imported))
  return sorted(missing)
