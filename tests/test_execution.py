"""Where a run executes: the settings checked against each other."""

import types

import pytest

from tff_opt.program import execution

_NONE = {'max_concurrent_clients': None, 'intra_op_threads': None}


def test_a_local_run_has_no_workers():
  assert execution.resolve_workers(
      None, tls_root_cert=None, worker_settings=_NONE) is None


def test_workers_are_normalized():
  assert execution.resolve_workers(
      ' 10.0.0.1:80, [::1]:81', tls_root_cert=None,
      worker_settings=_NONE) == '10.0.0.1:80,[::1]:81'


def test_a_malformed_address_is_one_line_naming_the_flag():
  with pytest.raises(execution.RefusedError) as error:
    execution.resolve_workers('host', tls_root_cert=None,
                              worker_settings=_NONE)
  assert str(error.value) == (
      "--workers=host: 'host' has no port; expected HOST:PORT (IPv6 hosts in "
      'brackets, e.g. [::1]:8000).')


def test_a_workers_own_setting_is_refused_beside_workers():
  with pytest.raises(execution.RefusedError) as error:
    execution.resolve_workers(
        'h:1', tls_root_cert=None,
        worker_settings={'max_concurrent_clients': None,
                         'intra_op_threads': 2})
  assert str(error.value) == (
      '--intra_op_threads=2: with --workers, set it on each worker (python -m '
      'binaries.worker --intra_op_threads=N).')


def test_a_root_certificate_needs_workers():
  with pytest.raises(execution.RefusedError) as error:
    execution.resolve_workers(None, tls_root_cert='ca.pem',
                              worker_settings=_NONE)
  assert str(error.value) == '--worker_tls_root_cert=ca.pem: needs --workers.'


def test_max_concurrent_clients_default_is_local_only(monkeypatch):
  monkeypatch.setenv('TF_NUM_INTEROP_THREADS', '3')
  assert execution.max_concurrent_clients(None, None) == 3
  assert execution.max_concurrent_clients(5, None) == 5
  assert execution.max_concurrent_clients(None, 'h:1') is None
  monkeypatch.setenv('TF_NUM_INTEROP_THREADS', 'two')
  with pytest.raises(execution.RefusedError, match='TF_NUM_INTEROP_THREADS'):
    execution.max_concurrent_clients(None, None)


def test_a_local_run_checks_nothing_about_workers():
  # Never looked at: no workers, nothing to split.
  execution.check_workers_can_run(types.SimpleNamespace(), workers=None,
                                  algorithm='fedopt')
