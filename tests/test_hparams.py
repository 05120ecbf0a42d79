"""Each algorithm's hyper-parameters are declared once (`hparams.Spec`).

The binary's flags, the registry's entries and the library builders'
defaults must all be that declaration: the same default objects, the same
bounds, the same client weighting.
"""

import inspect

from absl import flags
import pytest
import tensorflow_federated as tff

from binaries import train
from tests import tiny
from tff_opt import algorithms
from tff_opt.algorithms import fed_adc
from tff_opt.algorithms import fed_curv
from tff_opt.algorithms import fed_for
from tff_opt.algorithms import fed_gkd
from tff_opt.algorithms import fed_ntd
from tff_opt.algorithms import fed_ptr
from tff_opt.algorithms import fed_rs
from tff_opt.algorithms import hparams
from tff_opt.algorithms import moon
from tff_opt.program import flag_adapters
from tff_opt.program import registry

UNIFORM = tff.learning.ClientWeighting.UNIFORM
NUM_EXAMPLES = tff.learning.ClientWeighting.NUM_EXAMPLES

# Each registered algorithm's library builder.
BUILDERS = {
    'fedopt': algorithms.build_fed_opt,
    'fedadc': algorithms.build_fed_adc,
    'fedadc_plus': algorithms.build_fed_adc,
    'slowmo': algorithms.build_slowmo,
    'fedprox': algorithms.build_fed_prox,
    'fedfor': algorithms.build_fed_for,
    'fedcurv': algorithms.build_fed_curv,
    'feddyn': algorithms.build_fed_dyn,
    'fedntd': algorithms.build_fed_ntd,
    'fedrs': algorithms.build_fed_rs,
    'fedgkd': algorithms.build_fed_gkd,
    'moon': algorithms.build_moon,
    'feddc': algorithms.build_fed_dc,
    'scaffold': algorithms.build_scaffold,
    'fedptr_s': algorithms.build_fed_ptr,
    'fedptr': algorithms.build_fed_ptr,
}

# (declaration, builder, the builder's argument) for every hyper-parameter
# whose builder argument has a default.
WITH_A_LIBRARY_DEFAULT = [
    (fed_adc.VARIANT, algorithms.build_fed_adc, 'variant'),
    (fed_adc.DISTILL_LAMBDA, algorithms.build_fed_adc, 'distill_lambda'),
    (fed_adc.DISTILL_TEMPERATURE, algorithms.build_fed_adc,
     'distill_temperature'),
    (fed_ntd.NTD_BETA, algorithms.build_fed_ntd, 'beta'),
    (fed_ntd.NTD_TEMPERATURE, algorithms.build_fed_ntd, 'temperature'),
    (fed_rs.FEDRS_ALPHA, algorithms.build_fed_rs, 'alpha'),
    (fed_gkd.GKD_GAMMA, algorithms.build_fed_gkd, 'gamma'),
    (fed_gkd.GKD_TEMPERATURE, algorithms.build_fed_gkd, 'temperature'),
    (fed_gkd.GKD_BUFFER_SIZE, algorithms.build_fed_gkd, 'buffer_size'),
    (moon.MOON_TEMPERATURE, algorithms.build_moon, 'temperature'),
    *[(h, algorithms.build_fed_ptr, h.flag) for h in fed_ptr.SPEC.hparams
      if h is not fed_ptr.MU],
]


def _default(builder, argument):
  return inspect.signature(builder).parameters[argument].default


def test_every_algorithm_has_a_builder_here():
  assert sorted(BUILDERS) == sorted(registry.ALGORITHMS)


@pytest.mark.parametrize('name', sorted(registry.ALGORITHMS))
def test_library_weighting_is_the_registered_one(name):
  spec = registry.ALGORITHMS[name].spec
  assert _default(BUILDERS[name], 'client_weighting') is spec.client_weighting


def test_fedcurv_and_fedfor_default_to_their_papers_plain_mean():
  # Their builders defaulted to example weighting while the binary ran
  # them uniformly: the library and the binary ran different algorithms.
  for builder in (algorithms.build_fed_curv, algorithms.build_fed_for):
    assert _default(builder, 'client_weighting') is UNIFORM
  assert registry.ALGORITHMS['fedcurv'].client_weighting == 'uniform'
  assert registry.ALGORITHMS['fedopt'].client_weighting == 'num_examples'


@pytest.mark.parametrize('hparam, builder, argument', WITH_A_LIBRARY_DEFAULT,
                         ids=lambda x: getattr(x, 'flag', None))
def test_library_default_is_the_declared_object(hparam, builder, argument):
  assert _default(builder, argument) is hparam.default


@pytest.mark.parametrize('hparam', registry.algorithm_hparams(),
                         ids=lambda h: h.flag)
def test_binary_flag_is_the_declaration(hparam):
  flag = train.FLAGS[hparam.flag]
  assert flag.default == hparam.default
  assert flag.help.endswith(hparam.help)  # absl puts an enum's values first.
  parser = flag.parser
  assert getattr(parser, 'lower_bound', None) == hparam.lower
  assert getattr(parser, 'upper_bound', None) == hparam.upper
  if hparam.kind == 'enum':
    assert tuple(parser.enum_values) == hparam.choices


def test_registry_flags_come_from_the_specs():
  assert registry.ALGORITHMS['fedcurv'].flags == ('lam', 'fedcurv_exact')
  assert registry.ALGORITHMS['fedcurv'].needed == ('lam',)
  assert registry.ALGORITHMS['fedcurv'].task_facts == ('num_clients',
                                                       'client_epochs')
  assert registry.ALGORITHMS['fedadc_plus'].flags[-2:] == (
      'distill_lambda', 'distill_temperature')
  assert registry.ALGORITHMS['slowmo'].server_rule == 'own'
  # --beta and --mu are one declaration each, shared.
  assert (registry.ALGORITHMS['slowmo'].spec.hparams[0] is
          registry.ALGORITHMS['fedadc'].spec.hparams[0] is
          hparams.GLOBAL_MOMENTUM)
  assert fed_ptr.MU is hparams.PROXIMAL_MU
  flags_of = [h.flag for h in registry.algorithm_hparams()]
  assert len(flags_of) == len(set(flags_of))


def test_a_flag_declared_twice_differently_is_refused(monkeypatch):
  other = hparams.HParam('lam', 1.0, 'Another lambda.')
  monkeypatch.setitem(
      registry.ALGORITHMS, 'other',
      registry.Algorithm('other', hparams.Spec('x', hparams=(other,)),
                         build=None))
  with pytest.raises(ValueError, match=r'^--lam is declared twice, '
                     r'differently \(again by other\)\.$'):
    registry.algorithm_hparams()


@pytest.mark.parametrize('hparam, value, message', [
    (fed_curv.LAM, None, '--lam is needed.'),
    (fed_curv.LAM, -1.0, 'expected a value in >= 0.'),
    (fed_rs.FEDRS_ALPHA, 1.5, 'expected a value in [0, 1].'),
    (fed_rs.FEDRS_ALPHA, float('nan'), 'expected a finite number.'),
    (fed_gkd.GKD_BUFFER_SIZE, 2.5, 'expected an integer.'),
    (fed_gkd.GKD_BUFFER_SIZE, 0, 'expected a value in >= 1.'),
    (fed_for.GRAD_AT_ZERO, '2', 'expected one of 0, 1.'),
    (fed_ptr.LAYER_ADAPTIVE, 1, 'expected true or false.'),
    (fed_adc.LOCAL_MOMENTUM, 'big', 'expected a finite number.'),
])
def test_check_refuses_out_of_range(hparam, value, message):
  with pytest.raises(ValueError) as error:
    hparam.check(value)
  assert str(error.value) == message


def test_check_accepts_the_bounds_and_an_optional_none():
  fed_rs.FEDRS_ALPHA.check(0.0)
  fed_rs.FEDRS_ALPHA.check(1.0)
  fed_adc.BETA_LOCAL.check(None)  # --beta_local's default: --beta.
  fed_gkd.GKD_BUFFER_SIZE.check(3)


@pytest.mark.parametrize('kwargs, message', [
    (dict(kind='vector'), "HParam x: kind 'vector' is not one of "),
    (dict(kind='enum'), 'HParam x: choices go with kind enum.'),
    (dict(choices=('a',)), 'HParam x: choices go with kind enum.'),
    (dict(needed=True), 'HParam x: a needed one has no default.'),
    (dict(lower=2.0), 'expected a value in >= 2.'),
])
def test_a_bad_declaration_is_refused_when_made(kwargs, message):
  with pytest.raises(ValueError) as error:
    hparams.HParam('x', 1.0, 'help', **kwargs)
  assert str(error.value).startswith(message)


def test_define_flag_gives_the_declared_bounds():
  values = flags.FlagValues()
  hparams.define_flag(fed_rs.FEDRS_ALPHA, values)
  hparams.define_flag(fed_for.GRAD_AT_ZERO, values)
  values(['prog', '--fedrs_alpha=0.25', '--fedfor_grad_at_zero=1'])
  assert values.fedrs_alpha == 0.25
  assert values.fedfor_grad_at_zero == '1'
  with pytest.raises(flags.IllegalFlagValueError):
    values(['prog', '--fedrs_alpha=2'])


# --- The declared bounds are the library's ------------------------------------

# Valid values of the flags an algorithm needs, for building it with one
# other flag out of range.
_NEEDED_VALUES = {'lam': 1.0, 'mu': 0.1, 'moon_mu': 1.0}


def _out_of_range_cases():
  """(algorithm, flag, value just outside a declared bound) for each bound."""
  cases = []
  for name, algorithm in sorted(registry.ALGORITHMS.items()):
    for hparam in algorithm.spec.hparams:
      if hparam.kind not in ('float', 'integer'):
        continue
      step = 1 if hparam.kind == 'integer' else 1e-3
      if hparam.lower is not None:
        cases.append((name, hparam.flag, hparam.lower - step))
      if hparam.upper is not None:
        cases.append((name, hparam.flag, hparam.upper + step))
  return cases


@pytest.mark.parametrize('name, flag, value', _out_of_range_cases(),
                         ids=lambda x: str(x))
def test_the_library_refuses_what_the_declaration_refuses(name, flag, value):
  # The flag parser refuses these values (the declared bounds are its
  # bounds); a program calling the registry directly must be refused by the
  # library's own checks as well, before anything is built, with an error
  # naming the flag: the declaration and the checks cannot drift apart.
  algorithm = registry.ALGORITHMS[name]
  settings = {h.flag: _NEEDED_VALUES.get(h.flag, h.default)
              for h in algorithm.spec.hparams}
  settings[flag] = value
  with pytest.raises(ValueError) as error:
    registry.build_process(
        name, tiny.model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
        client_weighting=NUM_EXAMPLES, client_lr_schedule=None,
        client_learning_rate=0.1, num_clients=4, client_epochs=1, **settings)
  assert flag in str(error.value)
