"""Serve a tf.distribute.Server until stopped: what ps tasks (and PSS workers) do.

Under ParameterServerStrategy the ps and worker tasks only run ``tf.distribute.Server``
and ``join()`` forever; the coordinator (chief) dispatches work to them. They never
exit on their own: the orchestrator stops them when the chief is done (tensorflow#25858).
"""

from __future__ import annotations

from orchestrator import env
from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.resources.pinning import pin_self
from orchestrator.task.sigterm import route_sigterm


def configure_threads(tf) -> None:
    """Apply the per-task thread limits the orchestrator set (TF_NUM_*_THREADS)."""
    intra = env.read_int(env.INTRAOP_THREADS)
    inter = env.read_int(env.INTEROP_THREADS)
    if intra:
        tf.config.threading.set_intra_op_parallelism_threads(intra)
    if inter:
        tf.config.threading.set_inter_op_parallelism_threads(inter)


def serve(context, reporter) -> None:
    """Start this task's tf.distribute.Server from TF_CONFIG and block in ``join()``.

    Args:
        context: the task's :class:`orchestrator.task.context.TaskContext`.
        reporter: its :class:`orchestrator.task.reporter.HeartbeatReporter`.
    """
    import tensorflow as tf

    env.bench_mark("imported")
    pin_self(all_threads=True)  # the task's cores (ORCH_CPUS), from here on: see orchestrator.resources.pinning
    configure_threads(tf)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    reporter.release_port()
    env.bench_mark("port-released")
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    route_sigterm()  # TF's preemption notifier caught SIGTERM: ours stay prompt, preemptions exit 143
    env.bench_mark("serving")
    reporter.update(phase=pb.PHASE_SERVING, message=f"serving {server.target}")
    print(f"{context.name}: tf.distribute.Server serving at {server.target}", flush=True)
    server.join()
