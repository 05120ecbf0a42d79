"""Small helpers on TFF types: zeros of a type, and its size in bytes.

`num_bytes` is how tff-opt counts communication: the bytes of a value of a
type, sum over its tensors of (number of elements) x (dtype size), bool
counted as one byte. It is exact for fixed-shape types (models, Fisher
vectors, control variates) and raises for unknown dimensions.
"""

import collections

import attr
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff


def _np_dtype(dtype) -> np.dtype:
  return np.dtype(getattr(dtype, 'as_numpy_dtype', dtype))


def _tensor_types(value_type):
  if isinstance(value_type, tff.TensorType):
    return [value_type]
  if isinstance(value_type, tff.FederatedType):
    return _tensor_types(value_type.member)
  if isinstance(value_type, tff.StructType):
    out = []
    for _, element in tff.structure.iter_elements(value_type):
      out.extend(_tensor_types(element))
    return out
  raise TypeError(f'Cannot count the bytes of a value of type {value_type}.')


def num_bytes(value_type: tff.Type) -> int:
  """Bytes of one value of `value_type` (placement ignored).

  Args:
    value_type: A `tff.Type` made of tensors and structs.

  Returns:
    sum over its tensors of num_elements x dtype item size.

  Raises:
    TypeError: If the type has a sequence, function or unknown dimension.
  """
  total = 0
  for tensor_type in _tensor_types(value_type):
    shape = tensor_type.shape
    dims = list(shape) if shape is not None else None
    if dims is None or any(d is None for d in dims):
      raise TypeError(f'Cannot count the bytes of {tensor_type}: its shape '
                      'is not fully known.')
    total += int(np.prod(dims, dtype=np.int64)) * _np_dtype(
        tensor_type.dtype).itemsize
  return total


def zeros_of(value_type: tff.Type):
  """A NumPy value of `value_type` with every tensor zero (False for bool).

  Python containers of the type (ModelWeights, lists, OrderedDicts,
  named tuples, attrs classes) are kept.
  """
  if isinstance(value_type, tff.TensorType):
    return np.zeros(value_type.shape, _np_dtype(value_type.dtype))
  if not isinstance(value_type, tff.StructType):
    raise TypeError(f'Cannot build zeros of type {value_type}.')
  elements = [(name, zeros_of(element))
              for name, element in tff.structure.iter_elements(value_type)]
  container = getattr(value_type, 'python_container', None)
  names = [name for name, _ in elements]
  values = [value for _, value in elements]
  if container is None:
    if all(names):
      return collections.OrderedDict(elements)
    return values
  if container in (list, tuple):
    return container(values)
  if attr.has(container) or hasattr(container, '_fields'):
    return container(**dict(elements))
  if issubclass(container, dict):
    return container(elements)
  return container(*values)


def type_of(value) -> tff.Type:
  """The unplaced TFF type of a NumPy structure (containers kept)."""

  @tff.tensorflow.computation
  def constant():
    return tf.nest.map_structure(tf.constant, value)

  return constant.type_signature.result


def named_tuple_type(named_tuple_class, *field_types) -> tff.Type:
  """The TFF type of a `named_tuple_class` instance whose fields have
  `field_types` (in field order): TFF hands the value to TF functions as
  that NamedTuple.

  Raises:
    ValueError: If the number of types is not the number of fields.
  """
  fields = named_tuple_class._fields
  if len(field_types) != len(fields):
    raise ValueError(f'{named_tuple_class.__name__} has {len(fields)} fields '
                     f'({", ".join(fields)}), got {len(field_types)} types.')
  return tff.StructWithPythonType(list(zip(fields, field_types)),
                                  named_tuple_class)
