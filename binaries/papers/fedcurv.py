"""FedCurv (Shoham et al.): its table and its claim.

Overcoming Forgetting in Federated Learning on Non-IID Data.

- Table (`SPECS`, `binaries.reproduce --paper=fedcurv`): Table 1, rounds
  to reach 95%, 90%, 85% test accuracy on non-IID MNIST (96 devices, two
  one-label blocks each), FedCurv against FedProx and FedAvg. Our copy of
  the table merged its rows; the reading used is the comment above
  `FEDCURV_T1` (the table's note, printed with it, names
  `binaries/paper_tables.py`, where it was written).
- Claim (`CLAIM`, `binaries.claims --claims=fedcurv`): on MNIST split into
  96 devices of two one-label blocks, FedCurv reaches 95% / 90% / 85% test
  accuracy in fewer rounds than FedAvg and FedProx (Table 1, E = 50);
  tested on MNIST-5k.
"""

from binaries import tables
from binaries import verdicts
from binaries.papers import shared

FEDCURV_SPLIT = tables.FEDCURV_SPLIT
Measure = tables.Measure
MeasureSpec = tables.MeasureSpec
Method = tables.Method
STAND_IN_TASK = tables.STAND_IN_TASK
ScaleSpec = tables.ScaleSpec
Setting = tables.Setting
TableSpec = tables.TableSpec
Better = verdicts.Better
Claim = verdicts.Claim
Tuning = verdicts.Tuning


# --- The tables --------------------------------------------------------------

# Section 4: 96 devices, MNIST split into 96 x 2 blocks of one label, two
# blocks per device; all devices every round (C = 1), batch 256, constant
# lr 0.01; the MNIST PyTorch example CNN.
#
# Our copy of Table 1 merged its rows; read back as (each reading agrees
# with the text: FedCurv reaches 90% three times as fast as FedAvg at E=50,
# 95% twice as fast, FedProx reaches 95% two times slower):
#   E=50: FedCurv 38 9 6; FedProx mu=0.00025: 140 22 16; FedAvg 76 30 22
#   E=10: FedCurv 99 35 27; FedProx mu=0.00001: 115 46 33; FedAvg 106 51 43
# so each FedProx mu was run at one E only.
FEDCURV_T1 = TableSpec(
    paper='fedcurv', number='1',
    title=('Rounds to reach 95%, 90%, 85% test accuracy on non-IID MNIST '
           '(96 devices, two one-label blocks each)'),
    methods=(
        Method('FedCurv, lambda=1.0', ('--algorithm=fedcurv', '--lam=1.0')),
        Method('FedProx, mu=0.00025', ('--algorithm=fedprox', '--mu=0.00025'),
               settings=('E=50',)),
        Method('FedProx, mu=0.00001', ('--algorithm=fedprox', '--mu=0.00001'),
               settings=('E=10',)),
        Method('FedAvg', ('--algorithm=fedopt',)),
    ),
    methods_as_rows=True,
    # 50 local epochs of 24 clients took ~45 s a round here (2 loaded
    # cores): the stand-in runs E/10 (small_E).
    axes=(({'E': 50, 'small_E': 5}, {'E': 10, 'small_E': 1}),),
    label='E={E}',
    measures=tuple(MeasureSpec(f'{t:.2f}', 'rounds_to', t, scale=1.0)
                   for t in (0.95, 0.90, 0.85)),
    printed={
        'FedCurv, lambda=1.0': (38, 9, 6, 99, 35, 27),
        'FedProx, mu=0.00025': (140, 22, 16, None, None, None),
        'FedProx, mu=0.00001': (None, None, None, 115, 46, 33),
        'FedAvg': (76, 30, 22, 106, 51, 43),
    },
    paper_scale=ScaleSpec(
        task='mnist',
        task_options=(f'partition={FEDCURV_SPLIT}', 'num_clients=96'),
        model='fedcurv_cnn',
        point_flags=('--client_batch_size=256', '--clients_per_round=96',
                     shared.EPOCHS_FLAG),
        # choice: rounds are not given; 150 covers the largest printed
        # count (140).
        rounds=150, seeds=1,
        flags=('--server_opt=sgd', '--server_lr=1.0', '--client_opt=sgd',
               '--client_lr=0.01', '--eval_every=1')),
    small=ScaleSpec(
        task=STAND_IN_TASK,
        task_options=(f'partition={FEDCURV_SPLIT}', 'num_clients=24'),
        point_flags=('--client_batch_size=256', '--clients_per_round=24',
                     '--client_epochs={small_E}'),
        rounds=30, seeds=1,
        # Untuned; with client lr 0.05 no method reached 85% in 30 rounds;
        # with lr 0.2, lambda = 1 diverged: lambda is scaled to keep the
        # paper's lambda * lr (1 x 0.01).
        flags=('--server_opt=sgd', '--server_lr=1.0', '--client_opt=sgd',
               '--client_lr=0.2', '--eval_every=1'),
        method_flags={'FedCurv, lambda=1.0': ('--lam=0.05',)},
        stand_in=('24 devices with two one-label blocks each (partition='
                  f'{FEDCURV_SPLIT}), all every round; 30 rounds; client lr '
                  '0.2 (the paper: 0.01) and FedCurv lambda 0.05 (same '
                  'lambda x lr as the paper\'s 1 x 0.01); local epochs E/10 '
                  '(5 for E=50, 1 for E=10)')),
    notes=('Our copy merged the table\'s rows; the reading used is in '
           'binaries/paper_tables.py (each FedProx mu was run at one E).',
           'Cells are rounds; "not reached" when the target was not reached '
           'within the run.'))

SPECS = (FEDCURV_T1,)


# --- The claim ---------------------------------------------------------------

_CURV_TARGETS = (0.95, 0.90, 0.85)


# The paper's Table 1 (E = 50) rounds saved by FedCurv at 95 / 90 / 85 %.
_CURV_PAPER_GAP = {'FedAvg': (38.0, 21.0, 16.0),
                   'FedProx': (102.0, 13.0, 10.0)}


def _fedcurv_claim() -> Claim:
  # 40 rounds, not the 100 first registered (2026-11-26, before any run
  # reached a check: only the first tuning run had started, 3 rounds in).
  # A round of the 96 devices at E = 50 (12,000 steps of batch 16) took
  # 8-18 minutes on this shared 2-core machine, so 13 runs of 100 rounds
  # were 170-390 hours. 40 still spans the paper's FedCurv rounds to every
  # target (38 / 9 / 6); a method that does not reach a target by then is
  # censored, which decides a check against one that did and leaves two
  # censored runs inconclusive (`verdicts`).
  # Over 80 lines with its docstring: a declaration (the claim's setting,
  # measures and checks) with the reasons for its departures beside them.
  rounds = 40
  measures = tuple(Measure(f'rounds to {t:.0%}', 'rounds_to', t, scale=1.0)
                   for t in _CURV_TARGETS) + (
                       Measure('last 10', 'last_mean', 10),
                       # The curve measure beside rounds to a target.
                       Measure(f'mean 1-{rounds}', 'mean'))
  setting = Setting('E=50', (*shared.MNIST5K, *shared.task_options(
      partition='fedcurv', num_clients=96, model='fedcurv_cnn'),
                             '--client_epochs=50'), rounds, measures)
  sgd = ('--server_opt=sgd', '--server_lr=1.0')
  return Claim(
      name='fedcurv',
      statement=('FedCurv, Table 1: on MNIST split into 96 devices of two '
                 'one-label blocks, FedCurv reaches 95% / 90% / 85% test '
                 'accuracy in fewer rounds than FedAvg and FedProx (E = 50: '
                 '38 / 9 / 6 against FedAvg\'s 76 / 30 / 22 and FedProx\'s '
                 '140 / 22 / 16)'),
      setting_text=(
          f'MNIST-5k (the 5,000 real MNIST images this offline machine has), '
          f'96 devices of two one-label blocks (partition=fedcurv; '
          f'~42 images each, where the paper\'s held ~625), all every round, '
          f'E = 50, the paper\'s CNN (`fedcurv_cnn`), client SGD at the '
          f'paper\'s constant lr 0.01, batch 16 (the paper\'s 256 on ~625 '
          f'images gives ~150 steps a round at E = 50, as batch 16 does '
          f'here), {rounds} rounds (registered as 100, cut before any run '
          f'reached a check, when a round took 8-18 min; ~3.5 min on the '
          f'current machine, where 13 runs of 100 would still be ~75 '
          f'core-hours; 40 spans the paper\'s FedCurv '
          f'rounds to every target, 38 / 9 / 6); FedCurv by Eq. 3 (each '
          f'device subtracts '
          f'its own last Fisher terms), its Fisher over one of the E '
          f'epochs, lambda tuned as the paper tuned it (the value reaching '
          f'90% first, on a seed no check reads, over 1, 3, 10, 30; each '
          f'candidate stops once it reached 90%); '
          f'FedProx at the paper\'s tuned mu 0.00025'),
      # Each method averages as its paper does (FedCurv a plain mean, the
      # others by examples); every device holds the same number of images
      # (`partitioners.fedcurv_partition`), so the two means are the same
      # up to float rounding and the weighting is no difference between
      # the methods here.
      methods=(Method('FedCurv', ('--algorithm=fedcurv',
                                  '--fedcurv_exact=on', *sgd, *shared.UNIFORM)),
               Method('FedProx', ('--algorithm=fedprox', '--mu=0.00025',
                                  *sgd, *shared.BY_EXAMPLES)),
               Method('FedAvg', shared.FEDAVG)),
      settings=(setting,),
      # A checkpoint every 2 rounds (~20-40 min here), not 10: how a run
      # computes, not what (`binaries.train`'s RESUMABLE_CHANGES). Eq. 3's
      # client state makes each one ~0.9 GB (96 x 2 x 1.2M float32).
      flags=('--client_opt=sgd', '--client_lr=0.01',
             '--client_batch_size=16', '--clients_per_round=0',
             '--eval_every=1', '--checkpoint_every=2'),
      # Primary: the six rounds to a target (the table's claim), margin 5
      # rounds: the paper's gaps are 10-102 rounds, and one evaluation's
      # noise near 90 % (~0.95 point) against curves climbing 0.07-0.19
      # point a round is 5-13 rounds. Beside them, the mean accuracy over
      # rounds 1-40 (margin one point), which needs no censoring.
      checks=tuple(Better('FedCurv', other, 'E=50', m.label, 5.0,
                          paper=_CURV_PAPER_GAP[other][i])
                   for other in ('FedAvg', 'FedProx')
                   for i, m in enumerate(measures[:len(_CURV_TARGETS)])) +
      tuple(Better('FedCurv', other, 'E=50', f'mean 1-{rounds}', 1.0,
                   role=verdicts.SECONDARY)
            for other in ('FedAvg', 'FedProx')),
      rule=('reproduced when FedCurv reaches every target in fewer rounds '
            'than both FedAvg and FedProx (Holm over the six), not '
            'reproduced when any is ruled out'),
      tunings=(Tuning('FedCurv', 'lam', ('1', '3', '10', '30'), 'E=50',
                      'rounds to 90%'),),
      seeds=3,
      paper_numbers=('Table 1, E = 50: FedCurv 38/9/6, FedProx 140/22/16, '
                     'FedAvg 76/30/22 rounds'))


CLAIM = _fedcurv_claim()
