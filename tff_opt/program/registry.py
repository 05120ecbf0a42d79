"""Algorithms by name, as the training binary and sweeps select them.

Client weighting, each paper's (the binary's default; `--client_weighting`
overrides it): uniform over the round's clients for FedADC and FedADC+
(Ozfatura et al. Algorithms 3-4: (1/|S|) sum), SlowMo (their Algorithm 2),
FedFOR (Tian et al. Algorithm 1), FedCurv (Shoham et al.: the plain mean of
the participants' models), FedDyn (Acar et al. Algorithm 1: (1/|P|) sum
theta_k) FedDC (Gao et al.: the plain mean of the theta_i) and FedGKD (its
authors' code averages the received models uniformly); by number of examples for FedOpt (Reddi et al. Algorithm 5),
FedProx, SCAFFOLD, FedPTR(-S), FedNTD and FedRS, which follow FedAvg's
weighting.

Every entry builds a `LearningProcess` from the task's `model_fn` and the
settings every algorithm shares (client and server optimizers, client
weighting, client learning-rate schedule), plus the hyper-parameters named in
its `hparams` (each one a flag of `binaries.train`, e.g. `mu` for FedProx).
Its `build` is the algorithm's flag adapter in `flag_adapters` (flag values ->
the `tff_opt.algorithms.build_*` arguments, each flag checked there).
"""

import dataclasses
from collections.abc import Callable
from typing import Any, Optional

import tensorflow_federated as tff

from tff_opt.algorithms import fed_bn
from tff_opt.program import flag_adapters


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """A registered algorithm.

  Attributes:
    name: The `--algorithm` value.
    summary: One line for `--helpfull` and logs.
    build: `(model_fn, *, client_optimizer_fn, server_optimizer_fn,
      client_weighting, client_lr_schedule, **hparams) -> LearningProcess`,
      the algorithm's adapter in `flag_adapters`.
    hparams: Names of the algorithm-specific hyper-parameters `build` takes.
    optional_hparams: Names `build` also takes, passed even when `None`
      (their flag's `None` means the algorithm's own default).
    task_facts: What `build` takes of the task beside its model:
      'num_clients', the number of training clients (FedDyn's m);
      'client_epochs', the local epochs each client dataset holds (FedCurv's
      Fisher runs over one of them).
    client_weighting: Its paper's averaging of client updates,
      'num_examples' or 'uniform': the binary's default when
      `--client_weighting` is not given.
    server_rule: Who makes the server step. 'optimizer': the
      `--server_opt` optimizer on the mean delta (FedOpt and the penalty
      methods); 'sgd': its paper's plain step, SGD with learning rate 1
      unless `--server_lr` says otherwise, and an adaptive `--server_opt` is
      refused (FedDyn); 'own': its own server rule, built in, and
      `--server_opt`/`--server_lr` are unused (FedADC, FedADC+, SlowMo).
  """
  name: str
  summary: str
  build: Callable[..., tff.learning.templates.LearningProcess]
  hparams: tuple[str, ...] = ()
  optional_hparams: tuple[str, ...] = ()
  task_facts: tuple[str, ...] = ()
  client_weighting: str = 'num_examples'
  server_rule: str = 'optimizer'

  @property
  def flags(self) -> tuple[str, ...]:
    """Every flag of its own that `build` reads: `hparams` + optional."""
    return self.hparams + self.optional_hparams


SERVER_RULES = ('optimizer', 'sgd', 'own')

# Both FedPTR sides take the same flags (fed_ptr.build_fed_ptr's).
_FED_PTR_HPARAMS = ('mu', 'images_per_class', 'mtt_outer_steps',
                    'mtt_inner_steps', 'projection_steps', 'layer_adaptive',
                    'update_every', 'mtt_init_lr', 'mtt_image_lr',
                    'mtt_lr_lr', 'mtt_momentum')


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a for a in [
        Algorithm(
            name='fedopt',
            summary=('FedOpt (Reddi et al.): client SGD, server optimizer '
                     'from --server_opt (sgd = FedAvg, sgdm = FedAvgM, '
                     'adagrad/adam/yogi = FedAdagrad/FedAdam/FedYogi)'),
            build=flag_adapters.fed_opt),
        Algorithm(
            name='fedadc',
            summary=('FedADC (Ozfatura et al. Algorithm 3; Algorithm 4 with '
                     '--local_momentum > 0): global momentum embedded in '
                     'local SGD steps, server momentum rule with alpha = 1 '
                     '(--server_opt/--server_lr unused)'),
            build=flag_adapters.fed_adc,
            server_rule='own',
            client_weighting='uniform',
            hparams=('beta', 'fedadc_variant', 'local_momentum'),
            optional_hparams=('beta_local',)),
        Algorithm(
            name='fedadc_plus',
            summary=('FedADC+: FedADC with self-confidence distillation '
                     '(--distill_lambda, --distill_temperature)'),
            build=flag_adapters.fed_adc_plus,
            server_rule='own',
            client_weighting='uniform',
            hparams=('beta', 'fedadc_variant', 'local_momentum',
                     'distill_lambda', 'distill_temperature'),
            optional_hparams=('beta_local',)),
        Algorithm(
            name='slowmo',
            summary=('SlowMo / FedAvgM (FedADC paper Algorithm 2): local SGD, '
                     'server momentum --beta in units of Delta / eta, '
                     'alpha = 1 (--server_opt/--server_lr unused)'),
            build=flag_adapters.slowmo,
            server_rule='own',
            client_weighting='uniform',
            hparams=('beta',)),
        Algorithm(
            name='fedprox',
            summary=('FedProx: local objective L_k + (mu/2)||w - w_t||^2 '
                     '(--mu), server optimizer from --server_opt'),
            build=flag_adapters.fed_prox,
            hparams=('mu',)),
        Algorithm(
            name='fedfor',
            summary=('FedFOR (Eq. 7): two-model broadcast, local penalty '
                     '(alpha/eta) sum U((w_{t-1} - w_t)(w - w_t)) '
                     '(--alpha; U\'(0) from --fedfor_grad_at_zero), server '
                     'optimizer from --server_opt'),
            build=flag_adapters.fed_for,
            client_weighting='uniform',
            hparams=('alpha',),
            optional_hparams=('fedfor_grad_at_zero',)),
        Algorithm(
            name='fedcurv',
            summary=('FedCurv: Fisher sums u, v broadcast, local penalty '
                     'lam (w^T diag(u) w - 2 w^T v) (--lam), Eq. 3 (the '
                     'client\'s own term subtracted) per --fedcurv_exact, '
                     'server optimizer from --server_opt'),
            build=flag_adapters.fed_curv,
            client_weighting='uniform',
            hparams=('lam',),
            optional_hparams=('fedcurv_exact',),
            task_facts=('num_clients', 'client_epochs')),
        Algorithm(
            name='feddyn',
            summary=('FedDyn (Acar et al. Algorithm 1): local objective '
                     'L_k - <g_k, w> + (alpha/2)||w - w_t||^2 with per-client '
                     'state g_k kept by the training loop, server correction '
                     'h (--feddyn_alpha); the paper\'s server step is '
                     '--server_opt=sgd --server_lr=1'),
            build=flag_adapters.fed_dyn,
            server_rule='sgd',
            client_weighting='uniform',
            hparams=('feddyn_alpha',),
            task_facts=('num_clients',)),
        Algorithm(
            name='fedntd',
            summary=('FedNTD (Lee et al., NeurIPS 2022): local loss CE + '
                     'beta tau^2 KL over the not-true classes, the broadcast '
                     'model the teacher (--ntd_beta, --ntd_temperature), '
                     'server optimizer from --server_opt'),
            build=flag_adapters.fed_ntd,
            hparams=('ntd_beta', 'ntd_temperature')),
        Algorithm(
            name='fedrs',
            summary=('FedRS (Li & Zhan, KDD 2021): restricted softmax, the '
                     'logits of the classes a client lacks scaled by '
                     '--fedrs_alpha, server optimizer from --server_opt'),
            build=flag_adapters.fed_rs,
            hparams=('fedrs_alpha',)),
        Algorithm(
            name='fedgkd',
            summary=('FedGKD (Yao et al.): distillation from the parameter '
                     'mean of the last --gkd_buffer_size global models, CE + '
                     '(gamma/2) tau^2 KL (--gkd_gamma, --gkd_temperature), '
                     'server optimizer from --server_opt'),
            build=flag_adapters.fed_gkd,
            client_weighting='uniform',
            hparams=('gkd_gamma', 'gkd_temperature', 'gkd_buffer_size')),
        Algorithm(
            name='moon',
            summary=('MOON (Li, He & Song, CVPR 2021): local loss CE + mu '
                     'l_con contrasting the projection head\'s z with the '
                     'global model\'s (positive) and the client\'s previous '
                     'local model\'s (negative, client state kept by the '
                     'training loop), cosine at --moon_temperature '
                     '(--moon_mu); needs a model with a projection layer '
                     '(--task_option=model=<name>_proj); server optimizer '
                     'from --server_opt'),
            build=flag_adapters.moon,
            hparams=('moon_mu', 'moon_temperature')),
        Algorithm(
            name='feddc',
            summary=('FedDC (Gao et al., CVPR 2022): local objective '
                     'L_i + (alpha/2)||theta + h_i - w||^2 + (1/(eta K))'
                     '<theta, g_i - g> with per-client drift h_i and last '
                     'update g_i kept by the training loop; the server '
                     'takes the mean of the round\'s theta_i plus the mean '
                     'of every client\'s h_i (N the task\'s training '
                     'clients, as its authors\' code) and of g_i '
                     '(--feddc_alpha); the paper\'s server step is '
                     '--server_opt=sgd --server_lr=1'),
            build=flag_adapters.fed_dc,
            server_rule='sgd',
            client_weighting='uniform',
            hparams=('feddc_alpha',),
            task_facts=('num_clients',)),
        Algorithm(
            name='scaffold',
            summary=('SCAFFOLD option II (Reddi et al. Algorithm 6): client '
                     'and server control variates, client state kept by the '
                     'training loop, c <- c + (1/N) sum_S Delta c_i with N '
                     'the task\'s training clients; server optimizer from '
                     '--server_opt'),
            build=flag_adapters.scaffold,
            task_facts=('num_clients',)),
        Algorithm(
            name='fedptr_s',
            summary=('FedPTR-S: server-side trajectory matching, broadcast '
                     'of the projected model w~_{t+1}, local penalty '
                     'sum_l mu_l/2 ||w_l - w~_l||^2 (--mu, --images_per_class, '
                     '--mtt_outer_steps, --mtt_inner_steps, '
                     '--projection_steps, --layer_adaptive, --update_every, '
                     '--mtt_init_lr, --mtt_image_lr, --mtt_lr_lr, '
                     '--mtt_momentum)'),
            build=flag_adapters.fed_ptr,
            hparams=_FED_PTR_HPARAMS),
        Algorithm(
            name='fedptr',
            summary=('FedPTR (client side): each client matches the last '
                     'global step (w_{t-1}, w_t) on a synthetic set started '
                     'from its own images, projects w~_{t+1} and trains with '
                     'sum_l mu_l/2 ||w_l - w~_l||^2; each client keeps its '
                     'synthetic set as client state and re-runs MTT every '
                     '--update_every of its participations (same flags as '
                     'fedptr_s)'),
            build=flag_adapters.fed_ptr_client,
            hparams=_FED_PTR_HPARAMS),
    ]
}


def flags_not_read_by(name: str) -> tuple[str, ...]:
  """The `binaries.train` flags that algorithm `name` does not read, sorted.

  Those are the other algorithms' own flags (`Algorithm.flags`) and, for an
  algorithm with its own server rule (`server_rule == 'own'`), the server
  optimizer's flags (`--server_opt`, of which only `sgd` is accepted, and
  `--server_lr`, `--server_tau`, ...).

  Args:
    name: A key of `ALGORITHMS`.

  Returns:
    Flag names without dashes.
  """
  algorithm = ALGORITHMS[name]
  others = {f for a in ALGORITHMS.values() for f in a.flags}
  if algorithm.server_rule == 'own':
    others.add('server_opt')
    others.update(f for _, f in flag_adapters.SERVER_OPTIMIZER_FLAGS)
  return tuple(sorted(others - set(algorithm.flags)))


def build_process(name: str, model_fn: Callable[[], Any], *,
                  client_optimizer_fn, server_optimizer_fn, client_weighting,
                  client_lr_schedule, fedbn: bool = False,
                  num_clients: Optional[int] = None,
                  client_epochs: Optional[int] = None, **hparams):
  """Builds algorithm `name`, passing it only the hyper-parameters it takes.

  With `fedbn`, builds `name` + FedBN (`algorithms.fed_bn`: batch-norm
  layers local to each client) for the bases in `fed_bn.BASES`.
  `num_clients` (the task's training population) and `client_epochs` (the
  local epochs its client datasets hold; `None`: 1) go to the algorithms
  that take them (`Algorithm.task_facts`).

  Raises:
    flag_adapters.FlagError: If the adapter refuses one flag's value.
    ValueError: If `name` is unknown (or has no FedBN variant), a
      hyper-parameter it needs is missing, or the builder refuses the
      settings.
  """
  if name not in ALGORITHMS:
    raise ValueError(f'Unknown algorithm {name!r}; known algorithms: '
                     f'{", ".join(ALGORITHMS)}.')
  algorithm = ALGORITHMS[name]
  missing = [h for h in algorithm.hparams if hparams.get(h) is None]
  if missing:
    raise ValueError(f'Algorithm {name!r} needs ' +
                     ', '.join(f'--{h}' for h in missing) + '.')
  facts = dict(num_clients=num_clients, client_epochs=client_epochs or 1)
  extra = {fact: facts[fact] for fact in algorithm.task_facts}
  if fedbn:
    if name not in fed_bn.BASES:
      raise ValueError(f'--fedbn: algorithm {name!r} has no FedBN variant; '
                       f'FedBN runs on {", ".join(fed_bn.BASES)}.')
    return flag_adapters.fed_bn(
        name, model_fn,
        client_optimizer_fn=client_optimizer_fn,
        server_optimizer_fn=server_optimizer_fn,
        client_weighting=client_weighting,
        client_lr_schedule=client_lr_schedule,
        **{h: hparams[h] for h in algorithm.hparams},
        **{h: hparams.get(h) for h in algorithm.optional_hparams}, **extra)
  return algorithm.build(
      model_fn,
      client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn,
      client_weighting=client_weighting,
      client_lr_schedule=client_lr_schedule,
      **{h: hparams[h] for h in algorithm.hparams},
      **{h: hparams.get(h) for h in algorithm.optional_hparams}, **extra)
