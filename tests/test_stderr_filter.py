"""TensorFlow's harmless stderr lines are dropped, and only those."""

import os

import pytest

from tff_opt.program import runtime
from tff_opt.program import stderr_filter

GRAPPLER = (b'2026-11-26 06:00:31.566138: E tensorflow/core/grappler/optimizers/'
            b'meta_optimizer.cc:961] function_optimizer failed: '
            b'INVALID_ARGUMENT: {{node Recomputed/StatefulPartitionedCall/while'
            b'/body/_93/cond/then/_665/StatefulPartitionedCall/fedcurv_cnn/'
            b'dense/BiasAdd}} has inputs from different frames. The input '
            b'{{node y}} is in frame \'StatefulPartitionedCall/while\'.\n')
IMPORT_LINES = [
    b'E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:9342] Unable '
    b'to register cuDNN factory: Attempting to register factory for plugin '
    b'cuDNN when one has already been registered\n',
    b'I tensorflow/tsl/cuda/cudart_stub.cc:28] Could not find cuda drivers '
    b'on your machine, GPU will not be used.\n',
    b'W tensorflow/compiler/tf2tensorrt/utils/py_utils.cc:38] TF-TRT '
    b'Warning: Could not find TensorRT\n',
]


@pytest.fixture(autouse=True)
def _filter_on(monkeypatch):
  monkeypatch.delenv('TFF_OPT_SHOW_TF_NOISE', raising=False)


def test_noise_is_dropped_and_every_other_line_kept_in_order(capfd):
  with stderr_filter.filtered():
    os.write(2, b'first\n' + GRAPPLER + b''.join(IMPORT_LINES) +
             b'E real error: something went wrong\n')
  os.write(2, b'after\n')
  assert capfd.readouterr().err == (
      'first\nE real error: something went wrong\nafter\n')


def test_a_lookalike_is_kept(capfd):
  # Another Grappler failure is news: only the frames one is known noise.
  line = (b'E meta_optimizer.cc:961] function_optimizer failed: '
          b'INVALID_ARGUMENT: something else\n')
  with stderr_filter.filtered():
    os.write(2, line)
  assert capfd.readouterr().err == line.decode()


def test_nested_uses_share_one_redirection_and_restore_stderr(capfd):
  with stderr_filter.filtered():
    with stderr_filter.filtered():
      os.write(2, b'inner\n' + GRAPPLER)
    os.write(2, b'outer\n' + GRAPPLER)
  os.write(2, GRAPPLER)  # Outside: nothing is filtered.
  assert capfd.readouterr().err == 'inner\nouter\n' + GRAPPLER.decode()


def test_show_tf_noise_keeps_everything(capfd, monkeypatch):
  monkeypatch.setenv('TFF_OPT_SHOW_TF_NOISE', '1')
  with stderr_filter.filtered():
    os.write(2, GRAPPLER)
  assert capfd.readouterr().err == GRAPPLER.decode()


def test_tff_compilation_runs_filtered(capfd, monkeypatch):
  # TFF's compiler runs Grappler in this process, where the line came from;
  # with this package's Grappler options (`runtime.grappler_config`).
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  @tff.tensorflow.computation(tf.int32)
  def add_one(x):
    return x + 1

  configs = []

  def compile_like_tff(computation, *, grappler_config):
    del computation
    configs.append(grappler_config)
    os.write(2, GRAPPLER + b'compiled\n')
    return 'native'

  monkeypatch.setattr(runtime.native_compiler, 'transform_to_native_form',
                      compile_like_tff)
  assert runtime._native_form(add_one) == 'native'  # pylint: disable=protected-access
  assert configs == [runtime.grappler_config()]
  assert capfd.readouterr().err == 'compiled\n'
