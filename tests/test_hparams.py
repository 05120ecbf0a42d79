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
from tff_opt import algorithms
from tff_opt.algorithms import fed_adc
from tff_opt.algorithms import fed_curv
from tff_opt.algorithms import fed_dyn
from tff_opt.algorithms import fed_for
from tff_opt.algorithms import fed_gkd
from tff_opt.algorithms import fed_ntd
from tff_opt.algorithms import fed_prox
from tff_opt.algorithms import fed_ptr
from tff_opt.algorithms import fed_rs
from tff_opt.algorithms import hparams
from tff_opt.algorithms import moon
from tff_opt.program import registry

UNIFORM = tff.learning.ClientWeighting.UNIFORM

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
    *[(h, algorithms.build_fed_ptr, h.argument_name)
      for h in fed_ptr.SPEC.hparams
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
  # No absl bounds of its own: the flag's range is the declaration's check
  # (tests/test_declared_bounds.py holds each bound against it).
  assert getattr(parser, 'lower_bound', None) is None
  assert getattr(parser, 'upper_bound', None) is None
  if hparam.kind == 'enum':
    assert tuple(parser.enum_values) == hparam.choices


def test_registry_flags_come_from_the_specs():
  assert registry.ALGORITHMS['fedcurv'].flags == ('fedcurv_lam',
                                                  'fedcurv_exact')
  assert registry.ALGORITHMS['fedcurv'].needed == ('fedcurv_lam',)
  assert registry.ALGORITHMS['fedcurv'].task_facts == ('num_clients',
                                                       'client_epochs')
  assert registry.ALGORITHMS['fedadc_plus'].flags[-2:] == (
      'fedadc_distill_lambda', 'fedadc_distill_temperature')
  assert registry.ALGORITHMS['slowmo'].server_rule == 'own'
  # Each algorithm has its own momentum and proximal flag; the two sides
  # of FedADC and of FedPTR share theirs.
  assert registry.ALGORITHMS['slowmo'].spec.hparams[0] is hparams.SLOWMO_BETA
  assert (registry.ALGORITHMS['fedadc'].spec.hparams[0] is
          registry.ALGORITHMS['fedadc_plus'].spec.hparams[0] is
          hparams.FEDADC_BETA)
  assert fed_prox.MU is hparams.FEDPROX_MU
  assert (registry.ALGORITHMS['fedptr'].spec.hparams[0] is
          registry.ALGORITHMS['fedptr_s'].spec.hparams[0] is
          fed_ptr.MU is hparams.FEDPTR_MU)
  flags_of = [h.flag for h in registry.algorithm_hparams()]
  assert len(flags_of) == len(set(flags_of))


def test_a_flag_declared_twice_differently_is_refused(monkeypatch):
  other = hparams.HParam('fedcurv_lam', 1.0, 'Another lambda.')
  monkeypatch.setitem(
      registry.ALGORITHMS, 'other',
      registry.Algorithm('other', hparams.Spec('x', hparams=(other,)),
                         builder=None))
  with pytest.raises(ValueError, match=r'^--fedcurv_lam is declared twice, '
                     r'differently \(again by other\)\.$'):
    registry.algorithm_hparams()


@pytest.mark.parametrize('hparam, value, message', [
    # The builder's argument is named (FedCurv's `lam`, FedRS's `alpha`),
    # in `tff_opt.checks`' words.
    (fed_curv.LAM, None, 'lam must be a non-negative number, got None.'),
    (fed_curv.LAM, -1.0, 'lam must be a non-negative number, got -1.0.'),
    (fed_dyn.ALPHA, 0.0, 'alpha must be positive, got 0.0.'),
    (fed_rs.FEDRS_ALPHA, 1.5, 'alpha must be in [0, 1], got 1.5.'),
    (fed_rs.FEDRS_ALPHA, float('nan'), 'alpha must be in [0, 1], got nan.'),
    (hparams.FEDADC_BETA, 1.0, 'beta must be in [0, 1), got 1.0.'),
    (hparams.SLOWMO_BETA, 1.0, 'beta must be in [0, 1), got 1.0.'),
    (fed_gkd.GKD_BUFFER_SIZE, 2.5,
     'buffer_size must be a positive integer, got 2.5.'),
    (fed_gkd.GKD_BUFFER_SIZE, True,
     'buffer_size must be a positive integer, got True.'),
    (fed_ptr.UPDATE_EVERY, -1, 'update_every must be an integer >= 0, got -1.'),
    (fed_for.GRAD_AT_ZERO, 2,
     'grad_at_zero must be an integer in [0, 1], got 2.'),
    (fed_for.GRAD_AT_ZERO, '1',
     "grad_at_zero must be an integer in [0, 1], got '1'."),
    (fed_curv.EXACT, 'yes', "cross_silo must be one of auto, on, off, got "
     "'yes'."),
    (fed_ptr.LAYER_ADAPTIVE, 1, 'layer_adaptive must be true or false, got 1.'),
    (fed_adc.LOCAL_MOMENTUM, 'big',
     "local_momentum must be in [0, 1), got 'big'."),
])
def test_check_refuses_out_of_range(hparam, value, message):
  with pytest.raises(ValueError) as error:
    hparam.check(value)
  assert str(error.value) == message


def test_check_names_what_it_is_told():
  with pytest.raises(ValueError, match=r'^fedcurv_exact must be one of '):
    fed_curv.EXACT.check('yes', 'fedcurv_exact')


def test_check_accepts_the_bounds_and_an_optional_none():
  fed_rs.FEDRS_ALPHA.check(0.0)
  fed_rs.FEDRS_ALPHA.check(1.0)
  hparams.FEDADC_BETA.check(0.0)
  fed_adc.BETA_LOCAL.check(None)  # Its default: --fedadc_beta's value.
  fed_gkd.GKD_BUFFER_SIZE.check(3)
  fed_for.GRAD_AT_ZERO.check(1)


@pytest.mark.parametrize('hparam, range_text, requirement', [
    (fed_curv.LAM, '>= 0', 'a non-negative number'),
    (fed_dyn.ALPHA, '> 0', 'positive'),
    (hparams.SLOWMO_BETA, '[0, 1)', 'in [0, 1)'),
    (fed_rs.FEDRS_ALPHA, '[0, 1]', 'in [0, 1]'),
    (fed_gkd.GKD_BUFFER_SIZE, '>= 1', 'a positive integer'),
    (fed_ptr.UPDATE_EVERY, '>= 0', 'an integer >= 0'),
    (fed_curv.EXACT, 'any', 'one of auto, on, off'),
])
def test_range_text_and_requirement(hparam, range_text, requirement):
  assert hparam.range_text() == range_text
  assert hparam.requirement() == requirement


@pytest.mark.parametrize('kwargs, message', [
    (dict(kind='vector'), "HParam x: kind 'vector' is not one of "),
    (dict(kind='enum'), 'HParam x: choices go with kind enum.'),
    (dict(choices=('a',)), 'HParam x: choices go with kind enum.'),
    (dict(needed=True), 'HParam x: a needed one has no default.'),
    (dict(lower_open=True), 'HParam x: an open bound needs its value.'),
    (dict(kind='boolean', lower=0.0),
     'HParam x: bounds go with kind float or integer.'),
    (dict(lower=2.0), 'x must be a number >= 2, got 1.0.'),
    (dict(lower=1.0, lower_open=True), 'x must be a number > 1, got 1.0.'),
])
def test_a_bad_declaration_is_refused_when_made(kwargs, message):
  default = kwargs.pop('default', True if kwargs.get('kind') == 'boolean'
                       else 1.0)
  with pytest.raises(ValueError) as error:
    hparams.HParam('x', default, 'help', **kwargs)
  assert str(error.value).startswith(message)


def test_define_flag_checks_with_the_declaration():
  values = flags.FlagValues()
  hparams.define_flag(fed_rs.FEDRS_ALPHA, values)
  hparams.define_flag(fed_for.GRAD_AT_ZERO, values)
  # --fedfor_grad_at_zero=1 (once an enum of '0' and '1') is the integer.
  values(['prog', '--fedrs_alpha=0.25', '--fedfor_grad_at_zero=1'])
  assert values.fedrs_alpha == 0.25
  assert values.fedfor_grad_at_zero == 1
  with pytest.raises(flags.IllegalFlagValueError,
                     match=r'alpha must be in \[0, 1\], got 2\.0\.'):
    values(['prog', '--fedrs_alpha=2'])
