"""`tools.rescore_archives` on a fabricated archive, numbers by hand."""

import math
import os

import numpy as np
import pytest
from scipy import stats

from tools import rescore_archives

_FEDPTR = rescore_archives.ARCHIVES[2]
# The mean of the last 5 of 60 rounds, per method and seed (constant runs).
_ACC = {'fedavg': (0.96, 0.95, 0.97), 'fedprox': (0.96, 0.96, 0.96),
        'fedptr_s': (0.97, 0.965, 0.975)}


def _fabricate(results):
  for method, accs in _ACC.items():
    for seed, acc in enumerate(accs):
      run = os.path.join(results, _FEDPTR.path, 'runs',
                         f'{method}__dir_0.04__seed{seed}')
      os.makedirs(run)
      with open(os.path.join(run, 'metrics.csv'), 'w') as f:
        f.write('round,train_loss,eval_accuracy,eval_num_examples\n')
        f.writelines(f'{r},1.0,{acc},1000\n' for r in range(1, 61))


def test_rescore_by_hand(tmp_path):
  assert _FEDPTR.path == 'fedptr/reduced_small_cnn_plain_sgd'
  _fabricate(str(tmp_path))
  text = rescore_archives.rescore(_FEDPTR, str(tmp_path))
  a = 100 * np.array(_ACC['fedptr_s'])
  for other in ('fedavg', 'fedprox'):
    b = 100 * np.array(_ACC[other])
    d = a - b
    var_seeds = d.var(ddof=1) / 3
    # The unpaired bound: both accuracies' binomial variances on 1,000
    # images, averaged over the seeds.
    var_test = np.mean((a / 100 * (1 - a / 100) + b / 100 * (1 - b / 100))
                       / 1000) * 1e4
    se = math.sqrt(var_seeds + var_test)
    df = 2 * (se * se / var_seeds) ** 2
    half = stats.t.ppf(0.95, df) * se
    label = {'fedavg': 'FedAvg', 'fedprox': 'FedProx'}[other]
    assert (f'- FedPTR-S better than {label} (Dir(0.04), last 5): ' in text)
    assert (f'mean difference {d.mean():+.2f}; 90% interval '
            f'[{d.mean() - half:+.2f}, {d.mean() + half:+.2f}] over 3 '
            f'seeds' in text)
  # +1.0 +- ~1.4 (FedAvg), +0.67 +- ~1.3 (FedProx): neither above 0 nor
  # below the margin.
  assert 'Verdict now: **inconclusive**' in text


def test_a_missing_archive_is_one_line_and_writes_nothing(tmp_path, capsys):
  _fabricate(str(tmp_path))
  with pytest.raises(SystemExit) as e:
    rescore_archives.main(['rescore_archives', f'--results={tmp_path}'])
  assert e.value.code == 2
  assert capsys.readouterr().err == (
      f'rescore_archives: error: --results={tmp_path}: no archived runs in '
      'fedcurv/reduced_24_devices_e5, fedfor/reduced_dirichlet_small_cnn '
      '(expected <dir>/<archive>/runs/).\n')
  assert not os.path.exists(os.path.join(tmp_path, _FEDPTR.path,
                                         'rescored.md'))
  with pytest.raises(SystemExit) as e:
    rescore_archives.main(['rescore_archives', '--out=x'])
  assert e.value.code == 2
  assert capsys.readouterr().err == (
      "rescore_archives: error: unknown argument '--out=x'; expected "
      '--results=DIR.\n')
