"""Render a job as a Docker Compose file: one service per task (pure: nothing is started).

The file works with ``docker compose`` (v2) and the older ``docker-compose`` (1.27+):

* one service per task, named like the task (``chief-0``, ``worker-1``, ``ps-0``), its
  TF_CONFIG built from those service names and one fixed port (``worker-1:2222``), as
  :mod:`orchestrator.backends.docker` does;
* the project image (``image:`` with its content-hash tag, and ``build:`` from this
  checkout, so ``docker compose up`` builds it when it is missing);
* the orchestrator's health endpoint as the containers reach it (default
  ``host.docker.internal:50051`` through ``extra_hosts: host-gateway``) and the job token;
  with no orchestrator listening the tasks run all the same;
* a private bridge network (no port published: TensorFlow's server has no
  authentication) and a named volume at ``/job`` for checkpoints, the exported model and
  error files;
* a healthcheck per service using the standard gRPC health protocol: each task serves
  ``grpc.health.v1`` on port 2223, probed by ``python -m orchestrator.task.probe``;
* ``init: true``, so SIGTERM from ``docker compose stop`` reaches the task;
* with ``--data-service N`` (docs/data-service.md), the dispatcher and the data workers as
  services too, outside TF_CONFIG's cluster, and ``depends_on`` (``service_healthy``) in the
  orchestrator's start order: data workers after the dispatcher, every other task after them.

``docker compose up --abort-on-container-exit --exit-code-from <coordinator>`` ends when
the coordinator (the chief, or worker 0) exits and returns its exit code: the other
tasks never exit on their own first (ps and PSS workers serve forever; MWMS workers that
finish wait to be stopped, ``ORCH_STAY_UNTIL_STOPPED``), and one that fails ends the
cluster at once.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import yaml

from orchestrator import env
from orchestrator.backends.docker_container import LABEL, TASK_HEALTH_PORT, addresses
from orchestrator.backends.image import DOCKERFILE, image_tag, source_root
from orchestrator.plan import attempt_env, make_plan, new_run_id
from orchestrator.resources.gpus import Inventory
from orchestrator.resources.placement import TaskGpus, place
from orchestrator.spec.dataservice import start_wave
from orchestrator.spec.model import JobSpec

JOB_DIR = "/job"
"""Where the job's volume is mounted in every container (the run directory)."""
DEFAULT_HEALTH_ADDRESS = "host.docker.internal:50051"
NETWORK = "cluster"
VOLUME = "job"


def coordinator_service(spec: JobSpec) -> str:
    """The service whose exit ends the job: the chief, or worker 0 without one."""
    return spec.coordinator.name


def up_command(spec: JobSpec, compose_file: str = "docker-compose.yml", legacy: bool = False) -> str:
    """The command that runs the rendered file to the coordinator's end."""
    tool = "docker-compose" if legacy else "docker compose"
    file_flag = "" if compose_file == "docker-compose.yml" else f" -f {compose_file}"
    return f"{tool}{file_flag} up --abort-on-container-exit --exit-code-from {coordinator_service(spec)}"


def render_compose(
    spec: JobSpec,
    *,
    image: str | None = None,
    base_image: str = "python:3.11-slim",
    build_context: str | None = None,
    health_address: str = DEFAULT_HEALTH_ADDRESS,
    token: str | None = None,
    run_id: str | None = None,
    stop_grace_s: float = 10.0,
    cores: int | None = None,
    inventory: Inventory | None = None,
    shm_size_bytes: int | None = None,
    memory_bytes: int | None = None,
) -> dict:
    """The Compose file of ``spec`` as a dict (dump it with :func:`dump_compose`).

    Args:
        spec: validated job spec.
        image: an image to use as it is (no ``build:``); default: the project image, tagged
            by the hash of what goes into it, with ``build:`` from ``build_context``.
        base_image: the ``BASE_IMAGE`` build argument.
        build_context: path of this checkout as the Compose file sees it (relative to the
            file's directory); default: absolute path of this checkout.
        health_address: the orchestrator's health endpoint as the containers reach it.
        token: the job token (default: a new random one).
        run_id: the run id the tasks report (default: a new one).
        stop_grace_s: seconds between SIGTERM and SIGKILL when Compose stops a task.
        cores: cores to divide among the tasks (default: this machine's).
        inventory: the GPUs of the machine the file will run on (``compose`` passes this
            machine's). With GPUs, each service reserves exactly its devices by UUID
            (``device_ids``, disjoint: :func:`orchestrator.resources.placement.place`); without, a
            ``count`` per service (``gpus_per_task``), which the engine fills with the first
            devices it finds (the same ones for every service: the file says so).
        shm_size_bytes: each service's ``shm_size`` (its ``/dev/shm``), bytes; None (default): the
            spec's ``containers.shm_size`` (1 GiB unless set:
            :data:`orchestrator.spec.sizes.DEFAULT_SHM_SIZE_BYTES`: Docker's 64 MB is outgrown by
            multi-process data loading and NCCL).
        memory_bytes: each service's ``mem_limit``, bytes; None (default): the spec's
            ``containers.memory`` (none unless set).

    Raises:
        SpecError: more GPUs asked than ``inventory`` has.

    Fixed addresses of a spec file are not used: services are addressed by name.
    """
    token = token or secrets.token_urlsafe(24)
    run_id = run_id or new_run_id()
    shm_size_bytes = spec.containers.shm_size if shm_size_bytes is None else shm_size_bytes
    memory_bytes = spec.containers.memory if memory_bytes is None else memory_bytes
    placement = place(spec, inventory if inventory is not None and inventory.gpus else None)
    plan = make_plan(spec, addresses(spec), run_id=run_id, run_dir=Path(JOB_DIR), health_address=health_address,
                     token=token, orchestrator_pid=0, cores=cores, python="python", placement=placement)
    build = None
    if image is None:
        root = source_root()
        image = image_tag(base_image, root)
        build = {"context": build_context or str(root), "dockerfile": DOCKERFILE, "args": {"BASE_IMAGE": base_image}}
    services: dict = {}
    for tp in plan.tasks:
        environment = dict(attempt_env(plan, tp.task, 0))
        environment[env.TASK_HEALTH_PORT] = str(TASK_HEALTH_PORT)
        if tp.task != spec.coordinator and not tp.serves_forever:  # a finished MWMS worker must not end the cluster
            environment[env.STAY_UNTIL_STOPPED] = "1"
        service: dict = {"image": image}
        if build:
            service["build"] = build
        service.update(
            {
                "command": list(tp.argv),
                "hostname": tp.task.name,
                "init": True,
                "shm_size": shm_size_bytes,
                "environment": dict(sorted(environment.items())),
                "extra_hosts": ["host.docker.internal:host-gateway"],
                "networks": [NETWORK],
                "volumes": [f"{VOLUME}:{JOB_DIR}"],
                "healthcheck": {
                    "test": ["CMD", "python", "-m", "orchestrator.task.probe", f"127.0.0.1:{TASK_HEALTH_PORT}"],
                    "interval": "10s",
                    "timeout": "5s",
                    "retries": 3,
                    "start_period": "30s",
                },
                "stop_grace_period": f"{stop_grace_s:g}s",
                "labels": {f"{LABEL}.run-id": run_id, f"{LABEL}.task": tp.task.name},
            }
        )
        earlier = [t.name for t in spec.tasks() if start_wave(t.task_type) < start_wave(tp.task.task_type)]
        if earlier:  # the tf.data service first: the dispatcher, then its data workers, then the trainers
            service["depends_on"] = {name: {"condition": "service_healthy"} for name in earlier}
        if memory_bytes is not None:
            service["mem_limit"] = memory_bytes
        devices = gpu_reservation(tp.gpus)
        if devices:
            service["deploy"] = {"resources": {"reservations": {"devices": devices}}}
        services[tp.task.name] = service
    return {
        "services": services,
        "networks": {NETWORK: {"driver": "bridge", "labels": {f"{LABEL}.run-id": run_id}}},
        "volumes": {VOLUME: {"labels": {f"{LABEL}.run-id": run_id}}},
    }


def gpu_reservation(gpus: TaskGpus) -> list[dict]:
    """A service's ``deploy.resources.reservations.devices`` (the Compose spec's GPU request,
    what ``docker run --gpus`` is for one container): its devices by UUID when they are known,
    else their count; ``[]`` for none."""
    if not gpus.count:
        return []
    request: dict = {"driver": "nvidia", "capabilities": ["gpu"]}
    if gpus.devices:
        request["device_ids"] = [g.uuid for g in gpus.devices]
    else:
        request["count"] = gpus.count
    return [request]


def dump_compose(document: dict, spec: JobSpec, compose_file: str = "docker-compose.yml") -> str:
    """YAML text of a rendered Compose file, with a header saying how to run it."""
    tasks = ", ".join(t.name for t in spec.tasks())
    header = (
        f"# Generated by `python -m orchestrator compose`: a {spec.strategy.value} job, "
        f"one service per task ({tasks}).\n"
        f"# Run it:   {up_command(spec, compose_file)}\n"
        f"#      or:  {up_command(spec, compose_file, legacy=True)}\n"
        "# The job token below lets a process reach the orchestrator's health endpoint: keep the file private.\n"
    )
    return header + yaml.dump(document, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)


class _Dumper(yaml.SafeDumper):
    """Writes shared values out in full: no ``&id001`` anchors, which readers trip on."""

    def ignore_aliases(self, data) -> bool:
        return True


def relative_context(output: str | os.PathLike) -> str:
    """This checkout's path relative to the directory of ``output`` (``.`` when they are the same)."""
    root = source_root()
    out_dir = Path(output).resolve().parent
    try:
        return os.path.relpath(root, out_dir)
    except ValueError:  # another drive (Windows)
        return str(root)
