"""Every environment variable the orchestrator sets in a task, in one place.

Task processes read these through :class:`orchestrator.task.context.TaskContext` or the
readers at the end of this module (:func:`read`, :func:`read_int`, :func:`read_flag`).

=============================  ==============================================================
Variable                       Meaning
=============================  ==============================================================
``TF_CONFIG``                  cluster spec and this task's type and index (TF's own format)
``ORCH_RUN_ID``                the run id, also the name of the run directory
``ORCH_RUN_DIR``               ``runs/<run-id>``: shared by every task of the job
``ORCH_TASK_DIR``              ``runs/<run-id>/attempt-<n>/<task>``: this attempt's logs and scratch
``ORCH_TASK``                  the task this process is (``worker-1``): it reports as this task even when its
                               program rewrites ``TF_CONFIG`` before the health client reads it
``ORCH_ATTEMPT``               0 for the first attempt of the task, 1 after one restart, ...
``ORCH_HEALTH_ADDRESS``        ``host:port`` of the orchestrator's gRPC health endpoint
``ORCH_JOB_TOKEN``             secret every health call carries as ``x-job-token`` metadata
``ORCH_TLS_DIR``               the run's certificates (``runs/<run-id>/tls``): the task presents
                               ``<ORCH_TASK>.crt``/``.key`` and trusts ``ca.crt``
                               (:mod:`orchestrator.tls`); unset with ``--insecure``; a
                               Kubernetes pod: ``/etc/tfcluster/tls``, the job's Secret
``ORCH_ORCHESTRATOR_PID``      pid of the orchestrator (local backend): the task dies with it
``ORCH_HEARTBEAT_INTERVAL_S``  seconds between two heartbeats
``ORCH_ERROR_FILE``            where the task writes a JSON record of an uncaught exception
``ORCH_STRATEGY``              ``multi_worker_mirrored`` or ``parameter_server``
``ORCH_TRAINING``              JSON of the training options (epochs, batch size, ...)
``ORCH_WORKERS_MIN``           elastic workers (``--workers MIN:MAX``) only: MIN; unset otherwise (docs/elastic.md)
``ORCH_WORKERS_MAX``           elastic workers only: MAX (the job starts there; ``TF_CONFIG`` says the size now)
``ORCH_BATCH_POLICY``          elastic workers only: ``keep-global`` or ``keep-per-replica``
``ORCH_GLOBAL_BATCH_SIZE``     elastic workers only: examples per training step at this size (under
                               ``keep-global`` the same at every size); a user's program batches its
                               dataset with it (MWMS splits it among the replicas)
``ORCH_PER_REPLICA_BATCH_SIZE`` elastic workers only: ``ORCH_GLOBAL_BATCH_SIZE`` / the replicas in sync
``ORCH_LEARNING_RATE_FACTOR``  elastic workers only: multiply the learning rate by it (``--lr-scaling
                               linear``: global batch now / global batch at MAX; else ``1.0``)
``ORCH_BACKUP_DIR``            BackupAndRestore directory, shared by the job
``ORCH_MODEL_DIR``             where the chief exports the final SavedModel
``TF_NUM_INTRAOP_THREADS``     per-task thread limit, so tasks do not oversubscribe the cores
``TF_NUM_INTEROP_THREADS``     per-task inter-op thread limit
``OMP_NUM_THREADS``            the same limit for oneDNN/OpenMP
``TF_USE_LEGACY_KERAS``        ``1``: ``tf.keras`` is tf-keras (Keras 3 ``fit`` fails under MWMS)
``TF_CPP_MIN_LOG_LEVEL``       ``1``: TensorFlow's INFO lines are dropped from the logs
``GRPC_FAIL_FAST``             ``use_caller`` for ParameterServerStrategy tasks (TF PSS tutorial)
``PYTHONUNBUFFERED``           ``1``: log lines reach the files at once
``BENCH_TIMING``               not set by the orchestrator: ``python -m bench`` sets it so the task programs
                               print ``bench: mark LABEL (unix T)`` lines (where a start's time goes)
``ORCH_FAULTS``                faults to inject into this task (``--inject-fault``), JSON; a gate's also
                               holds the step faults it hands over (:mod:`orchestrator.task.relay`)
``ORCH_KEEPER_FIELDS``         set by a task an injected ``hang`` freezes, for its keeper process: the
                               heartbeat fields it goes on sending (:mod:`orchestrator.task.keeper`)
``ORCH_TASK_HEALTH_PORT``      containers: serve grpc.health.v1 on this port (the healthcheck probes it)
``ORCH_ORPHAN_TIMEOUT_S``      containers: kill the task once its orchestrator is unreachable this long
``ORCH_STAY_UNTIL_STOPPED``    ``1`` (Compose): a finished task waits for SIGTERM instead of exiting
``ORCH_ADDRESS_FROM_TASK``     ``1`` (Slurm): bind a port on this node and register it with the
                               orchestrator (``RegisterAddress``); the TF_CONFIG in the
                               environment only names the task until the reply replaces it (and,
                               with ``--data-service``, the service's addresses above)
``ORCH_CLIENT_PID``            set by :mod:`orchestrator.client` itself: pid of the program's process
                               that announced the task (its children do not announce it again)
``ORCH_GPUS``                  GPUs this task holds (a count; set when any task of the job holds one):
                               the built-in program checks TensorFlow sees them; Slurm asks
                               ``srun --gpus-per-task`` for them (docs/gpus.md)
``CUDA_VISIBLE_DEVICES``       CUDA's own: this task's devices by UUID, disjoint between tasks
                               (:mod:`orchestrator.resources.placement`); empty: none. Not set on a node
                               without GPUs, nor where the scheduler sets it (Slurm, Kubernetes)
``TF_FORCE_GPU_ALLOW_GROWTH``  ``true`` with ``--share-gpus``: TensorFlow allocates GPU memory as
                               needed instead of mapping the whole device at start
``ORCH_FAKE_GPUS``             read, never set: a JSON list of fake GPUs that :mod:`orchestrator.resources.gpus`
                               reads instead of NVML (tests, demos; docs/gpus.md); tasks inherit
                               it on the local backend, so their heartbeats sample the same devices
``ORCH_LEASES_DIR``            read, never set: the directory of the machine-wide lease ledger
                               (:mod:`orchestrator.resources.leases`; default ``<tmp>/tf-orchestrator-leases``):
                               runs that share it lease disjoint cores and GPUs (docs/several-jobs.md)
``ORCH_CPUS``                  the cores of this task (``0-3``; :mod:`orchestrator.resources.cpus`): it sets its
                               own affinity to them before TensorFlow starts its pools; unset: not pinned
``ORCH_NODE_CPUS``             Slurm: this task's share of its node's cores (JSON: the job's tasks on that
                               node, which one it is; :func:`orchestrator.resources.cores.node_share_cores`): it
                               divides the cores its step may use, as ``ORCH_CPUS`` would, before TF starts
``ORCH_SERVICE_CPUS``          cores kept off the training tasks' (the health client's thread and the
                               warm spares run there); unset: none are kept
``ORCH_DATA_SERVICE_ADDRESS``  with ``--data-service``: ``host:port`` of the tf.data service's dispatcher
                               (trainers, data workers and the dispatcher itself; docs/data-service.md;
                               on Slurm the registration reply's, once the dispatcher registered);
                               a user's program passes ``grpc://`` + it as ``service=`` to
                               ``tf.data.experimental.service.distribute``
``ORCH_DATA_SERVICE_JOB``      with ``--data-service``: the job name the trainers share (the run id), so a
                               restarted trainer re-attaches to the same tf.data service job
``ORCH_DATA_SERVICE_SHARDING`` with ``--data-service``: ``dynamic`` or ``off`` (``ShardingPolicy``)
``ORCH_DATA_SERVICE_WORK_DIR`` the dispatcher only: its journal directory (``DispatcherConfig.work_dir``,
                               ``fault_tolerant_mode=True``), kept across its restarts
``ORCH_DATA_SERVICE_JOB_GC_S`` the dispatcher only: ``DispatcherConfig.job_gc_timeout_ms`` / 1000
``ORCH_TASK_ADDRESS``          tf.data service roles only: the ``host:port`` the backend gave this task
                               (its server binds the port; a data worker's ``worker_address``); on
                               Slurm the one it registered (its node's address), from the reply
``ORCH_SPARE_READY_FILE``      warm spares only: the file it creates once its imports are done (the
                               backend hands a task only to a spare that has it)
``ORCH_SPARE_MODULE``          warm spares only: the built-in task program it becomes (``worker``)
``ORCH_SPARE_PRELOAD``         warm spares only: modules it imports while it waits (``tensorflow,...``;
                               ``tf_keras?``: when installed); never in a user's program's environment
=============================  ==============================================================

Kubernetes JobSet pods (``render --format jobset``) get no ``TF_CONFIG``: each pod computes
its own at start (:func:`orchestrator.task.jobset.tf_config_from_jobset`) from these. The
first four come from the pod's own labels, which the JobSet controller sets on every pod
(``labelAndAnnotateObject`` in jobset's ``jobset_controller.go``), through the downward API
(:data:`JOBSET_LABELS`); Kubernetes itself sets ``JOB_COMPLETION_INDEX`` in the pods of an
Indexed Job; the renderer writes the last four literally.

=================================  ==========================================================
Variable                           Meaning
=================================  ==========================================================
``JOBSET_NAME``                    the JobSet's name (label ``jobset.sigs.k8s.io/jobset-name``)
``JOBSET_REPLICATED_JOB_NAME``     the replicated job's name = the task type
                                   (label ``jobset.sigs.k8s.io/replicatedjob-name``)
``JOBSET_JOB_INDEX``               index of the Job within its replicated job (always 0 here:
                                   one Job per task type; label ``jobset.sigs.k8s.io/job-index``)
``ORCH_ATTEMPT``                   the JobSet's restart count (label ``jobset.sigs.k8s.io/restart-attempt``)
``JOB_COMPLETION_INDEX``           the pod's index in its Indexed Job = the task index
``ORCH_JOBSET_SUBDOMAIN``          the headless Service JobSet creates (pods are
                                   ``<jobset>-<rjob>-<jobIdx>-<podIdx>.<subdomain>``)
``ORCH_JOBSET_CLUSTER``            JSON task type -> task count, e.g. ``{"chief": 1, "worker": 2, "ps": 1}``
``ORCH_JOBSET_PORT``               the port every task's ``tf.distribute`` server binds
``ORCH_JOBSET_PEER_WAIT_S``        how long a pod waits, before TensorFlow starts, for its peers'
                                   names to resolve (default 300; 0: no wait;
                                   :func:`orchestrator.task.jobset.wait_for_peers`)
=================================  ==========================================================

Files the orchestrator writes into a task's directory (``ORCH_TASK_DIR``):

=============================  ==============================================================
File                           Meaning
=============================  ==============================================================
``stop-requested``             written by the local backend right before its SIGTERM: the
                               orchestrator itself stops the task (not a preemption), so
                               ``execwrap`` SIGKILLs a user's program that ignores SIGTERM
                               after :data:`orchestrator.task.execwrap.STOP_GRACE_S`, and
                               a built-in task dies at once instead of taking the preemption
                               path (:func:`orchestrator.task.sigterm.route_sigterm`)
=============================  ==============================================================

Exit code: :data:`PREEMPTED_EXIT_CODE` (143) says "preempted: my state is saved, restart me".
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import TextIO

RUN_ID = "ORCH_RUN_ID"
RUN_DIR = "ORCH_RUN_DIR"
TASK_DIR = "ORCH_TASK_DIR"
TASK = "ORCH_TASK"
ATTEMPT = "ORCH_ATTEMPT"
HEALTH_ADDRESS = "ORCH_HEALTH_ADDRESS"
JOB_TOKEN = "ORCH_JOB_TOKEN"
TLS_DIR = "ORCH_TLS_DIR"
ORCHESTRATOR_PID = "ORCH_ORCHESTRATOR_PID"
HEARTBEAT_INTERVAL_S = "ORCH_HEARTBEAT_INTERVAL_S"
ERROR_FILE = "ORCH_ERROR_FILE"
STRATEGY = "ORCH_STRATEGY"
TRAINING = "ORCH_TRAINING"
BACKUP_DIR = "ORCH_BACKUP_DIR"
MODEL_DIR = "ORCH_MODEL_DIR"
WORKERS_MIN = "ORCH_WORKERS_MIN"
WORKERS_MAX = "ORCH_WORKERS_MAX"
BATCH_POLICY = "ORCH_BATCH_POLICY"
GLOBAL_BATCH_SIZE = "ORCH_GLOBAL_BATCH_SIZE"
PER_REPLICA_BATCH_SIZE = "ORCH_PER_REPLICA_BATCH_SIZE"
LEARNING_RATE_FACTOR = "ORCH_LEARNING_RATE_FACTOR"
TASK_HEALTH_PORT = "ORCH_TASK_HEALTH_PORT"
ORPHAN_TIMEOUT_S = "ORCH_ORPHAN_TIMEOUT_S"
STAY_UNTIL_STOPPED = "ORCH_STAY_UNTIL_STOPPED"
CLIENT_PID = "ORCH_CLIENT_PID"
GPUS = "ORCH_GPUS"
FAKE_GPUS = "ORCH_FAKE_GPUS"
LEASES_DIR = "ORCH_LEASES_DIR"
SPARE_MODULE = "ORCH_SPARE_MODULE"
SPARE_PRELOAD = "ORCH_SPARE_PRELOAD"
SPARE_READY_FILE = "ORCH_SPARE_READY_FILE"
CPUS = "ORCH_CPUS"
SERVICE_CPUS = "ORCH_SERVICE_CPUS"
DATA_SERVICE_ADDRESS = "ORCH_DATA_SERVICE_ADDRESS"
DATA_SERVICE_JOB = "ORCH_DATA_SERVICE_JOB"
DATA_SERVICE_SHARDING = "ORCH_DATA_SERVICE_SHARDING"
DATA_SERVICE_WORK_DIR = "ORCH_DATA_SERVICE_WORK_DIR"
DATA_SERVICE_JOB_GC_S = "ORCH_DATA_SERVICE_JOB_GC_S"
TASK_ADDRESS = "ORCH_TASK_ADDRESS"
NODE_CPUS = "ORCH_NODE_CPUS"

JOBSET_NAME = "JOBSET_NAME"
JOBSET_REPLICATED_JOB = "JOBSET_REPLICATED_JOB_NAME"
JOBSET_JOB_INDEX = "JOBSET_JOB_INDEX"
JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
JOBSET_SUBDOMAIN = "ORCH_JOBSET_SUBDOMAIN"
JOBSET_CLUSTER = "ORCH_JOBSET_CLUSTER"
JOBSET_PORT = "ORCH_JOBSET_PORT"
JOBSET_PEER_WAIT_S = "ORCH_JOBSET_PEER_WAIT_S"
JOBSET_PEER_WAIT_DEFAULT_S = 300.0
"""Default of ``ORCH_JOBSET_PEER_WAIT_S`` (the renderer writes it; a pod without it uses it): the
pods of a set start within seconds of each other once scheduled, minutes when images are pulled."""

JOBSET_LABELS = {
    JOBSET_NAME: "jobset.sigs.k8s.io/jobset-name",
    JOBSET_REPLICATED_JOB: "jobset.sigs.k8s.io/replicatedjob-name",
    JOBSET_JOB_INDEX: "jobset.sigs.k8s.io/job-index",
    ATTEMPT: "jobset.sigs.k8s.io/restart-attempt",
}
"""Environment variable -> the pod label the JobSet controller sets (jobset ``api/jobset/v1alpha2``
``JobSetNameKey``, ``ReplicatedJobNameKey``, ``JobIndexKey``; ``pkg/constants`` ``RestartsKey``),
read through the downward API (``fieldRef: metadata.labels['...']``)."""
ADDRESS_FROM_TASK = "ORCH_ADDRESS_FROM_TASK"
KEEPER_FIELDS = "ORCH_KEEPER_FIELDS"
"""JSON of the heartbeat fields a keeper sends for a task an injected ``hang`` froze
(:mod:`orchestrator.task.keeper`)."""

STOP_REQUESTED_FILE = "stop-requested"
"""Marker file in a task's directory: the orchestrator itself is stopping the task."""

SIGTERM_RECEIVED_FILE = "sigterm-received"
"""Marker file the task writes into its directory when a SIGTERM from outside reaches it (a
preemption notice): of several workers that exit preempted together (TF's
``PreemptionCheckpointHandler`` makes every worker save and exit), it names the one that was
preempted."""

LEFT_BEHIND_FILE = "left-behind.jsonl"
"""File in a task's directory: one JSON line ``{"pid", "cmdline", "by"}`` per process the task's
program left running (a daemon in its own session, a child it never waited for) that was ended
for it: by the wrapper of a user's program (``by``: ``wrapper``), a child subreaper
(``PR_SET_CHILD_SUBREAPER``), when the program exited or was stopped, or by the local backend
(``by``: ``backend``) when the wrapper could not (it was SIGKILLed). The report counts them."""

PREEMPTED_EXIT_CODE = 143
"""Exit code of a task that received SIGTERM from outside (``docker stop``, a Kubernetes
eviction, Slurm preemption, a spot reclaim) and exited on purpose: the built-in trainers after
saving a checkpoint at the next step (TF's ``PreemptionCheckpointHandler``), other tasks at
once. TensorFlow's own restartable exit code (``failure_handling_util._RESTARTABLE_EXIT_CODE``,
the ``exit_fn`` of its GCE ``TerminationConfig``), within Kubeflow's retryable 128-255; the
supervisor retries it under every restart policy except ``never``
(:func:`orchestrator.supervisor.rules.decisions.retry_verdict`). Popen tells it from a death by
SIGTERM (return code -15); the Docker backend cannot (a container's status 143 reads as SIGTERM)."""

TOKEN_METADATA_KEY = "x-job-token"
"""gRPC metadata key that carries the job token."""

INTRAOP_THREADS = "TF_NUM_INTRAOP_THREADS"
INTEROP_THREADS = "TF_NUM_INTEROP_THREADS"
BENCH_TIMING = "BENCH_TIMING"
"""Not set by the orchestrator: ``bench/`` sets it to make task programs print timing markers."""


def read(name: str, default: str = "", environ: Mapping[str, str] | None = None) -> str:
    """The value of the task's variable ``name`` (from ``environ``, default ``os.environ``),
    ``default`` when it is unset. The task side reads its environment here or in
    :meth:`orchestrator.task.context.TaskContext.from_env`, never directly
    (``tests/unit/test_env_reads.py`` enforces it)."""
    return (os.environ if environ is None else environ).get(name, default)


def read_int(name: str, default: int = 0, environ: Mapping[str, str] | None = None) -> int:
    """:func:`read` as an int; ``default`` when unset or empty.

    Raises:
        ValueError: a value that is not an integer.
    """
    value = read(name, "", environ)
    return int(value) if value else default


def read_flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the variable ``name`` is ``1`` (the flags above: ``ORCH_STAY_UNTIL_STOPPED``, ...)."""
    return read(name, "", environ) == "1"


def is_set(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the variable ``name`` is set to something non-empty."""
    return bool(read(name, "", environ))


def bench_mark(label: str, stream: TextIO | None = None) -> None:
    """With :data:`BENCH_TIMING` set, print ``bench: mark LABEL (unix T)`` on ``stream`` (default
    stdout): one point of a launch's timeline (``bench/timeline.py`` reads them from the
    orchestrator's output and every task's ``stdout.log``). Nothing otherwise."""
    if is_set(BENCH_TIMING):
        print(f"bench: mark {label} (unix {time.time():.3f})", file=stream or sys.stdout, flush=True)
