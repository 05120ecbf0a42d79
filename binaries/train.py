r"""Trains one federated algorithm on one task and records every round.

    python -m binaries.train                          # digits, FedYogi
    python -m binaries.train --task=digits --server_opt=adam --rounds=50
    python -m binaries.train --helpfull               # every flag

Flags left unset take the task's defaults (`tasks.task_defaults`), which
follow the paper's settings where the paper gives them. Results go to
`--output_dir` (default `results/<task>_<algorithm>_<server_opt>_<time>`):

    hparams.json   every setting of the run (flags after task defaults)
    metrics.csv    one row per round: round, train_loss, train_accuracy,
                   eval_loss, eval_accuracy (on evaluation rounds),
                   round_seconds, and the process's other measurements
    tensorboard/   the same scalars as TensorBoard events
    checkpoints/   program state every --checkpoint_every rounds

Running again with the same `--output_dir` resumes from the last checkpoint
and continues the same `metrics.csv`; `--rounds` may be raised to train on.
A directory made with other settings is refused, never overwritten, and
so is a directory another `binaries.train` is writing (`.lock`).
"""

import ast
import contextlib
import datetime
import importlib
import os
import sys

# TensorFlow's environment (oneDNN, C++ log level): binaries/__init__.py.

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags  # pylint: disable=g-import-not-at-top
from absl import logging  # pylint: disable=g-import-not-at-top

import binaries  # pylint: disable=g-bad-import-order
from tff_opt.algorithms import hparams as hparams_lib
from tff_opt.program import analysis
from tff_opt.program import execution
from tff_opt.program import output_dir as output_dir_lib
from tff_opt.program import output_lock
from tff_opt.program import registry
from tff_opt.program import run_config
from tff_opt.program import runtime
from tff_opt.round import optimizers

# Imported after absl so flag definitions below can list their choices.
import tasks  # pylint: disable=g-bad-import-order
from tasks import data_errors  # pylint: disable=g-bad-import-order
from tasks import sqlite_data  # pylint: disable=g-bad-import-order

# Settings that may change when a run is resumed: they do not change what
# the run computes.
RESUMABLE_CHANGES = ('rounds', 'output_dir', 'checkpoint_every', 'eval_every',
                     'max_concurrent_clients', 'intra_op_threads', 'onednn',
                     'workers',
                     'worker_tls_root_cert', 'worker_timeout',
                     'gpu_memory_growth', 'logical_gpus', 'ignored_flags',
                     'client_vectorization', 'stop_at')
# Where the flags are listed, for an unknown flag's message.
_FLAGS_HELP = 'python -m binaries.train --helpfull lists every flag'

# --- What to train -----------------------------------------------------------
flags.DEFINE_enum('task', 'digits', tasks.TASK_NAMES, 'Benchmark task.')
flags.DEFINE_enum('algorithm', 'fedopt', list(registry.ALGORITHMS),
                  'Federated algorithm: ' + '; '.join(
                      f'{a.name}: {a.summary}'
                      for a in registry.ALGORITHMS.values()))
flags.DEFINE_multi_string('task_option', [],
                          'A task option as NAME=VALUE (repeatable), e.g. '
                          '--task_option=alpha=0.1 for digits or '
                          '--task_option=num_clients=50 for cifar10; '
                          'tasks.task_options(name) lists each task\'s.')
flags.DEFINE_string('data_dir', None,
                    'Where the task looks for its dataset files (TFF\'s '
                    'SQLite files, prepared TFDS data sets, mnist_5k.csv.gz). '
                    f'Default: {data_errors.DEFAULT_DATA_DIR}/ in the working '
                    'directory, where `make data` writes.')

# --- Server optimizer --------------------------------------------------------
flags.DEFINE_enum('server_opt', None, optimizers.SERVER_OPTIMIZERS,
                  'Server optimizer: sgd (FedAvg with --server_lr=1), sgdm '
                  '(FedAvgM), adagrad/adam/yogi (Reddi et al. Algorithm 2, no '
                  'bias correction), tff_adagrad/tff_adam/tff_yogi (TFF\'s '
                  'bias-corrected ones). Default: the task\'s.')
flags.DEFINE_float('server_lr', None, 'Server learning rate eta. Default: '
                   'the task\'s.', lower_bound=0.0)
flags.DEFINE_float('server_tau', None, 'Adaptivity tau of adagrad/adam/yogi '
                   '(v_{-1} = tau^2). Default: the task\'s.', lower_bound=0.0)
flags.DEFINE_float('server_beta_1', None, 'First-moment decay beta_1. '
                   'Default: the task\'s, else the optimizer\'s (0.9; 0 for '
                   'adagrad).')
flags.DEFINE_float('server_beta_2', None, 'Second-moment decay beta_2. '
                   'Default: the task\'s, else 0.99.')
flags.DEFINE_float('server_momentum', 0.9, 'Momentum of --server_opt=sgdm.')

# --- Clients -----------------------------------------------------------------
flags.DEFINE_enum('client_opt', None, optimizers.CLIENT_OPTIMIZERS,
                  'Client optimizer. Default: the task\'s (sgd).')
flags.DEFINE_float('client_lr', None, 'Client learning rate. Default: the '
                   'task\'s.', lower_bound=0.0)
flags.DEFINE_enum('client_lr_decay', 'none', ['none', 'staircase'],
                  'Client learning-rate schedule: staircase multiplies it by '
                  '--client_lr_decay_factor every --client_lr_decay_every '
                  'rounds (ExpDecay of Reddi et al., Appendix E.6).')
flags.DEFINE_float('client_lr_decay_factor', 0.1, 'Staircase decay factor.')
flags.DEFINE_integer('client_lr_decay_every', 500,
                     'Rounds between two staircase decays.', lower_bound=1)
flags.DEFINE_enum('client_weighting', None,
                  ['num_examples', 'uniform'],
                  'How client updates are averaged: by number of examples '
                  '(Reddi et al. Algorithm 5) or uniformly. Default: the '
                  'algorithm\'s paper (uniform for ' + ', '.join(
                      a.name for a in registry.ALGORITHMS.values()
                      if a.client_weighting == 'uniform') +
                  '; num_examples otherwise).')
flags.DEFINE_integer('clients_per_round', None, 'Clients sampled per round; '
                     '0: every training client of the task, every round '
                     '(full participation; a partition\'s empty clients are '
                     'not clients). Default: the task\'s.', lower_bound=0)
flags.DEFINE_integer('client_epochs', None, 'Local epochs per round. '
                     'Default: the task\'s.', lower_bound=1)
flags.DEFINE_integer('client_batch_size', None, 'Local batch size. Default: '
                     'the task\'s.', lower_bound=1)

# --- Each algorithm's own flags, as its module declares them -----------------
# (`SPEC` in tff_opt/algorithms/<algorithm>.py: default, bounds, help; the
# library builder's defaults are the same objects.)
# Their earlier spellings (`--lam`, `--mu`) stay accepted: `define_flags`,
# then `_apply_old_spellings` for one spelling that several flags share.
hparams_lib.define_flags(registry.algorithm_hparams())
# {old spelling: its declarations} where one old flag fed several algorithms.
_SHARED_OLD_SPELLINGS = {
    alias: targets for alias, targets in hparams_lib.old_spelling_targets(
        registry.algorithm_hparams()).items() if len(targets) > 1}

# --- FedBN (--fedbn), on top of another algorithm -----------------------------
flags.DEFINE_boolean('fedbn', False, 'FedBN: keep every BatchNormalization '
                     'layer local to its client (client state kept and '
                     'checkpointed by the loop), on top of --algorithm='
                     'fedopt|fedprox|fedfor|fedcurv|feddyn; needs a model with '
                     'batch norm, e.g. --task_option=model=cnn_bn for digits. '
                     'Evaluation uses the global model\'s (initial) BN.')

# --- The run -----------------------------------------------------------------
flags.DEFINE_integer('rounds', None, 'Number of rounds. Default: the '
                     'task\'s.', lower_bound=1)
flags.DEFINE_integer('eval_every', None, 'Evaluate on the held-out clients '
                     'every this many rounds (and after the last). Default: '
                     'the task\'s.', lower_bound=1)
flags.DEFINE_integer('seed', 0, 'Seeds the initial model, client sampling and '
                     'shuffling: a run is a function of its flags. NumPy\'s '
                     'range: 0 to 2**32 - 1.', lower_bound=0,
                     upper_bound=2**32 - 1)
flags.DEFINE_string('output_dir', None, 'Where results go. Default: '
                    'results/<task>_<algorithm>_<server_opt>_<timestamp>.')
flags.DEFINE_string('stop_at', None, 'Stop after the first round whose '
                    'metric reaches a target, given as METRIC:VALUE (e.g. '
                    'eval_accuracy:0.9; at most VALUE for a loss or error): '
                    'the rounds to it are known then. The run is finished '
                    'there for binaries.sweep and binaries.claims; resumed '
                    'without the flag, it goes on to --rounds.')
flags.DEFINE_integer('checkpoint_every', 10, 'Save program state every this '
                     'many rounds (and after the last).', lower_bound=1)
flags.DEFINE_integer('eval_examples', None, 'Evaluate on a seeded sample of '
                     'this many test examples (clients in a random order, '
                     'see tasks.sqlite_data.sample_examples); 0 means the '
                     'whole test set. Default: the task\'s (10000 for Stack '
                     'Overflow, else all).', lower_bound=0)
flags.DEFINE_boolean('final_full_eval', None, 'After the last round, evaluate '
                     'on the whole test set and write final_eval.json. '
                     'Default: the task\'s (on for Stack Overflow).')
flags.DEFINE_integer('max_concurrent_clients', None, 'At most this many '
                     'client computations at once (TFF\'s C++ executor). '
                     'Default: unlimited, or, for a local run whose '
                     'environment sets TF_NUM_INTEROP_THREADS (as '
                     '--threads_per_run of binaries.claims, sweep and '
                     'reproduce does), that many.', lower_bound=1)
flags.DEFINE_integer('intra_op_threads', None, 'TensorFlow intra-op threads '
                     'of the local TFF worker (TF_NUM_INTRAOP_THREADS): with '
                     '--max_concurrent_clients=N on C cores, C/N. Default: '
                     'TensorFlow\'s (one per core).', lower_bound=1)
# --client_vectorization: how the clients run, not what they
# compute (RESUMABLE_CHANGES; `_vectorized_process`).
flags.DEFINE_integer('client_vectorization', 0, 'Train the round\'s clients '
                     'in groups of at most K as one TensorFlow computation '
                     'each (stacked weights; tff_opt/algorithms/'
                     'vectorized.py); 0 = one client at a time. Only '
                     '--task=shakespeare; algorithms fedopt, fedprox, '
                     'fedfor, fedcurv (--fedcurv_exact=off), fedadc '
                     '(Algorithm 3), slowmo; --client_opt=sgd or sgdm.',
                     lower_bound=0)

# --- Where the rounds run: TFF workers on other hosts, GPUs -----------------
flags.DEFINE_string('workers', None, 'Run the rounds on these TFF workers, '
                    'HOST:PORT,HOST:PORT,... (start each with `python -m '
                    'binaries.worker --port=PORT`): every round\'s clients '
                    'are split among them. A worker runs any computation it '
                    'is sent: only on a private network or through an '
                    'authenticated tunnel. Default: this machine.')
flags.DEFINE_string('worker_tls_root_cert', None, 'PEM root certificate '
                    'that signed the workers\' certificates: connect to '
                    '--workers over TLS.')
flags.DEFINE_float('worker_timeout', 30.0, 'Seconds to wait for every '
                   'worker to answer at start-up.', lower_bound=0.001)
flags.DEFINE_boolean('gpu_memory_growth', False, 'Allocate GPU memory as '
                     'needed (every GPU; also TFF\'s local C++ worker). '
                     'Without a GPU: a one-line note, nothing else.')
flags.DEFINE_integer('logical_gpus', None, 'Split the first GPU into this '
                     'many logical GPUs of --logical_gpu_memory_mb each for '
                     'this process\'s TensorFlow. TFF\'s C++ runtime has no '
                     'device placement: to spread clients over several GPUs '
                     'run one `binaries.worker --gpu=K` per GPU and list them '
                     'in --workers.', lower_bound=1)
flags.DEFINE_integer('logical_gpu_memory_mb', 2048, 'Memory of each logical '
                     'GPU of --logical_gpus.', lower_bound=1)

# --- Personalization by classifier calibration (FedADC paper, IV-D) ----------
flags.DEFINE_boolean('personalize', False, 'After the last round, each '
                     'held-out client fine-tunes only the last layer on its '
                     'own train split and is evaluated on its own test '
                     'split; writes personalization.json '
                     '(tff_opt/program/personalization.py).')
flags.DEFINE_integer('personalize_epochs', 2, 'Fine-tuning epochs of '
                     '--personalize (2 in the paper).', lower_bound=1)
flags.DEFINE_integer('personalize_clients', None, 'Calibrate a seeded sample '
                     'of this many held-out clients. Default: all.',
                     lower_bound=1)
flags.DEFINE_float('personalize_train_fraction', 0.5, 'Share of each class '
                   'of a held-out client\'s examples in its own train split '
                   '(the rest is its test split), in (0, 1).')
flags.register_validator(
    'personalize_train_fraction', lambda v: 0 < v < 1,
    message='must be in (0, 1)')
flags.DEFINE_float('personalize_mu', 0.0, 'Proximal strength of '
                   '--personalize toward the global last layer (0: none).',
                   lower_bound=0.0)
flags.DEFINE_float('personalize_distill_lambda', 0.0, 'FedADC+ '
                   'self-confidence distillation weight of --personalize, in '
                   '[0, 1] (0: none; teacher: the global model, tau = 1).',
                   lower_bound=0.0, upper_bound=1.0)

FLAGS = flags.FLAGS


class UsageError(Exception):
  """A bad flag or a bad output directory: reported in one line."""


def parse_flags(argv: list[str]) -> list[str]:
  """Parses `argv` (program name first) into `FLAGS`.

  absl's own parser reports a bad flag as `FATAL Flags parsing error` and
  exit status 1; here it is a `UsageError` naming the flag and what it
  takes, which `main` prints as one `train: error: ...` line (exit 2).

  Args:
    argv: The command line, program name first.

  Returns:
    The program name and the arguments that are not flags.

  Raises:
    UsageError: If a flag is unknown, has no value, or has a value of the
      wrong kind or out of its range.
  """
  binaries.note_args(argv[1:])
  try:
    return FLAGS(argv)
  except (flags.Error, ValueError) as e:
    # absl raises a bare ValueError for `--noNAME=VALUE`.
    raise UsageError(_flag_error_line(e, argv)) from e


def parse_flags_or_exit(argv: list[str]) -> list[str]:
  """`parse_flags` for `app.run`: a bad flag is one line and exit 2."""
  try:
    return parse_flags(argv)
  except UsageError as e:
    _fail(str(e))


def _flag_error_line(error: Exception, argv: list[str]) -> str:
  """The one-line message for absl's `error` parsing `argv`."""
  return binaries.flag_error_line(error, argv, FLAGS, _FLAGS_HELP)


def parse_task_options(items: list[str]) -> dict:
  """`['alpha=0.1', 'num_clients=50']` -> `{'alpha': 0.1, 'num_clients': 50}`.

  Values are Python literals (numbers, booleans, strings in quotes); any
  other text is kept as a string.

  Raises:
    UsageError: If an item is not NAME=VALUE or a name repeats.
  """
  options = {}
  for item in items:
    name, sep, text = item.partition('=')
    if not sep or not name:
      raise UsageError(f'--task_option={item}: expected NAME=VALUE.')
    if name in options:
      raise UsageError(f'--task_option: {name} is given twice.')
    try:
      options[name] = ast.literal_eval(text)
    except (ValueError, SyntaxError):
      options[name] = text
  return dict(sorted(options.items()))


def _apply_server_rule(hparams: dict) -> None:
  """The algorithm's own server step (registry `server_rule`) wins.

  FedDyn's step is its paper's SGD (learning rate 1 by default), never the
  task's default adaptive optimizer; FedADC(+)/SlowMo apply their own rule.
  An adaptive `--server_opt` given to either is refused.

  Raises:
    UsageError: If `--server_opt` names an optimizer the algorithm cannot
      use.
  """
  algorithm = registry.ALGORITHMS[FLAGS.algorithm]
  if algorithm.server_rule == 'optimizer':
    return
  given = FLAGS.server_opt
  if given is not None and given != 'sgd':
    what = ('its paper\'s server step, SGD (theta = mean theta_k - h/alpha '
            'at --server_lr, 1 by default)'
            if algorithm.server_rule == 'sgd' else
            'its own server momentum rule (--server_opt and --server_lr are '
            'unused)')
    raise UsageError(f'--server_opt={given}: --algorithm={FLAGS.algorithm} '
                     f'applies {what}; drop --server_opt.')
  if algorithm.server_rule == 'sgd' and given is None:
    hparams['server_opt'] = 'sgd'
    hparams['server_lr'] = (FLAGS.server_lr if FLAGS.server_lr is not None
                            else 1.0)


def _apply_old_spellings() -> None:
  """Gives `--mu`'s and `--beta`'s values to the run's algorithm's flag.

  One old flag fed two algorithms (`--mu`: FedProx and FedPTR; `--beta`:
  FedADC and SlowMo); today each has its own (`--fedprox_mu`,
  `--fedptr_mu`), and the old spelling sets the one `--algorithm` reads.
  For another algorithm it is an ignored flag (`ignored_flags`).

  Raises:
    UsageError: If the old and the new spelling are both given, with
      different values, or the value is out of the new flag's range (the
      old flag checks each range it feeds while parsing; this is the
      last word).
  """
  own = set(registry.ALGORITHMS[FLAGS.algorithm].flags)
  for alias, targets in _SHARED_OLD_SPELLINGS.items():
    if not FLAGS[alias].present:
      continue
    value = FLAGS[alias].value
    for hparam in (h for h in targets if h.flag in own):
      target = hparam.flag
      if FLAGS[target].present and FLAGS[target].value != value:
        raise UsageError(
            f'--{alias}={value} and --{target}={FLAGS[target].value}: '
            f'--{alias} is the old spelling of --{target}; give one value.')
      try:
        hparam.check(value)
      except ValueError as e:
        raise UsageError(f'--{alias}={value} (--{target}): {e}') from e
      setattr(FLAGS, target, value)
      FLAGS[target].present = max(FLAGS[target].present, 1)


def resolve_hparams() -> dict:
  """Returns every setting of the run: flags, then the task's defaults.

  Returns:
    The settings as hparams.json records them, the algorithm's own under
    their flag names (`run_config.RunConfig.from_hparams` types them).

  Raises:
    UsageError: If a flag's value is refused: an old and a new spelling
      that differ, a task option, the workers' settings, a server
      optimizer the algorithm cannot use, `--stop_at`.
  """
  _apply_old_spellings()
  hparams = _settings_from_flags()
  _apply_server_rule(hparams)
  # Per-optimizer defaults (the paper's Tables 8-9) for the chosen optimizer.
  _apply_paper_settings(hparams)
  default_examples, default_full_eval = tasks.task_eval_defaults(FLAGS.task)
  hparams['eval_examples'] = (FLAGS.eval_examples
                              if FLAGS.eval_examples is not None else
                              default_examples or 0)
  hparams['final_full_eval'] = (FLAGS.final_full_eval
                                if FLAGS.final_full_eval is not None else
                                default_full_eval)
  for name in registry.ALGORITHMS[FLAGS.algorithm].flags:
    hparams[name] = FLAGS[name].value
  if FLAGS.fedbn:  # Recorded only when set: older run directories resume.
    hparams['fedbn'] = True
  if FLAGS.client_vectorization:  # Recorded only when set; resumable.
    hparams['client_vectorization'] = FLAGS.client_vectorization
  if FLAGS.stop_at is not None:  # Recorded only when set; resumable.
    try:
      hparams['stop_at'] = str(analysis.Target.parse(FLAGS.stop_at))
    except ValueError as e:
      raise UsageError(f'--stop_at: {e}') from e
  ignored = ignored_flags(hparams)
  if ignored:  # Recorded only when some were given (RESUMABLE_CHANGES).
    hparams['ignored_flags'] = ignored
  hparams['output_dir'] = FLAGS.output_dir or os.path.join(
      'results', '{task}_{algorithm}_{server_opt}_{time}'.format(
          time=datetime.datetime.now().strftime('%Y%m%d-%H%M%S'), **hparams))
  return hparams


def _settings_from_flags() -> dict:
  """The settings every run has: each flag, or the task's default for it.

  Returns:
    `{setting: value}` from `task` to `logical_gpus`, in the order they
    are resolved.

  Raises:
    UsageError: If a task option or the workers' settings are refused.
  """
  defaults = tasks.task_defaults(FLAGS.task)

  def pick(flag_name, default_name=None):
    value = FLAGS[flag_name].value
    return value if value is not None else getattr(
        defaults, default_name or flag_name)

  task_options = parse_task_options(FLAGS.task_option)
  with _refusals_as_usage_errors():  # In the order the settings are listed.
    max_concurrent = execution.max_concurrent_clients(
        FLAGS.max_concurrent_clients, FLAGS.workers)
    workers = execution.resolve_workers(
        FLAGS.workers, tls_root_cert=FLAGS.worker_tls_root_cert,
        worker_settings={
            'max_concurrent_clients': FLAGS.max_concurrent_clients,
            'intra_op_threads': FLAGS.intra_op_threads})
  return {
      'task': FLAGS.task,
      'algorithm': FLAGS.algorithm,
      'data_dir': FLAGS.data_dir,
      'task_options': task_options,
      'server_opt': pick('server_opt', 'server_optimizer'),
      'server_lr': pick('server_lr'),
      'server_tau': pick('server_tau'),
      'server_beta_1': pick('server_beta_1'),
      'server_beta_2': pick('server_beta_2'),
      'server_momentum': FLAGS.server_momentum,
      'client_opt': pick('client_opt', 'client_optimizer'),
      'client_lr': pick('client_lr'),
      'client_lr_decay': FLAGS.client_lr_decay,
      'client_lr_decay_factor': FLAGS.client_lr_decay_factor,
      'client_lr_decay_every': FLAGS.client_lr_decay_every,
      'client_weighting': (
          FLAGS.client_weighting or
          registry.ALGORITHMS[FLAGS.algorithm].client_weighting),
      'clients_per_round': pick('clients_per_round'),
      'client_epochs': pick('client_epochs'),
      'client_batch_size': pick('client_batch_size'),
      'rounds': pick('rounds'),
      'eval_every': pick('eval_every'),
      'seed': FLAGS.seed,
      'checkpoint_every': FLAGS.checkpoint_every,
      'max_concurrent_clients': max_concurrent,
      'intra_op_threads': FLAGS.intra_op_threads,
      # TensorFlow's oneDNN kernels (round-off differs from Eigen's): set
      # from TF_ENABLE_ONEDNN_OPTS at the top of this file, for the record.
      'onednn': os.environ.get('TF_ENABLE_ONEDNN_OPTS') == '1',
      'workers': workers,
      'worker_tls_root_cert': FLAGS.worker_tls_root_cert,
      'worker_timeout': FLAGS.worker_timeout,
      'gpu_memory_growth': FLAGS.gpu_memory_growth,
      'logical_gpus': FLAGS.logical_gpus,
  }


def _apply_paper_settings(hparams: dict) -> None:
  """The paper's learning rates and tau for the chosen server optimizer.

  Reddi et al.'s Tables 8-9 give them per task and optimizer; each is
  taken where its flag was not given, and the server's only where the
  algorithm's server step is the optimizer.

  Args:
    hparams: The settings so far (`server_opt` chosen); updated in place.
  """
  paper = tasks.task_paper_settings(FLAGS.task)
  own_step = registry.ALGORITHMS[FLAGS.algorithm].server_rule != 'optimizer'
  if hparams['server_opt'] in paper:
    for name, value in zip(('client_lr', 'server_lr', 'server_tau'),
                           paper[hparams['server_opt']]):
      if own_step and name != 'client_lr':
        continue  # Not the algorithm's server step.
      if FLAGS[name].value is None and value is not None:
        hparams[name] = value


def ignored_flags(hparams: dict) -> dict:
  """The flags given on the command line that the run does not read.

  Those are the flags of other algorithms (`registry.flags_not_read_by`,
  which also counts every server-optimizer flag for an algorithm with its
  own server rule), the server-optimizer flags that `--server_opt` does not
  read (`optimizers.SERVER_OPTIMIZER_ARGS`: `--server_momentum` is SGDm's
  alone, `--server_beta_2` Adam's and Yogi's), and the staircase decay's
  flags without `--client_lr_decay=staircase`.

  Args:
    hparams: The run's resolved settings (`algorithm`, `server_opt`,
      `client_lr_decay`).

  Returns:
    `{flag name: value}` for each such flag given; empty when there is none.
  """
  return {name: FLAGS[name].value for name in _unread_flags(hparams)
          if FLAGS[name].present}


def _unread_flags(hparams: dict) -> dict:
  """`{flag name: why it is not read}` for the run `hparams` describes."""
  algorithm = hparams['algorithm']
  unread = {name: f'--algorithm={algorithm}'
            for name in registry.flags_not_read_by(algorithm)}
  own = set(registry.ALGORITHMS[algorithm].flags)
  for alias, targets in _SHARED_OLD_SPELLINGS.items():
    if not own.intersection(h.flag for h in targets):
      unread[alias] = f'--algorithm={algorithm}'
  read = optimizers.SERVER_OPTIMIZER_ARGS.get(hparams.get('server_opt'), ())
  for arg, name in registry.SERVER_OPTIMIZER_FLAGS:
    if arg not in read:
      unread.setdefault(name, f'--server_opt={hparams["server_opt"]}')
  if hparams.get('client_lr_decay') != 'staircase':
    for name in ('client_lr_decay_factor', 'client_lr_decay_every'):
      unread.setdefault(
          name, f'--client_lr_decay={hparams.get("client_lr_decay")}')
  return unread


def ignored_flags_note(hparams: dict) -> str | None:
  """One line naming the run's ignored flags (`ignored_flags`), or None.

  The flags are grouped by what they do not apply to, in the order of
  `ignored_flags`.
  """
  ignored = hparams.get('ignored_flags')
  if not ignored:
    return None
  why = _unread_flags(hparams)
  groups: dict[str, list[str]] = {}
  for name in ignored:
    groups.setdefault(why.get(name, f'--algorithm={hparams["algorithm"]}'),
                      []).append(f'--{name}')
  parts = []
  for reason, names in groups.items():
    verb = 'does' if len(names) == 1 else 'do'
    parts.append(f'{", ".join(names)} {verb} not apply to {reason}')
  return (f'train: note: {"; ".join(parts)}; ignored (recorded as '
          'ignored_flags in hparams.json).')


def run(config: run_config.RunConfig) -> None:
  """Builds the task and the algorithm of `config` and trains.

  Args:
    config: The run's settings, as `main` resolves them from the flags.

  Raises:
    UsageError: If a setting is refused (the output directory, the
      execution context, the task, the algorithm), or the run cannot go on
      (`_train`).
  """
  # Heavy imports here, so that bad flags are reported without paying them,
  # and before the collector stops re-scanning what the imports made
  # (binaries/__init__).
  import tensorflow_federated  # pylint: disable=g-import-not-at-top,unused-import

  from tff_opt.program import evaluation  # pylint: disable=g-import-not-at-top,unused-import

  binaries.freeze_imports()
  resuming = _take_output_dir_and_context(config)
  hparams = config.as_hparams()
  task, round_data = _create_task(hparams)
  client_ids = sorted(task.datasets.train_data.client_ids)
  num_test = len(task.datasets.test_data.client_ids)
  _check_populations(config, len(client_ids), num_test)
  process, shared = _build_process(
      hparams, task, len(client_ids),
      personalize=config.options.personalize is not None)
  on_start = _record_hparams(hparams, resuming, num_train=len(client_ids),
                             num_test=num_test, round_data=round_data)
  initial_state = _initial_state(config.seed, task, process)
  evaluate = _build_evaluate(hparams, task, round_data)
  per_round = config.clients_per_round or len(client_ids)
  _print_start(config, hparams, per_round)
  result = _train(
      hparams, process, task, client_ids, per_round,
      initial_state=initial_state, evaluate=evaluate,
      round_clients_fn=(round_data.clients_for_round
                        if round_data is not None else None),
      on_start=on_start)
  _after_training(config, hparams, task, process, result,
                  shared['client_optimizer_fn'])


def _take_output_dir_and_context(config: run_config.RunConfig) -> bool:
  """Prepares and locks the output directory, then sets the context.

  Args:
    config: The run's settings.

  Returns:
    True when the run resumes the one in its output directory.

  Raises:
    UsageError: If the directory or the execution settings are refused
      (`output_dir.prepare`, `output_dir.lock`, `execution.set_context`).
  """
  with _refusals_as_usage_errors():
    resuming = output_dir_lib.prepare(config.as_hparams(), RESUMABLE_CHANGES)
    output_dir_lib.lock(config.output_dir)
    execution.set_context(
        workers=config.workers,
        max_concurrent_clients=config.max_concurrent_clients,
        intra_op_threads=config.intra_op_threads,
        tls_root_cert=config.worker_tls_root_cert,
        worker_timeout=config.worker_timeout,
        gpu_memory_growth=config.gpu_memory_growth,
        logical_gpus=config.logical_gpus,
        logical_gpu_memory_mb=config.options.logical_gpu_memory_mb,
        log=lambda line: print(line, flush=True))
  return resuming


def _check_populations(config: run_config.RunConfig, num_train: int,
                       num_test: int) -> None:
  """Refuses to sample more clients than the task has.

  Args:
    config: The run's settings.
    num_train: The task's training clients.
    num_test: The task's held-out clients.

  Raises:
    UsageError: If `--clients_per_round` or `--personalize_clients` is
      larger than the clients it samples from.
  """
  if config.clients_per_round > num_train:
    raise UsageError(
        f'--clients_per_round={config.clients_per_round} is larger than '
        f'the {num_train} training clients of task {config.task}.')
  personalize = config.options.personalize
  if personalize and (personalize.clients or 0) > num_test:
    raise UsageError(
        f'--personalize_clients={personalize.clients} is larger than '
        f'the {num_test} held-out clients of task {config.task}.')


def _record_hparams(hparams: dict, resuming: bool, *, num_train: int,
                    num_test: int, round_data):
  """Writes a new run's hparams.json; for a resumed one, when to rewrite it.

  A new run records its settings with what its data are (the clients,
  the partition, the round data). A resumed run rewrites the file once
  the training loop has accepted the checkpoint, keeping what was recorded
  when it began: a refused resume (fewer --rounds, no readable checkpoint)
  changes nothing.

  Args:
    hparams: The run's settings (`RunConfig.as_hparams`).
    resuming: Whether the run resumes the one in its output directory.
    num_train: The task's training clients.
    num_test: The task's held-out clients.
    round_data: The task's round data (`_create_task`), or None.

  Returns:
    The training loop's `on_start(start_round)` that rewrites the file of a
    resumed run; None for a new run.
  """
  if resuming:

    def record_resumed_hparams(start_round):
      del start_round
      output_dir_lib.write_hparams(hparams,
                                   output_dir_lib.saved_extras(hparams))

    return record_resumed_hparams
  output_dir_lib.write_hparams(hparams, {
      'num_train_clients': num_train,
      'num_test_clients': num_test,
      'partition': tasks.describe_task_data(
          hparams['task'], data_dir=hparams['data_dir'],
          seed=hparams['seed'], **hparams['task_options']),
      **({'round_data': round_data.describe(hparams['rounds'])}
         if round_data is not None else {}),
  })
  return None


def _initial_state(seed: int, task, process):
  """The process's initial state, with the task's model seeded by `seed`.

  The initial model is a function of --seed, and is made before the
  evaluator's model, which draws from the same seeded generator.

  Args:
    seed: `--seed`.
    task: The task, whose `model_fn` makes the model.
    process: The algorithm's process.

  Returns:
    `process.initialize()` with the seeded model's weights.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  tf.keras.utils.set_random_seed(seed)
  initial_weights = tff.learning.models.ModelWeights.from_model(
      task.model_fn())
  return process.set_model_weights(
      process.initialize(),
      tf.nest.map_structure(lambda v: np.asarray(v.numpy()), initial_weights))


def _print_start(config: run_config.RunConfig, hparams: dict,
                 per_round: int) -> None:
  """Prints the run's first line, and the task's note on its settings."""
  server = ('its own rule' if registry.ALGORITHMS[
      config.algorithm].server_rule == 'own' else config.server_opt)
  print(f'tff-opt: task={config.task} algorithm={config.algorithm} '
        f'server_opt={server} rounds={config.rounds} '
        f'clients_per_round={per_round} '
        f'output_dir={config.output_dir}', flush=True)
  note = tasks.task_start_note(config.task, hparams)
  if note:
    print(note, flush=True)


def _after_training(config: run_config.RunConfig, hparams: dict, task,
                    process, result, client_optimizer) -> None:
  """The full evaluation and the personalization after the last round.

  Args:
    config: The run's settings.
    hparams: The same, as `RunConfig.as_hparams`.
    task: The task.
    process: The algorithm's process.
    result: What the training loop returned (its final state and rows).
    client_optimizer: The run's client optimizer function.

  Raises:
    UsageError: If the personalization refuses its settings.
  """
  from tff_opt.program import evaluation  # pylint: disable=g-import-not-at-top
  final_weights = process.get_model_weights(result.state)
  # Fewer than --rounds when --stop_at stopped the run.
  trained = int(result.rows[-1]['round']) if result.rows else config.rounds
  if config.final_full_eval:
    metrics = evaluation.final_full_eval(
        task.model_fn, tasks.pooled_test_data(task), final_weights,
        output_dir=config.output_dir, rounds=trained)
    print('final full evaluation: ' + evaluation.format_metrics(metrics),
          flush=True)
  if config.options.personalize is not None:
    _personalize(hparams, config.options.personalize, client_optimizer,
                 final_weights, trained)


def _create_task(hparams: dict):
  """The task (`tff.simulation.baselines.BaselineTask`) and its round data.

  Returns:
    `(task, round_data)`: `round_data` the long-tail or concept-shift rounds
    (`tasks/heterogeneity.py`), or `None`.

  Raises:
    UsageError: If the data are missing or damaged, or a task option is
      refused.
  """
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  try:
    task = tasks.create_task(
        hparams['task'],
        train_client_spec=tff.simulation.baselines.ClientSpec(
            num_epochs=hparams['client_epochs'],
            batch_size=hparams['client_batch_size']),
        eval_client_spec=tff.simulation.baselines.ClientSpec(
            num_epochs=1, batch_size=max(hparams['client_batch_size'], 128)),
        data_dir=hparams['data_dir'],
        seed=hparams['seed'],
        **hparams['task_options'])
    round_data = tasks.create_round_data(
        hparams['task'], task, data_dir=hparams['data_dir'],
        seed=hparams['seed'], **hparams['task_options'])
  except data_errors.DataError as e:
    raise UsageError(str(e)) from e
  except ValueError as e:
    raise UsageError(f'--task={hparams["task"]}: {e}') from e
  return task, round_data


def _build_process(hparams: dict, task, num_clients: int,
                   personalize: bool = False):
  """The algorithm's process, as it will run (vectorized clients, workers).

  Args:
    hparams: The run's settings.
    task: The task, whose `model_fn` the process trains.
    num_clients: The task's training clients.
    personalize: Whether `--personalize` will calibrate the model's last
      layer (checked before anything runs).

  Returns:
    `(process, shared)`: `shared` the builder arguments every algorithm
    takes (`registry.shared_arguments`).

  Raises:
    UsageError: If a flag's value is refused, by its declaration, the builder,
      the vectorized client work or TFF's workers.
  """
  from tff_opt.program import personalization  # pylint: disable=g-import-not-at-top
  try:
    if personalize:
      registry.check_flag('personalize', None, lambda _: (
          personalization.check_classifier(task.model_fn)), about_model=True)
    shared = registry.shared_arguments(hparams)
    process = registry.build_process(
        hparams['algorithm'], task.model_fn, **shared,
        client_learning_rate=registry.plain_sgd_learning_rate(hparams),
        fedbn=hparams.get('fedbn', False), num_clients=num_clients,
        client_epochs=hparams['client_epochs'],
        **{h: hparams[h]
           for h in registry.ALGORITHMS[hparams['algorithm']].flags})
  except registry.FlagError as e:
    raise UsageError(e.line(task=hparams['task'])) from e
  except ValueError as e:
    raise UsageError(str(e)) from e
  if hparams.get('client_vectorization'):
    process = _vectorized_process(hparams, task, process)
  # The process that runs is the one checked (its compiled form is cached).
  with _refusals_as_usage_errors():
    execution.check_workers_can_run(
        process, workers=hparams['workers'], algorithm=hparams['algorithm'],
        fedbn=hparams.get('fedbn', False))
  return process, shared


def _build_evaluate(hparams: dict, task, round_data):
  """`evaluate(weights, round_num) -> metrics` on the held-out clients.

  One evaluation, with what may change from one round to the next: Reddi
  et al.'s uniform sample of `--eval_examples` test examples, drawn afresh
  at each evaluation and seeded by the round (a task with a SQLite test
  file; otherwise one seeded sample); under concept shift, the round's label
  map (one evaluator per label map seen, built when first needed).
  """
  from tff_opt.program import evaluation  # pylint: disable=g-import-not-at-top
  sampler = None
  sqlite_path = tasks.eval_sqlite_path(hparams['task'], hparams['data_dir'])
  if hparams.get('eval_examples') and sqlite_path:
    sampler = sqlite_data.ExampleSampler(
        sqlite_path, task.datasets.test_data.element_type_structure,
        num_examples=hparams['eval_examples'], seed=hparams['seed'])
    eval_data = task.datasets.eval_preprocess_fn(sampler.dataset())
  elif hparams.get('eval_examples'):
    eval_data = task.datasets.eval_preprocess_fn(sqlite_data.sample_examples(
        task.datasets.test_data, hparams['eval_examples'],
        seed=hparams['seed']))
  else:
    eval_data = tasks.pooled_test_data(task)
  shifting = round_data is not None and round_data.concept_shift is not None
  evaluators = {}
  if not shifting:
    # One fixed test set: its per-example correctness pairs runs' scores.
    logged = ({'correct_path': os.path.join(hparams['output_dir'],
                                            evaluation.CORRECT_FILE)}
              if hparams.get('output_dir') and not hparams.get('eval_examples')
              else {})
    evaluators[None] = evaluation.build_evaluator(task.model_fn, eval_data,
                                                  **logged)

  def evaluate(weights, round_num):
    if sampler is not None:
      sampler.round_num = round_num
    key = round_data.label_map(round_num).tobytes() if shifting else None
    if key not in evaluators:
      evaluators[key] = evaluation.build_evaluator(
          task.model_fn, round_data.relabel(eval_data, round_num))
    return evaluators[key](weights, round_num=round_num)

  return evaluate


def _train(hparams: dict, process, task, client_ids, per_round, **loop_args):
  """`training_loop.run_training` with the run's settings; its result.

  Raises:
    UsageError: If the checkpoints cannot be resumed, or a data file became
      unreadable during the run (the results so far kept).
  """
  from tff_opt.program import training_loop  # pylint: disable=g-import-not-at-top
  train_data = task.datasets.train_data

  def client_dataset(client_id):
    return task.datasets.train_preprocess_fn(
        train_data.create_tf_dataset_for_client(client_id))

  try:
    return training_loop.run_training(
        process,
        client_ids=client_ids,
        client_dataset_fn=client_dataset,
        clients_per_round=per_round,
        rounds=hparams['rounds'],
        seed=hparams['seed'],
        output_dir=hparams['output_dir'],
        evaluate_fn=loop_args.pop('evaluate'),
        eval_every=hparams['eval_every'],
        checkpoint_every=hparams['checkpoint_every'],
        log=lambda line: print(line, flush=True),
        stop_at=(analysis.Target.parse(hparams['stop_at'])
                 if hparams.get('stop_at') else None),
        **loop_args)
  except training_loop.MissingMetricError as e:
    raise UsageError(f'--stop_at={hparams["stop_at"]}: {e}') from e
  except training_loop.RoundsBehindCheckpointError as e:
    raise UsageError(f'--rounds={hparams["rounds"]}: {e}') from e
  except (training_loop.UnreadableCheckpointsError,
          training_loop.MetricsGapError) as e:
    raise UsageError(str(e)) from e
  except Exception as e:  # pylint: disable=broad-except
    reason = data_errors.damaged_sqlite_reason(e)
    if reason is None:
      raise
    # TF's SQL dataset read a damaged file inside a round (or the Stack
    # Overflow sampler did): one line, the results so far kept.
    raise UsageError(
        f'--task={hparams["task"]}: a data file in --data_dir='
        f'{hparams["data_dir"] or data_errors.default_data_dir()} became '
        f'unreadable during the run ({reason}). The results in '
        f'{hparams["output_dir"]} are intact: restore the file and run the '
        'same command again to resume from the last checkpoint.') from e


def _personalize(hparams: dict, settings: run_config.Personalization,
                 client_optimizer, model_weights, trained: int) -> None:
  """Classifier calibration on the held-out clients; personalization.json.

  Each held-out client (all, or a --seed-ed sample of
  --personalize_clients) fine-tunes the last layer of the global model on
  its own train split with the run's client optimizer and batch size
  (tff_opt.program.personalization.calibrate_clients).

  Args:
    hparams: The run's settings.
    settings: `--personalize`'s settings.
    client_optimizer: The run's client optimizer function.
    model_weights: The global model's final weights.
    trained: The rounds the model trained, recorded in the report.

  Raises:
    UsageError: If the calibration refuses its settings.
  """
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  from tff_opt.program import personalization  # pylint: disable=g-import-not-at-top

  # Unshuffled held-out examples: the splits are a function of --seed.
  task = tasks.create_task(
      hparams['task'],
      train_client_spec=tff.simulation.baselines.ClientSpec(
          num_epochs=1, batch_size=hparams['client_batch_size']),
      eval_client_spec=tff.simulation.baselines.ClientSpec(
          num_epochs=1, batch_size=128, shuffle_buffer_size=1),
      data_dir=hparams['data_dir'],
      seed=hparams['seed'],
      **hparams['task_options'])
  test_data = task.datasets.test_data
  client_ids = personalization.choose_clients(
      test_data.client_ids, settings.clients, hparams['seed'])
  try:
    result = personalization.calibrate_clients(
        task.model_fn, model_weights,
        [task.datasets.eval_preprocess_fn(
            test_data.create_tf_dataset_for_client(c)).unbatch()
         for c in client_ids], client_ids,
        optimizer=client_optimizer, batch_size=hparams['client_batch_size'],
        epochs=settings.epochs,
        train_fraction=settings.train_fraction,
        mu=settings.mu,
        distill_lambda=settings.distill_lambda, seed=hparams['seed'])
  except ValueError as e:
    raise UsageError(f'--personalize: {e}') from e
  personalization.write_report(
      hparams['output_dir'], result, rounds=trained, settings={
          'epochs': settings.epochs,
          'train_fraction': settings.train_fraction,
          'mu': settings.mu,
          'distill_lambda': settings.distill_lambda,
          'batch_size': hparams['client_batch_size'],
          'client_opt': hparams['client_opt'],
          'client_lr': hparams['client_lr'],
      })
  print(personalization.summary_line(result), flush=True)


# The tasks whose model has a vectorized form
# (`vectorized_training.VectorizedModel`), by task name: the module whose
# `vectorized_model_for(model_fn)` builds it. Here, not in
# `tff_opt.program.execution`: the library does not import `tasks`.
_VECTORIZED_MODELS = {'shakespeare': 'tasks.shakespeare_vectorized'}


def _vectorized_process(hparams: dict, task, process):
  """`--client_vectorization=K`: `process` with clients trained in groups.

  Args:
    hparams: The run's settings (`task`, `algorithm`, `client_vectorization`).
    task: The task, whose `model_fn` the vectorized model is made from.
    process: The algorithm's process, as its builder made it.

  Returns:
    The process that trains the round's clients in groups of K.

  Raises:
    UsageError: If the task's model has no vectorized form, or the algorithm
      has a part the vectorized client work cannot run
      (`execution.vectorize`).
  """
  k = hparams['client_vectorization']
  if hparams['task'] not in _VECTORIZED_MODELS:
    raise UsageError(
        f'--client_vectorization={k}: --task={hparams["task"]} has no '
        'vectorized model (only ' + ', '.join(
            f'--task={t}' for t in _VECTORIZED_MODELS) + ' has one); drop '
        'the flag (or set it to 0).')
  vectorized_model_for = importlib.import_module(
      _VECTORIZED_MODELS[hparams['task']]).vectorized_model_for
  with _refusals_as_usage_errors():
    return execution.vectorize(
        process, vectorized_model_for(task.model_fn), group_size=k,
        algorithm=hparams['algorithm'])


@contextlib.contextmanager
def _refusals_as_usage_errors():
  """Turns the program modules' one-line refusals into `UsageError`s."""
  try:
    yield
  except (execution.RefusedError, output_dir_lib.RefusedError) as e:
    raise UsageError(str(e)) from e


def _run_options() -> run_config.RunOptions:
  """The run's settings that hparams.json does not record, from the flags."""
  personalize = None
  if FLAGS.personalize:
    personalize = run_config.Personalization(
        epochs=FLAGS.personalize_epochs, clients=FLAGS.personalize_clients,
        train_fraction=FLAGS.personalize_train_fraction,
        mu=FLAGS.personalize_mu,
        distill_lambda=FLAGS.personalize_distill_lambda)
  return run_config.RunOptions(
      personalize=personalize,
      logical_gpu_memory_mb=FLAGS.logical_gpu_memory_mb)


def main(argv):
  logging.set_verbosity(logging.WARNING)
  if len(argv) > 1:
    _fail(f'unexpected arguments: {" ".join(argv[1:])} (flags take the form '
          '--name=value).')
  hparams = None
  created = None  # The output directory, if this invocation creates it.
  previous = binaries.stop_on_signals()
  try:
    hparams = resolve_hparams()
    note = ignored_flags_note(hparams)
    if note:
      print(note, file=sys.stderr, flush=True)
    if not os.path.exists(hparams['output_dir']):
      created = hparams['output_dir']
    run(run_config.RunConfig.from_hparams(hparams, _run_options()))
  except UsageError as e:
    output_dir_lib.remove_if_no_files(created)
    _fail(str(e))
  except KeyboardInterrupt as e:
    # Ctrl-C, SIGTERM or SIGHUP: the loop checkpointed its last finished
    # round (`training_loop.run_training`); what was written stays.
    _exit_interrupted(e, hparams)
  except runtime.WorkerError as e:
    # A worker died or failed mid-run. Nothing written is lost: metrics.csv
    # and the checkpoints are rewritten atomically, and a re-run resumes.
    _fail(f'{e} The results in {hparams["output_dir"]} are intact: run the '
          'same command again (with the worker back) to resume from the last '
          'checkpoint.')
  finally:
    binaries.restore_signals(previous)
    output_lock.release_all()


def _exit_interrupted(error: KeyboardInterrupt, hparams) -> None:
  """One line: what is kept, the command that resumes; exit 130 or 143.

  The command is this one, with --output_dir added when it was left to its
  dated default (the same command would start a new run).
  """
  done = ''
  extra = []
  if hparams:
    saved = getattr(error, 'checkpointed_round', None)
    where = hparams['output_dir']
    done = (f'round {saved} checkpointed in {where}' if saved else
            f'results in {where}')
    if FLAGS.output_dir is None:
      extra.append(f'--output_dir={where}')
  binaries.exit_interrupted('train', error, done=done, extra=extra)


def _fail(message: str) -> None:
  print(f'train: error: {message}', file=sys.stderr, flush=True)
  sys.exit(2)


# As binaries.sweep.HELP_FLAGS (not imported: sweep defines flags of its own).
HELP_FLAGS = ('--help', '-h', '-?', '--helpfull', '--helpshort')


def _help_requested(argv) -> bool:
  """Prints the flags' help for --help/--helpfull (absl would exit 1)."""
  if not any(arg in HELP_FLAGS for arg in argv[1:]):
    return False
  print((__doc__ or '') + '\n' + (FLAGS.get_help() if '--helpfull' in argv
                                   else FLAGS.module_help(sys.modules[__name__])))
  return True


if __name__ == '__main__':
  if _help_requested(sys.argv):
    sys.exit(0)
  with binaries.quiet_after_interrupt():
    app.run(main, flags_parser=parse_flags_or_exit)
