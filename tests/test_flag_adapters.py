"""The flag adapters (`tff_opt/program/flag_adapters.py`): flags -> arguments.

The settings every algorithm shares, each algorithm's adapter (called the
way `binaries.train` calls it, through `registry.build_process`), and the
flag errors: the flag named, the library's sentence after it. The builders
are replaced by recorders where a test is about the arguments an adapter
passes (building a process costs seconds and is the algorithm tests'
business); the shared settings are real optimizers and schedules, read back
through their hyper-parameters. The registry's own checks are
tests/test_registry.py's.
"""

import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tests import tiny
from tff_opt import algorithms
from tff_opt.program import flag_adapters
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
  return flag_adapters.shared_arguments(FLAGS)


class Recorder:
  """Stands in for a builder: records its arguments, returns a marker."""

  def __init__(self):
    self.calls = []

  def __call__(self, *args, **kwargs):
    self.calls.append((args, kwargs))
    return 'process'


@pytest.fixture(name='record')
def fixture_record(monkeypatch):
  def record(name):
    recorder = Recorder()
    monkeypatch.setattr(algorithms, name, recorder)
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
  assert flag_adapters.plain_sgd_learning_rate(FLAGS) == 0.05
  assert flag_adapters.plain_sgd_learning_rate(
      {**FLAGS, 'client_opt': 'sgdm'}) is None


def test_staircase_flags_make_the_schedule():
  schedule = flag_adapters.client_lr_schedule(
      {**FLAGS, 'client_lr_decay': 'staircase', 'client_lr_decay_factor': 0.5,
       'client_lr_decay_every': 3})
  assert [float(schedule(t)) for t in (0, 2, 3, 6)] == pytest.approx(
      [0.05, 0.05, 0.025, 0.0125])


def test_sgdm_server_takes_server_momentum():
  optimizer = flag_adapters.server_optimizer(
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
  with pytest.raises(flag_adapters.FlagError) as error:
    flag_adapters.shared_arguments({**FLAGS, **changes})
  assert str(error.value) == line
  assert error.value.flag == line[2:].split('=')[0]


def test_flags_a_builder_ignores_are_not_checked():
  # --server_opt=sgd has no tau or betas: out-of-range values are unused.
  optimizer = flag_adapters.server_optimizer(
      {**FLAGS, 'server_opt': 'sgd', 'server_tau': -1.0,
       'server_beta_1': 3.0})
  assert _hparams(optimizer) == pytest.approx({'learning_rate': 0.3})


def test_feddyn_alpha_is_named_and_nothing_is_built(shared, record):
  build = record('build_fed_dyn')
  with pytest.raises(flag_adapters.FlagError) as error:
    registry.build_process('feddyn', tiny.model_fn, **shared,
                           feddyn_alpha=0.0, num_clients=5)
  assert str(error.value) == (
      '--feddyn_alpha=0.0: alpha must be positive, got 0.0.')
  assert build.calls == []


def test_a_combination_the_builder_refuses_is_a_plain_value_error(shared):
  # SlowMo's beta = 1 passes the flag's bounds; the builder refuses it,
  # and its sentence is reported alone (not a FlagError).
  with pytest.raises(ValueError) as error:
    registry.build_process('slowmo', tiny.model_fn, **shared,
                           client_learning_rate=0.05, beta=1.0)
  assert not isinstance(error.value, flag_adapters.FlagError)
  assert str(error.value) == 'beta must be in [0, 1), got 1.0.'


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
  build = record('build_fed_bn')
  with pytest.raises(flag_adapters.FlagError) as error:
    registry.build_process('fedprox', _named_model_fn('linear'), **shared,
                           fedbn=True, mu=0.1)
  assert error.value.about_model
  assert error.value.line(task='tiny') == (
      "--fedbn: task tiny: FedBN needs a model with a BatchNormalization "
      "layer; the model 'linear' has none.")
  assert build.calls == []


# --- Each adapter passes the builder the arguments its flags say -------------


def test_feddyn_alpha_is_alpha_and_num_clients_is_the_population(
    shared, record):
  build = record('build_fed_dyn')
  assert registry.build_process('feddyn', tiny.model_fn, **shared,
                                feddyn_alpha=0.01, num_clients=7) == 'process'
  [(args, kwargs)] = build.calls
  assert args == (tiny.model_fn,)
  assert kwargs == {'alpha': 0.01, 'num_clients': 7, **shared}


@pytest.mark.parametrize('given, grad_at_zero', [(None, 0), ('0', 0),
                                                 ('1', 1)])
def test_fedfor_grad_at_zero_flag_is_an_int(given, grad_at_zero, shared,
                                            record):
  build = record('build_fed_for')
  registry.build_process('fedfor', tiny.model_fn, **shared, alpha=5.0,
                         fedfor_grad_at_zero=given)
  [(_, kwargs)] = build.calls
  assert kwargs == {'alpha': 5.0, 'grad_at_zero': grad_at_zero, **shared}


@pytest.mark.parametrize('given, cross_silo', [('on', True), ('off', False),
                                               ('auto', True), (None, True)])
def test_fedcurv_exact_flag_picks_cross_silo(given, cross_silo, shared,
                                             record):
  # auto: the tiny model's client state for 10 clients is far below 2 GiB.
  build = record('build_fed_curv')
  registry.build_process('fedcurv', tiny.model_fn, **shared, lam=0.01,
                         fedcurv_exact=given, num_clients=10)
  [(_, kwargs)] = build.calls
  assert kwargs == {'lam': 0.01, 'cross_silo': cross_silo,
                    'client_epochs': 1, **shared}


@pytest.mark.parametrize('client_epochs, want', [(5, 5), (None, 1)])
def test_fedcurv_takes_the_tasks_client_epochs(client_epochs, want, shared,
                                               record):
  # binaries.train passes its resolved --client_epochs (the epochs each
  # client dataset holds); FedCurv's Fisher runs over one of them.
  build = record('build_fed_curv')
  registry.build_process('fedcurv', tiny.model_fn, **shared, lam=0.01,
                         fedcurv_exact='off', num_clients=10,
                         client_epochs=client_epochs)
  [(_, kwargs)] = build.calls
  assert kwargs['client_epochs'] == want
  # An algorithm that does not take it is not given it.
  build = record('build_fed_prox')
  registry.build_process('fedprox', tiny.model_fn, **shared, mu=0.1,
                         client_epochs=5)
  [(_, kwargs)] = build.calls
  assert 'client_epochs' not in kwargs


def test_fedadc_takes_client_sgd_learning_rate_and_no_server_optimizer(
    shared, record):
  build = record('build_fed_adc')
  registry.build_process('fedadc', tiny.model_fn, **shared,
                         client_learning_rate=0.05, beta=0.8,
                         beta_local=None, fedadc_variant='nesterov',
                         local_momentum=0.0)
  [(_, kwargs)] = build.calls
  assert kwargs.pop('client_learning_rate') == pytest.approx(0.05)
  assert kwargs == {
      'beta': 0.8, 'beta_local': None, 'variant': 'nesterov',
      'local_momentum': None,  # --local_momentum=0 is Algorithm 3.
      'client_weighting': shared['client_weighting'],
      'client_lr_schedule': shared['client_lr_schedule']}


def test_fedadc_plus_turns_distillation_on(shared, record):
  build = record('build_fed_adc')
  registry.build_process('fedadc_plus', tiny.model_fn, **shared,
                         client_learning_rate=0.05, beta=0.9,
                         fedadc_variant='heavy_ball', local_momentum=0.5,
                         distill_lambda=0.35, distill_temperature=4.0)
  [(_, kwargs)] = build.calls
  assert kwargs['distillation'] is True
  assert (kwargs['distill_lambda'], kwargs['distill_temperature'],
          kwargs['local_momentum'], kwargs['beta_local']) == (0.35, 4.0, 0.5,
                                                              None)


def test_fedadc_refuses_a_client_optimizer_other_than_sgd(record):
  record('build_fed_adc')
  flags = {**FLAGS, 'client_opt': 'sgdm'}
  shared = flag_adapters.shared_arguments(flags)
  with pytest.raises(ValueError, match=r'^--algorithm=fedadc takes its local '
                     r'steps with plain SGD; use --client_opt=sgd\.$'):
    registry.build_process('fedadc', tiny.model_fn, **shared,
                           client_learning_rate=(
                               flag_adapters.plain_sgd_learning_rate(flags)),
                           beta=0.9,
                           fedadc_variant='heavy_ball', local_momentum=0.0)


def test_fedptr_side_follows_the_algorithm(shared, record):
  build = record('build_fed_ptr')
  flags = dict(mu=0.01, images_per_class=2, mtt_outer_steps=3,
               mtt_inner_steps=4, projection_steps=5, layer_adaptive=False,
               update_every=0, mtt_init_lr=0.02, mtt_image_lr=10.0,
               mtt_lr_lr=1e-3, mtt_momentum=0.0)
  registry.build_process('fedptr_s', tiny.model_fn, **shared, **flags)
  registry.build_process('fedptr', tiny.model_fn, **shared, **flags)
  assert [kwargs for _, kwargs in build.calls] == [
      {'side': 'server', **flags, **shared},
      {'side': 'client', **flags, **shared}]


def test_fedbn_over_feddyn_passes_alpha_and_population(shared, record):
  build = record('build_fed_bn')
  model_fn = _named_model_fn('with_bn', batch_norm=True)
  registry.build_process('feddyn', model_fn, **shared, fedbn=True,
                         feddyn_alpha=0.1, num_clients=9)
  registry.build_process('fedcurv', model_fn, **shared, fedbn=True, lam=0.2,
                         num_clients=9)
  registry.build_process('fedcurv', model_fn, **shared, fedbn=True, lam=0.2,
                         num_clients=9, client_epochs=3)
  assert build.calls == [
      (('feddyn', model_fn), {'alpha': 0.1, 'num_clients': 9, **shared}),
      (('fedcurv', model_fn), {'lam': 0.2, 'client_epochs': 1, **shared}),
      (('fedcurv', model_fn), {'lam': 0.2, 'client_epochs': 3, **shared}),
  ]


def test_flag_error_line_without_value_or_task():
  error = flag_adapters.FlagError('fedbn', 'no batch norm.', about_model=True)
  assert str(error) == '--fedbn: no batch norm.'
  assert error.line(task='digits') == '--fedbn: task digits: no batch norm.'
  assert str(flag_adapters.FlagError('mu', 'too big.', value=0.5)) == (
      '--mu=0.5: too big.')
