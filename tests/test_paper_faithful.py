"""What `binaries.train` runs by default is each paper's configuration.

Each expected value is the paper's, written here, not read from the code
under test: client weighting (uniform where the paper averages the
participants' models plainly), FedADC+'s CS-KD temperature 4, FedCurv's
Eq. 3 where the client state fits, FedFOR's U'(0) flag.
"""

import pytest

from binaries import train
from tests import binary
from tff_opt.program import output_dir as output_dir_lib
from tff_opt.program import registry


_hparams = binary.resolve_hparams


# (algorithm, its paper's client weighting).
PAPER_WEIGHTING = [
    ('fedopt', 'num_examples'),     # Reddi et al. Algorithm 5.
    ('fedprox', 'num_examples'),    # FedAvg's weighting.
    ('scaffold', 'num_examples'),
    ('fedptr_s', 'num_examples'),
    ('fedptr', 'num_examples'),
    ('fedadc', 'uniform'),          # Ozfatura et al. Algorithm 3: 1/|S| sum.
    ('fedadc_plus', 'uniform'),
    ('slowmo', 'uniform'),          # Ozfatura et al. Algorithm 2.
    ('fedfor', 'uniform'),          # Tian et al. Algorithm 1.
    ('fedcurv', 'uniform'),         # Shoham et al.: plain mean of models.
    ('feddyn', 'uniform'),          # Acar et al. Algorithm 1: 1/|P| sum.
    ('fedntd', 'num_examples'),     # Its authors' server: by data size.
    ('fedrs', 'num_examples'),      # FedRepo: by client counts.
    ('fedgkd', 'uniform'),          # Its authors' plain mean of models.
    ('moon', 'num_examples'),       # Li et al. Algorithm 1 (FedAvg's).
    ('feddc', 'uniform'),           # Gao et al.: plain means.
]


def test_every_algorithm_has_a_paper_weighting():
  assert sorted(registry.ALGORITHMS) == sorted(a for a, _ in PAPER_WEIGHTING)


@pytest.mark.parametrize('algorithm, weighting', PAPER_WEIGHTING)
def test_client_weighting_defaults_to_the_papers(algorithm, weighting):
  argv = [f'--algorithm={algorithm}']
  if algorithm == 'fedprox':
    argv.append('--mu=0.01')
  if algorithm == 'fedcurv':
    argv.append('--lam=0.1')
  if algorithm == 'moon':
    argv.append('--moon_mu=1')
  assert _hparams(*argv)['client_weighting'] == weighting
  other = 'uniform' if weighting == 'num_examples' else 'num_examples'
  assert _hparams(*argv, f'--client_weighting={other}')[
      'client_weighting'] == other


def test_fedadc_plus_temperature_is_cs_kds_4():
  assert _hparams('--algorithm=fedadc_plus')[
      'fedadc_distill_temperature'] == 4.0


def test_fedcurv_exact_and_fedfor_grad_at_zero_are_recorded():
  assert _hparams('--algorithm=fedcurv', '--lam=0.1')['fedcurv_exact'] == (
      'auto')
  assert _hparams('--algorithm=fedfor',
                  '--fedfor_grad_at_zero=1')['fedfor_grad_at_zero'] == 1


def test_a_run_that_recorded_grad_at_zero_as_text_resumes():
  # --fedfor_grad_at_zero was an enum of '0' and '1': a run recorded so is
  # the same setting as the integer flag; nothing else is read leniently.
  assert output_dir_lib.same_setting('fedfor_grad_at_zero', '1', 1)
  assert not output_dir_lib.same_setting('fedfor_grad_at_zero', '0', 1)
  assert not output_dir_lib.same_setting('rounds', '3', 3)
  assert not output_dir_lib.same_setting('client_lr', '0.1', 0.1)


def test_feddyn_runs_its_papers_sgd_step_not_the_tasks_yogi():
  # digits' default server optimizer is yogi; FedDyn's step is SGD, lr 1.
  assert _hparams()['server_opt'] == 'yogi'
  hparams = _hparams('--algorithm=feddyn')
  assert (hparams['server_opt'], hparams['server_lr']) == ('sgd', 1.0)
  hparams = _hparams('--algorithm=feddyn', '--server_lr=0.5')
  assert (hparams['server_opt'], hparams['server_lr']) == ('sgd', 0.5)


@pytest.mark.parametrize('algorithm, message', [
    ('feddyn', "--server_opt=adam: --algorithm=feddyn applies its paper's "
               'server step, SGD (theta = mean theta_k - h/alpha at '
               '--server_lr, 1 by default); drop --server_opt.'),
    ('fedadc', '--server_opt=adam: --algorithm=fedadc applies its own server '
               'momentum rule (--server_opt and --server_lr are unused); drop '
               '--server_opt.'),
    ('slowmo', '--server_opt=adam: --algorithm=slowmo applies its own server '
               'momentum rule (--server_opt and --server_lr are unused); drop '
               '--server_opt.'),
])
def test_adaptive_server_opt_is_refused_where_the_algorithm_owns_the_step(
    algorithm, message):
  with pytest.raises(train.UsageError) as e:
    _hparams(f'--algorithm={algorithm}', '--server_opt=adam')
  assert str(e.value) == message
