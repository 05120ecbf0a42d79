"""What a first run shows: elapsed time and an ETA on every round's line,
and a start line where a task's defaults are slow."""

import re

import tensorflow as tf
import tensorflow_federated as tff

import tasks
from tests import tiny
from tff_opt import algorithms
from tff_opt.program import training_loop


def test_durations_and_the_eta_at_the_pace_so_far():
  assert training_loop.format_duration(0.4) == '0:00'
  assert training_loop.format_duration(65) == '1:05'
  assert training_loop.format_duration(3725) == '1:02:05'
  # 2 rounds in 130 s, 3 left: 195 s more.
  assert training_loop.progress(130, 2, 3) == 'elapsed 2:10  eta 3:15'
  assert training_loop.progress(130, 2, 0) == 'elapsed 2:10  eta 0:00'
  # The first round (its 100 s include tracing) is left out of the pace once
  # a later one finished: (130 - 100) / 1 s a round for the 3 left.
  assert training_loop.progress(130, 2, 3, first=100) == (
      'elapsed 2:10  eta 1:30')
  assert training_loop.progress(100, 1, 3, first=100) == (
      'elapsed 1:40  eta 5:00')


def test_every_round_line_ends_with_elapsed_and_eta():
  process = algorithms.build_fed_opt(
      tiny.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))
  x, y = tiny.make_clients(num_clients=1)[0]
  lines = []
  training_loop.run_training(
      process, client_ids=['a'], clients_per_round=1, rounds=2,
      client_dataset_fn=lambda _: tf.data.Dataset.from_tensor_slices(
          (x, y)).batch(4), log=lines.append)
  rounds = [line for line in lines if line.startswith('round ')]
  assert len(rounds) == 2
  for line in rounds:
    assert re.search(r'  \d+\.\d\ds  elapsed \d+:\d\d  eta \d+:\d\d$',
                     line), line
  assert rounds[-1].endswith('eta 0:00')


def test_shakespeare_start_line_names_the_faster_flag_and_its_gain():
  note = tasks.task_start_note('shakespeare', {'client_vectorization': 0})
  assert note.startswith('note: --client_vectorization=10 trains each '
                         'round\'s clients in groups of 10, 1.25x faster')
  assert tasks.task_start_note('shakespeare',
                               {'client_vectorization': 10}) is None


def test_mnist5k_start_line_names_the_paper_setting_of_its_defaults():
  defaults = tasks.task_defaults('mnist5k')
  hparams = {'client_lr': defaults.client_lr,
             'server_opt': defaults.server_optimizer}
  note = tasks.task_start_note('mnist5k', hparams)
  assert note.startswith('note: --task=mnist5k\'s defaults follow FedFOR\'s '
                         'and FedBN\'s local training (client SGD lr 0.01, '
                         'batch 32, 1 epoch; FedAvg): ')
  assert '--client_lr=0.1' in note
  assert tasks.task_start_note('mnist5k', {**hparams,
                                           'client_lr': 0.1}) is None
  assert tasks.task_start_note('digits', hparams) is None
