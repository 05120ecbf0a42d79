"""Client learning-rate schedules: round number -> learning rate.

A schedule is a plain callable `schedule(round_num) -> learning_rate` that
works on int32 `tf.Tensor`s (it is traced inside a TFF computation) and on
Python ints (for printing and tests). Rounds count from 0.

`staircase_decay` is the "ExpDecay" schedule of Reddi et al., Appendix E.6:
the client learning rate is multiplied by 0.1 every 500 rounds.
"""

from collections.abc import Callable

import tensorflow as tf

from tff_opt import checks

Schedule = Callable[[tf.Tensor], tf.Tensor]


def constant(learning_rate: float) -> Schedule:
  """Returns the schedule that is `learning_rate` in every round.

  Raises:
    ValueError: If `learning_rate` is negative.
  """
  if learning_rate < 0:
    raise ValueError(
        f'learning_rate must be non-negative, got {learning_rate!r}.')

  def schedule(round_num):
    del round_num
    return tf.constant(learning_rate, tf.float32)

  return schedule


def staircase_decay(learning_rate: float,
                    *,
                    decay_factor: float = 0.1,
                    decay_every: int = 500) -> Schedule:
  """Returns lr_t = learning_rate * decay_factor ** floor(t / decay_every).

  Args:
    learning_rate: The learning rate of rounds 0 .. decay_every - 1.
    decay_factor: The factor applied every `decay_every` rounds, in (0, 1].
    decay_every: The number of rounds between two decays.

  Raises:
    ValueError: If an argument is out of range; the message names it.
  """
  if learning_rate < 0:
    raise ValueError(
        f'learning_rate must be non-negative, got {learning_rate!r}.')
  if not 0 < decay_factor <= 1:
    raise ValueError(f'decay_factor must be in (0, 1], got {decay_factor!r}.')
  checks.check_positive('decay_every', decay_every)

  def schedule(round_num):
    steps = tf.math.floordiv(tf.cast(round_num, tf.int32), decay_every)
    return learning_rate * tf.pow(
        tf.constant(decay_factor, tf.float32), tf.cast(steps, tf.float32))

  return schedule
