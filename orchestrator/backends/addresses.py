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

Every complete cluster is also written to ``cluster.json`` in the run directory (generation,
time, address of every task), so the addresses actually used are on record.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from orchestrator import jsontext
from orchestrator.backends.base import Registration
from orchestrator.spec.address import Address
from orchestrator.spec.model import TRAINING_TASK_TYPES, JobSpec, TaskId
from orchestrator.spec.tfconfig import tf_config_json

log = logging.getLogger(__name__)

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

    def wait(self, task: TaskId, timeout_s: float) -> Registration:
        """Wait at most ``timeout_s`` seconds (capped at :data:`MAX_WAIT_S`) for the training
        cluster to be complete; the registration of ``task`` with its TF_CONFIG when it is."""
        deadline = time.monotonic() + min(max(timeout_s, 0.0), MAX_WAIT_S)
        with self._cond:
            while not self._complete():
                left = deadline - time.monotonic()
                if left <= 0:
                    return Registration(False, self._current.get(task, ""))
                self._cond.wait(left)
            addresses = dict(self._current)
            generation = self._generation
        address = addresses.get(task, "")
        self._write(addresses, generation)
        return Registration(True, address, tf_config_json(addresses, task))

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
            tmp = self._run_dir / "cluster.json.tmp"
            tmp.write_text(jsontext.dumps(record, indent=2) + "\n", encoding="utf-8")
            tmp.replace(self._run_dir / "cluster.json")
        except OSError as exc:
            log.warning("cannot write cluster.json: %s", exc)
