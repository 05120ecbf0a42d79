"""What `binaries.train` ran, recorded, to replay on a process built apart.

A binary test that checks only ranges and flags passes when the registry
builds the wrong algorithm. Recording each round's inputs and output state
of the process the binary built, and replaying those rounds on the process
the builder makes directly from the same arguments, checks what was built:
the bits must be the same (and differ from another algorithm's).
"""

import numpy as np
import tensorflow as tf

from binaries import train


class Recorder:
  """`train._build_process`, noting each `next`'s inputs and output state."""

  def __init__(self, monkeypatch):
    self.rounds = []
    self.hparams = self.model_fn = self.num_clients = None
    build = train._build_process  # pylint: disable=protected-access

    def recording_build(hparams, task, num_clients, **kwargs):
      self.hparams, self.model_fn = hparams, task.model_fn
      self.num_clients = num_clients
      process, shared = build(hparams, task, num_clients, **kwargs)
      return wrap_next(process, self._record), shared

    monkeypatch.setattr(train, '_build_process', recording_build)

  def replay(self, process):
    """Each recorded round's `next` on `process`: its output states.

    The state each round starts from is the recorded one, so a round that
    differs does not carry into the next.
    """
    return [_state_of(process.next(state, *inputs))
            for state, inputs, _ in self.rounds]

  def recorded_states(self):
    return [state for _, _, state in self.rounds]


  def _record(self, next_fn, state, *inputs):
    output = next_fn(state, *inputs)
    self.rounds.append((state, inputs, _state_of(output)))
    return output


def wrap_next(process, wrapper):
  """`process`, its `next(*args)` now `wrapper(original_next, *args)`.

  The process keeps its class (a subclass of it, made here), so what tells
  a client-stateful process from another (`isinstance`) still does.
  """
  base = type(process)

  class Wrapped(base):

    @property
    def next(self):
      original = super().next
      return lambda *args: wrapper(original, *args)

  Wrapped.__name__ = base.__name__
  process.__class__ = Wrapped
  return process


def _state_of(output):
  if hasattr(output, 'state'):
    return output.state
  return output[0].state  # A client-stateful process: (output, states).


def flat(structure):
  return [np.asarray(t) for t in tf.nest.flatten(structure)]


def assert_same_bits(got, want):
  got, want = flat(got), flat(want)
  assert len(got) == len(want)
  for g, w in zip(got, want):
    np.testing.assert_array_equal(g, w)


def max_difference(a, b):
  return max(float(np.abs(x.astype(np.float64) - y).max())
             for x, y in zip(flat(a), flat(b)) if x.size)
