r"""Scores the superseded claim runs by the verdict protocol the claims use.

The runs of `results/claims/*/reduced_*/` were made, and their verdicts
written, under earlier rules (their READMEs keep the verdicts of then).
This scores the same runs by `binaries.verdicts` as it is: the checks each
archive's table lists, rebuilt here with their setting's rounds, measures
and evaluation grid, and the margins the current claims use (one point of
accuracy, five rounds to a target), on the values read from the archived
`metrics.csv` files (no per-example log: the unpaired test-set bound). It
writes `rescored.md` next to each archive's README and prints it:

    python -m tools.rescore_archives [--results=results/claims]

Reddi et al.'s archive (`fedopt/reduced_1x128_100_rounds/`) is left out:
its README reports its tie at the 25-round grid, not a verdict.
"""

import dataclasses
import os
import sys
from collections.abc import Sequence

from binaries import claims
from binaries import verdicts
from tff_opt.program import analysis

RESULTS = os.path.join('results', 'claims')
Measure = verdicts.Measure
Setting = verdicts.Setting
Better = verdicts.Better
GainLarger = verdicts.GainLarger


@dataclasses.dataclass(frozen=True)
class Archive:
  """One superseded claim: where its runs are and the checks it had.

  Attributes:
    path: The archive's directory, under the claims' results.
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
      settings=settings, flags=('--eval_every=1',), checks=checks, seeds=3)


# The current claims' margins.
ACCURACY_DELTA = 1.0
ROUNDS_DELTA = 5.0
_ROUNDS_TO = tuple(Measure(f'{t:.0%}', 'rounds_to', t, scale=1.0)
                   for t in (0.95, 0.9, 0.85))
_FEDCURV = Archive(
    path='fedcurv/reduced_24_devices_e5',
    claim=_claim('fedcurv', (Setting('E=5', (), 40, _ROUNDS_TO),),
                 tuple(Better('FedCurv', 'FedAvg', 'E=5', m.label,
                              ROUNDS_DELTA) for m in _ROUNDS_TO)),
    methods={'fedavg': 'FedAvg', 'fedcurv': 'FedCurv', 'fedprox': 'FedProx'},
    settings={'e_5': 'E=5'})

_FEDFOR_CHECKS = []
for _method in ('FedFOR', "FedFOR U'(0)=1", 'FedFOR alpha=0.5'):
  _FEDFOR_CHECKS += [
      Better(_method, 'FedAvg', 'E=8', 'final', ACCURACY_DELTA),
      GainLarger(_method, 'FedAvg', 'E=8', 'E=1', 'final', ACCURACY_DELTA)]
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
                 (Better('FedPTR-S', 'FedAvg', 'Dir(0.04)', 'last 5',
                         ACCURACY_DELTA),
                  Better('FedPTR-S', 'FedProx', 'Dir(0.04)', 'last 5',
                         ACCURACY_DELTA))),
    methods={'fedavg': 'FedAvg', 'fedprox': 'FedProx',
             'fedptr_s': 'FedPTR-S'},
    settings={'dir_0.04': 'Dir(0.04)'})

ARCHIVES = (_FEDCURV, _FEDFOR, _FEDPTR)


def values_and_sizes(archive: Archive, results: str = RESULTS):
  """The archive's (values, eval sizes), as `binaries.claims` reads runs.

  Raises:
    ValueError: If a run a check reads has not logged every round.
  """
  runs_dir = os.path.join(results, archive.path, 'runs')
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
    if n:
      sizes[setting.label] = min(sizes.get(setting.label, n), n)
  return values, sizes


def rescore(archive: Archive, results: str = RESULTS) -> str:
  """The archive's verdict by the current protocol, as markdown."""
  values, sizes = values_and_sizes(archive, results)
  overall, found = verdicts.evaluate(archive.claim, values, sizes)
  lines = ['# By the verdict protocol the claims use now', '',
           'The runs of this archive scored by `binaries.verdicts` as it is '
           'now (`python -m tools.rescore_archives`: the checks of the '
           'table as they were, every one primary, with the current '
           'claims\' margins; no per-example log, so the test set\'s '
           'error is the unpaired bound). The README\'s verdict is the one '
           'of then.', '',
           f'Verdict now: **{overall}**', '']
  lines += [f'- {r.check.describe()}: {r.verdict} ({r.numbers})'
            for r in found]
  return '\n'.join(lines) + '\n'


def main(argv: Sequence[str]) -> None:
  """Rescores every archive under `--results=DIR` (default results/claims).

  Exits with status 2 and one line on an unknown argument or a missing
  archive, writing nothing.
  """
  results = RESULTS
  for arg in argv[1:]:
    if not arg.startswith('--results='):
      _fail(f'unknown argument {arg!r}; expected --results=DIR.')
    results = arg.split('=', 1)[1]
  missing = [a.path for a in ARCHIVES
             if not os.path.isdir(os.path.join(results, a.path, 'runs'))]
  if missing:
    _fail(f'--results={results}: no archived runs in '
          f'{", ".join(missing)} (expected <dir>/<archive>/runs/).')
  for archive in ARCHIVES:
    text = rescore(archive, results)
    with open(os.path.join(results, archive.path, 'rescored.md'), 'w',
              encoding='utf-8') as f:
      f.write(text)
    print(f'== {archive.path}\n{text}')


def _fail(message: str) -> None:
  print(f'rescore_archives: error: {message}', file=sys.stderr, flush=True)
  sys.exit(2)


if __name__ == '__main__':
  main(sys.argv)
