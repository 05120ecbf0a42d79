"""One run's settings, typed: what `binaries.train` resolves from its flags.

A run is recorded as `hparams.json`, a flat dictionary of its settings
(flags after the task's defaults), and that dictionary is what sweeps,
claims, reports and a resumed run read. `RunConfig` is the same settings
as typed fields, for the program that runs them; it converts both ways
without changing a value, so the file stays as it is (`as_hparams`).

Besides the recorded settings, a run has a few options that change
neither what it computes nor how it is resumed and are not recorded
(`--personalize` and its settings, the logical GPUs' memory):
`RunOptions`.
"""

import dataclasses
from typing import Any, Mapping

from tff_opt.program import registry


@dataclasses.dataclass(frozen=True)
class Personalization:
  """`--personalize`'s settings: classifier calibration after the last round.

  Attributes:
    epochs: Fine-tuning epochs on each held-out client.
    clients: Calibrate a seeded sample of this many held-out clients;
      None: all.
    train_fraction: Share of each class in a client's own train split.
    mu: Proximal strength toward the global last layer.
    distill_lambda: Self-confidence distillation weight.
  """
  epochs: int
  clients: int | None
  train_fraction: float
  mu: float
  distill_lambda: float


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """What a run is told beside its recorded settings (not in hparams.json).

  Attributes:
    personalize: `--personalize`'s settings, or None when it is off.
    logical_gpu_memory_mb: Memory of each logical GPU of `logical_gpus`.
  """
  personalize: Personalization | None = None
  logical_gpu_memory_mb: int = 2048


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """Every recorded setting of one run, as `hparams.json` holds it.

  The fields are `hparams.json`'s keys, in the order the trainer resolves
  them, but for `algorithm_hparams` (the algorithm's own settings, each
  its own key there) and `options` (not recorded). A setting recorded only
  when set (`fedbn`, `client_vectorization`, `stop_at`, `ignored_flags`)
  has the value that leaves it out by default.
  """
  task: str
  algorithm: str
  data_dir: str | None
  task_options: Mapping[str, Any]
  server_opt: str
  server_lr: float | None
  server_tau: float | None
  server_beta_1: float | None
  server_beta_2: float | None
  server_momentum: float
  client_opt: str
  client_lr: float
  client_lr_decay: str
  client_lr_decay_factor: float
  client_lr_decay_every: int
  client_weighting: str
  clients_per_round: int
  client_epochs: int
  client_batch_size: int
  rounds: int
  eval_every: int
  seed: int
  checkpoint_every: int
  max_concurrent_clients: int | None
  intra_op_threads: int | None
  onednn: bool
  workers: str | None
  worker_tls_root_cert: str | None
  worker_timeout: float
  gpu_memory_growth: bool
  logical_gpus: int | None
  eval_examples: int
  final_full_eval: bool
  algorithm_hparams: Mapping[str, Any]
  output_dir: str
  fedbn: bool = False
  client_vectorization: int = 0
  stop_at: str | None = None
  ignored_flags: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  options: RunOptions = RunOptions()

  @classmethod
  def from_hparams(cls, hparams: Mapping[str, Any],
                   options: RunOptions = RunOptions()) -> 'RunConfig':
    """The run `hparams` (as `hparams.json` records it) describes.

    Args:
      hparams: Every recorded setting; the algorithm's own under their
        flag names (`registry.ALGORITHMS[algorithm].flags`).
      options: The run's options that are not recorded.

    Returns:
      The typed settings; `as_hparams` gives `hparams` back.

    Raises:
      ValueError: If `hparams` has a key that is neither a setting nor one
        of the algorithm's, or lacks a setting.
    """
    own = registry.ALGORITHMS[hparams['algorithm']].flags
    names = {f.name for f in dataclasses.fields(cls)} - _NOT_KEYS
    unknown = sorted(set(hparams) - names - set(own))
    if unknown:
      raise ValueError(f'not settings of --algorithm={hparams["algorithm"]}: '
                       f'{", ".join(unknown)}')
    return cls(
        **{k: v for k, v in hparams.items() if k in names},
        algorithm_hparams={name: hparams[name] for name in own},
        options=options)

  def as_hparams(self) -> dict[str, Any]:
    """The settings as `hparams.json` records them.

    Returns:
      A new dictionary: each setting under its key, in the order the
      trainer resolves them, the algorithm's own after `final_full_eval`;
      the settings recorded only when set left out when they are not.
    """
    hparams = {}
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      if field.name == 'algorithm_hparams':
        hparams.update(value)
      elif field.name in _NOT_KEYS:
        continue
      elif field.name in _RECORDED_WHEN_SET:
        if value:
          hparams[field.name] = value
      else:
        hparams[field.name] = value
    # `output_dir` is resolved last (its default names the other settings).
    hparams['output_dir'] = hparams.pop('output_dir')
    return {k: dict(v) if isinstance(v, Mapping) else v
            for k, v in hparams.items()}


# Fields that are not keys of hparams.json.
_NOT_KEYS = frozenset({'algorithm_hparams', 'options'})
# Settings recorded only when set, so that older run directories resume.
_RECORDED_WHEN_SET = frozenset(
    {'fedbn', 'client_vectorization', 'stop_at', 'ignored_flags'})
