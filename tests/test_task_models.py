"""Parameter counts of the seven Reddi et al. task models, and their shapes."""

import numpy as np
import pytest
import tensorflow as tf

from tasks import emnist
from tasks import models_resnet
from tasks import shakespeare
from tasks import stackoverflow


def _count(model):
  return int(sum(np.prod(v.shape) for v in model.trainable_variables))


@pytest.mark.parametrize('build, expected', [
    (emnist.create_cr_model, 1_206_590),
    (emnist.create_ae_model, 2_837_314),
    (shakespeare.create_model, 820_522),
    (stackoverflow.create_nwp_model, 4_050_748),
    (stackoverflow.create_lr_model, 5_000_500),
    (lambda: models_resnet.create_resnet18_gn(num_classes=100), 11_220_132),
    (lambda: models_resnet.create_resnet18_gn(num_classes=10), 11_173_962),
], ids=['emnist_cr', 'emnist_ae', 'shakespeare', 'so_nwp', 'so_lr',
        'resnet18_gn_100', 'resnet18_gn_10'])
def test_trainable_parameter_counts(build, expected):
  assert _count(build()) == expected


def test_resnet_uses_two_group_norm_and_maps_crops_to_logits():
  model = models_resnet.create_resnet18_gn((24, 24, 3), num_classes=10)
  norms = [l for l in model.layers
           if isinstance(l, tf.keras.layers.GroupNormalization)]
  assert len(norms) == 20  # stem + 16 in blocks + 3 projections
  assert {l.groups for l in norms} == {2}
  assert model(tf.zeros([2, 24, 24, 3])).shape == (2, 10)


def test_resnet_rejects_one_class():
  with pytest.raises(ValueError, match=r'^num_classes must be at least 2, '
                     r'got 1\.$'):
    models_resnet.create_resnet18_gn(num_classes=1)
