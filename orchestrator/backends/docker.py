"""Docker backend: one container per task on a private network, through the Docker Engine API.

* Addresses are service names on the job's own bridge network with one fixed port:
  ``worker-1:2222`` (each container carries its task name as network alias and
  hostname), exactly as in the Compose file :mod:`orchestrator.render.compose` renders.
  Nothing is published on the host: TensorFlow's server has no authentication.
  The name is known before the container exists (:attr:`Capability.NAMED_ADDRESSES`), so a plan may
  name a task not started yet: an elastic PSS job's held worker slots (docs/elastic.md).
* The orchestrator's health endpoint binds the network's gateway address (still
  token-protected), which the containers reach; nothing binds ``0.0.0.0``.
* Every task runs under the engine's init (``--init``), so SIGTERM, SIGUSR1 (stack dump)
  and SIGKILL reach the task as they do a local process; ``handle.pid`` is the
  container's host pid (``State.Pid``). An exit code ``128+N`` is reported as death by
  signal N (``-N``): that is what the init reports for a task killed by a signal, and
  what the engine reports for a container killed with ``docker kill``.
* stdout and stderr stream from the engine into ``attempt-<n>/<task>/{stdout,stderr}.log``
  while the task runs. The run directory is bind-mounted at the same path, so
  checkpoints, the exported model and error files land on the host as with ``local``;
  the containers run as the orchestrator's uid:gid.
* A task container is removed once it has exited and its logs are collected; ``close``
  removes every container and the network of the run (the run directory is kept).
* Tasks have no parent-death signal in a container: a task that loses its orchestrator
  for ``ORPHAN_TIMEOUT_S`` kills itself (heartbeat watchdog), and containers and networks
  left by an orchestrator that died are removed by the next docker-backend run
  (labels name their orchestrator).

Requires the Docker SDK (``pip install -e '.[docker]'``) and a reachable engine.
"""

from __future__ import annotations

import logging
import os
import signal as signals
import socket
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from orchestrator import env as envvars
from orchestrator.backends.base import Backend, Capability, LaunchRequest
from orchestrator.backends.docker_container import (
    LABEL_OWNER,
    LABEL_RUN,
    LABEL_TASK,
    TASK_HEALTH_PORT,
    TF_PORT,
    Container,
    addresses,
    device_requests,
    exit_code_of,
)
from orchestrator.backends.engine import connect
from orchestrator.backends.image import ensure_image
from orchestrator.backends.netns import MAX_UNIX_PATH, SOCKET_NAME
from orchestrator.backends.options import DOCKER, DockerOptions
from orchestrator.backends.stacks import faulthandler_dump
from orchestrator.errors import LaunchError
from orchestrator.spec.model import JobSpec, TaskId

log = logging.getLogger(__name__)

def list_containers(client: Any, filters: Mapping[str, Any]) -> list[Any]:
    """Containers (running or not) matching ``filters``, leaving out any removed meanwhile.

    Listing inspects each container after the engine listed it; a task container removed in
    between (by its exit watcher, ``_wait_exit``) made the SDK raise ``NotFound`` ("No such
    container") for the whole listing. ``ignore_removed`` skips it; a NotFound that still
    escapes (an older SDK, a removal mid-way) lists again, then gives up with what is known:
    an empty list, logged.

    Raises:
        docker.errors.DockerException: other engine errors.
    """
    import docker.errors

    last: Exception | None = None
    for _ in range(3):
        try:
            return list(client.containers.list(all=True, filters=dict(filters), ignore_removed=True))
        except docker.errors.NotFound as exc:
            last = exc
    log.warning("could not list containers %s: %s", dict(filters), last)
    return []


def _owner() -> str:
    import psutil

    return f"{socket.gethostname()}:{os.getpid()}:{psutil.Process().create_time():.2f}"


def _owner_alive(owner: str) -> bool:
    import psutil

    try:
        host, pid, created = owner.rsplit(":", 2)
        if host != socket.gethostname():
            return True  # another machine's: not ours to judge
        return bool(abs(psutil.Process(int(pid)).create_time() - float(created)) < 0.5)
    except (ValueError, psutil.Error):
        return False


class DockerBackend(Backend[Container]):
    """Runs each task in its own container; see the module docstring.

    Args:
        options: :class:`DockerOptions` (None: the defaults).
    """

    name = DOCKER.name
    summary = DOCKER.summary
    options_type = DockerOptions
    capabilities = frozenset({Capability.LIFECYCLE, Capability.DIAGNOSTICS, Capability.HOST_GPUS, Capability.HOST_CPUS,
                              Capability.NAMED_ADDRESSES})
    python = "python"
    """The interpreter in the image: task commands are run inside the containers."""
    parent_death_signal = False
    """Tasks are not the orchestrator's children: no ORCH_ORCHESTRATOR_PID for them."""

    def __init__(self, options: DockerOptions | None = None) -> None:
        options = options or DockerOptions()
        self.image = options.image
        self.base_image = options.base_image
        self.ca_bundle = options.ca_bundle
        self.progress = options.progress
        self.orphan_timeout_s = options.orphan_timeout_s
        self.shm_size_bytes, self.memory_bytes = options.shm_size_bytes, options.memory_bytes
        self.isolate_network = options.isolate_network
        self.health_socket: Path | None = None  # --isolate-network: the endpoint tasks reach
        self.client: Any = None
        self.network: Any = None
        self.run_id = ""
        self.run_dir: Path | None = None
        self.health_host = "127.0.0.1"
        self._owner = ""
        self._lock = threading.Lock()
        self._containers: list[Container] = []

    # -- setting up ------------------------------------------------------------------------
    def open(self, run_id: str, run_dir: Path) -> None:
        """Connect to the engine, remove what dead orchestrators left, get the image and
        create the job's network. Called once, before ``allocate``.

        Raises:
            LaunchError: no engine, a failed build, or no network.
        """
        self.client = connect()  # first: it says clearly when the SDK is missing
        import docker.errors

        self.run_id, self.run_dir = run_id, Path(run_dir)
        self._owner = _owner()
        remove_orphans(self.client)
        if self.image:
            try:
                self.client.images.get(self.image)
            except docker.errors.ImageNotFound:
                raise LaunchError(f"image {self.image!r} is not in the engine; build it or leave out --image") from None
        else:
            self.image = ensure_image(self.client, self.base_image, ca_bundle=self.ca_bundle, progress=self.progress)
        labels = {LABEL_RUN: run_id, LABEL_OWNER: self._owner}
        if self.isolate_network:  # no route out of an internal network: the socket in the mounted run dir
            self.health_socket = self.run_dir / SOCKET_NAME
            if len(str(self.health_socket)) > MAX_UNIX_PATH:
                raise LaunchError(f"--isolate-network: {self.health_socket} is longer than a Unix socket's path may "
                                  f"be ({MAX_UNIX_PATH}); use a shorter --runs-dir")
        try:
            self.network = self.client.networks.create(f"tfjob-{run_id}", driver="bridge", labels=labels,
                                                       check_duplicate=True, internal=self.isolate_network)
            self.network.reload()
            if not self.isolate_network:
                self.health_host = self.network.attrs["IPAM"]["Config"][0]["Gateway"]
        except (docker.errors.DockerException, KeyError, IndexError) as exc:
            self.close()
            raise LaunchError(f"cannot create the job's network tfjob-{run_id}: {exc}") from None

    def allocate(self, spec: JobSpec, ports: tuple[int, int] | None = None) -> dict[TaskId, str]:
        """Service-name addresses (:func:`addresses`); nothing to reserve (no ``ports`` block: each
        container binds in its own network namespace, and nothing is published on this machine).
        Fixed addresses of a spec file (``127.0.0.1:62221``) are replaced: containers are addressed by name."""
        if getattr(spec, "addresses", None):
            log.warning("the spec's addresses are replaced by service names (worker-0:%d) in containers", TF_PORT)
        return addresses(spec)

    # -- tasks -----------------------------------------------------------------------------
    def start(self, request: LaunchRequest) -> Container:
        """Create and start the container of one task attempt: ``request.argv`` runs inside
        the image with ``request.env`` as its whole environment (nothing of the
        orchestrator's is passed); output goes to ``request.log_dir``.

        Raises:
            LaunchError: when the engine refuses.
        """
        import docker.errors

        if self.client is None or self.network is None:
            raise LaunchError("the docker backend was not opened")
        task, attempt, argv, env, log_dir = request.task, request.attempt, request.argv, request.env, request.log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        stdout_path, stderr_path = log_dir / "stdout.log", log_dir / "stderr.log"
        for path in (stdout_path, stderr_path):
            path.touch()
        _remove_task_containers(self.client, self.run_id, task)  # an earlier attempt must not answer to the alias
        environment = {
            **env,
            envvars.TASK_HEALTH_PORT: str(TASK_HEALTH_PORT),
            envvars.ORPHAN_TIMEOUT_S: repr(self.orphan_timeout_s),
            "HOME": "/tmp",
        }
        environment.pop(envvars.ORCHESTRATOR_PID, None)
        name = f"tfjob-{self.run_id}-{task.name}-{attempt}"
        assert self.run_dir is not None
        try:
            container = self.client.containers.create(
                self.image,
                command=list(argv),
                name=name,
                hostname=task.name,
                environment=environment,
                labels={LABEL_RUN: self.run_id, LABEL_TASK: task.name, LABEL_OWNER: self._owner},
                user=f"{os.getuid()}:{os.getgid()}",
                init=True,
                shm_size=self.shm_size_bytes, mem_limit=self.memory_bytes,  # /dev/shm; an OOM kill we can name
                working_dir="/tmp",
                volumes={str(self.run_dir): {"bind": str(self.run_dir), "mode": "rw"}},
                network=self.network.name,
                device_requests=device_requests(env), cpuset_cpus=env.get(envvars.CPUS) or None,  # resources.cpus
                networking_config={
                    self.network.name: self.client.api.create_endpoint_config(aliases=[task.name])
                },
                detach=True,
            )
            container.start()
            container.reload()
        except docker.errors.DockerException as exc:
            raise LaunchError(f"cannot start the container of {task.name}: {exc}") from None
        handle = Container(task, attempt, int(container.attrs["State"]["Pid"]), stdout_path, stderr_path,
                           request.runtime, container=container, name=name)
        for stream, path in (("stdout", stdout_path), ("stderr", stderr_path)):
            t = threading.Thread(target=_copy_logs, args=(handle, stream, path), name=f"logs-{name}-{stream}",
                                 daemon=True)
            t.start()
            handle.threads.append(t)
        threading.Thread(target=_wait_exit, args=(handle,), name=f"wait-{name}", daemon=True).start()
        with self._lock:
            self._containers.append(handle)
        return handle

    def poll(self, handle: Container) -> int | None:
        """Exit code (negative: killed by that signal), or None while running."""
        if not handle.exited.is_set():
            return None
        return exit_code_of(handle.status if handle.status is not None else 137, handle.oom_killed)

    def wait(self, handle: Container, timeout_s: float) -> int | None:
        """Wait at most ``timeout_s`` seconds for the task to exit; its exit code or None."""
        handle.exited.wait(timeout_s)
        return self.poll(handle)

    def signal(self, handle: Container, signum: int) -> None:
        """Send ``signum`` to the task (through the container's init; no-op once it exited)."""
        import docker.errors

        if handle.exited.is_set():
            return
        try:
            handle.container.kill(signal=int(signum))
        except docker.errors.DockerException:
            pass  # not running any more

    def dump_stacks(self, handle: Container, timeout_s: float) -> str:
        """The task's stacks through its runtime's ``faulthandler`` (SIGUSR1 through the init);
        "" for a user's program (SIGUSR1 would kill it; py-spy in a container needs SYS_PTRACE)."""
        return faulthandler_dump(self, handle, timeout_s)

    def oom_killed(self, handle: Container) -> bool | None:
        """The engine's ``State.OOMKilled`` of the ended container."""
        return handle.oom_killed if handle.exited.is_set() else None

    def stop(self, handles: Iterable[Container], timeout_s: float = 10.0,
             abort: threading.Event | None = None) -> None:
        """Stop containers in two phases on one monotonic deadline: SIGTERM, then SIGKILL
        what is left after ``timeout_s`` seconds (at once when ``abort`` is set: a second Ctrl-C).

        Raises:
            LaunchError: when a container has not exited 20 s after SIGKILL.
        """
        handles = list(handles)
        pending = [h for h in handles if not h.exited.is_set()]
        for h in pending:
            self.signal(h, signals.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for h in pending:
            while not h.exited.is_set() and time.monotonic() < deadline and not (abort is not None and abort.is_set()):
                h.exited.wait(min(0.1, max(0.0, deadline - time.monotonic())))
        left = [h for h in pending if not h.exited.is_set()]
        for h in left:
            log.warning("container %s did not stop within %.1f s of SIGTERM; sending SIGKILL", h.name, timeout_s)
            self.signal(h, signals.SIGKILL)
        deadline = time.monotonic() + 20.0
        for h in left:
            if not h.exited.wait(max(0.0, deadline - time.monotonic())):
                raise LaunchError(f"container {h.name} survived SIGKILL for 20 s")

    def close(self) -> None:
        """Remove every container and the network of this run (the run directory stays).

        Never raises: it runs in the supervisor's ``finally:`` after the job's outcome is
        decided, so an engine error here (a container removed meanwhile by its exit watcher,
        an engine that went away) is logged as a warning and must cost neither the summary
        nor a success.
        """
        if self.client is None:
            return
        try:
            with self._lock:
                handles = list(self._containers)
            _remove_everything(self.client, self.run_id, handles, self.network)
            self.network = None
        except Exception as exc:  # noqa: BLE001 - see the docstring: logged, never raised
            log.warning("cleaning up the containers of run %s: %s", self.run_id, exc)
        finally:
            try:
                self.client.close()
            except Exception as exc:  # noqa: BLE001
                log.warning("closing the Docker client: %s", exc)
            self.client = None


def _remove(container: Any) -> None:
    """Remove one container, tolerating its removal by someone else (never raises)."""
    import docker.errors

    try:
        container.remove(force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.status_code not in (404, 409):  # 409: its removal is already under way (the task exited)
            log.warning("could not remove container %s: %s", getattr(container, "name", container), exc)
    except docker.errors.DockerException as exc:
        log.warning("could not remove container %s: %s", getattr(container, "name", container), exc)


def remove_orphans(client: Any) -> None:
    """Remove containers and networks of orchestrators that are gone (killed without cleanup)."""
    import docker.errors

    for container in list_containers(client, {"label": LABEL_OWNER}):
        if not _owner_alive(container.labels.get(LABEL_OWNER, "")):
            log.warning("removing container %s left by a dead orchestrator", container.name)
            try:
                container.remove(force=True)
            except docker.errors.DockerException:
                pass
    for network in client.networks.list(filters={"label": LABEL_OWNER}):
        if not _owner_alive(network.attrs.get("Labels", {}).get(LABEL_OWNER, "")):
            try:
                network.remove()
            except docker.errors.DockerException:
                pass


def _copy_logs(handle: Container, stream: str, path: Path) -> None:
    """Copy the container's ``stream`` (stdout, stderr) into ``path`` until it ends (a thread per stream)."""
    try:
        chunks = handle.container.logs(stdout=stream == "stdout", stderr=stream == "stderr", stream=True,
                                       follow=True)
        with open(path, "ab") as out:
            for chunk in chunks:
                out.write(chunk)
                out.flush()
    except Exception as exc:  # noqa: BLE001 - the container may be gone; logged, never raised
        log.debug("log stream %s of %s ended: %s", stream, handle.name, exc)


def _wait_exit(handle: Container) -> None:
    """Wait for the container to exit (a thread): its status, whether it was OOM-killed, its logs
    complete; then remove it."""
    import docker.errors

    status = -signals.SIGKILL
    try:
        while True:
            try:
                status = int(handle.container.wait(timeout=3600)["StatusCode"])
                break
            except docker.errors.NotFound:
                break
            except Exception as exc:  # noqa: BLE001 - a read timeout: wait again
                if "timed out" not in str(exc).lower():
                    log.warning("waiting for %s: %s", handle.name, exc)
                    time.sleep(0.5)
        try:
            handle.container.reload()
            handle.oom_killed = bool(handle.container.attrs["State"].get("OOMKilled"))
        except docker.errors.DockerException:
            pass
        for t in handle.threads:  # the streams end with the container: the logs are complete
            t.join(10.0)
    finally:
        handle.status = status
        handle.exited.set()
    try:
        handle.container.remove(force=True)
    except docker.errors.DockerException:
        pass


def _remove_task_containers(client: Any, run_id: str, task: TaskId) -> None:
    """Remove the containers of ``task``'s earlier attempts in run ``run_id``."""
    import docker.errors

    filters = {"label": [f"{LABEL_RUN}={run_id}", f"{LABEL_TASK}={task.name}"]}
    for container in list_containers(client, filters):
        try:
            container.remove(force=True)
        except docker.errors.DockerException:
            pass


def _remove_everything(client: Any, run_id: str, handles: list[Container], network: Any) -> None:
    """Remove every container of run ``run_id`` (those listed and ``handles``) and its ``network``."""
    import docker.errors

    deadline = time.monotonic() + 30.0
    if run_id:
        try:
            listed = list_containers(client, {"label": f"{LABEL_RUN}={run_id}"})
        except docker.errors.DockerException as exc:
            log.warning("could not list the containers of run %s: %s", run_id, exc)
            listed = []
        known = {getattr(c, "id", None) for c in listed}
        # every container this backend started, listed or not (a failed listing must not leave one)
        listed += [h.container for h in handles if getattr(h.container, "id", None) not in known]
        for container in listed:
            _remove(container)
    for h in handles:
        h.exited.wait(max(0.0, deadline - time.monotonic()))
    if network is not None:
        # a removal under way still holds its endpoint: retry, bounded
        while True:
            try:
                network.remove()
                break
            except docker.errors.NotFound:
                break
            except docker.errors.DockerException as exc:
                if time.monotonic() > deadline:
                    log.warning("could not remove network %s: %s", network.name, exc)
                    break
                time.sleep(0.2)
