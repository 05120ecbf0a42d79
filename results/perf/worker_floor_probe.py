# Probe (issue 19): the plain-TF Shakespeare client graph run as a TFF
# tensorflow computation on the worker, one client at a time; prints wall
# and CPU seconds (this process + worker) per round of the 4 quick clients.
# Run from the repository root: .venv/bin/python results/perf/worker_floor_probe.py
# Output on 2026-11-25, load 4.7: 5.57/5.48/5.91 s wall, 6.38/6.26/6.46 CPU s.
import os, sys, time
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL','3'); os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS','1')
sys.path.insert(0, os.getcwd())
import psutil
import tensorflow as tf, tensorflow_federated as tff
from benchmarks import round_time, common
from tff_opt.program import runtime
w = round_time.Workload('shakespeare', quick=True, data_dir='data')
runtime.set_local_execution_context()
spec = w.datasets[0].element_spec
@tff.tensorflow.computation(tff.SequenceType(tff.types.tensorflow_to_type(spec)))
def client(ds):
    model = w.keras_model_fn(); loss_fn = w.loss_fn(); weights = model.trainable_variables
    @tf.function
    def run(ds):
      examples = tf.constant(0.0)
      for x, y in ds:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        g = tape.gradient(loss, weights)
        for v, gg in zip(weights, g): v.assign_sub(0.1 * tf.convert_to_tensor(gg))
        examples += tf.cast(tf.shape(y)[0], tf.float32)
      return examples
    return run(ds)
def cpu():
    p = psutil.Process(); t = p.cpu_times(); s = t.user + t.system
    for c in p.children(recursive=True):
        try: ct = c.cpu_times(); s += ct.user + ct.system
        except psutil.Error: pass
    return s
def rnd():
    for d in w.datasets: client(d)
rnd()
for _ in range(3):
    t=time.perf_counter(); c=cpu(); rnd(); print('worker floor x1: %.2f s wall, %.2f cpu' % (time.perf_counter()-t, cpu()-c), flush=True)
runtime.shutdown()
