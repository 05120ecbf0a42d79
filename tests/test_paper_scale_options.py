"""Every paper-scale table's settings validate here; only the data are absent.

For each table of `binaries/paper_tables.py` at `--scale=paper`, the grid
passes `reproduce.check_points` up to the data (algorithms, tasks, flags,
option names, hyper-parameters), and every (task, options) pair of it,
resolved as `binaries.train` resolves it, is refused by the task builder
with `MissingDataError` only: the tasks validate their option values before
they look for files, so a wrong value would surface as a `ValueError` here.
"""

import pytest
import tensorflow_federated as tff

import tasks
from binaries import paper_tables
from binaries import reproduce
from binaries import train
from tasks import data_errors

SPEC = tff.simulation.baselines.ClientSpec(num_epochs=1, batch_size=1)
TABLES = [(paper, number) for paper in paper_tables.PAPERS
          for number in paper_tables.tables_of(paper)]


def _task_settings(points):
  """Distinct (task, task options, seed) of the points, as train resolves."""
  settings = {}
  for p in points:
    train.FLAGS.unparse_flags()
    try:
      train.FLAGS(['train', *p.argv])
      hparams = train.resolve_hparams()
    finally:
      train.FLAGS.unparse_flags()
    options = hparams['task_options']
    settings[(hparams['task'], repr(sorted(options.items())))] = (
        hparams['task'], options, hparams['seed'])
  return list(settings.values())


@pytest.mark.parametrize('paper, number', TABLES)
def test_paper_scale_is_refused_for_missing_data_only(paper, number,
                                                      tmp_path):
  table = paper_tables.get_table(paper, number)
  empty = tmp_path / 'nodata'
  empty.mkdir()
  points = reproduce.grid(table, 'paper', seeds=1,
                          work_dir=str(tmp_path / 'work'),
                          data_dir=str(empty))
  assert points
  reproduce.check_points(points, where=f'{paper} {number}', load_data=False)
  settings = _task_settings(points)
  assert settings
  for task, options, seed in settings:
    with pytest.raises(data_errors.MissingDataError) as error:
      tasks.create_task(task, train_client_spec=SPEC, data_dir=str(empty),
                        seed=seed, **options)
    assert str(error.value).startswith(f"task '{task}' needs {empty}/")
    assert 'which does not exist (no download is attempted)' in str(
        error.value)


def test_a_bad_option_value_is_refused_before_the_missing_data(tmp_path):
  """The control: values are checked first, so the test above can fail."""
  with pytest.raises(ValueError, match='^classes_per_client must be a '
                     'positive integer, got 0.$'):
    tasks.create_task('cifar10', train_client_spec=SPEC,
                      data_dir=str(tmp_path), partition='sort',
                      classes_per_client=0)
