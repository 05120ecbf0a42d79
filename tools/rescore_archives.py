r"""Scores the superseded claim runs by the verdict rule the claims use now.

The runs of `*/reduced_*/` were made, and their verdicts written, before
issue 30 corrected the rule (a censored or tied check counted as "not
reproduced"; no check had a resolution). Their READMEs keep the verdicts
of then. This script scores the same runs by the current rule
(`binaries.verdicts`): the checks each archive's table lists, rebuilt
here with their setting's rounds, measures and evaluation grid, on the
values read from the archived `metrics.csv` files. It writes
`rescored.md` next to each archive's README and prints it:

    .venv/bin/python results/claims/rescore_archives.py

Reddi et al.'s archive (`fedopt/reduced_1x128_100_rounds/`) is left out:
its README already reports its tie at the 25-round grid, not a verdict.
"""

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

from binaries import claims  # pylint: disable=g-import-not-at-top
from binaries import verdicts  # pylint: disable=g-import-not-at-top
from tff_opt.program import analysis  # pylint: disable=g-import-not-at-top

HERE = os.path.dirname(os.path.abspath(__file__))
Measure = verdicts.Measure
Setting = verdicts.Setting
Better = verdicts.Better
GainLarger = verdicts.GainLarger


@dataclasses.dataclass(frozen=True)
class Archive:
  """One superseded claim: where its runs are and the checks it had.

  Attributes:
    path: The archive's directory, under results/claims.
    claim: The claim as it was (its settings, measures and checks).
    methods: Run-directory prefix -> method label.
    settings: Run-directory setting part -> setting label.
  """
  path: str
  claim: verdicts.Claim
  methods: dict[str, str]
  settings: dict[str, str]


def _claim(name, settings, checks):
  return verdicts.Claim(
      name=name, statement='', setting_text='', methods=(),
      settings=settings, flags=('--eval_every=1',), checks=checks)


_ROUNDS_TO = tuple(Measure(f'{t:.0%}', 'rounds_to', t, scale=1.0)
                   for t in (0.95, 0.9, 0.85))
_FEDCURV = Archive(
    path='fedcurv/reduced_24_devices_e5',
    claim=_claim('fedcurv', (Setting('E=5', (), 40, _ROUNDS_TO),),
                 tuple(Better('FedCurv', 'FedAvg', 'E=5', m.label)
                       for m in _ROUNDS_TO)),
    methods={'fedavg': 'FedAvg', 'fedcurv': 'FedCurv', 'fedprox': 'FedProx'},
    settings={'e_5': 'E=5'})

_FEDFOR_CHECKS = []
for _method in ('FedFOR', "FedFOR U'(0)=1", 'FedFOR alpha=0.5'):
  _FEDFOR_CHECKS += [Better(_method, 'FedAvg', 'E=8', 'final'),
                     GainLarger(_method, 'FedAvg', 'E=8', 'E=1', 'final')]
_FEDFOR = Archive(
    path='fedfor/reduced_dirichlet_small_cnn',
    claim=_claim('fedfor', tuple(
        Setting(label, (), rounds,
                (Measure('halfway', 'best_up_to', rounds // 2),
                 Measure('final', 'best_up_to', rounds)))
        for label, rounds in (('E=1', 100), ('E=8', 50))),
                 tuple(_FEDFOR_CHECKS)),
    methods={'fedavg': 'FedAvg', 'fedfor': 'FedFOR',
             'fedfor_u_0_1': "FedFOR U'(0)=1",
             'fedfor_alpha_0.5': 'FedFOR alpha=0.5'},
    settings={'e_1': 'E=1', 'e_8': 'E=8'})

_FEDPTR = Archive(
    path='fedptr/reduced_small_cnn_plain_sgd',
    claim=_claim('fedptr', (Setting('Dir(0.04)', (), 60,
                                    (Measure('last 5', 'last_mean', 5),)),),
                 (Better('FedPTR-S', 'FedAvg', 'Dir(0.04)', 'last 5'),
                  Better('FedPTR-S', 'FedProx', 'Dir(0.04)', 'last 5'))),
    methods={'fedavg': 'FedAvg', 'fedprox': 'FedProx',
             'fedptr_s': 'FedPTR-S'},
    settings={'dir_0.04': 'Dir(0.04)'})

ARCHIVES = (_FEDCURV, _FEDFOR, _FEDPTR)


def values_and_sizes(archive: Archive):
  """The archive's (values, eval sizes), as `binaries.claims` reads runs."""
  runs_dir = os.path.join(HERE, archive.path, 'runs')
  values, sizes = {}, {}
  for name in sorted(os.listdir(runs_dir)):
    method, setting_part, seed = name.split('__')
    if method not in archive.methods:
      continue  # A run no check reads.
    setting = archive.claim.setting(archive.settings[setting_part])
    rows = analysis.read_metrics(os.path.join(runs_dir, name))
    if not analysis.logged_through(rows) >= setting.rounds:
      raise ValueError(f'{name}: not finished ({setting.rounds} rounds).')
    for label, value in claims.run_values(rows, setting,
                                          setting.rounds).items():
      values.setdefault((archive.methods[method], setting.label, label),
                        {})[int(seed.removeprefix('seed'))] = value
    n = claims.eval_size(rows)
    sizes[setting.label] = min(sizes.get(setting.label, n), n)
  return values, sizes


def rescore(archive: Archive) -> str:
  """The archive's verdict by the current rule, as markdown."""
  values, sizes = values_and_sizes(archive)
  overall, results = verdicts.evaluate(archive.claim, values, sizes)
  lines = ['# By the verdict rule the claims use now', '',
           'The runs of this archive scored by `binaries.verdicts` as it is '
           'now (`results/claims/rescore_archives.py`, the checks of the '
           'table as they were; each check\'s resolution and reason as '
           'the current claims table gives them). The README\'s verdict '
           'is the one of then.', '',
           f'Verdict now: **{overall}**', '']
  lines += [f'- {check.describe()}: {verdict} ({numbers})'
            for check, verdict, numbers in results]
  return '\n'.join(lines) + '\n'


def main() -> None:
  for archive in ARCHIVES:
    text = rescore(archive)
    with open(os.path.join(HERE, archive.path, 'rescored.md'), 'w',
              encoding='utf-8') as f:
      f.write(text)
    print(f'== {archive.path}\n{text}')


if __name__ == '__main__':
  main()
