"""Slurm backend: inside an allocation, each task attempt is its own job step on one node.

``launch --backend slurm`` runs where ``salloc`` or a batch script runs it (``SLURM_JOB_ID``
and ``SLURM_JOB_NODELIST`` set); it asks for no allocation itself.

* **Placement** (:func:`place`): tasks in the order chief, workers, ps, evaluator go round-robin
  over the allocation's nodes in ``SLURM_JOB_NODELIST`` order: one task per node while there are
  enough nodes, so ps and workers are spread; with fewer nodes than tasks, at most
  ``tasks_per_node`` per node (default: as few as the tasks need, ``ceil(tasks / nodes)``).
* **Steps**: ``srun --overlap --nodes=1 --ntasks=1 -w NODE --job-name RUN:TASK:ATTEMPT ...`` per
  attempt, started from here; ``srun`` forwards the task's stdout and stderr into
  ``attempt-<n>/<task>/`` and exits with the task's exit status (128+N for a death by signal N,
  reported as ``-N``). The environment, job token included, goes through ``srun``'s
  environment, never its command line.
* **Addresses**: the orchestrator cannot hold ports on other nodes (``Capability.REMOTE``):
  each task binds a port on its node and registers it (:mod:`orchestrator.backends.addresses`).
  The plan's addresses read ``NODE_ADDRESS:0``; ``cluster.json`` in the run directory has the
  real ones.
* **Health endpoint** on this machine's address on the route to the nodes (never a wildcard),
  or ``health_host``.
* **Signals** go to the step: ``scancel --signal=SIG JOB.STEP``. A step that does not end within
  :data:`LOST_GRACE_S` of SIGKILL (its node is gone: slurmd dead or cut off) has its ``srun``
  killed here and counts as ended by SIGKILL; the step itself stays in Slurm's books until Slurm
  declares the node down (``SlurmdTimeout``).
* **Lost nodes** (:meth:`SlurmBackend.prepare_restart`): before a restart every node's slurmd is
  probed (TCP connect, 1 s); tasks placed on a node that does not answer, or whose step could not
  be killed, move to the nodes left, least loaded first, within ``tasks_per_node``; when they do
  not fit the restart is refused and the job fails saying so.
  An elastic MWMS job's worker that failed on a lost node (:class:`NodeWatch`: the node's
  step could not be killed, or its slurmd does not answer) makes the group continue one smaller
  instead, while at least MIN workers remain (:mod:`orchestrator.supervisor.resizing`); the next
  life's :meth:`SlurmBackend.allocate` places no task on a lost node.
* **Shared run directory**: :meth:`SlurmBackend.open` writes a file into the runs directory and
  reads it back on every node (one step); a directory the nodes do not share is bad input. So
  does :meth:`SlurmBackend.allocate` for the tf.data service's ``work_dir`` outside the runs
  directory (the dispatcher's journal: a dispatcher restarted on another node must read it).
* **tf.data service** (``--data-service N``): the dispatcher and data workers register their
  addresses like every task; the dispatcher's reply is ready at once, a data worker's once the
  dispatcher registered, a trainer's once the training cluster and the dispatcher did, each with
  the dispatcher's address (:mod:`orchestrator.backends.addresses`). The supervisor's start waves
  (dispatcher, data workers serving and registered, trainers) are the local backend's.
* **Preemption** (:meth:`SlurmBackend.job_preempted`): the job's own record
  (:mod:`orchestrator.backends.slurm_job`: ``PreemptTime`` set, or a preempted state) confirms that
  every step SIGTERMed at once is the job being preempted, not task failures.
* **Growing back** (:mod:`orchestrator.backends.slurm_extend`): an elastic MWMS job below MAX
  (a lost node shrank it) grows back, once its cooldown has passed, into the allocation's nodes not
  used (a lost node that answers again and runs a step counts), else into one-node *extension
  allocations*: new Slurm jobs (``sbatch -N1 --exclude=...``, the run's partition, time left,
  account, QoS and CPUs and GPUs per node) whose node joins the run; a task placed there is started
  as a step of the extension (``srun --jobid=EXT``).
  :class:`~orchestrator.backends.slurm_room.SlurmGrowth` gives the room the grow-back watch asks.
  A later life that places no task on an extension's node gives it up. The
  cluster must let a job submit another from inside its allocation and start steps of it there
  (``srun --jobid``), and share the runs directory with the new node (docs/elastic.md "Slurm: growing
  back" says why the extension takes one node and the run's partition, time left, account, QoS and
  CPUs and GPUs per node).
* ``close`` cancels every step still running and waits (bounded) until ``squeue`` lists none of
  this run's steps on the nodes that answer, and cancels every extension allocation of the run.

Tasks are not this process's children: they have no parent-death signal; a task whose
orchestrator is unreachable for ``ORPHAN_TIMEOUT_S`` kills itself, and the allocation's end
(``salloc`` or the batch script returning) ends every step anyway.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import os
import shutil
import signal as signals
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterable, Sequence

from orchestrator import env as envvars
from orchestrator.backends.addresses import AddressBook
from orchestrator.backends.base import Backend, Capability, LaunchRequest, LostNodes, Registration
from orchestrator.backends.host import pidfd
from orchestrator.backends.options import SLURM, SlurmOptions
from orchestrator.backends.slurm_commands import (
    check_shared,
    check_work_dir,
    command,
    node_answers,
    route_source,
    signal_steps,
    step_ids,
)
from orchestrator.backends.slurm_extend import Extensions
from orchestrator.backends.slurm_job import JobProbe
from orchestrator.backends.slurm_room import SlurmGrowth, usable_nodes
from orchestrator.backends.slurm_step import (
    DEFAULT_SLURMD_PORT,
    LOST_GRACE_S,
    SlurmStep,
    exit_code_of,
)
from orchestrator.backends.stacks import faulthandler_dump
from orchestrator.errors import LaunchError, SpecError
from orchestrator.resources.cpus import node_cpus_plan, node_share_env
from orchestrator.resources.extension import per_node
from orchestrator.resources.nodes import move_off, parse_node_list, place
from orchestrator.resources.placement import srun_gpu_options
from orchestrator.spec.model import JobSpec, TaskId

log = logging.getLogger(__name__)


class SlurmBackend(Backend[SlurmStep]):
    """Runs each task attempt as a job step of the current allocation; see the module docstring.

    Args:
        options: :class:`SlurmOptions` (None: the defaults).
    """

    name = SLURM.name
    summary = SLURM.summary
    options_type = SlurmOptions
    capabilities = frozenset({Capability.LIFECYCLE, Capability.PORTS, Capability.DIAGNOSTICS, Capability.REMOTE,
                              Capability.EXIT_EVENTS, Capability.HOST_FILES})
    parent_death_signal = False
    """Tasks run on other nodes: no ORCH_ORCHESTRATOR_PID for them."""

    def __init__(self, options: SlurmOptions | None = None) -> None:
        options = options or SlurmOptions()
        self.environ = dict(os.environ if options.environ is None else options.environ)
        self.tasks_per_node_option = options.tasks_per_node
        self.tasks_per_node = options.tasks_per_node or 1
        self.health_host = options.health_host or ""
        self.orphan_timeout_s = options.orphan_timeout_s
        self.job_id = ""
        self.nodes: list[str] = []
        self.node_addr: dict[str, str] = {}
        self.slurmd_port = DEFAULT_SLURMD_PORT
        self.placement: dict[TaskId, str] = {}
        self.cores_divided_for: JobSpec | None = None  # the job whose tasks divide their node's cores, or None
        self.lost: set[str] = set()
        self.book: AddressBook | None = None
        self.run_id = ""
        self.run_dir: Path | None = None
        self._lock = threading.Lock()
        self._steps: list[SlurmStep] = []
        self._probe: JobProbe | None = None
        self.lost_nodes = NodeWatch(self)
        self.density: int | None = None  # tasks per node of the run's first placement (grow-back keeps it)
        self.extensions = Extensions(self.environ, "", "", None, lambda: [], lambda: [], lambda n: n, lambda: 0)
        self.growth = SlurmGrowth(self)

    # -- setting up ------------------------------------------------------------------------
    def open(self, run_id: str, run_dir: Path) -> None:
        """Read the allocation (job id, nodes, their addresses), pick the health endpoint's
        address, and check that the runs directory is shared by every node.

        Raises:
            SpecError: not inside an allocation, or the runs directory is not shared.
            LaunchError: the Slurm commands are missing or fail.
        """
        self.run_id, self.run_dir = run_id, Path(run_dir)
        self.job_id = self.environ.get("SLURM_JOB_ID", "")
        nodelist = self.environ.get("SLURM_JOB_NODELIST") or self.environ.get("SLURM_NODELIST", "")
        if not self.job_id or not nodelist:
            raise SpecError("backend", "slurm", "not inside a Slurm allocation (SLURM_JOB_ID is not set)",
                            "run it under salloc -N 3 --no-kill, or submit a batch script made by "
                            "`python -m orchestrator sbatch`")
        if shutil.which("srun", path=self.environ.get("PATH")) is None:
            raise LaunchError("srun not found on PATH: install the Slurm client commands")
        shown = command(self.environ, "scontrol", "show", "hostnames", nodelist)
        if shown.returncode != 0:
            raise LaunchError(f"scontrol show hostnames {nodelist} failed: {shown.stderr.strip()}")
        self.nodes = parse_node_list(shown.stdout)
        info = command(self.environ, "scontrol", "show", "node", "-o", ",".join(self.nodes))
        for line in info.stdout.splitlines():
            fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
            if fields.get("NodeName") in self.nodes:
                self.node_addr[fields["NodeName"]] = fields.get("NodeAddr", fields["NodeName"])
        config = command(self.environ, "scontrol", "show", "config")
        for line in config.stdout.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "SlurmdPort" and value.strip().isdigit():
                self.slurmd_port = int(value.strip())
        if not self.health_host:
            self.health_host = route_source(self.node_addr.get(self.nodes[0], self.nodes[0]), self.slurmd_port)
        if self.health_host in ("0.0.0.0", "::", ""):
            raise SpecError("health-host", self.health_host, "a wildcard address would expose the health endpoint "
                            "on every interface", "give this machine's address on the cluster network")
        check_shared(self.environ, self.nodes, self.run_id, run_dir.parent)
        self.extensions = Extensions(self.environ, self.job_id, run_id, run_dir.parent,
                                     taken=lambda: [*self.nodes, *self.lost],
                                     lost=lambda: [n for n in self.nodes if n in self.lost],
                                     node_address=lambda n: self.node_addr.get(n, n),
                                     slurmd_port=lambda: self.slurmd_port)

    def allocate(self, spec: JobSpec, ports: tuple[int, int] | None = None) -> dict[TaskId, str]:
        """Place every task on a node (:func:`place`); addresses read ``NODE_ADDRESS:0`` until the
        tasks register their ports. Fixed addresses of a spec file are replaced. No ``ports``
        block: each task binds a port on its node, not this machine's (no lease is taken).

        Nodes found lost (:attr:`SlurmBackend.lost`: an earlier life of the run lost them) are left out,
        but those found answering again; granted extension allocations' nodes come after the
        allocation's (:mod:`~orchestrator.backends.slurm_extend`), and one whose node gets no task is
        given up.

        Raises:
            SpecError: the tasks do not fit on the allocation's nodes (those not lost).
        """
        if getattr(spec, "addresses", None):
            log.warning("the spec's fixed addresses are replaced: on Slurm every task binds a port on its node")
        self.lost -= self.extensions.take_back()  # lost nodes that answer again and run a step
        for node, address in ((n, self.extensions.address(n)) for n in self.extensions.granted()):
            self.node_addr.setdefault(node, address or node)
        nodes = usable_nodes(self.nodes, self.lost, self.extensions) if self.nodes else ["localhost"]
        if not nodes:
            raise SpecError("SLURM_JOB_NODELIST", ",".join(self.nodes), "every node of the allocation is lost",
                            "run the job again in a new allocation")
        tasks = list(spec.tasks())
        self.placement = place(tasks, nodes, self.tasks_per_node_option)
        if self.density is None:
            self.density = per_node(self.tasks_per_node_option, len(tasks), len(nodes))
        self.extensions.keep(set(self.placement.values()), set(self.lost))
        self.cores_divided_for = spec if node_cpus_plan(spec, self.environ).nodes else None
        self.tasks_per_node = self.tasks_per_node_option or math.ceil(len(tasks) / len(nodes))
        if self.run_dir is not None and self.nodes:  # the dispatcher's journal, on a file system every node shares
            check_work_dir(self.environ, nodes, self.run_id, self.run_dir.parent, spec.data_service)
        self.book = AddressBook(spec, self.run_dir)
        return {task: f"{self.node_addr.get(node, node)}:0" for task, node in self.placement.items()}

    def register_address(self, task: TaskId, attempt: int, host: str, port: int, wait_s: float) -> Registration:
        """A task registers the port it bound on its node; see :mod:`orchestrator.backends.addresses`."""
        if self.book is None:
            return Registration(False, error="no job is planned")
        try:
            address = self.book.register(task, attempt, host, port)
        except ValueError as exc:
            return Registration(False, error=str(exc))
        reply = self.book.wait(task, wait_s)
        return reply if reply.ready else Registration(False, address)

    def reserve_again(self, task: TaskId) -> None:
        """The task will start a new attempt: the cluster waits for its new registration."""
        if self.book is not None:
            self.book.forget(task)

    # -- tasks -----------------------------------------------------------------------------
    def start(self, request: LaunchRequest) -> SlurmStep:
        """Start one task attempt as a job step on its node (``srun`` runs here, in its own
        session; the task's output goes to ``request.log_dir``).

        Raises:
            LaunchError: when ``srun`` cannot be started.
        """
        task, log_dir = request.task, request.log_dir
        node = self.placement[task]
        if self.book is not None:
            self.book.expect(task, request.attempt)
        log_dir.mkdir(parents=True, exist_ok=True)
        stdout_path, stderr_path = log_dir / "stdout.log", log_dir / "stderr.log"
        step_name = f"{self.run_id}:{task.name}:{request.attempt}"
        extension = self.extensions.job_of(node)  # a node of an extension allocation: a step of that job
        argv = ["srun", *([f"--jobid={extension}"] if extension else []), "--overlap", "--nodes=1", "--ntasks=1",
                f"--nodelist={node}", f"--job-name={step_name}",
                "--unbuffered", "--kill-on-bad-exit=0", "--quiet", "--export=ALL", f"--chdir={os.getcwd()}",
                *srun_gpu_options(request.env), *request.argv]
        full_env = {**self.environ, **request.env, envvars.ADDRESS_FROM_TASK: "1",
                    envvars.ORPHAN_TIMEOUT_S: repr(self.orphan_timeout_s)}
        full_env.pop(envvars.ORCHESTRATOR_PID, None)
        if self.cores_divided_for is not None:  # its share of the node's cores
            full_env.update(node_share_env(self.cores_divided_for, self.placement, task))
        if envvars.GPUS in request.env:  # Slurm sets the step's own CUDA_VISIBLE_DEVICES
            full_env.pop("CUDA_VISIBLE_DEVICES", None)
        with open(stdout_path, "ab") as out, open(stderr_path, "ab") as err:
            try:
                popen = subprocess.Popen(argv, env=full_env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         start_new_session=True, close_fds=True)
            except OSError as exc:
                raise LaunchError(f"cannot start srun for {task}: {exc}") from exc
        step = SlurmStep(task, request.attempt, popen.pid, stdout_path, stderr_path, request.runtime, popen, node,
                         step_name, job_id=extension)
        with self._lock:
            self._steps.append(step)
        return step

    def poll(self, step: SlurmStep) -> int | None:
        """The task's exit code (negative: signal), or None while it runs. A step SIGKILLed
        more than :data:`LOST_GRACE_S` ago whose ``srun`` still waits is on a lost node: its
        ``srun`` is killed and the task counts as ended by SIGKILL."""
        assert step.popen is not None
        code = step.popen.poll()
        if code is not None:
            return -signals.SIGKILL if step.lost else exit_code_of(code)
        if step.killed_at is not None and time.monotonic() - step.killed_at > LOST_GRACE_S:
            with step.lock:
                if not step.lost:
                    step.lost = True
                    self.lost.add(step.node)
                    log.warning("step %s of %s on node %s did not end %.0f s after SIGKILL: node %s is lost",
                                step.step_id or step.step_name, step.task, step.node, LOST_GRACE_S, step.node)
                    try:
                        os.killpg(step.pid, signals.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
            try:
                step.popen.wait(10.0)
            except subprocess.TimeoutExpired:
                log.warning("srun pid %d survived SIGKILL for 10 s", step.pid)
            return -signals.SIGKILL
        return None

    def exit_fd(self, step: SlurmStep) -> int | None:
        """A pidfd of the step's local ``srun``, which exits with the task (a lost node's step: :meth:`wait`)."""
        return pidfd(step.popen) if step.popen is not None else None

    def wait(self, step: SlurmStep, timeout_s: float) -> int | None:
        """Wait at most ``timeout_s`` seconds for the task to end; its exit code or None."""
        deadline = time.monotonic() + timeout_s
        assert step.popen is not None
        while True:
            code = self.poll(step)
            if code is not None:
                return code
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                step.popen.wait(min(left, 0.1))
            except subprocess.TimeoutExpired:
                pass

    def signal(self, step: SlurmStep, signum: int) -> None:
        """Send ``signum`` to the task's step (``scancel --signal``, not waited for); no-op once it ended."""
        signal_steps(self.environ, self.job_id, [step], signum)

    def stop(self, steps: Iterable[SlurmStep], timeout_s: float = 10.0, abort: threading.Event | None = None) -> None:
        """Stop steps in two phases on one deadline: SIGTERM (``scancel --signal=TERM``), then
        SIGKILL what is left after ``timeout_s`` seconds (or at once on ``abort``); a step that
        SIGKILL does not end within :data:`LOST_GRACE_S` is on a lost node and is let go."""
        steps = list(steps)
        pending = [s for s in steps if self.poll(s) is None]
        for s in pending:
            try:
                (s.stdout_path.parent / envvars.STOP_REQUESTED_FILE).touch()
            except OSError:
                pass
        signal_steps(self.environ, self.job_id, pending, signals.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline and not (abort is not None and abort.is_set()):
            pending = [s for s in pending if self.poll(s) is None]
            if pending:
                time.sleep(0.05)
        if pending:
            log.warning("%d step(s) did not stop within %.1f s of SIGTERM; sending SIGKILL", len(pending), timeout_s)
            signal_steps(self.environ, self.job_id, pending, signals.SIGKILL)
        for s in pending:
            if self.wait(s, LOST_GRACE_S + 10.0) is None:
                raise LaunchError(f"step {s.step_id or s.step_name} survived SIGKILL")

    def dump_stacks(self, step: SlurmStep, timeout_s: float) -> str:
        """The task's Python stacks through its runtime's ``faulthandler`` (SIGUSR1 to the step);
        "" for a user's program (SIGUSR1 would kill it; py-spy cannot reach another node), and at
        once for a task on a node whose slurmd does not answer (nothing would come back)."""
        if step.runtime and not node_answers(self.node_addr.get(step.node, step.node), self.slurmd_port):
            return ""
        return faulthandler_dump(self, step, timeout_s)

    # -- lost nodes, growing back ------------------------------------------------------------
    def job_preempted(self) -> bool | None:
        """Whether Slurm is preempting this job now, from ``scontrol show job`` (bounded by
        :data:`~orchestrator.backends.slurm_job.SCONTROL_TIMEOUT_S`, cached for a second); None
        outside a job or when ``scontrol`` cannot say."""
        if not self.job_id:
            return None
        if self._probe is None:
            self._probe = JobProbe(self.job_id, self.environ)
        return self._probe.preempted()

    def prepare_restart(self, tasks: Sequence[TaskId]) -> tuple[bool, str]:
        """Probe the nodes; move the tasks to restart off lost ones (see the module docstring).

        Returns:
            ``(True, note)`` with the moves made ("" for none), or ``(False, why)`` when the
            nodes left cannot hold them.
        """
        nodes = [*self.nodes, *(n for n in self.extensions.granted() if n not in self.nodes)]
        addresses = [self.node_addr.get(n, n) for n in nodes]
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            answers = dict(zip(nodes, pool.map(node_answers, addresses, [self.slurmd_port] * len(addresses))))
        newly = {n for n, ok in answers.items() if not ok} - self.lost
        if newly:
            log.warning("node(s) %s do not answer (slurmd at port %d): lost", ", ".join(sorted(newly)),
                        self.slurmd_port)
        self.lost |= newly
        moving = [t for t in tasks if self.placement.get(t) in self.lost]
        if not moving:
            return True, ""
        placed = move_off(self.placement, moving, nodes, self.lost, self.tasks_per_node)
        if isinstance(placed, str):
            return False, placed
        moves = ", ".join(f"{t.name} {self.placement[t]} -> {placed[t]}" for t in moving)
        self.placement = placed
        return True, f"node(s) {', '.join(sorted(self.lost))} lost (slurmd does not answer); moving {moves}"

    # -- the end ---------------------------------------------------------------------------
    def close(self) -> None:
        """Cancel every step of this run still running and wait (at most 10 s) until Slurm
        lists none on the nodes that answer; steps on lost nodes are reported, not waited for.
        Then cancel every extension allocation of the run (:meth:`Extensions.close`)."""
        with self._lock:
            steps = list(self._steps)
        try:
            live = [s for s in steps if s.popen is not None and s.popen.poll() is None]
            if live:
                signal_steps(self.environ, self.job_id, live, signals.SIGKILL)
                for s in live:
                    self.wait(s, LOST_GRACE_S + 5.0)
            if not self.job_id:
                return
            names = {s.step_name for s in steps}
            deadline = time.monotonic() + 10.0
            while True:
                left = {n: i for n, i in step_ids(self.environ, self.job_id).items() if n in names}
                on_lost = {n for n in left if any(s.step_name == n and s.node in self.lost for s in steps)}
                if len(left) == len(on_lost) or time.monotonic() > deadline:
                    break
                command(self.environ, "scancel", *[i for n, i in left.items() if n not in on_lost])
                time.sleep(0.2)
            if left:
                log.warning("job step(s) %s still listed by Slurm%s", ", ".join(sorted(left.values())),
                            " (on lost node(s): they go when Slurm declares the node down, SlurmdTimeout)"
                            if on_lost else "")
        except Exception:  # noqa: BLE001 - cleanup never costs the summary
            log.warning("could not clean up the job steps", exc_info=True)
        finally:
            self.extensions.close()


class NodeWatch(LostNodes):
    """Which nodes of a :class:`SlurmBackend`'s allocation are lost: those whose step did not end
    after SIGKILL (:meth:`SlurmBackend.poll`) or whose slurmd does not answer a probe (TCP connect,
    at most 1 s), kept in the backend's :attr:`SlurmBackend.lost`.

    Args:
        backend: the backend whose placement and nodes it watches.
    """

    def __init__(self, backend: SlurmBackend) -> None:
        self._backend = backend

    def node_of(self, task: TaskId) -> str | None:
        """``task``'s node when it is lost (probed now when not known lost yet), else None (also for
        a task never placed)."""
        b = self._backend
        node = b.placement.get(task)
        if node is None:
            return None
        if node not in b.lost and not node_answers(b.node_addr.get(node, node), b.slurmd_port):
            log.warning("node %s does not answer (slurmd at port %d): lost", node, b.slurmd_port)
            b.lost.add(node)
        return node if node in b.lost else None
