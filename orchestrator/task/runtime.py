"""Task-side runtime: what every task process does first (never imports TensorFlow).

* reads its context from the environment the orchestrator set (:mod:`orchestrator.env`);
* dies with the orchestrator: ``PR_SET_PDEATHSIG`` (Linux), checked once after it is set;
* dumps all thread stacks to stderr on ``SIGUSR1`` (the orchestrator asks before it kills
  a hung task) and on fatal signals (``faulthandler``);
* tells the orchestrator's own SIGTERM (die at once) from a preemption (checkpoint, then
  exit :data:`orchestrator.env.PREEMPTED_EXIT_CODE`): :func:`route_sigterm`;
* records an uncaught exception as a JSON error file (message, type, traceback,
  timestamp), as torch.distributed.elastic's ``@record`` does, so the orchestrator can name
  the root cause.
"""

from __future__ import annotations

import ctypes
import faulthandler
import json
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Mapping, TypeVar

from orchestrator import env
from orchestrator.task.faults import FaultInjector

_PR_SET_PDEATHSIG = 1
_task_health = None
_T = TypeVar("_T")


@dataclass(frozen=True)
class TaskContext:
    """What a task knows about itself and its job, read from the environment.

    Attributes:
        task_type: ``chief``, ``worker``, ``ps`` or ``evaluator`` (from ``ORCH_TASK``, else TF_CONFIG).
        task_index: index within the task type (likewise).
        tf_config: the parsed TF_CONFIG.
        attempt: 0 for the first attempt.
        health_address: ``host:port`` of the orchestrator's health endpoint, or ``""``.
        token: the job token, or ``""``.
        orchestrator_pid: pid the task must not outlive, or 0 when not local.
        orphan_timeout_s: when > 0 (containers), the task kills itself once the orchestrator
            it reached has been unreachable this long.
        heartbeat_interval_s: seconds between heartbeats.
        run_dir, task_dir, error_file, backup_dir, model_dir: paths (``""`` when unset).
        strategy: ``multi_worker_mirrored`` or ``parameter_server``.
        training: the training options as a dict.
        gpus: GPUs the orchestrator gave the task (``ORCH_GPUS``; 0 when none or not said).
    """

    task_type: str
    task_index: int
    tf_config: Mapping
    attempt: int = 0
    health_address: str = ""
    token: str = ""
    tls_dir: str = ""
    orchestrator_pid: int = 0
    orphan_timeout_s: float = 0.0
    heartbeat_interval_s: float = 1.0
    run_dir: str = ""
    task_dir: str = ""
    error_file: str = ""
    backup_dir: str = ""
    model_dir: str = ""
    strategy: str = "multi_worker_mirrored"
    training: Mapping = None  # type: ignore[assignment]
    gpus: int = 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "TaskContext":
        """Read the context from ``environ`` (default ``os.environ``).

        Raises:
            ValueError: when TF_CONFIG is missing or has no task.
        """
        environ = os.environ if environ is None else environ
        raw = environ.get("TF_CONFIG", "")
        if not raw:
            raise ValueError("TF_CONFIG is not set; start tasks with `python -m orchestrator launch`")
        tf_config = json.loads(raw)
        task = tf_config.get("task") or {}
        if "type" not in task or "index" not in task:
            raise ValueError(f"TF_CONFIG has no task type and index: {raw}")
        task_type, task_index = str(task["type"]), int(task["index"])
        planned = environ.get(env.TASK, "")  # the orchestrator's name for it: a program may rewrite TF_CONFIG
        if planned.rpartition("-")[2].isdigit():
            task_type, task_index = planned.rpartition("-")[0], int(planned.rpartition("-")[2])
        return cls(
            task_type=task_type,
            task_index=task_index,
            tf_config=tf_config,
            attempt=int(environ.get(env.ATTEMPT, "0")),
            health_address=environ.get(env.HEALTH_ADDRESS, ""),
            token=environ.get(env.JOB_TOKEN, ""),
            tls_dir=environ.get(env.TLS_DIR, ""),
            orchestrator_pid=int(environ.get(env.ORCHESTRATOR_PID, "0") or 0),
            orphan_timeout_s=float(environ.get(env.ORPHAN_TIMEOUT_S, "0") or 0),
            heartbeat_interval_s=float(environ.get(env.HEARTBEAT_INTERVAL_S, "1.0")),
            run_dir=environ.get(env.RUN_DIR, ""),
            task_dir=environ.get(env.TASK_DIR, ""),
            error_file=environ.get(env.ERROR_FILE, ""),
            backup_dir=environ.get(env.BACKUP_DIR, ""),
            model_dir=environ.get(env.MODEL_DIR, ""),
            strategy=environ.get(env.STRATEGY, "multi_worker_mirrored"),
            training=json.loads(environ.get(env.TRAINING, "{}")),
            gpus=int(environ.get(env.GPUS, "0") or 0),
        )

    @property
    def name(self) -> str:
        """``worker-1``."""
        return f"{self.task_type}-{self.task_index}"

    @property
    def is_chief(self) -> bool:
        """The chief, or worker 0 when the cluster has no chief (TF multi_worker_util.is_chief)."""
        if self.task_type == "chief":
            return True
        cluster = self.tf_config.get("cluster", {})
        return self.task_type == "worker" and self.task_index == 0 and not cluster.get("chief")


def die_with_orchestrator(orchestrator_pid: int, signum: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``signum`` (default SIGKILL) to this process when its parent
    dies (Linux ``PR_SET_PDEATHSIG``).

    The parent must be the orchestrator (the local backend starts tasks directly).
    If the orchestrator is already gone when this runs, exit at once.
    """
    if orchestrator_pid <= 0 or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != orchestrator_pid:
        os._exit(137)


def install(context: TaskContext) -> None:
    """Prepare the task process: parent-death signal, stack dumps on SIGUSR1, fatal-signal dumps."""
    die_with_orchestrator(context.orchestrator_pid)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True, chain=False)


def stop_requested(task_dir: str | None = None) -> bool:
    """Whether the orchestrator itself is stopping this task: the local backend writes the
    marker :data:`orchestrator.env.STOP_REQUESTED_FILE` into the task's directory right
    before its SIGTERM. Any other SIGTERM (``docker stop``, a Kubernetes eviction, Slurm
    preemption, a spot reclaim) comes from outside: a preemption."""
    task_dir = env.read(env.TASK_DIR) if task_dir is None else task_dir
    return bool(task_dir) and os.path.exists(os.path.join(task_dir, env.STOP_REQUESTED_FILE))


_preemption_handler: Callable[[int, Any], Any] | None = None
"""The Python SIGTERM handler a preemption goes to (TF's ``PreemptionCheckpointHandler``)."""
_wakeup_thread: threading.Thread | None = None


def _die_of_sigterm() -> None:
    """Die of SIGTERM now, from any thread: the default action, as the orchestrator expects of
    its own stops (a Python handler could only run once the main thread leaves TF's C++)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal(int(signal.SIGTERM), 0)  # SIG_DFL, at the C level: allowed from any thread
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # delivered before it returns
    finally:
        os.kill(os.getpid(), signal.SIGKILL)  # not reached unless the above failed


def exit_preempted(why: str) -> None:
    """Exit at once with :data:`orchestrator.env.PREEMPTED_EXIT_CODE` (from any thread).

    Args:
        why: one clause for the task's logs, e.g. ``checkpoint saved at step 37``.
    """
    cause = "SIGTERM from outside" if _sigterm_received() else "a peer received SIGTERM from outside"
    line = f"preempted ({cause}): {why}; exiting with code {env.PREEMPTED_EXIT_CODE}"
    for stream in (sys.stdout, sys.stderr):
        try:
            print(line, file=stream, flush=True)
        except (OSError, ValueError):
            pass
    os._exit(env.PREEMPTED_EXIT_CODE)


def _marker(name: str) -> str:
    task_dir = env.read(env.TASK_DIR)
    return os.path.join(task_dir, name) if task_dir else ""


def _note_sigterm_from_outside() -> None:
    """Write :data:`orchestrator.env.SIGTERM_RECEIVED_FILE` (its Unix time) into the task's
    directory, once: this task is the one that was preempted (best effort)."""
    path = _marker(env.SIGTERM_RECEIVED_FILE)
    if not path or os.path.exists(path):
        return
    try:
        with open(path, "w", encoding="utf-8") as marker:
            marker.write(f"{time.time():.3f}\n")
    except OSError:
        pass


def _sigterm_received() -> bool:
    path = _marker(env.SIGTERM_RECEIVED_FILE)
    return bool(path) and os.path.exists(path)


def _has_preemption_handler() -> bool:
    current = signal.getsignal(signal.SIGTERM)
    return _preemption_handler is not None or (callable(current) and current is not _on_sigterm)


def _on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM in the main thread: ours -> die at once; from outside -> the preemption path."""
    if stop_requested():
        _die_of_sigterm()
    _note_sigterm_from_outside()
    if _preemption_handler is not None:
        _preemption_handler(signum, frame)  # TF: flag it; the checkpoint is saved at the next step
    else:
        exit_preempted("nothing to checkpoint in this task")


def _watch_wakeups(read_fd: int) -> None:
    """Act on SIGTERM even while the main thread is blocked in TensorFlow's C++ (a collective,
    ``Server.join()``), where Python handlers wait: CPython's C handler writes the signal
    number to the wakeup fd at once (``signal.set_wakeup_fd``)."""
    while True:
        try:
            data = os.read(read_fd, 64)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        if signal.SIGTERM not in data:
            continue
        if stop_requested():
            _die_of_sigterm()
        _note_sigterm_from_outside()
        if not _has_preemption_handler():
            exit_preempted("nothing to checkpoint in this task")
        # else: the main thread hands it to TF's handler between two steps


def route_sigterm() -> None:
    """Tell the orchestrator's own SIGTERM from a preemption (call in the main thread).

    TensorFlow catches SIGTERM twice: its coordination service's preemption notifier (C++,
    ``preemption_notifier.cc: SIGTERM caught``) when a multi-worker strategy or server
    starts, and ``tf.distribute.experimental.PreemptionCheckpointHandler``, which installs a
    Python handler that makes the cluster checkpoint at the next step and exit. Call this right
    after the strategy or server is created, and again right after a
    ``PreemptionCheckpointHandler`` is (its handler is then chained behind ours):

    * the orchestrator's own stop (the marker :func:`stop_requested`): the task dies of SIGTERM
      at once, even while its main thread is blocked in a collective (a wakeup-fd thread), so
      stops stay prompt and never write a preemption checkpoint;
    * a SIGTERM from outside: TF's ``PreemptionCheckpointHandler`` takes it when there is one
      (checkpoint at the next step, then :data:`~orchestrator.env.PREEMPTED_EXIT_CODE`); a
      task without one (ps, PSS worker: nothing of its own to save) exits with that code at once.

    Raises:
        ValueError: when called outside the main thread (``signal.signal``'s rule).
    """
    global _preemption_handler, _wakeup_thread
    current = signal.getsignal(signal.SIGTERM)
    if callable(current) and current is not _on_sigterm:
        _preemption_handler = current
    signal.signal(signal.SIGTERM, _on_sigterm)
    if _wakeup_thread is None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        if signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False) != -1:
            raise RuntimeError("signal.set_wakeup_fd is already in use in this task")
        _wakeup_thread = threading.Thread(target=_watch_wakeups, args=(read_fd,), name="sigterm-router", daemon=True)
        _wakeup_thread.start()


def write_error_file(path: str, exc: BaseException, task: str = "") -> None:
    """Write the JSON error record of ``exc`` to ``path`` (no-op when ``path`` is empty).

    The record: ``{"message", "type", "traceback", "timestamp" (Unix seconds), "pid", "task"}``.
    """
    if not path:
        return
    record = {
        "message": f"{type(exc).__name__}: {exc}",
        "type": type(exc).__name__,
        "traceback": "".join(traceback.format_exception(exc)),
        "timestamp": time.time(),
        "pid": os.getpid(),
        "task": task,
    }
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=2)
    os.replace(tmp, path)


def record_errors(context: TaskContext, fn: Callable[[], _T]) -> _T:
    """Run ``fn``; on an uncaught exception write the error file, then re-raise."""
    try:
        return fn()
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - recorded, then re-raised
        write_error_file(context.error_file, exc, context.name)
        raise


def run_task(body: Callable[[TaskContext, Any], None]) -> int:
    """The common frame of every task entrypoint (``python -m worker``, ``python -m ps``).

    Sets ``TF_CONFIG`` from the JobSet environment when it is absent (Kubernetes,
    :func:`orchestrator.task.jobset.ensure_tf_config`), reads the context, waits (bounded) for a
    JobSet pod's peers' names (:func:`orchestrator.task.jobset.wait_for_jobset_peers`), installs the runtime
    (parent-death signal, stack dumps), starts the heartbeat stream, runs ``body(context, reporter)``,
    records an uncaught exception in the error file, and sends a final DONE heartbeat on success.

    Returns:
        0 on success, 2 when the environment is not a task's (no TF_CONFIG, or an
        inconsistent JobSet environment: one line on stderr naming the variable), 1 when a JobSet
        pod's peers' names never resolved (one line naming them); an exception propagates
        (Python exits 1 with the traceback on stderr).
    """
    # grpc, protobuf and psutil (~20 MB) load here, not when the module is imported: execwrap
    # imports this module and stays resident as the parent of a user's program
    from orchestrator.proto import supervisor_pb2 as pb
    from orchestrator.task.jobset import PeersUnresolved, ensure_tf_config, wait_for_jobset_peers
    from orchestrator.task.reporter import HeartbeatReporter

    env.bench_mark("runtime-imported")
    try:
        ensure_tf_config()  # a Kubernetes JobSet pod computes its own TF_CONFIG
        context = TaskContext.from_env()
        wait_for_jobset_peers()  # ... and waits, saying so, until its peers' names resolve
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except PeersUnresolved as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    install(context)
    FaultInjector.from_env().start_timers()
    if env.is_set(env.TASK_HEALTH_PORT):  # containers: the healthcheck probes it
        from orchestrator.task.probe import serve_task_health  # grpc_health: containers only

        global _task_health  # keep a reference: a collected grpc.Server stops serving
        _task_health = serve_task_health(env.read_int(env.TASK_HEALTH_PORT))
    reporter = HeartbeatReporter.from_context(context).start()
    env.bench_mark("reporter-started")

    def registered_then_body() -> None:
        ctx = context
        if env.read_flag(env.ADDRESS_FROM_TASK):  # Slurm: bind a port here, register it, get TF_CONFIG
            ctx = take_cluster(context, reporter)
        body(ctx, reporter)

    try:
        record_errors(context, registered_then_body)
    except BaseException:
        reporter.close(timeout_s=2.0)
        raise
    if env.read_flag(env.STAY_UNTIL_STOPPED):
        reporter.update(phase=pb.PHASE_DONE)
        _wait_for_stop(context)
    reporter.close(pb.PHASE_DONE)
    return 0


def take_cluster(context: TaskContext, reporter: Any = None) -> TaskContext:
    """Register this task's address with the orchestrator and wait for the whole cluster
    (:mod:`orchestrator.task.addressing`); sets ``TF_CONFIG`` in the environment to the reply's.

    Args:
        context: the task's context (its TF_CONFIG names the task only).
        reporter: the task's heartbeat reporter; it then holds the bound port until
            ``release_port()``, right before TensorFlow binds. Without one the socket is
            closed at once (a user's program binds its port when it wants).

    Returns:
        The context with the cluster's TF_CONFIG.

    Raises:
        RuntimeError: the registration was refused or timed out.
    """
    import dataclasses

    from orchestrator.task.addressing import register

    tf_config, sock = register(context)
    os.environ["TF_CONFIG"] = tf_config
    cluster = json.loads(tf_config)
    mine = cluster["cluster"].get(context.task_type, [])
    where = mine[context.task_index] if context.task_index < len(mine) else "(not in the training cluster)"
    print(f"{context.name}: registered {where}; cluster {json.dumps(cluster['cluster'], sort_keys=True)}", flush=True)
    if reporter is not None:
        reporter.hold(sock)
    elif sock is not None:
        sock.close()
    return dataclasses.replace(context, tf_config=cluster)


def _wait_for_stop(context: TaskContext) -> None:
    """Block until SIGTERM or SIGINT (Compose: a finished task must not end the cluster;
    ``docker compose up --abort-on-container-exit`` stops everything when the chief exits)."""
    print(f"{context.name}: done; waiting to be stopped", file=sys.stderr, flush=True)
    stopped = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopped.set())
    while not stopped.wait(1.0):
        pass
