"""The per-layer mu_l FedPTR-S's clients trained with, read from checkpoints.

`tff_opt/algorithms/fed_ptr.py` reconstructs the paper's lost layer-adaptive
mu as mu_l = mu / d_l, d_l = ||w~^l_{t+1} - w^l_t|| (the layer's projected
step), capped at 1 / eta. The metrics files do not log d_l, so this script
reads it from a run's checkpoints: `program_state_<t>/state.npz` holds the
FedPTR-S distributor's state after round t, that is w_{t-1} (the model it
broadcast in round t) and w~_t (the projection it broadcast with it). For
each layer it prints d_l and the mu_l the package's own `fed_ptr.layer_mu`
gives for the run's base mu and client learning rate, and whether the cap
bound it (for a run with a constant mu, `--nofedptr_layer_adaptive`, mu_l
is that mu and d_l is there for comparison).

The checkpoint stores leaves, not their structure
(`tff_opt.program.checkpoints`); in `tree.flatten` order a FedPTR-S
program state starts with the global model's n trainable tensors, then the
distributor's state in sorted-key order: has_previous, has_previous_projection,
matching_rounds, mtt_updates, previous_model_weights (n), previous_projected_weights
(n), synthetic_images, synthetic_lr. `read_round` checks that layout (the
kinds of the four scalars, matching_rounds = t - 1 for a run whose every
round had a previous model but the first, the three blocks' shapes against
each other and against `mtt_convnet`'s) and refuses a file that does not
fit it.

Usage (from the repository root):

    .venv/bin/python -m tools.fedptr_layer_mu RUN_DIR [RUN_DIR ...]

It writes Markdown to stdout; `results/claims/fedptr/layer_mu.md` is its
output on the claim's runs, with what it shows (its header says which
checkpoints it read and how to get them back from this repository's
history).
"""

import json
import os
import re
import sys

import numpy as np

_STATE_FILE = 'state.npz'  # `tff_opt.program.checkpoints.STATE_FILE`.
_VERSION = re.compile(r'^program_state_(\d+)$')
_SCALARS = (('has_previous', np.bool_), ('has_previous_projection', np.bool_),
            ('matching_rounds', np.int32), ('mtt_updates', np.int32))


def _model(images_shape, num_classes):
  """mtt_convnet's trainable shapes, layer names and `trainable_layer_groups`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tasks import models  # pylint: disable=g-import-not-at-top
  from tff_opt.algorithms import fed_ptr  # pylint: disable=g-import-not-at-top

  def model_fn():
    keras_model = models.create_mtt_convnet(tuple(images_shape), num_classes)
    return tff.learning.models.from_keras_model(
        keras_model,
        input_spec=(tf.TensorSpec((None, *images_shape), tf.float32),
                    tf.TensorSpec((None,), tf.int32)),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

  groups = fed_ptr.trainable_layer_groups(model_fn)
  keras_model = models.create_mtt_convnet(tuple(images_shape), num_classes)
  shapes = [tuple(v.shape) for v in keras_model.trainable_variables]
  # The layers with weights, in model order (the groups' order): "conv 1",
  # "norm 1", ..., "dense" (Keras's own names carry a process-wide count).
  kinds = {'Conv2D': 'conv', 'GroupNormalization': 'norm', 'Dense': 'dense'}
  names, seen = [], {}
  for layer in keras_model.layers:
    if layer.trainable_weights:
      kind = kinds.get(type(layer).__name__, type(layer).__name__)
      seen[kind] = seen.get(kind, 0) + 1
      names.append(f'{kind} {seen[kind]}')
  if len(names) != len(set(groups)):
    raise ValueError(f'{len(names)} layers with weights, '
                     f'{len(set(groups))} layer groups.')
  return shapes, groups, [n if seen[n.split()[0]] > 1 else n.split()[0]
                          for n in names]


def read_round(state_path):
  """(w_{t-1}, w~_t, matching_rounds, images shape, classes) of a checkpoint.

  n, the model's trainable tensors, is the number of leaves before the
  first scalar (has_previous); the classes are the last trainable's (the
  dense bias) length.

  Raises:
    ValueError: If the file's leaves do not have the layout of the module
      docstring.
  """
  with np.load(state_path, allow_pickle=False) as z:
    leaves = [z[f'leaf_{i:06d}'] for i in range(len(z.files))]
  n = next((i for i, x in enumerate(leaves) if not x.shape), len(leaves))
  if n == 0 or len(leaves) < 3 * n + 6:
    raise ValueError(f'{state_path}: {len(leaves)} leaves, the first scalar '
                     f'at {n}; not a FedPTR-S state.')
  for i, (name, kind) in enumerate(_SCALARS):
    leaf = leaves[n + i]
    if leaf.shape or leaf.dtype != kind:
      raise ValueError(f'{state_path}: leaf {n + i} is {leaf.dtype} '
                       f'{leaf.shape}, expected a {np.dtype(kind)} scalar '
                       f'({name}); not a FedPTR-S state.')
  blocks = [leaves[0:n], leaves[n + 4:2 * n + 4], leaves[2 * n + 4:3 * n + 4]]
  shapes = [x.shape for x in blocks[0]]
  if any([x.shape for x in b] != shapes for b in blocks[1:]):
    raise ValueError(f'{state_path}: the three weight blocks differ in shape; '
                     'not a FedPTR-S state.')
  images = leaves[3 * n + 4]
  if images.ndim != 4:
    raise ValueError(f'{state_path}: leaf {3 * n + 4} has shape '
                     f'{images.shape}, expected the synthetic images.')
  return (blocks[1], blocks[2], int(leaves[n + 2]), images.shape[1:],
          int(blocks[0][-1].shape[0]))


def saved_rounds(run_dir):
  """Rounds whose checkpoint in `run_dir` is complete (has its state file).

  A save cut by a kill (`program_state_<N>_temp<K>/`) is not one, and a
  run with no `checkpoints/` folder (a finished run, cloned) has none.
  """
  folder = os.path.join(run_dir, 'checkpoints')
  if not os.path.isdir(folder):
    return []
  return sorted(int(m.group(1)) for m in map(_VERSION.match,
                                               os.listdir(folder))
                if m and os.path.isfile(os.path.join(folder, m.group(0),
                                                     _STATE_FILE)))


def layer_table(run_dir):
  """Markdown: each checkpoint's d_l and mu_l, one row per layer.

  Raises:
    ValueError: If `run_dir` is not a FedPTR-S run with checkpoints of the
      layout in the module docstring, or of another model than
      `mtt_convnet`.
  """
  from tff_opt.algorithms import fed_ptr  # pylint: disable=g-import-not-at-top
  from tff_opt.algorithms import hparams  # pylint: disable=g-import-not-at-top
  with open(os.path.join(run_dir, 'hparams.json'), encoding='utf-8') as f:
    # Runs recorded before `--fedptr_mu` was named so say `mu`.
    hp = hparams.with_current_names(json.load(f), fed_ptr.SPEC.hparams)
  if hp.get('algorithm') != 'fedptr_s':
    raise ValueError(f'{run_dir}: algorithm {hp.get("algorithm")!r}, '
                     'expected fedptr_s.')
  rounds = saved_rounds(run_dir)
  if not rounds:
    raise ValueError(f'{run_dir}: no checkpoints/program_state_*/state.npz.')
  mu, lr = float(hp['fedptr_mu']), float(hp['client_lr'])
  adaptive = bool(hp['fedptr_layer_adaptive'])
  cap = 1.0 / lr
  lines = [f'## {os.path.basename(run_dir.rstrip(os.sep))}', '',
           (f'Layer-adaptive, base mu {mu:g}, client lr {lr:g} (mu_l capped '
            f'at 1/lr = {cap:g}).' if adaptive else
            f'A constant mu = {mu:g} (d_l for comparison), client lr '
            f'{lr:g}.'), '',
           '| round | layer | d_l | mu_l | mu_l / mu | at the cap |',
           '|---|---|---|---|---|---|']
  model = None
  for t in rounds:
    path = os.path.join(run_dir, 'checkpoints', f'program_state_{t}',
                        _STATE_FILE)
    previous, projected, matching, image_shape, classes = read_round(path)
    if model is None:
      model = _model(image_shape, classes)
    shapes, groups, names = model
    if [x.shape for x in previous] != shapes:
      raise ValueError(f'{path}: tensor shapes {[x.shape for x in previous]} '
                       f'are not mtt_convnet\'s {shapes}.')
    if matching != t - 1:
      raise ValueError(f'{path}: matching_rounds {matching}, expected '
                       f'{t - 1} after round {t}.')
    mus = [float(m) for m in fed_ptr.layer_mu(
        projected, previous, mu=mu, layer_adaptive=adaptive,
        layer_groups=groups, max_mu=cap)]
    for g, name in enumerate(names):
      members = [i for i, x in enumerate(groups) if x == g]
      d = float(np.sqrt(sum(
          np.sum(np.square(projected[i].astype(np.float64) -
                           previous[i].astype(np.float64)))
          for i in members)))
      m = mus[members[0]]
      at_cap = adaptive and m >= cap * (1 - 1e-6)
      lines.append(f'| {t} | {name} | {d:.3g} | {m:.3g} | {m / mu:.3g} | '
                   f'{"yes" if at_cap else "no"} |')
  return '\n'.join(lines) + '\n'


def main(argv):
  if len(argv) < 2:
    print('usage: python -m tools.fedptr_layer_mu RUN_DIR [RUN_DIR ...]',
          file=sys.stderr)
    sys.exit(2)
  try:
    tables = [layer_table(d) for d in argv[1:]]
  except (OSError, ValueError) as e:
    print(f'fedptr_layer_mu: {e}', file=sys.stderr)
    sys.exit(2)
  print('\n'.join(tables), end='')


if __name__ == '__main__':
  main(sys.argv)
