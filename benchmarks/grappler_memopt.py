r"""Does Grappler's memory optimisation make a graph's numbers vary by process?

    for mem in 3 6 5 4 2; do for i in 1 2 3; do \
      MEM=$mem .venv/bin/python -m benchmarks.grappler_memopt; done; done

One outer step of FedPTR-S's trajectory matching
(`fed_ptr_mtt.matching_gradients`, 2 unrolled steps, 100 synthetic 28x28 images,
the claim's `mtt_convnet`: width 128, depth 3, GroupNorm) built as a TF1 graph,
optimised by Grappler as TFF's native compiler does (constant folding and
arithmetic, loop and function optimisation AGGRESSIVE) with
`memory_optimization` set to the `MemOptType` number in $MEM (TFF's own
AGGRESSIVE is 3, HEURISTICS; 6 scheduling, 5 recomputation, 4 swapping
heuristics alone; 2 MANUAL), and run once in a session without Grappler on one
thread, as TFF's worker runs it. Prints the optimised graph's node count, a
digest of its bytes and a digest of the result; run it in several processes and
compare (`runtime.grappler_config`; output in
`results/perf/grappler_memopt.log`).
"""

import hashlib
import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
from tensorflow.python.grappler import tf_optimizer  # pylint: disable=g-import-not-at-top
from tensorflow_federated.python.core.environments.tensorflow_backend import graph_spec  # pylint: disable=g-import-not-at-top

from tasks import models  # pylint: disable=g-import-not-at-top
from tff_opt.algorithms import fed_ptr_mtt  # pylint: disable=g-import-not-at-top

_SHAPE = (28, 28, 1)


def _digest(data: bytes) -> str:
  return hashlib.sha1(data).hexdigest()[:10]


def main() -> None:
  memory = int(os.environ.get('MEM', '3'))
  spec = (tf.TensorSpec([None, *_SHAPE], tf.float32),
          tf.TensorSpec([None], tf.int32))

  def model_fn():
    return tff.learning.models.from_keras_model(
        models.create_mtt_convnet(_SHAPE, 10), input_spec=spec,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

  rng = np.random.default_rng(0)
  graph = tf.Graph()
  with graph.as_default():
    tf.keras.utils.set_random_seed(0)
    start = models.create_mtt_convnet(_SHAPE, 10).get_weights()
    target = [w + np.float32(0.01) * rng.standard_normal(w.shape, np.float32)
              for w in start]
    x = tf.compat.v1.placeholder(tf.float32, [100, *_SHAPE], name='x')
    outputs = tf.nest.flatten(fed_ptr_mtt.matching_gradients(
        fed_ptr_mtt.forward_from_model_fn(model_fn),
        [tf.constant(w) for w in start], [tf.constant(w) for w in target], x,
        fed_ptr_mtt.synthetic_labels(10, 10),
        tf.constant(0.01), 2))
  names = [t.name for t in outputs]

  config = tf.compat.v1.ConfigProto()
  options = config.graph_options.rewrite_options
  for name in ('constant_folding', 'arithmetic_optimization',
               'loop_optimization', 'function_optimization'):
    setattr(options, name, options.AGGRESSIVE)
  options.memory_optimization = memory
  optimised = tf_optimizer.OptimizeGraph(
      config, graph_spec.GraphSpec(graph.as_graph_def(), '', ['x:0'],
                                   names).to_meta_graph_def())

  run_config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1,
                                        inter_op_parallelism_threads=1)
  run_config.graph_options.rewrite_options.disable_meta_optimizer = True
  with tf.Graph().as_default() as run_graph:
    tf.compat.v1.import_graph_def(optimised, name='')
    with tf.compat.v1.Session(graph=run_graph, config=run_config) as session:
      images = rng.standard_normal((100, *_SHAPE), np.float32)
      result = session.run(names, {'x:0': images})
  print(f'memory_optimization={memory} nodes {len(optimised.node)} graph '
        f'{_digest(optimised.SerializeToString(deterministic=True))} result '
        f'{_digest(b"".join(np.asarray(r).tobytes() for r in result))}',
        flush=True)


if __name__ == '__main__':
  main()
