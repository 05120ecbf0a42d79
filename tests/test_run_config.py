"""A run's typed settings give back hparams.json's dictionary unchanged."""

import json

import pytest

from tests import binary
from tff_opt.program import run_config


@pytest.mark.parametrize('args', [
    (),
    ('--algorithm=fedprox', '--fedprox_mu=0.1', '--fedcurv_lam=2'),
    ('--algorithm=feddyn', '--fedbn', '--stop_at=eval_accuracy:0.5',
     '--task_option=alpha=0.1'),
    ('--task=shakespeare', '--client_vectorization=4', '--rounds=3'),
])
def test_as_hparams_is_the_resolved_dictionary(args):
  hparams = binary.resolve_hparams(*args)
  config = run_config.RunConfig.from_hparams(hparams)
  back = config.as_hparams()
  assert back == hparams
  assert list(back) == list(hparams)
  assert (json.dumps(back, indent=2, sort_keys=True) ==
          json.dumps(hparams, indent=2, sort_keys=True))


def test_settings_are_typed_fields():
  config = run_config.RunConfig.from_hparams(binary.resolve_hparams(
      '--algorithm=fedprox', '--fedprox_mu=0.1', '--seed=3'))
  assert config.seed == 3
  assert config.algorithm_hparams == {'fedprox_mu': 0.1}
  assert not config.fedbn and config.client_vectorization == 0
  assert config.options == run_config.RunOptions()
  with pytest.raises(AttributeError):
    config.seed = 4  # Frozen: the run is what was resolved.


def test_options_are_not_recorded():
  hparams = binary.resolve_hparams()
  options = run_config.RunOptions(
      personalize=run_config.Personalization(
          epochs=2, clients=None, train_fraction=0.5, mu=0.0,
          distill_lambda=0.0),
      logical_gpu_memory_mb=1024)
  assert run_config.RunConfig.from_hparams(
      hparams, options).as_hparams() == hparams


def test_a_key_that_is_no_setting_is_refused():
  hparams = binary.resolve_hparams('--algorithm=fedprox')
  with pytest.raises(ValueError, match=r'--algorithm=fedprox: fedcurv_lam$'):
    run_config.RunConfig.from_hparams({**hparams, 'fedcurv_lam': 1.0})
