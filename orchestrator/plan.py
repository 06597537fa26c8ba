"""Spec + backend addresses -> Plan: pure data, what a dry run prints.

A plan says, for every task, its address, its TF_CONFIG, the command it runs and the
environment the orchestrator sets (see :mod:`orchestrator.env`). Nothing here starts
a process or touches the network.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from orchestrator import env
from orchestrator.errors import SpecError
from orchestrator.resources.cpus import CpuPlan
from orchestrator.resources.placement import NO_GPUS, Placement, TaskGpus
from orchestrator.rundir import ERROR_FILE, RunDir
from orchestrator.spec.faults import Fault, gate_of, relayed, untestable
from orchestrator.spec.faults import encode as encode_faults
from orchestrator.spec.fields import spec_fields
from orchestrator.spec.model import JobSpec, TaskId
from orchestrator.spec.program import python_program
from orchestrator.spec.tfconfig import ClusterConfig, tf_config_json
from orchestrator.taskenv import common_env, data_service_env
from orchestrator.taskenv import task_env as build_task_env


@dataclass(frozen=True)
class TaskPlan:
    """One task as planned.

    Attributes:
        task: type and index.
        address: ``host:port`` in the cluster spec.
        argv: the command, e.g. ``(python, "-m", "worker")``.
        env: variables the orchestrator sets (attempt-independent ones).
        tf_config: the task's TF_CONFIG as a dict.
        serves_forever: True for tasks that never exit on their own (ps, and workers
            under ParameterServerStrategy): the orchestrator stops them at the end.
        reports_heartbeats: False for a user's own program, which may or may not call
            ``orchestrator.client.report``; its health comes from the process itself.
        module: the built-in program's module (``worker``, ``ps``), "" for a user's program:
            what a warm spare preloads (:data:`SPARE_PRELOAD`).
        gpus: its GPUs (the devices when this orchestrator assigns them; a count when the
            backend's scheduler does); ``env`` holds their ``CUDA_VISIBLE_DEVICES``.
    """

    task: TaskId
    address: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    tf_config: Mapping

    serves_forever: bool = False
    reports_heartbeats: bool = True
    module: str = ""
    gpus: TaskGpus = field(default_factory=TaskGpus)


@dataclass(frozen=True)
class Plan:
    """The whole job as planned.

    Attributes:
        run_id: ``YYYYmmdd-HHMMSS-xxxx``.
        run_dir: absolute path of ``runs/<run-id>``.
        spec: the validated job spec.
        tasks: every task, chief first.
        cluster: the training cluster spec (evaluator excluded).
        threads_per_task: intra-op threads each task may use.
        health_address: where tasks send heartbeats.
        warnings: what looks wrong but is allowed (:func:`plan_warnings`), one line each;
            ``launch`` prints them on stderr, ``plan.json`` and the dry run list them.
        placement: every task's GPUs.
        cpus: every task's cores and threads (:mod:`orchestrator.resources.cpus`); not pinned on a
            backend whose tasks run elsewhere.
        started_workers: ParameterServerStrategy workers started below MAX with every slot up to MAX
            planned (:func:`held_at_max`): the worker tasks the job starts with; the ones above are
            held (addresses and certificates ready, not started) until a resize grows into them, and
            every task's ``TF_CONFIG`` names the workers started when it starts (:func:`attempt_env`).
            None: every task of the plan starts.
    """

    run_id: str
    run_dir: Path
    spec: JobSpec
    tasks: tuple[TaskPlan, ...]
    cluster: Mapping[str, list[str]]
    threads_per_task: int
    health_address: str
    token: str = field(repr=False, default="")
    warnings: tuple[str, ...] = ()
    placement: Placement = NO_GPUS
    cpus: CpuPlan = field(default_factory=lambda: CpuPlan(reason="tasks run on other machines"))
    started_workers: int | None = None

    @property
    def held(self) -> tuple[str, ...]:
        """The worker tasks planned and not started (:attr:`started_workers`), lowest first."""
        if self.started_workers is None:
            return ()
        return tuple(f"worker-{i}" for i in range(self.started_workers, self.spec.workers))

    def _first_config(self, tp: TaskPlan) -> Mapping:
        """``tp``'s ``TF_CONFIG`` when it first starts: of the workers started then (:attr:`started_workers`;
        a held worker's names the plan's cluster, up to itself at least)."""
        if not self.held or tp.task.name in self.held:
            return tp.tf_config
        return json.loads(cluster_text(self, tp.task, self.started_workers or 0))

    @functools.cached_property
    def _by_task(self) -> dict[TaskId, TaskPlan]:
        return {tp.task: tp for tp in self.tasks}

    def task_plan(self, task: TaskId) -> TaskPlan:
        """The plan of one task (a dict lookup). Raises KeyError when the job has no such task."""
        try:
            return self._by_task[task]
        except KeyError:
            raise KeyError(str(task)) from None

    @property
    def user_program(self) -> tuple[str, ...] | None:
        """The user's program (argv after ``--``) when the job runs one, else None: the
        built-in program's settings (epochs, batch sizes) then do not apply and are not shown."""
        for tp in self.tasks:
            if not tp.reports_heartbeats:
                return tuple(tp.argv[tp.argv.index("--") + 1:]) if "--" in tp.argv else tuple(tp.argv)
        return None

    def to_dict(self) -> dict:
        """JSON-ready form, the job token masked; a user's program's job shows its program
        instead of the built-in program's batch sizes."""
        builtin = {
            "replicas": self.spec.replicas,
            "batch_size_per_replica": self.spec.training.batch_size_per_replica,
            "global_batch_size": self.spec.global_batch_size,
        } if self.user_program is None else {"program": list(self.user_program)}
        return {
            "run_id": self.run_id,
            "run_dir": str(self.run_dir),
            "strategy": self.spec.strategy.value,
            "cluster": dict(self.cluster),
            "threads_per_task": self.threads_per_task,
            "cpus": self.cpus.to_dict(),
            **builtin,
            "health_address": self.health_address,
            "warnings": list(self.warnings),
            "spec": spec_fields(self.spec if self.started_workers is None else  # a resume starts at the start size
                                dataclasses.replace(self.spec, workers=self.started_workers)),
            **({"started_workers": self.started_workers, "held": list(self.held)} if self.held else {}),
            "program": list(self.user_program) if self.user_program else None,
            **({"gpus": {"node_gpus": self.placement.node_gpus, "share": self.placement.share,
                         "assigned_by": "scheduler" if self.placement.by_scheduler else "orchestrator"}}
               if self.placement.any or self.placement.node_gpus else {}),
            "tasks": [
                {
                    "task": str(tp.task),
                    "address": tp.address,
                    "argv": list(tp.argv),
                    "tf_config": self._first_config(tp),
                    "env": {k: ("***" if k == env.JOB_TOKEN else json.dumps(self._first_config(tp), separators=(
                        ",", ":"), sort_keys=True) if k == "TF_CONFIG" and self.held else v)
                            for k, v in sorted(tp.env.items())},
                    **({"gpus": tp.gpus.to_dict()} if self.placement.any or self.placement.node_gpus else {}),
                }
                for tp in self.tasks
            ],
        }


SPARE_PRELOAD: Mapping[str, tuple[str, ...]] = {
    "worker": ("tensorflow", "tf_keras", "orchestrator.task.reporter", "worker.train", "worker.callbacks",
               "worker.model", "worker.data", "tensorboard.summary"),
}
"""What a warm spare of a built-in task program imports while it waits (``python -m worker``):
TensorFlow and tf-keras, and what the task would otherwise import on its way to the first
step (the health client, the data module, TensorBoard's summary writers
for the ``TensorBoard`` callback). None of it starts TensorFlow's runtime."""

EXECWRAP = "orchestrator.task.execwrap"
"""The module every user's program runs through (``python -m orchestrator.task.execwrap -- PROGRAM``)."""


def user_spare(argv: Sequence[str], task_env: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The command of a warm spare for a task run as ``argv`` (a user's program through
    execwrap), and the modules it imports while it waits; None when ``argv`` is not a user's
    Python program of the form a spare can become (:func:`orchestrator.spec.program.python_program`).

    The spare imports TensorFlow, and tf-keras when the job's environment (``task_env`` over
    this process's) has ``TF_USE_LEGACY_KERAS=1`` (when installed).
    """
    if len(argv) < 5 or tuple(argv[1:4]) != ("-m", EXECWRAP, "--"):
        return None
    program = tuple(argv[4:])
    try:
        python_program(program)
    except SpecError:
        return None
    legacy = task_env.get("TF_USE_LEGACY_KERAS", os.environ.get("TF_USE_LEGACY_KERAS", ""))
    preload = ("tensorflow", *(("tf_keras?",) if legacy == "1" else ()))
    return (argv[0], "-m", EXECWRAP, "--spare", "--", *program), preload


def new_run_id(now: float | None = None) -> str:
    """A sortable, unique run id: ``20261130-031500-a1b2`` (``os.urandom``, not ``secrets``: a launch starts its
    first tasks before it imports ``hmac``)."""
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + "-" + os.urandom(2).hex()


def available_cores() -> int:
    """Cores this process may run on (affinity-aware)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def threads_per_task(spec: JobSpec, cores: int) -> int:
    """Intra-op threads per task: the spec's value, else ``max(1, cores // tasks)``.

    Oversubscribing the cores with one thread pool per task sized to all the cores is the
    most common slowdown of local clusters (``tf.config.threading`` / ``TF_NUM_INTRAOP_THREADS``: one pool per process).
    """
    if spec.threads_per_task:
        return spec.threads_per_task
    return max(1, cores // max(1, spec.tf_process_count()))


def plan_warnings(spec: JobSpec, commands: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """Warnings (not errors) about a job of the built-in program; none for a user's program.

    Epochs that over-cover the data: ``training.steps_per_epoch`` steps of the global batch
    (per-replica batch x replicas in sync) that see more examples than the train split has,
    by more than the last partial batch the derived default (``ceil(examples / global
    batch)``) rounds up to. More workers grow the global batch, so a value tuned for one
    worker silently passes over the data several times per epoch. Said only when the
    number of train examples is known cheaply (:func:`orchestrator.spec.data.train_examples`).

    Args:
        spec: the validated spec.
        commands: a user's program per task type (then nothing is known of its data).

    Returns:
        One line per warning, without a ``warning:`` prefix.
    """
    from orchestrator.spec.data import train_examples

    steps = spec.training.steps_per_epoch
    if commands or steps is None:
        return []
    examples = train_examples(spec.training.data)
    batch = spec.global_batch_size
    if not examples or steps <= math.ceil(examples / batch):
        return []
    source = "the digits" if spec.training.data is None else spec.training.data
    per_epoch = steps * batch
    times = f"{per_epoch / examples:.2f}".rstrip("0").rstrip(".")
    return [
        f"training.steps_per_epoch={steps} x global batch {batch} "
        f"({spec.training.batch_size_per_replica} per replica x "
        f"{spec.replicas} replica(s)) = {per_epoch:,} examples per epoch, {times}x the "
        f"{examples:,} train examples of {source}: each epoch passes over the data {times} times; "
        f"for one pass per epoch use --steps-per-epoch {math.ceil(examples / batch)} or leave it out"
    ]


def task_module(task_type: str) -> str:
    """The built-in program of a task type: ``ps`` for ps, ``dataservice`` for the tf.data
    service's dispatcher and data workers, ``worker`` for chief, worker and evaluator."""
    if task_type in ("dispatcher", "data_worker"):
        return "dataservice"
    return "ps" if task_type == "ps" else "worker"


def task_dir(run_dir: Path, attempt: int, task: TaskId) -> Path:
    """``runs/<run-id>/attempt-<n>/<task>``: logs, error file and scratch of one attempt."""
    return RunDir(run_dir).task(attempt, task)


def make_plan(
    spec: JobSpec,
    addresses: Mapping[TaskId, str],
    *,
    run_id: str,
    run_dir: Path,
    health_address: str,
    token: str,
    orchestrator_pid: int = 0,
    cores: int | None = None,
    python: str = sys.executable,
    faults: Sequence[Fault] = (),
    commands: Mapping[str, Sequence[str]] | None = None,
    placement: Placement = NO_GPUS,
    cpus: CpuPlan | None = None,
    tls_dir: str | None = None,
) -> Plan:
    """Build the plan of a job.

    Args:
        spec: validated job spec.
        addresses: ``host:port`` of every task, from the backend.
        run_id: the run id.
        run_dir: absolute run directory.
        health_address: ``host:port`` of the orchestrator's health endpoint as tasks reach it.
        token: the job token.
        orchestrator_pid: pid tasks must not outlive (local backend), 0 otherwise.
        cores: cores to divide among tasks; default: this machine's.
        python: interpreter that runs the tasks.
        faults: faults to inject (``--inject-fault``); each lands in its task's env. They are
            checked once, before anything is planned (:func:`orchestrator.api.check_job`); one
            for a task the job does not have lands nowhere.
        commands: a user's program (argv) per task type replacing the built-in ones
            (``python -m worker`` for chief / worker / evaluator, ``python -m ps`` for ps);
            it runs through ``python -m orchestrator.task.execwrap --``.
        placement: every task's GPUs (:func:`orchestrator.resources.placement.place`); their
            ``CUDA_VISIBLE_DEVICES`` lands in each task's env.
        cpus: every task's cores and threads (:func:`orchestrator.resources.cpus.assign_cores`) on a
            backend whose tasks run on this machine; their ``ORCH_CPUS`` and thread limits land
            in each task's env. None: not pinned, ``threads`` for every task.
        tls_dir: the run's certificates as tasks see them (``ORCH_TLS_DIR``); None: plaintext.

    Returns:
        The plan.

    Raises:
        KeyError: when a task of the spec has no address.
    """
    threads = threads_per_task(spec, cores or available_cores())
    if cpus is not None and cpus.threads:
        threads = max(cpus.threads.values())
    training_options = dataclasses.asdict(spec.training)
    if training_options.get("data"):  # tasks may run in another directory
        training_options["data"] = os.path.abspath(training_options["data"])
    training = json.dumps(training_options, sort_keys=True)
    common = common_env(spec, run_id=run_id, run_dir=str(run_dir), health_address=health_address, token=token,
                        training_json=None if commands else training,  # the built-in program's options only
                        threads=threads, orchestrator_pid=orchestrator_pid, tls_dir=tls_dir)
    tasks = []
    gate = gate_of(spec.trainers())
    faults = [relayed(f, _stepless(spec, f.task), gate) for f in faults]
    config = ClusterConfig(addresses)  # the cluster once, not once per task (O(tasks^2))
    for task in spec.tasks():
        module = task_module(task.task_type)
        user_program = (commands or {}).get(task.task_type)
        # a user's program runs through execwrap, which makes it die with the orchestrator
        if user_program:
            argv = (python, "-m", EXECWRAP, "--", *user_program)
        else:
            argv = (python, "-m", module)
        mine = [f for f in faults if f.task == task or f.relay == str(task)]  # the gate hands over relayed ones
        task_env = build_task_env(common, cluster=(config, task), task=task.name,
                                  gpus={**placement.env(task), **(cpus.env(task) if cpus else {})},
                                  faults=encode_faults(mine) if mine else None,
                                  extra=data_service_env(spec, addresses, task, run_id=run_id, run_dir=str(run_dir)))
        tasks.append(
            TaskPlan(
                task=task,
                address=addresses[task],
                argv=argv,
                env=task_env,
                tf_config=config.tf_config(task),
                serves_forever=spec.serves_forever(task),
                reports_heartbeats=not user_program,
                module="" if user_program else module,
                gpus=placement.of(task),
            )
        )
    return Plan(
        run_id=run_id,
        run_dir=run_dir,
        spec=spec,
        tasks=tuple(tasks),
        cluster=config.cluster,
        threads_per_task=threads,
        health_address=health_address,
        token=token,
        warnings=tuple(plan_warnings(spec, commands)) + placement.warnings + tuple(
            w for f in faults if (w := untestable(f, _stepless(spec, f.task),
                                                  bool((commands or {}).get(f.task.task_type)), gate)) is not None),
        placement=placement,
        cpus=cpus if cpus is not None else CpuPlan(reason="tasks run on other machines"),
    )


def _stepless(spec: JobSpec, task: TaskId) -> bool:
    """``task`` reports no training step: it serves (a ps, a PSS worker, the tf.data service's) or evaluates."""
    return spec.serves_forever(task) or task.task_type == "evaluator"


def held_at_max(spec: JobSpec, *, fixed_addresses: bool = False) -> JobSpec | None:
    """The spec to plan a job at when its workers start below MAX and a grow can stay within the life:
    ParameterServerStrategy elastic workers, fewer than MAX, no GPUs asked (a held worker has no device
    dealt), addresses the backend draws (``fixed_addresses``: the user's own; none for the held ones):
    the spec at MAX (the caller keeps the start size as :attr:`Plan.started_workers`). None otherwise
    (MWMS: a size change is a new group anyway, docs/elastic.md)."""
    if (spec.elastic is None or spec.strategy.value != "parameter_server" or spec.workers >= spec.elastic.max
            or fixed_addresses or any(spec.gpus_per_task.values())):
        return None
    return dataclasses.replace(spec, workers=spec.elastic.max)


def cluster_text(plan: Plan, task: TaskId, workers: int) -> str:
    """``task``'s ``TF_CONFIG`` (as :func:`~orchestrator.spec.tfconfig.tf_config_json`) naming the plan's first
    ``workers`` workers only (a PSS job below MAX: its coordinator connects to every worker its cluster names)."""
    addresses = {tp.task: tp.address for tp in plan.tasks if tp.task.task_type != "worker" or tp.task.task_index
                 < workers}
    addresses.setdefault(task, plan.task_plan(task).address)
    return tf_config_json(addresses, task)


def attempt_env(plan: Plan, task: TaskId, attempt: int, workers: int | None = None) -> dict[str, str]:
    """The full set of orchestrator variables for one attempt of one task; ``workers``: the workers its
    ``TF_CONFIG`` names (a PSS job's cluster grown within its life); None: :attr:`Plan.started_workers`,
    else the plan's."""
    directory = task_dir(plan.run_dir, attempt, task)
    workers = plan.started_workers if workers is None else workers
    return {
        **plan.task_plan(task).env,
        **({"TF_CONFIG": cluster_text(plan, task, workers)} if workers is not None else {}),
        env.ATTEMPT: str(attempt),
        env.TASK_DIR: str(directory),
        env.ERROR_FILE: str(directory / ERROR_FILE),
    }
