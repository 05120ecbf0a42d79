"""Flags -> builder arguments: what `binaries.train`'s flags mean to the library.

`registry.ALGORITHMS` names, for each algorithm, its adapter here (one
function per algorithm: `fed_dyn`, `fed_adc`, ...), which turns the flags'
values into that algorithm's `tff_opt.algorithms.build_*` arguments (FedDyn's
`--feddyn_alpha` is its `alpha`; FedADC's client learning rate is the one of
the `--client_opt=sgd` optimizer; FedCurv's `--fedcurv_exact` picks
`cross_silo`; FedFOR's `--fedfor_grad_at_zero` is `grad_at_zero`; ...). The
settings every algorithm shares (client and server optimizers, client
weighting, client learning-rate schedule) come from `shared_arguments`.

Flag errors: each adapter validates the flags it reads, one flag at a time,
and raises `FlagError` naming that flag; the library's own sentence follows
(`--server_lr=0.0: learning_rate must be positive, got 0.0.`). Which flag an
error is about is known from the call that raised it, never read from the
message:

- a builder with several flag arguments (the server optimizer, the client
  learning-rate schedule) is first called with one flag's value at a time,
  the others at valid values (`_build_checking_each_flag`): a `ValueError`
  then is about that flag. The probes run in the order in which the builder
  checks its arguments, so that the flag reported is the one the builder
  itself would refuse first; building an optimizer or a schedule costs
  nothing worth counting.
- an algorithm's flags are checked by the library's check of that one
  argument (`checks.check_positive('alpha', ...)` for `--feddyn_alpha`), before the process
  is built;
- a check of the task's model against a flag (`--fedbn`: a model with batch
  norm) raises a `FlagError` marked `about_model`, which the binary reports
  with the task's name.

Any other `ValueError` (a combination of settings, e.g. `beta must be in
[0, 1)` from SlowMo's builder) is left as it is: the binary reports its
message alone.
"""

from collections.abc import Callable, Mapping
import functools
from typing import Any, Optional

import tensorflow_federated as tff

from tff_opt import algorithms
from tff_opt import checks
from tff_opt.algorithms import fed_bn as fed_bn_lib
from tff_opt.algorithms import fed_curv as fed_curv_lib
from tff_opt.algorithms import fed_gkd as fed_gkd_lib
from tff_opt.algorithms import fed_ntd as fed_ntd_lib
from tff_opt.algorithms import fed_rs as fed_rs_lib
from tff_opt.algorithms import moon as moon_lib
from tff_opt.round import optimizers
from tff_opt.round import schedules


class FlagError(ValueError):
  """A flag's value, refused; `str()` is `--flag=value: reason`.

  Attributes:
    flag: The flag's name, without dashes.
    value: Its value (`None`: not shown, as for a boolean flag that is on).
    reason: Why, in the library's words.
    about_model: The value is refused because of the task's model (the
      binary puts the task's name before `reason`).
  """

  def __init__(self, flag: str, reason: str, *, value: Any = None,
               about_model: bool = False):
    self.flag = flag
    self.value = value
    self.reason = reason
    self.about_model = about_model
    super().__init__(self.line())

  def line(self, task: Optional[str] = None) -> str:
    """The one-line message; `task` is named first when `about_model`."""
    setting = f'--{self.flag}' + (
        '' if self.value is None else f'={self.value}')
    where = f'task {task}: ' if self.about_model and task else ''
    return f'{setting}: {where}{self.reason}'


def check_flag(flag: str, value: Any, check: Callable[[Any], Any], *,
               about_model: bool = False) -> None:
  """Calls `check(value)`; a `ValueError` becomes a `FlagError` for `flag`.

  Args:
    flag: The flag `value` comes from.
    value: Its value (`None`: not shown in the message).
    check: Raises `ValueError` if `value` is refused.
    about_model: `check` tests the task's model against the flag.

  Raises:
    FlagError: If `check` raises a `ValueError`.
  """
  try:
    check(value)
  except ValueError as e:
    raise FlagError(flag, str(e), value=value, about_model=about_model) from e


def _build_checking_each_flag(build: Callable[..., Any],
                              flag_of_argument: tuple[tuple[str, str], ...],
                              hparams: Mapping[str, Any],
                              valid: Mapping[str, Any]) -> Any:
  """`build(**{argument: hparams[flag]})`, each flag first checked alone.

  Args:
    build: A builder that checks its arguments when called.
    flag_of_argument: `(argument, flag)` pairs, in the order in which
      `build` checks its arguments.
    hparams: The run's settings, by flag name.
    valid: Valid values of the arguments `build` requires; the others are
      left at `build`'s defaults while one flag is checked.

  Returns:
    What `build` returns.

  Raises:
    FlagError: If `build` refuses one flag's value given alone.
    ValueError: If it refuses only their combination.
  """
  for argument, flag in flag_of_argument:
    check_flag(flag, hparams[flag],
               lambda v, a=argument: build(**{**valid, a: v}))
  return build(**{a: hparams[f] for a, f in flag_of_argument})


# --- The settings every algorithm shares --------------------------------------

# (builder argument, flag), in the order in which each builder checks them.
SERVER_OPTIMIZER_FLAGS = (('learning_rate', 'server_lr'),
                          ('momentum', 'server_momentum'),
                          ('tau', 'server_tau'),
                          ('beta_1', 'server_beta_1'),
                          ('beta_2', 'server_beta_2'))
CLIENT_OPTIMIZER_FLAGS = (('learning_rate', 'client_lr'),)
SCHEDULE_FLAGS = (('learning_rate', 'client_lr'),
                  ('decay_factor', 'client_lr_decay_factor'),
                  ('decay_every', 'client_lr_decay_every'))


def server_optimizer(hparams: Mapping[str, Any]
                     ) -> tff.learning.optimizers.Optimizer:
  """`--server_opt` with `--server_lr`, `--server_tau`, ... (`optimizers`).

  Raises:
    FlagError: If a flag's value is out of range for `--server_opt`.
  """
  return _build_checking_each_flag(
      functools.partial(optimizers.build_server_optimizer,
                        hparams['server_opt']),
      SERVER_OPTIMIZER_FLAGS, hparams, valid={'learning_rate': 1.0})


def client_optimizer(hparams: Mapping[str, Any]
                     ) -> tff.learning.optimizers.Optimizer:
  """`--client_opt` with `--client_lr`.

  Raises:
    FlagError: If `--client_lr` is not positive.
  """
  return _build_checking_each_flag(
      functools.partial(optimizers.build_client_optimizer,
                        hparams['client_opt']),
      CLIENT_OPTIMIZER_FLAGS, hparams, valid={'learning_rate': 1.0})


def client_lr_schedule(hparams: Mapping[str, Any]
                       ) -> Optional[schedules.Schedule]:
  """`--client_lr_decay=staircase` (ExpDecay), else `None` (constant).

  Raises:
    FlagError: If `--client_lr`, `--client_lr_decay_factor` or
      `--client_lr_decay_every` is out of range.
  """
  if hparams['client_lr_decay'] != 'staircase':
    return None
  return _build_checking_each_flag(schedules.staircase_decay, SCHEDULE_FLAGS,
                                   hparams, valid={'learning_rate': 1.0})


def client_weighting(hparams: Mapping[str, Any]) -> tff.learning.ClientWeighting:
  """`--client_weighting`: 'num_examples' or 'uniform'."""
  return (tff.learning.ClientWeighting.NUM_EXAMPLES
          if hparams['client_weighting'] == 'num_examples' else
          tff.learning.ClientWeighting.UNIFORM)


def shared_arguments(hparams: Mapping[str, Any]) -> dict[str, Any]:
  """The builder arguments every algorithm takes, from the flags.

  Returns:
    `{'client_optimizer_fn', 'server_optimizer_fn', 'client_weighting',
    'client_lr_schedule'}`, as `registry.build_process` takes them.

  Raises:
    FlagError: If a flag's value is out of range.
    ValueError: If the builders refuse a combination of flags.
  """
  return {
      'server_optimizer_fn': server_optimizer(hparams),
      'client_optimizer_fn': client_optimizer(hparams),
      'client_lr_schedule': client_lr_schedule(hparams),
      'client_weighting': client_weighting(hparams),
  }


def plain_sgd_learning_rate(hparams: Mapping[str, Any]) -> Optional[float]:
  """`--client_lr` where `--client_opt=sgd`, else `None`.

  The number FedADC, FedADC+ and SlowMo take their own local steps (plain
  SGD) with: `registry.build_process`'s `client_learning_rate`.
  """
  return (float(hparams['client_lr']) if hparams['client_opt'] == 'sgd'
          else None)


# --- One adapter per algorithm (registry.ALGORITHMS' `build`) -----------------
#
# Each takes the task's `model_fn`, the shared arguments (client_optimizer_fn,
# server_optimizer_fn, client_weighting, client_lr_schedule; `common` below),
# the task facts its registry entry names (`num_clients`, `client_epochs`;
# `registry.Algorithm.task_facts`), and its algorithm's flags under their
# flag names.


def _plain_sgd_rate(client_learning_rate: Optional[float],
                    algorithm: str) -> float:
  """The learning rate of the local plain SGD steps of FedADC and SlowMo.

  Raises:
    ValueError: If there is none (the client optimizer is not plain SGD).
  """
  if client_learning_rate is None:
    raise ValueError(f'--algorithm={algorithm} takes its local steps with '
                     'plain SGD; use --client_opt=sgd.')
  return client_learning_rate


def fed_opt(model_fn, **common):
  """`--algorithm=fedopt`: `build_fed_opt`, no flags of its own."""
  return algorithms.build_fed_opt(model_fn, **common)


def fed_prox(model_fn, *, mu, **common):
  """`--algorithm=fedprox`: `--mu`."""
  return algorithms.build_fed_prox(model_fn, mu=mu, **common)


def _check_alpha(alpha) -> None:
  check_flag('alpha', alpha,
             functools.partial(checks.check_non_negative, 'alpha'))


def fed_for(model_fn, *, alpha, fedfor_grad_at_zero=None, **common):
  """`--algorithm=fedfor`: `--alpha`; `--fedfor_grad_at_zero` '0'/'1'."""
  _check_alpha(alpha)
  return algorithms.build_fed_for(
      model_fn, alpha=alpha,
      grad_at_zero=int(fedfor_grad_at_zero or 0), **common)


def fed_curv(model_fn, *, lam, fedcurv_exact=None, client_epochs=1,
             num_clients=None, **common):
  """`--algorithm=fedcurv`: `--lam`; `--fedcurv_exact` picks `cross_silo`.

  'on' is the paper's Eq. 3 (client state), 'off' the stateless variant,
  'auto' (or `None`) Eq. 3 where its client state fits
  (`fed_curv.resolve_exact`, which needs `num_clients`). `--client_epochs`
  (the epochs the task's client datasets hold) lets the Fisher run over
  one of them.
  """
  return algorithms.build_fed_curv(
      model_fn, lam=lam,
      cross_silo=fed_curv_lib.resolve_exact(fedcurv_exact or 'auto', model_fn,
                                            num_clients),
      client_epochs=client_epochs, **common)


def _stateless_fed_curv(exact) -> None:
  if exact == 'on':
    raise ValueError('FedBN over FedCurv runs its stateless variant (each '
                     'client\'s own Fisher terms stay in u, v); Eq. 3 '
                     '(cross_silo) is not available with --fedbn: use '
                     '--fedcurv_exact=off or auto.')


def _check_feddyn_alpha(feddyn_alpha) -> None:
  check_flag('feddyn_alpha', feddyn_alpha,
             functools.partial(checks.check_positive, 'alpha'))


def fed_dyn(model_fn, *, feddyn_alpha, num_clients, **common):
  """`--algorithm=feddyn`: `--feddyn_alpha` is FedDyn's `alpha`."""
  _check_feddyn_alpha(feddyn_alpha)
  return algorithms.build_fed_dyn(model_fn, alpha=feddyn_alpha,
                                  num_clients=num_clients, **common)


def fed_dc(model_fn, *, feddc_alpha, num_clients, **common):
  """`--algorithm=feddc`: `--feddc_alpha` is FedDC's `alpha`; N (the
  population of its drift mean) is the task's training clients."""
  check_flag('feddc_alpha', feddc_alpha,
             functools.partial(checks.check_non_negative, 'alpha'))
  return algorithms.build_fed_dc(model_fn, alpha=feddc_alpha,
                                 num_clients=num_clients, **common)


def fed_ntd(model_fn, *, ntd_beta, ntd_temperature, **common):
  """`--algorithm=fedntd`: `--ntd_beta`, `--ntd_temperature`."""
  check_flag('ntd_beta', ntd_beta,
             lambda v: fed_ntd_lib.fed_ntd_recipe(
                 beta=v, server_optimizer_fn=common['server_optimizer_fn']))
  check_flag('ntd_temperature', ntd_temperature,
             lambda v: fed_ntd_lib.fed_ntd_recipe(
                 temperature=v,
                 server_optimizer_fn=common['server_optimizer_fn']))
  return fed_ntd_lib.build_fed_ntd(model_fn, beta=ntd_beta,
                                   temperature=ntd_temperature, **common)


def fed_rs(model_fn, *, fedrs_alpha, **common):
  """`--algorithm=fedrs`: `--fedrs_alpha` scales the absent classes' logits."""
  check_flag('fedrs_alpha', fedrs_alpha, fed_rs_lib.check_alpha)
  return fed_rs_lib.build_fed_rs(model_fn, alpha=fedrs_alpha, **common)


def fed_gkd(model_fn, *, gkd_gamma, gkd_temperature, gkd_buffer_size,
            **common):
  """`--algorithm=fedgkd`: `--gkd_gamma`, `--gkd_temperature`,
  `--gkd_buffer_size`."""
  for flag, argument, value in (('gkd_gamma', 'gamma', gkd_gamma),
                                ('gkd_temperature', 'temperature',
                                 gkd_temperature),
                                ('gkd_buffer_size', 'buffer_size',
                                 gkd_buffer_size)):
    check_flag(flag, value,
               lambda v, a=argument: fed_gkd_lib.fed_gkd_recipe(
                   **{a: v},
                   server_optimizer_fn=common['server_optimizer_fn']))
  return fed_gkd_lib.build_fed_gkd(
      model_fn, gamma=gkd_gamma, temperature=gkd_temperature,
      buffer_size=gkd_buffer_size, **common)


def moon(model_fn, *, moon_mu, moon_temperature, **common):
  """`--algorithm=moon`: `--moon_mu`, `--moon_temperature`; the task's model
  must have MOON's projection head (`--task_option=model=<name>_proj`)."""
  for flag, argument, value in (('moon_mu', 'mu', moon_mu),
                                ('moon_temperature', 'temperature',
                                 moon_temperature)):
    check_flag(flag, value,
               lambda v, a=argument: moon_lib.moon_recipe(
                   **{'mu': 1.0, a: v},
                   server_optimizer_fn=common['server_optimizer_fn']))
  return moon_lib.build_moon(model_fn, mu=moon_mu,
                             temperature=moon_temperature, **common)


def scaffold(model_fn, *, num_clients, **common):
  """`--algorithm=scaffold`: N is the task's training population."""
  return algorithms.build_scaffold(model_fn, num_clients=num_clients,
                                   **common)


def _fed_adc(model_fn, *, algorithm, client_learning_rate, client_optimizer_fn,
             server_optimizer_fn, client_weighting, client_lr_schedule, beta,
             beta_local=None, fedadc_variant='heavy_ball',
             local_momentum=None, **distillation):
  # FedADC's local step and server rule are its own: plain SGD at
  # --client_lr with the embedded momentum, alpha = 1.
  del client_optimizer_fn, server_optimizer_fn
  return algorithms.build_fed_adc(
      model_fn,
      client_learning_rate=_plain_sgd_rate(client_learning_rate, algorithm),
      beta=beta,
      beta_local=beta_local,
      variant=fedadc_variant,
      local_momentum=local_momentum or None,  # phi = 0 is Algorithm 3.
      client_weighting=client_weighting,
      client_lr_schedule=client_lr_schedule,
      **distillation)


def fed_adc(model_fn, **flags):
  """`--algorithm=fedadc`: alpha = 1, client SGD's learning rate.

  `--beta`, `--beta_local`, `--fedadc_variant` (`variant`),
  `--local_momentum` (0 is Algorithm 3: `None`).
  """
  return _fed_adc(model_fn, algorithm='fedadc', **flags)


def fed_adc_plus(model_fn, *, distill_lambda, distill_temperature, **flags):
  """`--algorithm=fedadc_plus`: FedADC's flags plus the distillation's."""
  return _fed_adc(model_fn, algorithm='fedadc_plus', distillation=True,
                  distill_lambda=distill_lambda,
                  distill_temperature=distill_temperature, **flags)


def slowmo(model_fn, *, client_learning_rate, client_optimizer_fn,
           server_optimizer_fn, client_weighting, client_lr_schedule, beta):
  """`--algorithm=slowmo`: alpha = 1, client SGD's learning rate, `--beta`."""
  # SlowMo's local step (plain SGD) and server rule (alpha = 1) are its own.
  del client_optimizer_fn, server_optimizer_fn
  return algorithms.build_slowmo(
      model_fn,
      client_learning_rate=_plain_sgd_rate(client_learning_rate, 'slowmo'),
      beta=beta,
      client_weighting=client_weighting,
      client_lr_schedule=client_lr_schedule)


def fed_ptr(model_fn, *, side='server', **flags_and_common):
  """`--algorithm=fedptr_s` (`side='server'`) or `fedptr` (`'client'`).

  Its flags (`--mu`, `--images_per_class`, `--mtt_*`, `--projection_steps`,
  `--layer_adaptive`, `--update_every`) are `build_fed_ptr`'s arguments.
  """
  return algorithms.build_fed_ptr(model_fn, side=side, **flags_and_common)


def fed_ptr_client(model_fn, **flags_and_common):
  """`--algorithm=fedptr`: MTT on the clients."""
  return fed_ptr(model_fn, side='client', **flags_and_common)


def fed_bn(base: str, model_fn, *, num_clients=None, feddyn_alpha=None,
           fedfor_grad_at_zero=None, fedcurv_exact=None,
           **flags_and_common):
  """`--fedbn` over `base`: `build_fed_bn` with the base's flags.

  `--feddyn_alpha` is FedDyn's `alpha`, and `num_clients` reaches FedDyn
  only; `--fedfor_grad_at_zero` is FedFOR's `grad_at_zero`; FedCurv +
  FedBN is the stateless variant (`cross_silo` unsupported), so
  `--fedcurv_exact=on` is refused there ('auto' and 'off' run it);
  `client_epochs` reaches FedCurv's recipe.

  Raises:
    FlagError: If a flag of the base is out of range or asks for what FedBN
      over it cannot run, or (`about_model`) the model has no batch-norm
      layer for `--fedbn` to keep local.
  """
  if base == 'feddyn':
    _check_feddyn_alpha(feddyn_alpha)
    flags_and_common.update(alpha=feddyn_alpha, num_clients=num_clients)
  elif base == 'fedfor':
    _check_alpha(flags_and_common['alpha'])
    flags_and_common.update(grad_at_zero=int(fedfor_grad_at_zero or 0))
  elif base == 'fedcurv':
    check_flag('fedcurv_exact', fedcurv_exact, _stateless_fed_curv)
  check_flag('fedbn', None,
             lambda _: fed_bn_lib.find_batch_norm_variables(model_fn),
             about_model=True)
  return algorithms.build_fed_bn(base, model_fn, **flags_and_common)
