"""The binary runs the papers' other baselines on digits.

Two rounds of each of FedNTD, FedRS, FedGKD, MOON and FedDC through
`binaries.train`, against FedAvg's run on the same flags (same clients,
same weighting, same model): each records its hyper-parameters, and each
trains something other than FedAvg (its round-2 evaluation loss differs by
more than 2 %, where another CPU's kernels move FedAvg's by 0.4 %), so the
binary runs the algorithm its flag names. The maths of each is tested
against NumPy in its own test file (tests/test_fed_ntd.py, ...).
"""

import csv
import json
import os

import pytest

from tests import binary

FAST = ('--task=digits', '--clients_per_round=4', '--client_epochs=1',
        '--rounds=2', '--eval_every=1', '--seed=3', '--server_opt=sgd',
        '--server_lr=1.0', '--client_weighting=num_examples')
# MOON on the same CNN with its projection head; 4 clients, all every round,
# so that round 2's clients contrast with their round-1 models (a client's
# first round is FedAvg's: its previous model is the global one).
MOON_MODEL = ('--task_option=model=cnn_proj', '--task_option=num_clients=4')
# FedRS on clients that lack classes (Dirichlet concentration 0.05): on the
# default split (0.5) every client holds nearly every digit and its
# restriction moves the evaluation loss by 0.5 %; here by 5 %.
SKEWED = ('--task_option=alpha=0.05',)
# Each run's data and model options; FedAvg runs once on each.
SETUP = {'moon': MOON_MODEL, 'fedrs': SKEWED}
RUNS = {
    'fedntd': ('--fedntd_beta=3.0', '--fedntd_temperature=2.0'),
    'fedrs': (*SKEWED, '--fedrs_alpha=0.0'),
    'fedgkd': ('--fedgkd_gamma=5.0', '--fedgkd_temperature=0.5',
               '--fedgkd_buffer_size=2'),
    'moon': (*MOON_MODEL, '--moon_mu=20.0', '--moon_temperature=0.5'),
    'feddc': ('--feddc_alpha=0.1',),
}
RECORDED = {
    'fedntd': {'fedntd_beta': 3.0, 'fedntd_temperature': 2.0},
    'fedrs': {'fedrs_alpha': 0.0},
    'fedgkd': {'fedgkd_gamma': 5.0, 'fedgkd_temperature': 0.5,
               'fedgkd_buffer_size': 2},
    'moon': {'moon_mu': 20.0, 'moon_temperature': 0.5},
    'feddc': {'feddc_alpha': 0.1},
}


def _run(output_dir, *args):
  assert binary.run_train(*FAST, *args, f'--output_dir={output_dir}') == 0
  with open(os.path.join(output_dir, 'metrics.csv')) as f:
    rows = list(csv.DictReader(f))
  with open(os.path.join(output_dir, 'hparams.json')) as f:
    return rows, json.load(f)


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  out = {name: _run(str(tmp_path_factory.mktemp(name) / 'run'),
                    f'--algorithm={name}', *extra)
         for name, extra in RUNS.items()}
  for setup in {(), *SETUP.values()}:
    out[setup] = _run(str(tmp_path_factory.mktemp('fedavg') / 'run'),
                      '--algorithm=fedopt', *setup)
  return out


@pytest.mark.parametrize('name', list(RUNS))
def test_each_baseline_records_its_flags_and_is_not_fedavg(runs, name):
  rows, hparams = runs[name]
  assert [r['round'] for r in rows] == ['1', '2']
  assert hparams['algorithm'] == name
  assert {k: hparams[k] for k in RECORDED[name]} == RECORDED[name]
  fedavg, _ = runs[SETUP.get(name, ())]
  got, want = float(rows[1]['eval_loss']), float(fedavg[1]['eval_loss'])
  assert abs(got - want) > 0.02 * want, (name, got, want)
