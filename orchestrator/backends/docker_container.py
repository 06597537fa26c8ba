"""The docker backend's data: a task attempt as a container (:class:`Container`), its ports and
labels, a container's exit status as a task's (:func:`exit_code_of`) and its GPU request
(:func:`device_requests`). Its options (:class:`~orchestrator.backends.options.DockerOptions`) are
declared with every backend's, in :mod:`orchestrator.backends.options`; the backend itself:
:mod:`orchestrator.backends.docker`."""

from __future__ import annotations

import signal as signals
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

from orchestrator.backends.base import TaskHandle
from orchestrator.resources.gpus import VISIBLE_ENV, uuids_in
from orchestrator.spec.model import JobSpec, TaskId

TF_PORT = 2222
"""Port of every task's tf.distribute server, on its own hostname."""
TASK_HEALTH_PORT = 2223
"""Port of every task's grpc.health.v1 server (the container healthcheck probes it)."""
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
