"""The heterogeneity partitioners (tasks/partitioners.py, tasks/heterogeneity.py).

NumPy properties of every partitioner (sizes, determinism, the promise each
makes, empty clients), the `digits` task options that select them, and one
2-round binary run with long-tail rounds and concept shift.
"""

import collections
import json
import os
import warnings

import numpy as np
import pytest

import tasks
from tasks import digits
from tasks import heterogeneity
from tasks import partitioners
from tests import binary

# MNIST's training class counts (LeCun et al.), 60,000 examples.
MNIST_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]


def _labels(counts, seed=0):
  return np.random.default_rng(seed).permutation(
      np.repeat(np.arange(len(counts)), counts))


def _disjoint(partition):
  everything = np.concatenate(partition)
  return np.unique(everything).size == everything.size


def _same(a, b):
  return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


# --- Dirichlet over clients (FedPTR's) and empty clients ---------------------


def test_dirichlet_class_covers_every_example_once_and_is_seeded():
  labels = _labels([150] * 10)
  part = partitioners.dirichlet_class_partition(labels, 20, 0.5, seed=4)
  assert len(part) == 20 and _disjoint(part)
  assert sum(len(p) for p in part) == 1500  # Nothing is lost.
  assert _same(part, partitioners.dirichlet_class_partition(
      labels, 20, 0.5, seed=4))
  assert not _same(part, partitioners.dirichlet_class_partition(
      labels, 20, 0.5, seed=5))
  # A huge alpha gives every client ~1/20 of every class.
  flat = partitioners.dirichlet_class_partition(labels, 20, 1e4, seed=0)
  counts = np.stack([np.bincount(labels[p], minlength=10) for p in flat])
  assert np.abs(counts - 7.5).max() <= 2


def test_alpha_001_leaves_clients_empty_and_keep_reports_them():
  labels = _labels([144] * 10)  # digits-sized: 1,440 examples, 40 clients.
  part = partitioners.dirichlet_class_partition(labels, 40, 0.01, seed=0)
  empty = [k for k, p in enumerate(part) if len(p) == 0]
  assert len(part) == 40 and len(empty) >= 10  # FedPTR's observation.
  summary = partitioners.partition_summary(labels, part)
  assert summary['num_empty_clients'] == len(empty)
  assert summary['empty_clients'] == empty
  assert summary['size_min'] == 0 and summary['num_examples'] == 1440
  # Non-empty clients hold (nearly) one class each at alpha = 0.01.
  assert summary['mean_max_class_share'] > 0.8


def test_drop_warns_with_the_count_and_error_refuses():
  labels = _labels([144] * 10)
  kept = partitioners.dirichlet_class_partition(labels, 40, 0.01, seed=0)
  num_empty = sum(len(p) == 0 for p in kept)
  with pytest.warns(partitioners.EmptyClientsWarning,
                    match=f'^{num_empty} of 40 clients got no examples and '
                    'were dropped'):
    dropped = partitioners.dirichlet_class_partition(
        labels, 40, 0.01, seed=0, empty_clients='drop')
  assert _same(dropped, [p for p in kept if len(p)])
  first = ', '.join([str(k) for k, p in enumerate(kept) if len(p) == 0][:10])
  with pytest.raises(ValueError) as error:
    partitioners.dirichlet_class_partition(labels, 40, 0.01, seed=0,
                                           empty_clients='error')
  assert str(error.value) == (
      f'{num_empty} of 40 clients got no examples (clients {first}, ...); '
      "use empty_clients='keep' or 'drop', a larger alpha or fewer clients.")
  with warnings.catch_warnings():
    warnings.simplefilter('error')  # No empty client: no warning.
    partitioners.dirichlet_class_partition(labels, 4, 100.0, seed=0,
                                           empty_clients='drop')


@pytest.mark.parametrize('kwargs, message', [
    (dict(alpha=0.0), 'alpha must be positive, got 0.0.'),
    (dict(num_clients=0), 'num_clients must be at least 1, got 0.'),
    (dict(empty_clients='skip'),
     "empty_clients must be one of keep, drop, error, got 'skip'."),
])
def test_dirichlet_class_errors(kwargs, message):
  args = {'num_clients': 5, 'alpha': 0.5, **kwargs}
  with pytest.raises(ValueError) as error:
    partitioners.dirichlet_class_partition(np.arange(10) % 2, seed=0, **args)
  assert str(error.value) == message


# --- Sort and partition: exactly s classes ----------------------------------


@pytest.mark.parametrize('s', [2, 3, 4])
def test_distinct_sort_gives_exactly_s_classes(s):
  labels = np.random.default_rng(0).integers(0, 10, size=1437)
  part = partitioners.sort_and_partition(labels, 100, s, seed=1,
                                         distinct_classes=True)
  assert len(part) == 100 and _disjoint(part)
  assert len({len(p) for p in part}) == 1
  size = len(part[0])
  assert size % s == 0
  for p in part:
    classes, counts = np.unique(labels[p], return_counts=True)
    assert classes.size == s
    assert set(counts) == {size // s}  # one class-pure shard per class
  again = partitioners.sort_and_partition(labels, 100, s, seed=1,
                                          distinct_classes=True)
  assert _same(part, again)


def test_distinct_sort_refuses_more_classes_than_there_are():
  with pytest.raises(ValueError) as error:
    partitioners.sort_and_partition(np.arange(30) % 3, 5, 4, seed=0,
                                    distinct_classes=True)
  assert str(error.value) == (
      'classes_per_client (4) exceeds the number of classes (3); '
      'distinct_classes needs at least as many classes.')


def test_random_sort_keeps_its_old_deal():
  # distinct_classes=False is the FedADC paper's "at most s" deal: some
  # client gets two shards of one class.
  labels = np.random.default_rng(0).integers(0, 10, size=1437)
  part = partitioners.sort_and_partition(labels, 100, 2, seed=1)
  assert min(np.unique(labels[p]).size for p in part) == 1


# --- FedCurv's 96 x 2 blocks -------------------------------------------------


def test_fedcurv_split_on_mnist_counts():
  labels = _labels(MNIST_COUNTS)
  part = partitioners.fedcurv_partition(labels, seed=0)
  # By hand: 60,000 // 192 = 312 gives sum floor(n_c / 312) = 188 < 192;
  # 306 is the largest size giving >= 192 blocks (193), so 1,248 examples
  # (60,000 - 192 * 306) go to no device.
  assert len(part) == 96 and _disjoint(part)
  assert {len(p) for p in part} == {612}
  assert sum(len(p) for p in part) == 60000 - 1248
  for p in part:
    counts = np.bincount(labels[p], minlength=10)
    assert np.all(counts % 306 == 0) and counts.sum() == 2 * 306
  assert _same(part, partitioners.fedcurv_partition(labels, seed=0))


# --- Pachinko allocation -----------------------------------------------------


def test_pachinko_sizes_no_overlap_and_determinism():
  fine = _labels([500] * 100)  # CIFAR-100-shaped: 50,000, 5 fine / coarse.
  coarse = fine // 5
  part = partitioners.pachinko_partition(coarse, fine, 500, 0.1, 10.0,
                                         seed=0)
  assert len(part) == 500 and {len(p) for p in part} == {100}
  assert _disjoint(part) and sum(map(len, part)) == 50000
  # Reddi et al., Figure 14: most clients hold 20-30 distinct labels.
  distinct = np.array([np.unique(fine[p]).size for p in part])
  assert 18 < np.median(distinct) < 32
  assert _same(part[:5], partitioners.pachinko_partition(
      coarse, fine, 500, 0.1, 10.0, seed=0)[:5])


def test_pachinko_alpha_and_beta_shape_the_two_levels():
  fine = _labels([200] * 20)
  coarse = fine // 4  # 5 coarse labels of 4 fine labels.

  def coarse_and_fine_per_client(alpha, beta):
    part = partitioners.pachinko_partition(
        coarse, fine, 20, alpha, beta, seed=1, examples_per_client=50)
    first = part[:5]  # Before the pools run low.
    return (np.mean([np.unique(coarse[p]).size for p in first]),
            np.mean([np.unique(fine[p]).size / np.unique(coarse[p]).size
                     for p in first]))

  few_coarse, _ = coarse_and_fine_per_client(0.01, 10.0)
  many_coarse, many_fine = coarse_and_fine_per_client(100.0, 100.0)
  _, few_fine = coarse_and_fine_per_client(100.0, 0.01)
  assert few_coarse < 1.5 and many_coarse > 4.5
  assert few_fine < 1.5 and many_fine > 3.5


def test_pachinko_needs_a_tree():
  with pytest.raises(ValueError) as error:
    partitioners.pachinko_partition([0, 1, 0, 1], [5, 5, 6, 6], 2, 1.0, 1.0,
                                    seed=0)
  assert str(error.value) == ('fine label 5 sits under several coarse labels '
                              '(0, 1); Pachinko allocation needs a tree.')


# --- One domain per client ---------------------------------------------------


def test_one_domain_per_client_assignment():
  clients = partitioners.one_domain_per_client([10, 7, 9], 7, seed=0)
  assert [d for d, _ in clients] == [0, 1, 2, 0, 1, 2, 0]
  for d, size in enumerate([10, 7, 9]):
    mine = [idx for dom, idx in clients if dom == d]
    assert np.array_equal(np.sort(np.concatenate(mine)), np.arange(size))
    assert max(map(len, mine)) - min(map(len, mine)) <= 1
  # FedBN: one client per domain, all of it.
  fedbn = partitioners.one_domain_per_client([np.zeros(4), np.zeros(6)],
                                             seed=0)
  assert [(d, len(i)) for d, i in fedbn] == [(0, 4), (1, 6)]
  with pytest.raises(ValueError) as error:
    partitioners.one_domain_per_client([3, 3, 3], 2, seed=0)
  assert str(error.value) == ('num_clients (2) is smaller than the number of '
                              'domains (3).')


def test_domain_transforms_exact():
  images = np.random.default_rng(0).random((3, 8, 8, 1)).astype(np.float32)
  t = partitioners.apply_domain_transform
  np.testing.assert_array_equal(t(images, 0), images)
  np.testing.assert_allclose(t(images, 1), 1.0 - images)
  np.testing.assert_array_equal(t(images, 2)[0, :, :, 0],
                                np.rot90(images[0, :, :, 0]))
  np.testing.assert_allclose(t(images, 3), images**0.4, rtol=1e-6)
  noisy = t(images, 4, seed=7)
  np.testing.assert_array_equal(noisy, t(images, 4, seed=7))
  assert 0.1 < np.std(noisy - images) < 0.25 and noisy.min() >= 0
  np.testing.assert_array_equal(t(images, 5), images[:, :, ::-1])
  with pytest.raises(ValueError, match=r'^domain must be in \[0, 6\)'):
    t(images, 6)


# --- Long-tail rounds (FedFOR 4.2) -------------------------------------------


def test_long_tail_counts_by_hand():
  # 500 * 0.01^(i/9), floored: 299.74, 179.69, 107.72, 64.58, 38.71, ...
  np.testing.assert_array_equal(
      partitioners.long_tail_counts(10, 500, 0.01),
      [500, 299, 179, 107, 64, 38, 23, 13, 8, 5])
  assert list(partitioners.long_tail_counts(1, 7, 0.01)) == [7]


def test_long_tail_round_clients():
  labels = _labels([5000] * 10)  # CIFAR-10-shaped.
  rounds = partitioners.LongTailRounds(labels, fraction=0.1,
                                       imbalance_ratio=0.01)
  assert rounds.max_clients_per_round == 10
  clients = rounds.clients_for_round(3, 10, seed=0)
  assert len(clients) == 10 and _disjoint(clients)
  heads = set()
  for idx in clients:
    counts = np.bincount(labels[idx], minlength=10)
    ranked = np.sort(counts)[::-1]
    np.testing.assert_array_equal(
        ranked, partitioners.long_tail_counts(10, ranked[0], 0.01))
    assert abs(ranked[-1] - 0.01 * ranked[0]) < 1  # ratio 0.01, to rounding
    assert 440 < ranked[0] < 500  # smallest class of a 10 % sample
    heads.add(int(np.argmax(counts)))
  assert len(heads) > 3  # every client draws its own class ranking
  # ~2.5 % of the training data per client, as the paper says.
  assert 0.022 < np.mean([len(c) for c in clients]) / labels.size < 0.025
  # A function of (seed, round): same again, other round / seed differs.
  assert _same(clients, rounds.clients_for_round(3, 10, seed=0))
  assert not _same(clients, rounds.clients_for_round(4, 10, seed=0))
  assert not _same(clients, rounds.clients_for_round(3, 10, seed=1))
  with pytest.raises(ValueError, match=r'^num_clients must be in \[1, 10\]'):
    rounds.clients_for_round(1, 11, seed=0)


def test_long_tail_clients_are_new_every_round():
  seen = collections.Counter()
  for r in range(1, 51):
    seen.update(partitioners.LongTailRounds.client_ids(r, 10))
  assert len(seen) == 500 and max(seen.values()) == 1


# --- Concept shift (FedFOR 4.4) ----------------------------------------------


def test_concept_shift_frequency_is_five_percent():
  shift = partitioners.ConceptShift(10, 0.05, seed=0)
  rounds = shift.shift_rounds(10000)
  # Binomial(10000, 0.05): sd 0.0022 of the rate; 0.007 is > 3 sd.
  assert abs(len(rounds) / 10000 - 0.05) < 0.007


def test_concept_shift_persists_and_changes_one_class_at_shifts():
  shift = partitioners.ConceptShift(10, 0.05, seed=3)
  shift_rounds = set(shift.shift_rounds(400))
  assert len(shift_rounds) > 5
  previous = shift.label_map(0)
  np.testing.assert_array_equal(previous, np.arange(10))
  for r in range(1, 401):
    current = shift.label_map(r)
    changed = np.flatnonzero(current != previous)
    if r in shift_rounds:
      c, old, new = shift.shift_at(r)
      assert list(changed) == [c] and previous[c] == old != new == current[c]
    else:
      assert changed.size == 0  # persistent: nothing reverts by itself
    previous = current
  # A function of (seed, round) only: a fresh object, any order.
  fresh = partitioners.ConceptShift(10, 0.05, seed=3)
  np.testing.assert_array_equal(fresh.label_map(400), previous)
  np.testing.assert_array_equal(fresh.label_map(150), shift.label_map(150))
  other = partitioners.ConceptShift(10, 0.05, seed=4)
  assert set(other.shift_rounds(400)) != shift_rounds
  never = partitioners.ConceptShift(10, 0.0, seed=0)
  np.testing.assert_array_equal(never.label_map(500), np.arange(10))
  always = partitioners.ConceptShift(10, 1.0, seed=0)
  assert always.shift_rounds(30) == list(range(1, 31))


# --- The digits task options -------------------------------------------------


def test_digits_options_select_each_partition():
  sort = tasks.describe_task_data('digits', partition='sort',
                                  classes_per_client=3, distinct_classes=True)
  assert sort['train']['classes_per_client_min'] == 3
  assert sort['train']['classes_per_client_max'] == 3
  assert sort['settings']['partition'] == 'sort'
  fedcurv = tasks.describe_task_data('digits', partition='fedcurv',
                                     num_clients=96)
  assert fedcurv['train']['num_clients'] == 96
  assert fedcurv['train']['classes_per_client_max'] == 2
  pachinko = tasks.describe_task_data('digits', partition='pachinko',
                                      alpha=0.1)
  assert pachinko['train']['size_min'] == 1437 // 100
  long_tail = tasks.describe_task_data('digits', partition='long_tail')
  assert long_tail['train']['num_clients'] == 10  # the untrimmed slices
  assert long_tail['train']['long_tail_round_1']['num_clients'] == 10
  default = tasks.describe_task_data('digits')
  assert default['train']['label_entropy_max'] >= (
      default['train']['mean_label_entropy'])
  with pytest.raises(ValueError) as error:
    tasks.describe_task_data('digits', partition='lda')
  assert str(error.value).startswith(
      "partition must be one of dirichlet, dirichlet_class, sort, fedcurv, "
      "pachinko, domains, long_tail, got 'lda'.")


def test_digits_empty_clients_are_reported_and_never_sampled():
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  options = dict(partition='dirichlet_class', alpha=0.01, num_clients=40)
  summary = tasks.describe_task_data('digits', **options)['train']
  assert summary['num_empty_clients'] > 0
  assert len(summary['empty_client_ids']) == summary['num_empty_clients']
  task = tasks.create_task(
      'digits', train_client_spec=tff.simulation.baselines.ClientSpec(1, 8),
      **options)
  ids = set(task.datasets.train_data.client_ids)
  assert len(ids) == 40 - summary['num_empty_clients']
  assert not ids & set(summary['empty_client_ids'])
  assert ids | set(summary['empty_client_ids']) == {
      f'train_{k:02d}' for k in range(40)}


def test_digits_domains_transform_each_client():
  split = digits.split_digits(partition='domains', num_clients=5)
  plain = digits.split_digits()
  assert split.train_domains == [0, 1, 2, 3, 4]
  np.testing.assert_array_equal(split.train_labels, plain.train_labels)
  for domain, idx in zip(split.train_domains, split.train_partition):
    np.testing.assert_allclose(
        split.train_images[idx],
        partitioners.apply_domain_transform(plain.train_images[idx], domain,
                                            seed=0))
  assert split.test_domains[:6] == [0, 1, 2, 3, 4, 0]


def test_round_data_is_a_function_of_seed_and_round():
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  spec = tff.simulation.baselines.ClientSpec(1, 1000, shuffle_buffer_size=1)
  options = dict(partition='long_tail', concept_shift=1.0)
  task = tasks.create_task('digits', train_client_spec=spec, **options)
  data = tasks.create_round_data('digits', task, **options)
  split = digits.split_digits(**options)
  ids, datasets = data.clients_for_round(2, ['train_0', 'train_1'])
  assert ids == ['r000002_c000', 'r000002_c001']
  parts = partitioners.LongTailRounds(split.train_labels).clients_for_round(
      2, 2, seed=0)
  label_map = partitioners.ConceptShift(10, 1.0, seed=0).label_map(2)
  for dataset, idx in zip(datasets, parts):
    (x, y), = list(dataset.as_numpy_iterator())
    np.testing.assert_array_equal(x, split.train_images[idx])
    np.testing.assert_array_equal(y, label_map[split.train_labels[idx]])
  assert tasks.create_round_data('digits', task) is None  # static clients


# --- The training loop's round hook: exact resume ----------------------------


def test_loop_with_round_hook_resumes_exactly(tmp_path):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tests import tiny  # pylint: disable=g-import-not-at-top
  from tff_opt import algorithms  # pylint: disable=g-import-not-at-top
  from tff_opt.program import training_loop  # pylint: disable=g-import-not-at-top

  x, y = (np.concatenate(a) for a in zip(*tiny.make_clients(
      num_clients=4, seed=2, sizes=(20, 20, 20, 20))))
  hook_rounds = []

  def make_hook():
    data = heterogeneity.RoundClientData(
        x, y, {}, lambda d: d.shuffle(32).batch(8), seed=7, num_classes=3,
        partition='long_tail', long_tail_fraction=0.25, imbalance_ratio=0.5,
        concept_shift=0.5)

    def hook(round_num, sampled):
      hook_rounds.append(round_num)
      return data.clients_for_round(round_num, sampled)
    return hook

  process = algorithms.build_fed_opt(
      tiny.model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.2),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))

  def train(output_dir, rounds):
    return training_loop.run_training(
        process, client_ids=['pool_0', 'pool_1', 'pool_2', 'pool_3'],
        client_dataset_fn=None, clients_per_round=2, rounds=rounds, seed=7,
        output_dir=output_dir, checkpoint_every=2, log=None,
        initial_state=tiny.set_weights(process, process.initialize(),
                                       tiny.initial_weights()),
        round_clients_fn=make_hook())

  straight = train(str(tmp_path / 'straight'), 4)
  train(str(tmp_path / 'resumed'), 2)
  hook_rounds.clear()
  resumed = train(str(tmp_path / 'resumed'), 4)
  assert resumed.start_round == 2 and hook_rounds == [3, 4]
  for got, want in zip(tiny.trainable(process, resumed.state),
                       tiny.trainable(process, straight.state)):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


# --- The binary, 2 rounds ----------------------------------------------------


def test_binary_long_tail_concept_shift_hparams(tmp_path):
  out = str(tmp_path / 'run')
  code = binary.run_train(
      '--task=digits', '--rounds=2', '--clients_per_round=4',
      '--client_epochs=1', '--eval_every=1', f'--output_dir={out}',
      '--task_option=partition=long_tail', '--task_option=concept_shift=1.0')
  assert code == 0
  with open(os.path.join(out, 'hparams.json')) as f:
    hparams = json.load(f)
  round_1 = hparams['partition']['train']['long_tail_round_1']
  for key in ('label_entropy_min', 'label_entropy_median',
              'label_entropy_max', 'num_empty_clients', 'size_min'):
    assert key in round_1
  assert round_1['mean_label_entropy'] < np.log(10) - 0.5  # skewed
  shifts = hparams['round_data']['concept_shift']['shifts']
  assert [s['round'] for s in shifts] == [1, 2]
  assert hparams['round_data']['long_tail']['imbalance_ratio'] == 0.01
  with open(os.path.join(out, 'metrics.csv')) as f:
    rows = f.read().splitlines()
  assert len(rows) == 3 and 'eval_accuracy' in rows[0]
