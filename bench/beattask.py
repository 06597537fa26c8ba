"""One task for the heartbeat-gap measurement (:mod:`bench.heartbeat_gaps`): the real
``HeartbeatReporter`` started first, then what a training task does that could delay a beat,
each stage announced in the heartbeat's ``message`` (so the orchestrator side knows which stage
a late beat came in):

``import`` (``import tensorflow``: loading its shared libraries holds the GIL), ``ops`` (large
matmuls: TF ops release the GIL), ``python`` (a pure-Python busy loop: it shares the GIL),
``trace`` (tracing and compiling a ``tf.function`` of many ops), ``save`` (``tf.saved_model.save``
of a module with a few MB of variables), then ``done``.

``python -m bench.beattask SECONDS_PER_STAGE SAVE_DIR`` with the orchestrator's task variables.
"""

from __future__ import annotations

import sys
import time


def main() -> None:
    per_stage_s, save_dir = float(sys.argv[1]), sys.argv[2]
    from orchestrator.proto import supervisor_pb2 as pb
    from orchestrator.task.context import TaskContext
    from orchestrator.task.reporter import HeartbeatReporter

    context = TaskContext.from_env()
    reporter = HeartbeatReporter.from_context(context).start()
    reporter.update(phase=pb.PHASE_TRAINING, message="import", now=True)
    import tensorflow as tf

    reporter.update(message="ops", now=True)
    a = tf.random.normal((1500, 1500))
    end = time.monotonic() + per_stage_s
    while time.monotonic() < end:
        a = tf.linalg.matmul(a, a) / 1500.0
    reporter.update(message="python", now=True)
    end, n = time.monotonic() + per_stage_s, 0
    while time.monotonic() < end:
        n += sum(i * i for i in range(10_000))
    reporter.update(message="trace", now=True)

    end, k = time.monotonic() + per_stage_s, 0
    while time.monotonic() < end:
        k += 1

        @tf.function
        def f(x, k=k):
            for i in range(200):
                x = tf.nn.relu(tf.linalg.matmul(x, x) * (1.0 / (i + k)))
            return x

        f(tf.ones((8, 8))).numpy()
    reporter.update(message="save", now=True)
    module = tf.Module()
    module.v = [tf.Variable(tf.random.normal((500, 500))) for _ in range(8)]
    end = time.monotonic() + per_stage_s
    while time.monotonic() < end:
        tf.saved_model.save(module, save_dir)
    reporter.update(message="done", now=True)
    reporter.close(pb.PHASE_DONE)


if __name__ == "__main__":
    main()
