"""The registry (`tff_opt/program/registry.py`): flags -> a process.

The settings every algorithm shares, each algorithm's builder arguments
(made from its `Spec` alone, the way `binaries.train` calls
`registry.build_process`), and the flag errors: the flag named, the
library's sentence after it. The builders are replaced by recorders where a
test is about the arguments the registry passes (building a process costs
seconds and is the algorithm tests' business); the shared settings are real
optimizers and schedules, read back through their hyper-parameters.
"""

import dataclasses

import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny
from tff_opt import algorithms
from tff_opt.algorithms import fed_curv
from tff_opt.algorithms import fed_dyn
from tff_opt.program import registry

FLAGS = {
    'server_opt': 'yogi', 'server_lr': 0.3, 'server_tau': 0.01,
    'server_beta_1': 0.5, 'server_beta_2': 0.9, 'server_momentum': 0.9,
    'client_opt': 'sgd', 'client_lr': 0.05, 'client_lr_decay': 'none',
    'client_lr_decay_factor': 0.1, 'client_lr_decay_every': 500,
    'client_weighting': 'uniform',
}


def _hparams(optimizer):
  return {k: float(v) for k, v in optimizer.get_hparams(
      optimizer.initialize(tf.TensorSpec((), tf.float32))).items()}


@pytest.fixture(name='shared', scope='module')
def fixture_shared():
  return registry.shared_arguments(FLAGS)


class Recorder:
  """Stands in for a builder: records its arguments, returns a marker."""

  def __init__(self):
    self.calls = []

  def __call__(self, *args, **kwargs):
    self.calls.append((args, kwargs))
    return 'process'


@pytest.fixture(name='record')
def fixture_record(monkeypatch):
  """`record(algorithm)`: its builder a `Recorder`; 'fedbn': FedBN's."""
  def record(name):
    recorder = Recorder()
    if name == 'fedbn':
      monkeypatch.setattr(algorithms, 'build_fed_bn', recorder)
    else:
      monkeypatch.setitem(registry.ALGORITHMS, name, dataclasses.replace(
          registry.ALGORITHMS[name], builder=recorder))
    return recorder
  return record


# --- The shared settings -------------------------------------------------------


def test_shared_arguments_are_the_flags_optimizers(shared):
  assert _hparams(shared['server_optimizer_fn']) == pytest.approx(
      {'learning_rate': 0.3, 'beta_1': 0.5, 'beta_2': 0.9, 'tau': 0.01})
  assert _hparams(shared['client_optimizer_fn']) == pytest.approx(
      {'learning_rate': 0.05})
  assert shared['client_lr_schedule'] is None
  assert shared['client_weighting'] == tff.learning.ClientWeighting.UNIFORM
  # FedADC's and SlowMo's plain SGD rate: the flag's number, not read back
  # from a built optimizer; none for another client optimizer.
  assert registry.plain_sgd_learning_rate(FLAGS) == 0.05
  assert registry.plain_sgd_learning_rate(
      {**FLAGS, 'client_opt': 'sgdm'}) is None


def test_staircase_flags_make_the_schedule():
  schedule = registry.client_lr_schedule(
      {**FLAGS, 'client_lr_decay': 'staircase', 'client_lr_decay_factor': 0.5,
       'client_lr_decay_every': 3})
  assert [float(schedule(t)) for t in (0, 2, 3, 6)] == pytest.approx(
      [0.05, 0.05, 0.025, 0.0125])


def test_sgdm_server_takes_server_momentum():
  optimizer = registry.server_optimizer(
      {**FLAGS, 'server_opt': 'sgdm', 'server_momentum': 0.7})
  assert _hparams(optimizer) == pytest.approx(
      {'learning_rate': 0.3, 'momentum': 0.7})


# --- Flag errors: the flag named, the library's sentence after it ------------


@pytest.mark.parametrize('changes, line', [
    ({'server_lr': 0.0},
     '--server_lr=0.0: learning_rate must be positive, got 0.0.'),
    ({'server_beta_1': 1.5},
     '--server_beta_1=1.5: beta_1 must be in [0, 1), got 1.5.'),
    ({'server_opt': 'sgdm', 'server_momentum': 1.0},
     '--server_momentum=1.0: momentum must be in [0, 1), got 1.0.'),
    ({'server_opt': 'tff_adagrad', 'server_beta_1': 0.9},
     "--server_beta_1=0.9: beta_1 is not supported by 'tff_adagrad' (TFF's "
     "Adagrad has no momentum), got 0.9; use 'adagrad' for FedAdagrad with "
     'momentum.'),
    # Two bad flags: the one the builder checks first.
    ({'server_lr': 0.0, 'server_beta_1': 1.5},
     '--server_lr=0.0: learning_rate must be positive, got 0.0.'),
    ({'client_lr': 0.0},
     '--client_lr=0.0: learning_rate must be positive, got 0.0.'),
    ({'client_lr_decay': 'staircase', 'client_lr_decay_factor': 2.0},
     '--client_lr_decay_factor=2.0: decay_factor must be in (0, 1], got '
     '2.0.'),
])
def test_bad_flag_is_named_with_the_library_sentence(changes, line):
  with pytest.raises(registry.FlagError) as error:
    registry.shared_arguments({**FLAGS, **changes})
  assert str(error.value) == line
  assert error.value.flag == line[2:].split('=')[0]


def test_flags_a_builder_ignores_are_not_checked():
  # --server_opt=sgd has no tau or betas: out-of-range values are unused.
  optimizer = registry.server_optimizer(
      {**FLAGS, 'server_opt': 'sgd', 'server_tau': -1.0,
       'server_beta_1': 3.0})
  assert _hparams(optimizer) == pytest.approx({'learning_rate': 0.3})


def test_feddyn_alpha_is_named_and_nothing_is_built(shared, record):
  build = record('feddyn')
  with pytest.raises(registry.FlagError) as error:
    registry.build_process('feddyn', tiny.model_fn, **shared,
                           feddyn_alpha=0.0, num_clients=5)
  assert str(error.value) == (
      '--feddyn_alpha=0.0: alpha must be positive, got 0.0.')
  assert build.calls == []


def test_beta_one_is_refused_by_its_declaration_as_by_the_builder(shared):
  # --slowmo_beta is declared in [0, 1), the builder's range: beta = 1 is
  # the flag's error, with the builder's sentence.
  with pytest.raises(registry.FlagError) as error:
    registry.build_process('slowmo', tiny.model_fn, **shared,
                           client_learning_rate=0.05, slowmo_beta=1.0)
  assert str(error.value) == (
      '--slowmo_beta=1.0: beta must be in [0, 1), got 1.0.')


def test_a_combination_the_builder_refuses_is_a_plain_value_error(shared):
  # Each flag is in range; Algorithm 4 (local_momentum > 0) refuses the
  # Nesterov variant, and that sentence is reported alone.
  with pytest.raises(ValueError) as error:
    registry.build_process('fedadc', tiny.model_fn, **shared,
                           client_learning_rate=0.05, fedadc_beta=0.9,
                           fedadc_variant='nesterov',
                           fedadc_local_momentum=0.5)
  assert not isinstance(error.value, registry.FlagError)
  assert str(error.value) == (
      "local_momentum (Algorithm 4, double momentum) takes "
      "variant='heavy_ball', got variant='nesterov'.")


def _named_model_fn(name, batch_norm=False):
  def model_fn():
    layers = [tf.keras.layers.InputLayer(input_shape=(tiny.NUM_FEATURES,))]
    if batch_norm:
      layers.append(tf.keras.layers.BatchNormalization())
    layers.append(tf.keras.layers.Dense(tiny.NUM_CLASSES))
    return tff.learning.models.from_keras_model(
        tf.keras.Sequential(layers, name=name),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=tiny.INPUT_SPEC)
  return model_fn


def test_fedbn_on_a_model_without_batch_norm_names_flag_and_task(
    shared, record):
  build = record('fedbn')
  with pytest.raises(registry.FlagError) as error:
    registry.build_process('fedprox', _named_model_fn('linear'), **shared,
                           fedbn=True, fedprox_mu=0.1)
  assert error.value.about_model
  assert error.value.line(task='tiny') == (
      "--fedbn: task tiny: FedBN needs a model with a BatchNormalization "
      "layer; the model 'linear' has none.")
  assert build.calls == []


# --- Each builder is given the arguments its flags say ------------------------


def test_feddyn_alpha_is_alpha_and_num_clients_is_the_population(
    shared, record):
  build = record('feddyn')
  assert registry.build_process('feddyn', tiny.model_fn, **shared,
                                feddyn_alpha=0.01, num_clients=7) == 'process'
  [(args, kwargs)] = build.calls
  assert args == (tiny.model_fn,)
  assert kwargs == {'alpha': 0.01, 'num_clients': 7, **shared}


@pytest.mark.parametrize('given, grad_at_zero', [(None, 0), (0, 0),
                                                 (1, 1)])
def test_fedfor_grad_at_zero_flag_is_an_int(given, grad_at_zero, shared,
                                            record):
  build = record('fedfor')
  registry.build_process('fedfor', tiny.model_fn, **shared,
                         fedfor_alpha=5.0, fedfor_grad_at_zero=given)
  [(_, kwargs)] = build.calls
  assert kwargs == {'alpha': 5.0, 'grad_at_zero': grad_at_zero, **shared}


def test_fedfor_grad_at_zero_is_refused_as_text(shared, record):
  # The flag parses '0' and '1' as integers; a program passing text is
  # refused by the declaration, the flag named.
  build = record('fedfor')
  with pytest.raises(registry.FlagError) as error:
    registry.build_process('fedfor', tiny.model_fn, **shared,
                           fedfor_alpha=5.0, fedfor_grad_at_zero='1')
  assert str(error.value) == ("--fedfor_grad_at_zero=1: grad_at_zero must be "
                              "an integer in [0, 1], got '1'.")
  assert build.calls == []


@pytest.mark.parametrize('given, cross_silo', [('on', 'on'), ('off', 'off'),
                                               ('auto', 'auto'),
                                               (None, 'auto')])
def test_fedcurv_exact_flag_is_cross_silo(given, cross_silo, shared, record):
  # The builder resolves 'auto' (tests/test_fed_curv.py); it is given the
  # population for that.
  build = record('fedcurv')
  registry.build_process('fedcurv', tiny.model_fn, **shared,
                         fedcurv_lam=0.01, fedcurv_exact=given,
                         num_clients=10)
  [(_, kwargs)] = build.calls
  assert kwargs == {'lam': 0.01, 'cross_silo': cross_silo,
                    'client_epochs': 1, 'num_clients': 10, **shared}


@pytest.mark.parametrize('client_epochs, want', [(5, 5), (None, 1)])
def test_fedcurv_takes_the_tasks_client_epochs(client_epochs, want, shared,
                                               record):
  # binaries.train passes its resolved --client_epochs (the epochs each
  # client dataset holds); FedCurv's Fisher runs over one of them.
  build = record('fedcurv')
  registry.build_process('fedcurv', tiny.model_fn, **shared,
                         fedcurv_lam=0.01, fedcurv_exact='off', num_clients=10,
                         client_epochs=client_epochs)
  [(_, kwargs)] = build.calls
  assert kwargs['client_epochs'] == want
  # An algorithm that does not take it is not given it.
  build = record('fedprox')
  registry.build_process('fedprox', tiny.model_fn, **shared, fedprox_mu=0.1,
                         client_epochs=5)
  [(_, kwargs)] = build.calls
  assert 'client_epochs' not in kwargs


def test_fedadc_takes_client_sgd_learning_rate_and_no_server_optimizer(
    shared, record):
  build = record('fedadc')
  registry.build_process('fedadc', tiny.model_fn, **shared,
                         client_learning_rate=0.05, fedadc_beta=0.8,
                         fedadc_beta_local=None, fedadc_variant='nesterov',
                         fedadc_local_momentum=0.0)
  [(_, kwargs)] = build.calls
  assert kwargs.pop('client_learning_rate') == pytest.approx(0.05)
  assert kwargs == {
      'beta': 0.8, 'beta_local': None, 'variant': 'nesterov',
      'local_momentum': 0.0,  # The builder's Algorithm 3.
      'client_weighting': shared['client_weighting'],
      'client_lr_schedule': shared['client_lr_schedule']}


def test_fedadc_plus_turns_distillation_on(shared, record):
  build = record('fedadc_plus')
  registry.build_process('fedadc_plus', tiny.model_fn, **shared,
                         client_learning_rate=0.05, fedadc_beta=0.9,
                         fedadc_variant='heavy_ball',
                         fedadc_local_momentum=0.5,
                         fedadc_distill_lambda=0.35,
                         fedadc_distill_temperature=4.0)
  [(_, kwargs)] = build.calls
  assert kwargs['distillation'] is True
  assert (kwargs['distill_lambda'], kwargs['distill_temperature'],
          kwargs['local_momentum'], kwargs['beta_local']) == (0.35, 4.0, 0.5,
                                                              None)
  assert 'client_optimizer_fn' not in kwargs
  assert 'server_optimizer_fn' not in kwargs


def test_fedadc_refuses_a_client_optimizer_other_than_sgd(record):
  record('fedadc')
  flags = {**FLAGS, 'client_opt': 'sgdm'}
  shared = registry.shared_arguments(flags)
  with pytest.raises(ValueError, match=r'^--algorithm=fedadc takes its local '
                     r'steps with plain SGD; use --client_opt=sgd\.$'):
    registry.build_process('fedadc', tiny.model_fn, **shared,
                           client_learning_rate=(
                               registry.plain_sgd_learning_rate(flags)),
                           fedadc_beta=0.9, fedadc_variant='heavy_ball',
                           fedadc_local_momentum=0.0)


def test_fedptr_side_follows_the_algorithm(shared, record):
  server_side = record('fedptr_s')
  client_side = record('fedptr')
  arguments = dict(mu=0.01, images_per_class=2, mtt_outer_steps=3,
                   mtt_inner_steps=4, projection_steps=5,
                   layer_adaptive=False, update_every=0, mtt_init_lr=0.02,
                   mtt_image_lr=10.0, mtt_lr_lr=1e-3, mtt_momentum=0.0)
  # Each flag is `--fedptr_<argument>`.
  flags = {f'fedptr_{k}': v for k, v in arguments.items()}
  registry.build_process('fedptr_s', tiny.model_fn, **shared, **flags)
  registry.build_process('fedptr', tiny.model_fn, **shared, **flags)
  # The server side is the builder's default side.
  assert [kwargs for _, kwargs in server_side.calls] == [
      {**arguments, **shared}]
  assert [kwargs for _, kwargs in client_side.calls] == [
      {'side': 'client', **arguments, **shared}]


def test_fedbn_over_feddyn_passes_alpha_and_population(shared, record):
  build = record('fedbn')
  model_fn = _named_model_fn('with_bn', batch_norm=True)
  registry.build_process('feddyn', model_fn, **shared, fedbn=True,
                         feddyn_alpha=0.1, num_clients=9)
  registry.build_process('fedcurv', model_fn, **shared, fedbn=True,
                         fedcurv_lam=0.2, num_clients=9)
  registry.build_process('fedcurv', model_fn, **shared, fedbn=True,
                         fedcurv_lam=0.2, num_clients=9, client_epochs=3)
  fedcurv = {'lam': 0.2, 'cross_silo': 'auto', 'num_clients': 9}
  assert build.calls == [
      ((fed_dyn.fed_dyn_recipe, model_fn),
       {'alpha': 0.1, 'num_clients': 9, **shared}),
      ((fed_curv.stateless_recipe, model_fn),
       {**fedcurv, 'client_epochs': 1, **shared}),
      ((fed_curv.stateless_recipe, model_fn),
       {**fedcurv, 'client_epochs': 3, **shared}),
  ]


def test_fedbn_runs_on_the_entries_naming_a_recipe(shared):
  assert registry.FEDBN_BASES == ('fedopt', 'fedprox', 'fedfor', 'fedcurv',
                                  'feddyn')
  with pytest.raises(ValueError, match=r"^--fedbn: algorithm 'scaffold' has "
                     r'no FedBN variant; FedBN runs on fedopt, fedprox, '
                     r'fedfor, fedcurv, feddyn\.$'):
    registry.build_process('scaffold', tiny.model_fn, **shared, fedbn=True,
                           num_clients=4)


def test_flag_error_line_without_value_or_task():
  error = registry.FlagError('fedbn', 'no batch norm.', about_model=True)
  assert str(error) == '--fedbn: no batch norm.'
  assert error.line(task='digits') == '--fedbn: task digits: no batch norm.'
  assert str(registry.FlagError('mu', 'too big.', value=0.5)) == (
      '--mu=0.5: too big.')


# --- The registry's own checks ------------------------------------------------


def test_missing_flag_is_named_by_the_registry(shared):
  with pytest.raises(ValueError,
                     match=r"^Algorithm 'fedprox' needs --fedprox_mu\.$"):
    registry.build_process('fedprox', tiny.model_fn, **shared)


def test_every_algorithm_builds_through_its_public_builder():
  for algorithm in registry.ALGORITHMS.values():
    assert algorithm.builder.__name__.startswith('build_'), algorithm.name
    assert getattr(algorithms, algorithm.builder.__name__) is (
        algorithm.builder), algorithm.name
