"""tools.fedptr_layer_mu: d_l and mu_l read from checkpoints."""

import json
import os

import numpy as np
import pytest

from tasks import models



@pytest.fixture(scope='module')
def layer_mu():
  from tools import fedptr_layer_mu  # pylint: disable=g-import-not-at-top
  return fedptr_layer_mu


_SHAPES = [tuple(v.shape) for v in models.create_mtt_convnet(
    (28, 28, 1), 10).trainable_variables]
# The projected step of each Keras layer (a kernel and its bias, a norm
# layer's scale and offset): every entry of layer g moves by STEPS[g].
_STEPS = (1e-3, 1e-5, 2e-3, 1e-5, 1e-4, 1e-5, 5e-3)


def _write_run(run_dir, *, mu, layer_adaptive, round_=6, scalars=None):
  """A FedPTR-S run with one checkpoint after `round_`, in the saved layout."""
  previous = [np.full(s, 0.5, np.float32) for s in _SHAPES]
  projected = [p + np.float32(_STEPS[i // 2]) for i, p in enumerate(previous)]
  model = [np.zeros(s, np.float32) for s in _SHAPES]
  if scalars is None:
    scalars = [np.bool_(True), np.bool_(True), np.int32(round_ - 1),
               np.int32(round_ - 1)]
  leaves = (model + scalars + previous + projected +
            [np.zeros((100, 28, 28, 1), np.float32), np.float32(0.02),
             np.float32(0.0)])
  state = os.path.join(run_dir, 'checkpoints', f'program_state_{round_}')
  os.makedirs(state)
  np.savez(os.path.join(state, 'state.npz'),
           **{f'leaf_{i:06d}': x for i, x in enumerate(leaves)})
  with open(os.path.join(run_dir, 'hparams.json'), 'w') as f:
    json.dump({'algorithm': 'fedptr_s', 'mu': mu, 'client_lr': 0.01,
               'layer_adaptive': layer_adaptive}, f)


def _rows(table):
  return [line.split(' | ') for line in table.splitlines()
          if line.startswith('| 6 |')]


def test_mu_l_is_the_base_mu_over_the_layers_step_capped_at_one_over_lr(
    layer_mu, tmp_path):
  run = str(tmp_path / 'run')
  _write_run(run, mu=0.1, layer_adaptive=True)
  rows = _rows(layer_mu.layer_table(run))
  assert len(rows) == 7
  for g, row in enumerate(rows):
    size = sum(int(np.prod(s)) for s in _SHAPES[2 * g:2 * g + 2])
    d = _STEPS[g] * np.sqrt(size)
    mu_l = min(0.1 / d, 100.0)  # The cap: 1 / client_lr.
    assert float(row[2]) == pytest.approx(d, rel=2e-3), g
    assert float(row[3]) == pytest.approx(mu_l, rel=2e-3), g
    assert row[5] == ('yes |' if mu_l == 100.0 else 'no |'), g
  # The norm layers (steps of 1e-5 on 256 entries) are at the cap; the
  # first conv layer (1e-3 on 1,280) is not: 0.1 / 0.0358 = 2.80.
  assert [r[5] for r in rows] == ['no |', 'yes |', 'no |', 'yes |', 'no |',
                                  'yes |', 'no |']
  assert [r[1] for r in rows] == ['conv 1', 'norm 1', 'conv 2', 'norm 2',
                                  'conv 3', 'norm 3', 'dense']
  assert rows[0][2:4] == ['0.0358', '2.8']


def test_a_constant_mu_run_shows_its_mu_and_the_steps(layer_mu, tmp_path):
  run = str(tmp_path / 'run')
  _write_run(run, mu=1.0, layer_adaptive=False)
  rows = _rows(layer_mu.layer_table(run))
  assert [r[3] for r in rows] == ['1'] * 7
  assert [r[5] for r in rows] == ['no |'] * 7
  assert 'A constant mu = 1 (d_l for comparison)' in layer_mu.layer_table(run)


def test_a_file_of_another_layout_is_refused(layer_mu, tmp_path):
  run = str(tmp_path / 'run')
  _write_run(run, mu=0.1, layer_adaptive=True,
             scalars=[np.bool_(True), np.int32(5), np.int32(5),
                      np.int32(5)])
  path = os.path.join(run, 'checkpoints', 'program_state_6', 'state.npz')
  with pytest.raises(ValueError, match=(
      f'^{path}: leaf 15 is int32 \\(\\), expected a bool scalar '
      '\\(has_previous_projection\\); not a FedPTR-S state.$')):
    layer_mu.layer_table(run)


def test_a_checkpoint_whose_round_does_not_match_is_refused(layer_mu,
                                                            tmp_path):
  run = str(tmp_path / 'run')
  _write_run(run, mu=0.1, layer_adaptive=True,
             scalars=[np.bool_(True), np.bool_(True), np.int32(2),
                      np.int32(2)])
  with pytest.raises(ValueError, match='matching_rounds 2, expected 5 after '
                     'round 6'):
    layer_mu.layer_table(run)


def test_an_interrupted_save_is_not_read(layer_mu, tmp_path):
  # A kill during a save leaves program_state_<N>_temp<K>/ (see
  # tff_opt.program.checkpoints); the table has the complete checkpoints'
  # rounds only.
  run = str(tmp_path / 'run')
  _write_run(run, mu=0.1, layer_adaptive=True)
  temp = os.path.join(run, 'checkpoints', 'program_state_8_temp1')
  os.makedirs(temp)
  with open(os.path.join(temp, 'state.npz'), 'wb') as f:
    f.write(b'half')
  table = layer_mu.layer_table(run)
  assert len(_rows(table)) == 7
  assert '| 8 |' not in table


def test_a_run_without_checkpoints_is_refused(layer_mu, tmp_path):
  # A finished run cloned from the repository has no checkpoints/ folder.
  run = tmp_path / 'run'
  run.mkdir()
  (run / 'hparams.json').write_text(json.dumps(
      {'algorithm': 'fedptr_s', 'mu': 0.1, 'client_lr': 0.01,
       'layer_adaptive': True}))
  with pytest.raises(ValueError) as raised:
    layer_mu.layer_table(str(run))
  assert str(raised.value) == (
      f'{run}: no checkpoints/program_state_*/state.npz.')
