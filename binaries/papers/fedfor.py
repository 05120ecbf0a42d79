"""FedFOR (Tian, Smith, Kira): its tables and its claim.

FedFOR: Stateless Heterogeneous FL with First-Order Regularization.

- Tables (`SPECS`, `binaries.reproduce --paper=fedfor`): Table 2, prior
  shift on imbalanced CIFAR-10 (best validation accuracy up to round t);
  Table 3, covariate shift on DomainNet (rounds to 40% and best accuracy,
  FedBN backbone); Table 4, covariate shift on Digits (rounds to 80% and
  best accuracy); Table 5, concept shift on DomainNet (mean accuracy over
  200 rounds). Left out: Table 1 (communication, no numbers).
- Claim (`CLAIM`, `binaries.claims --claims=fedfor`): FedFOR beats FedAvg
  under label (prior) shift, and its gain grows with the local epochs,
  largest at E = 8 (Table 2, Section 4.2); tested on MNIST-5k at the
  paper's prior-shift setting.
"""

from binaries import tables
from binaries import verdicts
from binaries.papers import shared

BN_STAND_IN_MODEL = tables.BN_STAND_IN_MODEL
CONCEPT_SHIFT = tables.CONCEPT_SHIFT
DOMAINS = tables.DOMAINS
FEDBN_FLAG = tables.FEDBN_FLAG
FEDDYN_ALPHA_FLAG = tables.FEDDYN_ALPHA_FLAG
LONG_TAIL = tables.LONG_TAIL
Measure = tables.Measure
MeasureSpec = tables.MeasureSpec
Method = tables.Method
STAND_IN_TASK = tables.STAND_IN_TASK
ScaleSpec = tables.ScaleSpec
Setting = tables.Setting
TableSpec = tables.TableSpec
Better = verdicts.Better
Claim = verdicts.Claim
GainLarger = verdicts.GainLarger
Tuning = verdicts.Tuning


# --- The tables --------------------------------------------------------------

# Appendix D: batch 128 (CIFAR-10) / 32 (Digits, DomainNet), SGD with a
# constant learning rate 0.01, no momentum, no weight decay; alpha = 5 for
# every experiment (Appendix C). The server averages (FedAvg: SGD, lr 1).
_FEDFOR_SERVER = ('--server_opt=sgd', '--server_lr=1.0', '--client_opt=sgd',
                  '--client_lr=0.01', '--eval_every=1')
# choice: FedProx's mu and FedCurv's lambda are not given; mu = 0.01 is the
# FedBN paper's FedProx setting, lambda = 1 FedCurv's own Table 1 value.
_FEDFOR_METHODS = (
    Method('FedAvg', ('--algorithm=fedopt',)),
    Method('FedProx', ('--algorithm=fedprox', '--mu=0.01')),
    Method('FedCurv', ('--algorithm=fedcurv', '--lam=1.0')),
    Method('FedFOR', ('--algorithm=fedfor', '--alpha=5.0')),
)
# Tables 3-5: every method on the FedBN backbone (batch norm stays local).
_FEDFOR_BN_METHODS = (
    Method('FedBN', ('--algorithm=fedopt', FEDBN_FLAG)),
    Method('FedProx', ('--algorithm=fedprox', '--mu=0.01', FEDBN_FLAG)),
    Method('FedDYN', ('--algorithm=feddyn',
                      f'{FEDDYN_ALPHA_FLAG}={shared.FEDDYN_ALPHA}',
                      FEDBN_FLAG)),
    Method('FedCurv', ('--algorithm=fedcurv', '--lam=1.0', FEDBN_FLAG)),
    Method('FedFOR', ('--algorithm=fedfor', '--alpha=5.0', FEDBN_FLAG)),
)
# The local epochs E, with the rounds (half, full) of the tables' headers
# and the stand-in's rounds (t scaled with them).
_FEDFOR_T2_EPOCHS = (
    {'E': 1, 'half': 100, 'full': 200, 'small_rounds': 20},
    {'E': 2, 'half': 100, 'full': 200, 'small_rounds': 20},
    {'E': 4, 'half': 50, 'full': 100, 'small_rounds': 10},
    {'E': 8, 'half': 50, 'full': 100, 'small_rounds': 10},
    {'E': 16, 'half': 25, 'full': 50, 'small_rounds': 5},
)
_FEDFOR_T4_EPOCHS = (
    {'E': 1, 'half': 50, 'full': 100, 'small_rounds': 20},
    {'E': 2, 'half': 50, 'full': 100, 'small_rounds': 20},
    {'E': 4, 'half': 25, 'full': 50, 'small_rounds': 10},
    {'E': 8, 'half': 25, 'full': 50, 'small_rounds': 10},
    {'E': 16, 'half': 15, 'full': 25, 'small_rounds': 5},
)
_BEST_UP_TO = (MeasureSpec('t={half}', 'best_up_to', 'half'),
               MeasureSpec('t={full}', 'best_up_to', 'full'))

# Table 2: prior shift, imbalanced CIFAR-10, stateless algorithms.
FEDFOR_T2 = TableSpec(
    paper='fedfor', number='2',
    title=('Prior shift, imbalanced CIFAR-10 (long tail, imbalance ratio '
           '0.01, fresh clients every round): best validation accuracy (%) '
           'up to round t; mean (std) over 3 runs'),
    methods=_FEDFOR_METHODS,
    methods_as_rows=True,
    axes=(_FEDFOR_T2_EPOCHS,), label='E={E}', measures=_BEST_UP_TO,
    printed={
        'FedAvg': (39.85, 45.97, 44.86, 54.05, 45.13, 53.27, 53.21, 62.28,
                   51.41, 60.55),
        'FedProx': (39.84, 46.04, 44.82, 53.98, 44.68, 52.62, 51.88, 62.17,
                    52.90, 60.66),
        'FedCurv': (39.49, 46.03, 45.43, 53.36, 45.91, 53.68, 51.74, 60.94,
                    50.71, 60.97),
        'FedFOR': (41.93, 48.06, 50.18, 58.69, 52.18, 62.09, 60.24, 70.93,
                   56.86, 66.22),
    },
    printed_stds={
        'FedAvg': (1.02, 0.79, 1.38, 0.58, 0.01, 0.61, 0.95, 0.52, 0.23,
                   0.96),
        'FedProx': (1.09, 0.77, 1.46, 0.21, 0.47, 1.36, 1.29, 1.02, 1.30,
                    0.15),
        'FedCurv': (1.86, 0.93, 0.55, 0.36, 0.93, 0.47, 1.01, 1.13, 2.59,
                    0.84),
        'FedFOR': (0.43, 0.82, 0.75, 0.66, 0.48, 0.67, 0.38, 0.94, 0.19,
                   0.52),
    },
    paper_scale=ScaleSpec(
        task='cifar10', task_options=(f'partition={LONG_TAIL}',),
        model='resnet20',
        # choice: clients per round are not given; 10 clients, each ~2.5%
        # of the data (Section 4.2).
        point_flags=('--client_batch_size=128', '--clients_per_round=10',
                     shared.EPOCHS_FLAG),
        rounds='full', seeds=3, flags=_FEDFOR_SERVER),
    small=ScaleSpec(
        task=STAND_IN_TASK, task_options=(f'partition={LONG_TAIL}',),
        point_flags=('--client_batch_size=10', '--clients_per_round=10',
                     shared.EPOCHS_FLAG),
        rounds='small_rounds', seeds=1,
        flags=('--server_opt=sgd', '--server_lr=1.0', '--client_opt=sgd',
               '--client_lr=0.05', '--eval_every=1'),
        stand_in=('the same stateless long-tail sampling (partition='
                  f'{LONG_TAIL}); rounds and t scaled by 1/10')),
    notes=('choice: 10 clients per round (not given); FedProx mu = 0.01, '
           'FedCurv lambda = 1 (not given); alpha = 5 (Appendix C).',))

# Table 3: covariate shift, DomainNet (six domains, one per client), FedBN
# backbone for every method; ACC40 = rounds to 40%. The std rows print no
# std for ACC40: the stds shift past it.
FEDFOR_T3 = TableSpec(
    paper='fedfor', number='3',
    title=('Covariate shift, DomainNet (one domain per client, FedBN '
           'backbone): rounds to 40% (ACC40) and best validation accuracy (%) '
           'up to round t; mean (std) over 3 runs'),
    methods=_FEDFOR_BN_METHODS,
    methods_as_rows=True,
    axes=(_FEDFOR_T2_EPOCHS,), label='E={E}',
    measures=(MeasureSpec('ACC40', 'rounds_to', 0.40), *_BEST_UP_TO),
    printed={
        'FedBN': (46, 45.87, 48.8, 39, 47.46, 49.04, 29, 43.01, 48.25, 22,
                  42.85, 47.46, 25, 40.79, 43.88),
        'FedProx': (47, 45.23, 48.25, 27, 46.82, 49.2, 30, 46.5, 48.09, 20,
                    42.85, 48.25, 30, 38.96, 43.25),
        'FedDYN': (57, 46.5, 48.41, 38, 46.5, 48.57, 21, 45.87, 49.68, 26,
                   44.92, 47.77, 24, 40.0, 43.96),
        'FedCurv': (44, 44.76, 48.09, 32, 47.3, 48.73, 29, 42.69, 45.71, 22,
                    45.39, 49.04, 33, 33.96, 44.92),
        'FedFOR': (58, 46.26, 48.41, 28, 47.06, 49.76, 21, 44.76, 48.09, 17,
                   44.36, 49.52, 13, 44.12, 46.34),
    },
    printed_stds={
        'FedBN': (1.84, 1.75, 1.42, 1.25, 1.42, 1.58, 1.51, 1.4, 1.74, 1.78),
        'FedProx': (1.3, 1.47, 1.58, 1.9, 1.5, 1.28, 1.75, 1.61, 1.25, 1.9),
        'FedDYN': (1.98, 1.81, 1.9, 1.31, 1.72, 1.89, 1.68, 1.47, 1.58,
                   1.11),
        'FedCurv': (1.1, 1.43, 1.61, 1.91, 1.96, 1.47, 1.86, 1.26, 1.8, 1.54),
        'FedFOR': (1.5, 1.01, 1.71, 1.39, 1.82, 1.66, 1.03, 1.0, 1.49, 1.86),
    },
    stdless=('ACC40',),
    paper_scale=ScaleSpec(
        task='domainnet',
        point_flags=('--client_batch_size=32', '--clients_per_round=6',
                     shared.EPOCHS_FLAG),
        rounds='full', seeds=3, flags=_FEDFOR_SERVER),
    small=ScaleSpec(
        task=STAND_IN_TASK,
        task_options=(f'partition={DOMAINS}', 'num_clients=6'),
        model=BN_STAND_IN_MODEL,
        point_flags=('--client_batch_size=32', '--clients_per_round=6',
                     shared.EPOCHS_FLAG),
        rounds='small_rounds', seeds=1, flags=_FEDFOR_SERVER,
        stand_in=('six clients, one simulated domain each (per-client image '
                  f'transforms, partition={DOMAINS}); rounds and t scaled by '
                  '1/10')),
    notes=('The std rows print no std for ACC40.',
           'choice: all six domains every round (FedBN\'s setting); FedProx '
           'mu = 0.01, FedCurv lambda = 1, FedDyn alpha = 0.01 (not given).'))

# Table 4: covariate shift, Digits (MNIST, SVHN, USPS, SynthDigits, MNIST-M),
# ACC80 = rounds to 80%.
FEDFOR_T4 = TableSpec(
    paper='fedfor', number='4',
    title=('Covariate shift, Digits (five domains, one per client, FedBN '
           'backbone): rounds to 80% (ACC80) and best validation accuracy (%) '
           'up to round t; mean (std) over 3 runs'),
    methods=_FEDFOR_BN_METHODS,
    methods_as_rows=True,
    axes=(_FEDFOR_T4_EPOCHS,), label='E={E}',
    measures=(MeasureSpec('ACC80', 'rounds_to', 0.80), *_BEST_UP_TO),
    printed={
        'FedBN': (10, 85.14, 85.48, 8, 85.51, 85.87, 6, 84.59, 85.46, 6,
                  84.89, 85.51, 6, 83.80, 84.73),
        'FedProx': (10, 85.04, 85.59, 7, 85.43, 85.95, 6, 84.89, 85.67, 6,
                    84.60, 85.75, 7, 83.42, 84.52),
        'FedDYN': (9, 85.49, 85.85, 7, 85.26, 85.89, 6, 84.45, 85.25, 5,
                   84.88, 85.63, 6, 83.43, 84.95),
        'FedCurv': (10, 85.16, 85.56, 7, 85.79, 86.10, 7, 84.34, 85.53, 7,
                    84.63, 85.43, 7, 83.61, 84.71),
        'FedFOR': (8, 85.52, 85.65, 6, 85.72, 85.87, 4, 85.44, 85.96, 4,
                   85.72, 86.12, 4, 84.94, 85.58),
    },
    printed_stds={
        'FedBN': (0.23, 0.05, 0.46, 0.38, 0.16, 0.13, 0.23, 0.08, 0.31,
                  0.42),
        'FedProx': (0.13, 0.20, 0.17, 0.18, 0.53, 0.17, 0.27, 0.31, 0.06,
                    0.24),
        'FedDYN': (0.16, 0.18, 0.41, 0.17, 0.26, 0.44, 0.09, 0.13, 0.80,
                   0.30),
        'FedCurv': (0.35, 0.19, 0.29, 0.15, 0.01, 0.12, 0.41, 0.25, 0.19,
                    0.48),
        'FedFOR': (0.15, 0.10, 0.17, 0.27, 0.17, 0.32, 0.35, 0.06, 0.06,
                   0.29),
    },
    stdless=('ACC80',),
    paper_scale=ScaleSpec(
        task='digits_domains',
        point_flags=('--client_batch_size=32', '--clients_per_round=5',
                     shared.EPOCHS_FLAG),
        rounds='full', seeds=3, flags=_FEDFOR_SERVER),
    small=ScaleSpec(
        task=STAND_IN_TASK,
        task_options=(f'partition={DOMAINS}', 'num_clients=5'),
        model=BN_STAND_IN_MODEL,
        point_flags=('--client_batch_size=32', '--clients_per_round=5',
                     shared.EPOCHS_FLAG),
        rounds='small_rounds', seeds=1, flags=_FEDFOR_SERVER,
        stand_in=('five clients, one simulated domain each (per-client image '
                  f'transforms, partition={DOMAINS}); rounds and t scaled by '
                  'about 1/5')),
    notes=('The std rows print no std for ACC80.',
           'choice: all five domains every round (FedBN\'s setting); FedProx '
           'mu = 0.01, FedCurv lambda = 1, FedDyn alpha = 0.01 (not given).'))

# Table 5: concept shift on DomainNet, 200 rounds for every E; no FedCurv.
FEDFOR_T5 = TableSpec(
    paper='fedfor', number='5',
    title=('Concept shift on DomainNet (with probability 5% per round a '
           'class\'s label changes for all clients, persistently): average '
           'validation accuracy (%) over 200 rounds'),
    methods=tuple(m for m in _FEDFOR_BN_METHODS if m.label != 'FedCurv'),
    methods_as_rows=True,
    axes=(tuple({'E': e} for e in (1, 2, 4, 8, 16)),), label='E={E}',
    measures=(MeasureSpec('acc', 'mean'),),
    printed={
        'FedBN': (44.51, 46.84, 48.01, 47.55, 47.48),
        'FedProx': (44.48, 47.08, 48.64, 48.36, 47.73),
        'FedDYN': (44.22, 46.52, 47.97, 47.37, 47.84),
        'FedFOR': (44.36, 47.28, 49.35, 49.12, 49.83),
    },
    paper_scale=ScaleSpec(
        task='domainnet', task_options=(f'{CONCEPT_SHIFT}=0.05',),
        point_flags=('--client_batch_size=32', '--clients_per_round=6',
                     shared.EPOCHS_FLAG),
        rounds=200, seeds=1, flags=_FEDFOR_SERVER),
    small=ScaleSpec(
        task=STAND_IN_TASK,
        task_options=(f'partition={DOMAINS}', 'num_clients=6',
                      f'{CONCEPT_SHIFT}=0.05'),
        model=BN_STAND_IN_MODEL,
        point_flags=('--client_batch_size=32', '--clients_per_round=6',
                     shared.EPOCHS_FLAG),
        rounds=20, seeds=1, flags=_FEDFOR_SERVER,
        stand_in=('six simulated domains and the same 5%-per-round '
                  'persistent label shift; 20 rounds instead of 200')),
    notes=('choice: "average best validation accuracy over 200 training '
           'iterations" is read as the mean of the validation accuracy over '
           'the rounds (evaluated every round), which rewards fast recovery '
           'after each shift; one seed (the paper prints no std).',))

SPECS = (FEDFOR_T2, FEDFOR_T3, FEDFOR_T4, FEDFOR_T5)


# --- The claim ---------------------------------------------------------------

# The paper's prior-shift benchmark (§4.2, Appendix D): every round 10 fresh
# clients, each 10% of the training set trimmed to a long tail of imbalance
# ratio 0.01 (`partition=long_tail`), E = 1 for 200 rounds and E = 8 for
# 100, client SGD at a constant 0.01 without momentum, best accuracy up to
# halfway and to the end. Batch 10, not the paper's 128: a client here holds
# ~72.4 of MNIST-5k's images (1.8 % of the set) where the paper's held
# ~1,250 of CIFAR-10's, and batch 10 gives ~7 local steps per epoch against
# the paper's ~10.
#
# The model is `small_cnn`, not the paper's ResNet20: a round of
# `resnet20_gn` at E = 8 took 96-174 s on about 2/3 of a core, ~4 h a
# 100-round run; with `small_cnn` the runs took 4-21 min at E = 1 and 14-46
# min at E = 8.
_FEDFOR_BASE = ('--algorithm=fedfor', '--server_opt=sgd', '--server_lr=1.0',
                '--fedfor_grad_at_zero=0', *shared.UNIFORM)
_FEDFOR_ALPHAS = ('0.05', '0.1', '0.2', '0.5', '1')
_FEDFOR_TUNED = 'FedFOR tuned'


# The margin: one point. The paper's gain at E = 8 is ~16 % relative
# (several points on CIFAR-10); near MNIST's ceiling (96-97 % here) a gain
# under a point is not that effect, and one difference of two evaluations
# on the 1,000 test images has a standard error of ~0.8 point (a difference
# of gains ~1.2, to which its margin is raised).
_DELTA = 1.0


def _fedfor_claim() -> Claim:
  rounds = {1: 200, 8: 100}
  settings = tuple(
      Setting(f'E={e}', (*shared.MNIST5K,
                         *shared.task_options(partition='long_tail',
                                              long_tail_fraction=0.1,
                                              imbalance_ratio=0.01,
                                              model='small_cnn'),
                         f'--client_epochs={e}'), rounds[e],
              (Measure('halfway', 'best_up_to', rounds[e] // 2),
               Measure('final', 'best_up_to', rounds[e])))
      for e in (1, 8))
  methods = (Method('FedAvg', shared.FEDAVG),
             Method('FedFOR', (*_FEDFOR_BASE, '--alpha=5')),
             Method(_FEDFOR_TUNED, _FEDFOR_BASE))
  return Claim(
      name='fedfor',
      statement=('FedFOR, Table 2 and Section 4.2: FedFOR beats FedAvg under '
                 'label (prior) shift, and its gain grows with the local '
                 'epochs, largest at E = 8'),
      setting_text=(
          'MNIST-5k (real MNIST digits) for imbalanced CIFAR-10: each round '
          '10 fresh clients, each 10% of the training set trimmed to a long '
          'tail of imbalance ratio 0.01 (~72.4 images, 1.8% of the set; the '
          'paper: ~2.5%), `small_cnn` (the paper\'s ResNet20 with '
          'GroupNorm took ~4 h a run at E = 8 here), client SGD at the '
          'paper\'s constant lr 0.01 without momentum, batch 10 (~7 '
          'steps per epoch; the paper\'s 128 on ~1,250 CIFAR images gives '
          '~10), E = 1 for 200 rounds and E = 8 for 100 as '
          'the paper; its measure, the best accuracy up to halfway and to '
          'the end. FedFOR at the paper\'s alpha 5 (U\'(0) = 0), and at the '
          'alpha its tuning picks from 0.05-1 at E = 8 (the paper tuned '
          'alpha at E = 8 too, its Figure 3)'),
      methods=methods, settings=settings,
      flags=('--client_opt=sgd', '--client_lr=0.01', '--client_batch_size=10',
             '--clients_per_round=10', '--eval_every=1'),
      # Primary: the method at its tuned alpha, at E = 8 and its gain over
      # E = 1. The paper's own alpha 5 diverges here (its runs end at
      # chance): its own finding, beside the method's verdict, not it.
      checks=(Better(_FEDFOR_TUNED, 'FedAvg', 'E=8', 'final', _DELTA),
              GainLarger(_FEDFOR_TUNED, 'FedAvg', 'E=8', 'E=1', 'final',
                         _DELTA),
              Better(_FEDFOR_TUNED, 'FedAvg', 'E=1', 'final', _DELTA,
                     role=verdicts.SECONDARY),
              Better('FedFOR', 'FedAvg', 'E=8', 'final', _DELTA,
                     role=verdicts.PAPER_SETTING),
              GainLarger('FedFOR', 'FedAvg', 'E=8', 'E=1', 'final', _DELTA,
                         role=verdicts.PAPER_SETTING)),
      tunings=(Tuning(_FEDFOR_TUNED, 'alpha', _FEDFOR_ALPHAS, 'E=8',
                      'final'),),
      seeds=5,
      rule=('reproduced when FedFOR at its tuned alpha beats FedAvg at E = 8 '
            'and its gain there exceeds its gain at E = 1 (Holm over the '
            'two), not reproduced when either is ruled out'),
      paper_numbers=('Table 2 (imbalanced CIFAR-10): relative gain over '
                     'FedAvg ~15% halfway and ~16% at the end at E = 8'))


CLAIM = _fedfor_claim()
