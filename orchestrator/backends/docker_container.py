"""The docker backend's data: a task attempt as a container (:class:`Container`), the backend's
options (:class:`DockerOptions`), its ports and labels, a container's exit status as a task's
(:func:`exit_code_of`) and its GPU request (:func:`device_requests`). The backend itself:
:mod:`orchestrator.backends.docker`."""

from __future__ import annotations

import signal as signals
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from orchestrator.backends.base import TaskHandle
from orchestrator.backends.options import check_orphan_timeout, option
from orchestrator.errors import SpecError
from orchestrator.resources.gpus import VISIBLE_ENV, uuids_in
from orchestrator.spec.model import JobSpec, TaskId
from orchestrator.spec.sizes import parse_size

TF_PORT = 2222
"""Port of every task's tf.distribute server, on its own hostname."""
TASK_HEALTH_PORT = 2223
"""Port of every task's grpc.health.v1 server (the container healthcheck probes it)."""
ORPHAN_TIMEOUT_S = 30.0
"""A task that cannot reach its orchestrator this long after it could kills itself."""
LABEL = "io.tf-cluster-orchestrator"
LABEL_RUN = f"{LABEL}.run-id"
LABEL_TASK = f"{LABEL}.task"
LABEL_OWNER = f"{LABEL}.orchestrator"
"""``host:pid:create_time`` of the orchestrator that owns a container or network."""


def addresses(spec: JobSpec) -> dict[TaskId, str]:
    """``<task name>:2222`` for every task: service names on the job's network."""
    return {task: f"{task.name}:{TF_PORT}" for task in spec.tasks()}


def exit_code_of(status: int, oom_killed: bool = False) -> int:
    """The container's exit status as ``Popen.returncode`` would say it: ``128+N`` -> ``-N``."""
    if oom_killed:
        return -signals.SIGKILL
    if 128 < status < 128 + 65:
        return -(status - 128)
    return status


@dataclass(eq=False)
class Container(TaskHandle):
    """A started task container (see :class:`TaskHandle`; ``pid`` is the host pid of its
    init process, and the log files are where its output streams into).

    Attributes:
        container: the SDK's container object.
        name: container name.
    """

    container: Any = None
    name: str = ""
    exited: threading.Event = field(default_factory=threading.Event)
    status: int | None = None
    oom_killed: bool = False
    threads: list[threading.Thread] = field(default_factory=list)


@dataclass(frozen=True)
class DockerOptions:
    """Options of the docker backend (each a ``launch`` flag unless said otherwise).

    Attributes:
        image: image to run as it is; default: the project image, built when missing
            (:func:`orchestrator.backends.image.ensure_image`).
        base_image: base of that image (default ``$ORCH_DOCKER_BASE_IMAGE`` or python:3.11-slim).
        ca_bundle: CA bundle pip trusts while building the image (Python API only).
        progress: called with build output lines (Python API only; the CLI prints them).
        orphan_timeout_s: seconds a task keeps running once it cannot reach its orchestrator
            (no parent-death signal crosses into a container: its heartbeat watchdog), then it
            kills itself; > 0. Short: a lost orchestrator frees the GPUs sooner; long: a task
            outlives a longer network partition.
        shm_size: the size of each container's ``/dev/shm`` (``1G``, ``512M``; default 1G:
            :data:`orchestrator.spec.sizes.DEFAULT_SHM_SIZE_BYTES`; Docker's own default, 64 MB,
            is outgrown by multi-process data loading and NCCL, with a ``Bus error``).
        memory: each container's memory limit (``8G``); None (default): none. A task past it is
            killed by the kernel's OOM killer, which the failure report names.
        isolate_network: the job's network is ``--internal`` (no route out of it; TF's ports
            are never published either way) and tasks reach the orchestrator through
            ``runs/<run-id>/health.sock`` in the bind-mounted run directory.

    Raises:
        SpecError: ``orphan_timeout_s`` is not > 0, ``shm_size`` or ``memory`` is not a size.
    """

    image: str | None = field(default=None, metadata=option(
        "image to run as it is (default: the project image, built from docker/Dockerfile when missing, tagged by "
        "the hash of its files)"))
    base_image: str | None = field(default=None, metadata=option(
        "base of the project image (default $ORCH_DOCKER_BASE_IMAGE or python:3.11-slim)"))
    ca_bundle: str | None = field(default=None, metadata=option(None))
    progress: Callable[[str], None] | None = field(default=None, metadata=option(None))
    orphan_timeout_s: float = field(default=ORPHAN_TIMEOUT_S, metadata=option(
        f"seconds a task keeps running once its orchestrator is unreachable, then it stops itself (default "
        f"{ORPHAN_TIMEOUT_S:g})", metavar="SECONDS"))
    shm_size: str = field(default="1G", metadata=option(
        "size of each container's /dev/shm (default 1G; Docker's own 64M is outgrown by multi-process data "
        "loading and NCCL: a Bus error)", metavar="SIZE"))
    memory: str | None = field(default=None, metadata=option(
        "memory limit of each task's container (e.g. 8G; default none): a task past it is OOM-killed, and the "
        "failure report says so", metavar="SIZE"))
    isolate_network: bool = field(default=False, metadata=option(
        "every task of the run in one network namespace of its own with only loopback: TensorFlow's ports "
        "unreachable from outside the run (docs/security.md)"))

    def __post_init__(self) -> None:
        check_orphan_timeout(self.orphan_timeout_s)
        self.shm_size_bytes  # noqa: B018 - validated here, at the flag, before anything starts
        self.memory_bytes  # noqa: B018

    @property
    def shm_size_bytes(self) -> int:
        """``shm_size`` in bytes (at least 1 MiB).

        Raises:
            SpecError: not a size, or below 1M.
        """
        size = parse_size("shm-size", self.shm_size, "e.g. --shm-size 1G")
        if size < 1 << 20:
            raise SpecError("shm-size", self.shm_size, "must be at least 1M", "e.g. --shm-size 1G")
        return size

    @property
    def memory_bytes(self) -> int | None:
        """``memory`` in bytes, None for no limit (at least 64 MiB).

        Raises:
            SpecError: not a size, or below 64M.
        """
        if self.memory is None:
            return None
        size = parse_size("memory", self.memory, "e.g. --memory 8G")
        if size < 64 << 20:
            raise SpecError("memory", self.memory, "must be at least 64M", "e.g. --memory 8G")
        return size


def device_requests(env: Mapping[str, str]) -> list[Any]:
    """The container's GPU request: exactly the devices of the task's ``CUDA_VISIBLE_DEVICES``
    (their UUIDs, :mod:`orchestrator.resources.placement`), through the NVIDIA runtime (``docker run
    --gpus device=UUID,...``); none for a task without a device. The UUIDs stay valid inside
    the container, so the variable is passed on unchanged."""
    import docker.types

    uuids = uuids_in(env.get(VISIBLE_ENV))
    if not uuids:
        return []
    return [docker.types.DeviceRequest(driver="nvidia", device_ids=list(uuids), capabilities=[["gpu"]])]
