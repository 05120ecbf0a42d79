"""`tff_opt/tff_types.py`: the bytes of a TFF type, zeros of a type.

`num_bytes` (how communication is counted: elements x dtype size, bool one
byte, placement ignored) on types whose size is worked out by hand here;
`zeros_of` keeps the type's Python containers; `type_of` of a NumPy value;
`named_tuple_type` of a broadcast NamedTuple.
"""

import collections
from typing import Any, NamedTuple

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_opt import tff_types

Pair = collections.namedtuple('Pair', ['left', 'right'])


def test_num_bytes_is_elements_times_dtype_size():
  value_type = tff.types.to_type(collections.OrderedDict(
      kernel=(np.float32, [3, 4]),     # 12 x 4 = 48
      steps=(np.int64, [2]),           # 2 x 8 = 16
      flag=np.bool_,                   # 1
      nested=[(np.float16, [5]),       # 5 x 2 = 10
              (np.float64, [2, 1])]))  # 2 x 8 = 16
  assert tff_types.num_bytes(value_type) == 48 + 16 + 1 + 10 + 16
  # Placement does not count.
  assert tff_types.num_bytes(
      tff.FederatedType(value_type, tff.CLIENTS)) == 91


def test_num_bytes_of_the_tiny_model_is_its_float32_count_times_4():
  weights_type = tff.types.tensorflow_to_type(
      tff.learning.models.ModelWeights(
          trainable=[tf.TensorSpec((4, 3), tf.float32),
                     tf.TensorSpec((3,), tf.float32)],
          non_trainable=[]))
  assert tff_types.num_bytes(weights_type) == (4 * 3 + 3) * 4


@pytest.mark.parametrize('value_type', [
    tff.TensorType(np.float32, [None, 3]),
    tff.SequenceType(tff.TensorType(np.float32, [2])),
])
def test_num_bytes_refuses_what_has_no_fixed_size(value_type):
  with pytest.raises(TypeError, match='^Cannot count the bytes of'):
    tff_types.num_bytes(value_type)


def test_zeros_of_keeps_containers_dtypes_and_shapes():
  value_type = tff.types.tensorflow_to_type(collections.OrderedDict(
      weights=tff.learning.models.ModelWeights(
          trainable=[tf.TensorSpec((2, 3), tf.float32)],
          non_trainable=[tf.TensorSpec((), tf.int32)]),
      flag=tf.TensorSpec((), tf.bool),
      pair=Pair(tf.TensorSpec((2,), tf.float64),
                tf.TensorSpec((1,), tf.int64))))
  zeros = tff_types.zeros_of(value_type)
  assert isinstance(zeros, collections.OrderedDict)
  assert list(zeros) == ['weights', 'flag', 'pair']
  assert isinstance(zeros['weights'], tff.learning.models.ModelWeights)
  kernel, = zeros['weights'].trainable
  assert kernel.dtype == np.float32 and kernel.shape == (2, 3)
  assert not kernel.any()
  assert zeros['weights'].non_trainable[0].dtype == np.int32
  assert zeros['flag'].dtype == np.bool_ and not zeros['flag']
  assert isinstance(zeros['pair'], Pair)
  assert zeros['pair'].left.dtype == np.float64
  np.testing.assert_array_equal(zeros['pair'].right, [0])
  # zeros_of(t) is a value of t.
  assert tff_types.type_of(zeros).is_equivalent_to(value_type)


def test_type_of_a_numpy_structure():
  value_type = tff_types.type_of(
      collections.OrderedDict(a=np.zeros((2, 3), np.float32),
                              b=[np.int32(1), np.ones(4, np.float64)]))
  assert value_type.is_equivalent_to(tff.types.to_type(
      collections.OrderedDict(a=(np.float32, [2, 3]),
                              b=[np.int32, (np.float64, [4])])))
  assert tff_types.num_bytes(value_type) == 24 + 4 + 32


class Labelled(NamedTuple):
  model_weights: Any
  label: Any


def test_named_tuple_type_is_a_struct_of_the_class_with_its_fields():
  weights_type = tff.types.tensorflow_to_type(
      tff.learning.models.ModelWeights(
          trainable=[tf.TensorSpec((2,), tf.float32)], non_trainable=[]))
  value_type = tff_types.named_tuple_type(
      Labelled, weights_type, tff.TensorType(np.int32))
  assert isinstance(value_type, tff.StructWithPythonType)
  assert value_type.python_container is Labelled
  assert [name for name, _ in tff.structure.iter_elements(value_type)] == [
      'model_weights', 'label']
  assert value_type.model_weights == weights_type
  assert value_type.label == tff.TensorType(np.int32)
  # Its zeros are a `Labelled` (`zeros_of` keeps the container).
  zeros = tff_types.zeros_of(value_type)
  assert isinstance(zeros, Labelled) and zeros.label == 0


@pytest.mark.parametrize('types', [(), (np.float32,),
                                   (np.float32, np.int32, np.bool_)])
def test_named_tuple_type_needs_one_type_per_field(types):
  with pytest.raises(ValueError) as raised:
    tff_types.named_tuple_type(Labelled, *[tff.TensorType(t) for t in types])
  assert str(raised.value) == (
      f'Labelled has 2 fields (model_weights, label), got {len(types)} '
      'types.')
