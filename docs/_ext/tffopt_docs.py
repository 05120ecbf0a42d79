"""Sphinx directives that read the code and the results, so the docs cannot drift.

- `flag-reference`: every flag `binaries.train` defines, walked from absl's
  `FLAGS` after importing it (the same definitions `--helpfull` prints);
  an algorithm's hyper-parameter with its declared range
  (`hparam_tables.flag_term`).
- `algorithm-spec NAME`: the registered algorithm's declaration
  (`tff_opt.program.registry.ALGORITHMS[NAME].spec`): summary, weighting,
  server rule and each hyper-parameter's flag, builder argument, default,
  range and help (`hparam_tables.spec_row`).
- `module-text MODULE`: a module's docstring, verbatim (the algorithm
  modules write their equations in plain text).
- `csv-table-file PATH`: a CSV file of the repository as a table, its
  columns read from its header, whatever they are.
- `api-modules PACKAGE`: an `automodule` per module of a package.
- `test-files`: the test files listed, each with its docstring's summary.

And a check run when the build starts: every public (not underscored)
module, function, class and method of `tff_opt` has a docstring (a method
may inherit its base class's). Each one missing is a warning, an error under
`sphinx-build -W`.
"""

import ast
import csv
import importlib
import inspect
import os
import pkgutil
import re

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

import hparam_tables

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
LOGGER = logging.getLogger(__name__)


def _paragraph(text):
  return nodes.paragraph(text=text)


def _table(header, rows):
  """A docutils table of plain-text cells."""
  table = nodes.table()
  group = nodes.tgroup(cols=len(header))
  table += group
  for _ in header:
    group += nodes.colspec(colwidth=1)
  head = nodes.thead()
  group += head
  body = nodes.tbody()
  group += body
  for part, lines in ((head, [header]), (body, rows)):
    for line in lines:
      row = nodes.row()
      for cell in line:
        entry = nodes.entry()
        entry += _paragraph(str(cell))
        row += entry
      part += row
  return table


class FlagReference(SphinxDirective):
  """Every flag of `binaries.train`, in the order the module defines them."""

  def run(self):
    _note_generated(self)
    from absl import flags  # pylint: disable=g-import-not-at-top
    importlib.import_module('binaries.train')
    registry = importlib.import_module('tff_opt.program.registry')
    declared = {h.flag: h for h in registry.algorithm_hparams()}
    hparams_lib = importlib.import_module('tff_opt.algorithms.hparams')
    shared = {alias for alias, targets in hparams_lib.old_spelling_targets(
        registry.algorithm_hparams()).items() if len(targets) > 1}
    out = []
    count = 0
    # The project's own: binaries.train's, and the algorithms' hyper-parameters
    # it defines through tff_opt.algorithms.hparams.define_flag. --helpfull
    # lists absl's and TensorFlow's besides.
    for module, module_flags in flags.FLAGS.flags_by_module_dict().items():
      if not module.startswith(('binaries', 'tff_opt', 'tasks')):
        continue
      listing = nodes.definition_list()
      for flag in module_flags:
        if flag.help.startswith('Alias for --'):
          # absl's `DEFINE_alias`: an earlier spelling, listed on the
          # entry of the flag it sets (`hparam_tables.old_spellings_text`).
          continue
        item = nodes.definition_list_item()
        term = nodes.term()
        term += nodes.literal(text=f'--{flag.name}')
        term += nodes.Text(hparam_tables.flag_term(
            flag.flag_type(), flag.default_as_str or 'None',
            declared.get(flag.name)))
        item += term
        definition = nodes.definition()
        definition += _paragraph(flag.help or '')
        old = (hparam_tables.old_spellings_text(declared[flag.name], shared)
               if flag.name in declared else '')
        if old:
          definition += _paragraph(old)
        item += definition
        listing += item
        count += 1
      section = nodes.section(ids=[nodes.make_id(f'flags-{module}')])
      section += nodes.title(text=f'Defined in {module}')
      section += listing
      out.append(section)
    return [_paragraph(f'{count} flags, generated from their definitions '
                       'when these pages were built.')] + out


class AlgorithmSpec(SphinxDirective):
  """The declaration of one registered algorithm, as a table."""

  required_arguments = 1

  def run(self):
    _note_generated(self)
    registry = importlib.import_module('tff_opt.program.registry')
    algorithm = registry.ALGORITHMS[self.arguments[0]]
    spec = algorithm.spec
    out = [_paragraph(
        f'--algorithm={algorithm.name}: {spec.summary.rstrip(".")}. '
        'Client weighting: '
        f'{algorithm.client_weighting}; server step: {spec.server_rule}' +
        (f'; task facts it takes: {", ".join(spec.task_facts)}'
         if spec.task_facts else '') + '.')]
    if spec.hparams:
      out.append(_table(hparam_tables.SPEC_HEADER,
                        [hparam_tables.spec_row(h) for h in spec.hparams]))
    else:
      out.append(_paragraph('No hyper-parameter of its own beyond the '
                            'shared flags (client and server optimizers).'))
    return out


class ModuleText(SphinxDirective):
  """A module's docstring as a literal block."""

  required_arguments = 1

  def run(self):
    _note_generated(self)
    module = importlib.import_module(self.arguments[0])
    text = inspect.getdoc(module) or ''
    block = nodes.literal_block(text, text)
    block['language'] = 'text'
    return [block]


class CsvTableFile(SphinxDirective):
  """A CSV file of the repository (path from its root) as a table."""

  required_arguments = 1
  option_spec = {'columns': directives.unchanged}

  def run(self):
    _note_generated(self)
    path = os.path.join(ROOT, self.arguments[0])
    self.env.note_dependency(path)
    if not os.path.exists(path):
      return [_paragraph(f'{self.arguments[0]} does not exist yet.')]
    with open(path, newline='', encoding='utf-8') as f:
      reader = csv.reader(f)
      header = next(reader, [])
      rows = [row for row in reader if row]
    keep = list(range(len(header)))
    if 'columns' in self.options:
      wanted = [c.strip() for c in self.options['columns'].split(',')]
      keep = [header.index(c) for c in wanted if c in header]
    return [_table([header[i] for i in keep],
                   [[row[i] if i < len(row) else '' for i in keep]
                    for row in rows])]


class TestFiles(SphinxDirective):
  """Each test file named in the content, with its docstring's first part."""

  has_content = True

  def run(self):
    _note_generated(self)
    listing = nodes.bullet_list()
    for rel in (line.strip() for line in self.content if line.strip()):
      path = os.path.join(ROOT, rel)
      self.env.note_dependency(path)
      with open(path, encoding='utf-8') as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ''
      first = ' '.join(doc.split('\n\n')[0].split())
      item = nodes.list_item()
      para = nodes.paragraph()
      para += nodes.literal(text=rel)
      para += nodes.Text(f': {first}')
      item += para
      listing += item
    return [listing]


def _submodules(package):
  module = importlib.import_module(package)
  names = [package]
  for info in pkgutil.iter_modules(module.__path__):
    if info.name.startswith('_'):
      continue
    name = f'{package}.{info.name}'
    if info.ispkg:
      continue
    names.append(name)
  return names


class ApiModules(SphinxDirective):
  """`automodule` with members for the package and each public module."""

  required_arguments = 1

  def run(self):
    _note_generated(self)
    lines = []
    for name in _submodules(self.arguments[0]):
      # autodoc writes reStructuredText: eval-rst keeps MyST off it.
      lines += [f'## {name}', '', '```{eval-rst}', f'.. automodule:: {name}',
                '   :members:', '```', '']
    container = nodes.section()
    container.document = self.state.document
    self.state.nested_parse(StringList(lines, source='api-modules'),
                            self.content_offset, container,
                            match_titles=True)
    return container.children


def missing_docstrings(root=ROOT, package='tff_opt'):
  """'path:line name' of every public name of `package` with no docstring."""
  missing = []
  base = os.path.join(root, package)
  for folder, _, files in sorted(os.walk(base)):
    for file_name in sorted(files):
      if not file_name.endswith('.py'):
        continue
      path = os.path.join(folder, file_name)
      rel = os.path.relpath(path, root)
      with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read())
      if file_name == '__init__.py' or not file_name.startswith('_'):
        if not ast.get_docstring(tree):
          missing.append(f'{rel}:1 module')
      if file_name.startswith('_') and file_name != '__init__.py':
        continue
      module_name = rel[:-3].replace(os.sep, '.').replace('.__init__', '')
      for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                 ast.ClassDef)) or node.name.startswith('_'):
          continue
        if not ast.get_docstring(node):
          missing.append(f'{rel}:{node.lineno} {node.name}')
        if not isinstance(node, ast.ClassDef):
          continue
        for member in node.body:
          if (isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and
              not member.name.startswith('_') and
              not ast.get_docstring(member) and
              not _inherits_doc(module_name, node.name, member.name)):
            missing.append(f'{rel}:{member.lineno} {node.name}.{member.name}')
  return missing


def _inherits_doc(module_name, class_name, method_name):
  """Whether a base class documents the method (an override)."""
  cls = getattr(importlib.import_module(module_name), class_name)
  for base in inspect.getmro(cls)[1:]:
    method = base.__dict__.get(method_name)
    if method is not None and getattr(method, '__doc__', None):
      return True
  return False


_SECTION = re.compile(
    r'^(Args|Arguments|Attributes|Returns|Raises|Yields|Note|Notes|'
    r'Example|Examples|Keyword Args|Other Parameters|Warning|See Also):\s*$')
_BULLET = re.compile(r'^(\s*)([-*+]|\d+[.)])\s+')
_CODE = re.compile(r'(``[^`]+``|`[^`]+`)')


def _escape(line):
  """Keeps reStructuredText's markup characters literal in a plain line.

  A `code` span becomes a ``literal`` (napoleon splits no field inside
  one, and nothing in it is escaped); elsewhere `\`, `*`, `|` and a word's
  trailing `_` are escaped.
  """
  out = []
  for i, part in enumerate(_CODE.split(line)):
    if i % 2:
      code = part.strip('`')
      out.append(f'``{code}``')
      continue
    part = part.replace('\\', '\\\\').replace('*', r'\*').replace('|', r'\|')
    part = re.sub(r'(\w)_(?=\W|$)', r'\1\\_', part)
    if out and out[-1].endswith('``') and re.match(r'\w', part):
      part = '\\ ' + part
    if i + 1 < len(_CODE.split(line)) and re.search(r'\w$', part):
      part += '\\ '
    out.append(part)
  return ''.join(out)


def _ticks(line):
  return line.replace('``', '').count('`')


def _join_code_spans(lines):
  """Joins the lines of a `code` span that runs over a line end.

  Then every span opens and closes on one line: napoleon's `Returns:`
  reads a type before the first colon outside one.
  """
  out = []
  for line in lines:
    if (out and _ticks(out[-1]) % 2 and line.strip() and
        len(line) - len(line.lstrip()) >= len(out[-1]) - len(out[-1].lstrip())):
      out[-1] = out[-1].rstrip() + ' ' + line.strip()
    else:
      out.append(line)
  return out


def plain_docstring_to_rst(lines):
  """Reads the package's plain-text docstrings as reStructuredText.

  The docstrings are Google style (Args/Returns/Raises, for napoleon) around
  plain text: indented blocks are equations, code or tables, and `*`, `|`
  and `_` are mathematics, not markup. So every indented block outside a
  Google section or a list item becomes a literal block, so do a Markdown
  table and a fenced block, and markup characters elsewhere are escaped.
  """
  lines = _join_code_spans(lines)
  out = []
  section = None   # indent of the Google section header being read
  literal = None   # indent the literal block's lines are deeper than
  table = False
  fence = False
  base = None      # indent of the last plain line
  bullet = None    # (indent of the list's bullets, indent of their text)

  def blank():
    if out and out[-1].strip():
      out.append('')

  def open_literal():
    while out and not out[-1].strip():
      out.pop()
    if out and out[-1].rstrip().endswith(':') and not out[-1].rstrip(
        ).endswith('::'):
      out[-1] = out[-1].rstrip() + ':'
    else:
      out.extend(['', '::'])
    out.append('')

  for line in lines:
    stripped = line.strip()
    if fence:
      if stripped.startswith('```'):
        fence = False
        out.append('')
      else:
        out.append('    ' + line)
      continue
    if not stripped:
      out.append('')
      continue
    indent = len(line) - len(line.lstrip())
    if table:
      if stripped.startswith('|'):
        out.append('    ' + line)
        continue
      table = False
      blank()
    if literal is not None:
      if indent > literal:
        out.append(line)
        continue
      literal = None
      blank()
    if section is not None:
      if indent > section:
        out.append(_escape(line))
        continue
      section = None
      blank()
    if stripped.startswith('```'):
      open_literal()
      fence = True
      continue
    if _SECTION.match(stripped):
      blank()
      out.append(line)
      section, base, bullet = indent, indent, None
      continue
    if stripped.startswith('|') and stripped.endswith('|'):
      open_literal()
      out.append('    ' + line)
      table = True
      continue
    match = _BULLET.match(line)
    if match:
      if bullet is None or bullet[0] != indent:
        blank()
      bullet = (indent, match.end())
      base = indent
      out.append(_escape(line))
      continue
    if bullet is not None:
      if indent == bullet[1]:
        out.append(_escape(line))
        continue
      if indent > bullet[1]:
        open_literal()
        out.append(line)
        literal = bullet[1]
        continue
      bullet = None
      blank()
    if base is not None and indent > base:
      open_literal()
      out.append(line)
      literal = base
      continue
    if base is not None and indent < base:
      blank()
    base = indent
    out.append(_escape(line))
  return out


def _process_docstring(app, what, name, obj, options, lines):
  del app, what, obj, options
  if not name.startswith('tff_opt'):
    return
  lines[:] = plain_docstring_to_rst(list(lines))


def _check_docstrings(app):
  del app
  for where in missing_docstrings():
    LOGGER.warning(f'public name without a docstring: {where}')


def _note_generated(directive):
  pages = getattr(directive.env, 'tffopt_generated', set())
  pages.add(directive.env.docname)
  directive.env.tffopt_generated = pages


def _outdated(app, env, added, changed, removed):
  """Pages made from the code or results are read again on every build."""
  del app, added, changed, removed
  return sorted(getattr(env, 'tffopt_generated', set()))


def setup(app):
  app.add_directive('flag-reference', FlagReference)
  app.add_directive('algorithm-spec', AlgorithmSpec)
  app.add_directive('module-text', ModuleText)
  app.add_directive('csv-table-file', CsvTableFile)
  app.add_directive('api-modules', ApiModules)
  app.add_directive('test-files', TestFiles)
  app.connect('builder-inited', _check_docstrings)
  app.connect('env-get-outdated', _outdated)
  # Before napoleon (priority 500) turns the Google sections into fields.
  app.connect('autodoc-process-docstring', _process_docstring, priority=400)
  return {'parallel_read_safe': True, 'version': '1'}
