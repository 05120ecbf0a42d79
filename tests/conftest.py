"""Shared pytest set-up: one TFF execution context per test session."""

import os
import sys

# Quiet TensorFlow's C++ start-up lines (CUDA probes) in test output.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
# TensorFlow's oneDNN kernels unless the environment says otherwise (see
# tff_opt/program/worker_env.py); TFF's worker inherits the setting.
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pytest  # pylint: disable=g-import-not-at-top

import binaries  # pylint: disable=g-import-not-at-top,g-bad-import-order
from tff_opt.program import runtime  # pylint: disable=g-import-not-at-top

# As the binaries do (binaries/__init__.py): the collector stops re-scanning
# TensorFlow's and TFF's import-time objects at each full collection.
binaries.freeze_imports()


@pytest.fixture(scope='session', autouse=True)
def tff_execution_context():
  runtime.set_local_execution_context()
  yield
  runtime.shutdown()
