"""Addresses registered by the tasks themselves (``RegisterAddress``), for backends whose tasks
run on other machines, where the orchestrator cannot hold a port for them (Slurm).

Each task attempt binds a free port on its own node, registers ``host:port`` and waits until
every task of the training cluster has registered; it then gets its TF_CONFIG (TonY's scheme: a port picked in the
parent and bound later in the child races, tensorflow#46602, TonY#487). Rules:

* A restarted task that comes back on the same host gets its earlier port back (it binds that
  one instead): under ParameterServerStrategy the coordinator and the other tasks keep
  running with the old cluster and must find the restarted worker where it was.
* A task that moved to another host (its node was lost) gets the address it proposed.
* :meth:`AddressBook.forget` (called when the supervisor plans a task's next attempt, before
  any task of a group restart starts) makes the cluster incomplete until that task registers
  again, so no task of a group restart is handed a TF_CONFIG with a stale address.
* A registration of an older attempt than the one last started is refused.
* The evaluator is not part of the training cluster (tensorflow#46169): it registers like the
  others to get its TF_CONFIG, and never holds the cluster back.
* The tf.data service's roles are outside the training cluster too, and start before it
  (:func:`~orchestrator.spec.dataservice.registration_needs`): the dispatcher's reply is ready at
  once, a data worker's once the dispatcher registered, a trainer's once the training cluster and
  the dispatcher did. The ready reply's ``env`` carries the dispatcher's registered address
  (``ORCH_DATA_SERVICE_ADDRESS``) and a service role's own (``ORCH_TASK_ADDRESS``: a data
  worker's ``worker_address``, its node's address), which the plan could not know.

Every complete cluster is also written to ``cluster.json`` in the run directory (generation,
time, address of every task registered then, the tf.data service's included), so the addresses
actually used are on record.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from orchestrator import env
from orchestrator.backends.base import Registration
from orchestrator.rundir import RunDir, write_json_atomic
from orchestrator.spec.address import Address
from orchestrator.spec.dataservice import SERVICE_TASK_TYPES, registration_needs
from orchestrator.spec.model import TRAINING_TASK_TYPES, JobSpec, TaskId
from orchestrator.spec.tfconfig import tf_config_json

log = logging.getLogger(__name__)

DISPATCHER = TaskId("dispatcher", 0)
"""The tf.data service's dispatcher (one per job)."""
MAX_WAIT_S = 10.0
"""Longest a single ``RegisterAddress`` call waits for the cluster, seconds."""


class AddressBook:
    """Thread-safe book of the addresses tasks registered (see the module docstring).

    Args:
        spec: the job; its tasks are the ones expected to register.
        run_dir: where ``cluster.json`` is written when the cluster is complete (None: nowhere).
    """

    def __init__(self, spec: JobSpec, run_dir: Path | None = None) -> None:
        self._tasks = tuple(spec.tasks())
        self._training = tuple(t for t in self._tasks if t.task_type in TRAINING_TASK_TYPES)
        self._service = spec.data_service is not None
        self._run_dir = run_dir
        self._cond = threading.Condition()
        self._current: dict[TaskId, str] = {}
        self._last: dict[TaskId, str] = {}
        self._attempt: dict[TaskId, int] = {t: 0 for t in self._tasks}
        self._generation = 0
        self._written_generation = -1

    def expect(self, task: TaskId, attempt: int) -> None:
        """The backend started ``attempt`` of ``task``: registrations of older attempts are refused."""
        with self._cond:
            self._attempt[task] = max(self._attempt.get(task, 0), attempt)

    def forget(self, task: TaskId) -> None:
        """The task will start a new attempt: the cluster is incomplete until it registers again.
        Its last address is kept (a restart on the same host gets the same port back)."""
        with self._cond:
            if self._current.pop(task, None) is not None:
                self._generation += 1

    def register(self, task: TaskId, attempt: int, host: str, port: int) -> str:
        """Record where ``task`` serves; returns the address it must use, or raises.

        Args:
            task: the registering task.
            attempt: its attempt number.
            host: its host address on the cluster network (an IPv4 literal or a host name).
            port: the port it bound and holds, 1-65535.

        Returns:
            ``host:port``: its earlier address when it comes back on the same host, else the
            proposed one.

        Raises:
            ValueError: an unknown task, a stale attempt, or a bad host or port (the message
                goes back to the task, which fails with it).
        """
        if task not in self._attempt:
            raise ValueError(f"{task} is not a task of this job")
        if not host or not 0 < port < 65536:
            raise ValueError(f"bad address host={host!r} port={port}")
        with self._cond:
            if attempt < self._attempt[task]:
                raise ValueError(f"attempt {attempt} of {task} is stale (attempt {self._attempt[task]} was started)")
            self._attempt[task] = attempt
            proposed = str(Address(host, port))
            last = self._last.get(task)
            address = last if last is not None and last.rsplit(":", 1)[0] == proposed.rsplit(":", 1)[0] else proposed
            if self._current.get(task) != address:
                self._generation += 1
            self._current[task] = address
            self._last[task] = address
            self._cond.notify_all()
            return address

    def _complete(self) -> bool:
        return all(t in self._current for t in self._training)

    def _known(self, task: TaskId) -> bool:
        """Whether every address ``task`` needs is registered (:func:`registration_needs`)."""
        return all(self._complete() if need == "training" else DISPATCHER in self._current
                   for need in registration_needs(task.task_type, self._service))

    def wait(self, task: TaskId, timeout_s: float) -> Registration:
        """Wait at most ``timeout_s`` seconds (capped at :data:`MAX_WAIT_S`) until every address
        ``task`` needs is registered (the training cluster; with a tf.data service the
        dispatcher, see the module docstring); then the registration of ``task`` with its
        TF_CONFIG and its service variables (``env``)."""
        deadline = time.monotonic() + min(max(timeout_s, 0.0), MAX_WAIT_S)
        with self._cond:
            while not self._known(task):
                left = deadline - time.monotonic()
                if left <= 0:
                    return Registration(False, self._current.get(task, ""))
                self._cond.wait(left)
            addresses = dict(self._current)
            generation = self._generation
            complete = self._complete()
        address = addresses.get(task, "")
        if complete:
            self._write(addresses, generation)
        if task.task_type in SERVICE_TASK_TYPES:  # outside the training cluster, which may not be complete yet
            tf_config = tf_config_json({task: address}, task)
        else:
            tf_config = tf_config_json(addresses, task)
        return Registration(True, address, tf_config, env=self._service_env(task, addresses))

    def _service_env(self, task: TaskId, addresses: dict[TaskId, str]) -> dict[str, str]:
        """The tf.data service's registered addresses ``task`` runs with; empty without a service."""
        if not self._service:
            return {}
        out = {env.DATA_SERVICE_ADDRESS: addresses[DISPATCHER]}
        if task.task_type in SERVICE_TASK_TYPES:
            out[env.TASK_ADDRESS] = addresses[task]
        return out

    def addresses(self) -> dict[TaskId, str]:
        """The addresses registered now (tasks not registered are missing)."""
        with self._cond:
            return dict(self._current)

    def _write(self, addresses: dict[TaskId, str], generation: int) -> None:
        """``cluster.json``: the complete cluster of this generation (once per generation)."""
        with self._cond:
            if self._run_dir is None or generation <= self._written_generation:
                return
            self._written_generation = generation
        record = {"generation": generation, "time": time.time(),
                  "addresses": {t.name: addresses[t] for t in self._tasks if t in addresses}}
        try:
            self._run_dir.mkdir(parents=True, exist_ok=True)
            write_json_atomic(RunDir(self._run_dir).cluster, record)
        except OSError as exc:
            log.warning("cannot write cluster.json: %s", exc)
