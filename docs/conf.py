"""Sphinx configuration of tff-opt's documentation (`make docs`)."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, 'docs', '_ext'))

# binaries/__init__.py sets TensorFlow's environment; the docs need no GPU
# and no C++ log lines.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
os.environ.setdefault('CUDA_VISIBLE_DEVICES', '')

project = 'tff-opt'
author = 'tff-opt authors'
extensions = [
    'myst_parser',
    'sphinx.ext.autodoc',
    'sphinx.ext.napoleon',
    'sphinx.ext.mathjax',
    'tffopt_docs',
]
source_suffix = {'.md': 'markdown', '.rst': 'restructuredtext'}
exclude_patterns = ['_build', 'requirements.txt']
myst_enable_extensions = ['dollarmath']
myst_heading_anchors = 3
# The docstrings write `name` for code, as Markdown does.
default_role = 'code'

napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_member_order = 'bysource'
autodoc_typehints = 'none'
autodoc_default_options = {'members': True, 'show-inheritance': False}

html_theme = 'alabaster'
html_title = 'tff-opt'
# Offline: MathJax is not fetched from a CDN at build time; the pages load it
# when read online and show the TeX source otherwise.
autodoc_inherit_docstrings = False
# Flags are written --name; smart quotes would turn -- into a dash.
smartquotes = False
