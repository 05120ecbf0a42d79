"""The registry (`tff_opt/program/registry.py`): its table and its checks.

Every algorithm is built through its flag adapter, and a hyper-parameter an
algorithm needs is named by the registry when missing. What each adapter
does with its flags is tests/test_flag_adapters.py's.
"""

import pytest

from tests import test_flag_adapters
from tests import tiny
from tff_opt.program import flag_adapters
from tff_opt.program import registry


@pytest.fixture(name='shared', scope='module')
def fixture_shared():
  return flag_adapters.shared_arguments(test_flag_adapters.FLAGS)


def test_missing_flag_is_named_by_the_registry(shared):
  with pytest.raises(ValueError, match=r"^Algorithm 'fedprox' needs --mu\.$"):
    registry.build_process('fedprox', tiny.model_fn, **shared)


def test_every_algorithm_builds_through_a_flag_adapter():
  for algorithm in registry.ALGORITHMS.values():
    assert algorithm.build.__module__ == flag_adapters.__name__, algorithm.name
