"""Every declared bound, held against the flag, the builder and the docs.

For each hyper-parameter of each registered algorithm with a bound (and each
enum), the value just outside it is refused by `binaries.train`'s flag
parser, by the algorithm's library builder and by the registry, each for
the same reason (the declaration's `HParam.check` sentence), and the range
the documentation shows (`docs/_ext/hparam_tables.py`, which the docs'
`algorithm-spec` tables and flag reference are made of) leaves it out; the
value at a closed bound (and each enum value) is accepted by all of them.
The builders are called for real, up to the assembly of their process,
which is replaced by a marker (building a process costs seconds and is the
algorithm tests' business): every builder checks its arguments before.
"""

import importlib.util
import os
import re

import pytest
import tensorflow as tf
import tensorflow_federated as tff

from binaries import train
from tests import tiny
from tff_opt.algorithms import recipe
from tff_opt.program import registry

_TABLES = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), 'docs', '_ext', 'hparam_tables.py')
_spec = importlib.util.spec_from_file_location('hparam_tables', _TABLES)
hparam_tables = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hparam_tables)

# Valid values of the flags an algorithm needs (they have no default).
_NEEDED_VALUES = {'fedcurv_lam': 1.0, 'fedprox_mu': 0.1, 'fedptr_mu': 0.1,
                  'moon_mu': 1.0}


def _values(hparam):
  """`(outside, inside)`: values just outside each bound, values at one."""
  if hparam.kind == 'enum':
    return [f'not_{hparam.choices[0]}'], list(hparam.choices)
  if hparam.kind not in ('float', 'integer'):
    return [], []
  step = 1 if hparam.kind == 'integer' else 1e-3
  outside, inside = [], []
  for bound, is_open, sign in ((hparam.lower, hparam.lower_open, -1),
                               (hparam.upper, hparam.upper_open, 1)):
    if bound is None:
      continue
    if hparam.kind == 'integer':
      bound = int(bound)
    if is_open:
      outside.append(bound)
    else:
      outside.append(bound + sign * step)
      inside.append(bound)
  return outside, inside


def _cases(which):
  cases = []
  for name, algorithm in sorted(registry.ALGORITHMS.items()):
    for hparam in algorithm.spec.hparams:
      for value in _values(hparam)[which]:
        cases.append(pytest.param(name, hparam, value,
                                  id=f'{name}-{hparam.flag}={value}'))
  return cases


OUTSIDE = _cases(0)
INSIDE = _cases(1)


def _reason(hparam, value) -> str:
  """The declaration's sentence for `value`."""
  with pytest.raises(ValueError) as error:
    hparam.check(value)
  return str(error.value)


def _flag_text(value) -> str:
  return str(value)


def _parse_flag(flag, value):
  """Parses `--flag=value` into `train.FLAGS`; `UsageError`'s line or None."""
  train.FLAGS.unparse_flags()
  try:
    train.parse_flags(['train', f'--{flag}={_flag_text(value)}'])
  except train.UsageError as e:
    return str(e)
  finally:
    train.FLAGS.unparse_flags()
  return None


def _projection_model_fn():
  """`tiny`'s model with MOON's projection layer (z) before the logits."""
  return tff.learning.models.from_keras_model(
      tf.keras.Sequential([
          tf.keras.layers.InputLayer(input_shape=(tiny.NUM_FEATURES,)),
          tf.keras.layers.Dense(4, name='projection'),
          tf.keras.layers.Dense(tiny.NUM_CLASSES)]),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=tiny.INPUT_SPEC)


def _model_fn(name):
  return _projection_model_fn if name == 'moon' else tiny.model_fn


@pytest.fixture(name='no_assembly')
def fixture_no_assembly(monkeypatch):
  """Builders stop at `recipe.assemble`, which returns a marker."""
  monkeypatch.setattr(recipe, 'assemble', lambda *args, **kwargs: 'built')


def _build(name, flag, value):
  """Algorithm `name`'s library builder, `flag`'s argument at `value`."""
  algorithm = registry.ALGORITHMS[name]
  spec = algorithm.spec
  arguments = {h.argument_name: _NEEDED_VALUES.get(h.flag, h.default)
               for h in spec.hparams}
  arguments[next(h.argument_name for h in spec.hparams
                 if h.flag == flag)] = value
  facts = {'num_clients': 4, 'client_epochs': 1}
  arguments.update({fact: facts[fact] for fact in spec.task_facts})
  arguments.update(spec.preset)
  if spec.server_rule == 'own':
    arguments['client_learning_rate'] = 0.1
  else:
    arguments.update(
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))
  return algorithm.builder(_model_fn(name), **arguments)


def _registry_build(name, flag, value):
  algorithm = registry.ALGORITHMS[name]
  settings = {h.flag: _NEEDED_VALUES.get(h.flag, h.default)
              for h in algorithm.spec.hparams}
  settings[flag] = value
  return registry.build_process(
      name, _model_fn(name),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
      client_lr_schedule=None, client_learning_rate=0.1, num_clients=4,
      client_epochs=1, **settings)


def _documented(hparam):
  """What the docs allow: `value -> bool`, read from the docs' own text."""
  row = dict(zip(hparam_tables.SPEC_HEADER, hparam_tables.spec_row(hparam)))
  term = hparam_tables.flag_term('type', 'default', hparam)
  if hparam.kind == 'enum':
    choices = re.fullmatch(r'enum \{(.*)\}', row['kind']).group(1).split(', ')
    assert term.endswith(f', one of {", ".join(choices)})')
    return lambda value: value in choices
  text = row['range']
  assert term.endswith(f', range {text})')
  interval = re.fullmatch(r'([\[(])(\S+), (\S+)([\])])', text)
  if interval:
    low, high = float(interval.group(2)), float(interval.group(3))
    return lambda v: ((v > low if interval.group(1) == '(' else v >= low) and
                      (v < high if interval.group(4) == ')' else v <= high))
  side, bound = re.fullmatch(r'(>=|>|<=|<) (\S+)', text).groups()
  bound = float(bound)
  return {'>=': lambda v: v >= bound, '>': lambda v: v > bound,
          '<=': lambda v: v <= bound, '<': lambda v: v < bound}[side]


def test_every_bound_and_enum_is_held():
  flags = {h.flag for a in registry.ALGORITHMS.values()
           for h in a.spec.hparams
           if h.kind == 'enum' or h.lower is not None or h.upper is not None}
  assert {p.values[1].flag for p in OUTSIDE} == flags
  assert len(OUTSIDE) > 40


@pytest.mark.parametrize('name, hparam, value', OUTSIDE)
def test_outside_a_bound_is_refused_everywhere(name, hparam, value,
                                               no_assembly):
  del no_assembly
  reason = _reason(hparam, value)
  assert hparam.requirement() in reason
  # The flag parser: the declaration's sentence (an enum's value: absl's
  # parser, naming the same choices).
  line = _parse_flag(hparam.flag, value)
  if hparam.kind == 'enum':
    assert line == (f'--{hparam.flag}={value}: expected '
                    f'{hparam.requirement()}.')
  else:
    assert line == f'--{hparam.flag}={_flag_text(value)}: {reason}'
  # The library builder: the same sentence, naming its argument.
  with pytest.raises(ValueError) as error:
    _build(name, hparam.flag, value)
  assert str(error.value) == reason
  # The registry: the same sentence, naming the flag.
  with pytest.raises(registry.FlagError) as error:
    _registry_build(name, hparam.flag, value)
  assert str(error.value) == f'--{hparam.flag}={value}: {reason}'
  # The documentation: its range leaves it out.
  assert not _documented(hparam)(value)


@pytest.mark.parametrize('name, hparam, value', INSIDE)
def test_a_closed_bound_is_accepted_everywhere(name, hparam, value,
                                               no_assembly):
  del no_assembly
  hparam.check(value)
  assert _parse_flag(hparam.flag, value) is None
  assert _build(name, hparam.flag, value) == 'built'
  assert _registry_build(name, hparam.flag, value) == 'built'
  assert _documented(hparam)(value)
