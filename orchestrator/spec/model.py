"""The job spec: a frozen, validated description of what the user wants.

A spec says what is wanted (how many tasks of each type, which strategy, the
training options); runtime facts (pids, attempts, states) live in the supervisor.

Topology rules follow TensorFlow's ``multi_worker_util._validate_cluster_spec``
and the distributed-training guide:

* task types are ``chief``, ``worker``, ``ps`` and ``evaluator``;
* at most one chief and at most one evaluator;
* MultiWorkerMirroredStrategy: no ps; with no chief, worker 0 is the chief;
* ParameterServerStrategy: a chief (the coordinator running ``ClusterCoordinator``),
  at least one worker and at least one ps;
* the evaluator is never part of the training cluster (tensorflow#46169);
* ``hogwild`` (the built-in program's asynchronous threads) runs in exactly one task;
* the tf.data service roles (``dispatcher``, ``data_worker``: :mod:`orchestrator.spec.dataservice`)
  are outside the training cluster, only under MWMS and PSS.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass, field, replace
from typing import Mapping

from orchestrator.errors import SpecError
from orchestrator.spec.address import check_addresses
from orchestrator.spec.containers import ContainerSpec
from orchestrator.spec.data import check_data_path
from orchestrator.spec.dataservice import SERVICE_TASK_TYPES, DataServiceSpec, check_data_service
from orchestrator.spec.elastic import ElasticSpec, batch_facts, check_elastic
from orchestrator.spec.supervision import SuccessPolicy, SupervisionSpec

TASK_TYPES = (*SERVICE_TASK_TYPES, "chief", "worker", "ps", "evaluator")
"""Task types in the order TF_CONFIG, every listing and the start use: the tf.data service's
(dispatcher, then data workers) first, so that they serve before the trainers read."""

LOOPS = ("fit", "custom")
"""Training loops of the built-in program."""

HOGWILD_THREADS = 2
"""Threads of the ``hogwild`` strategy when ``training.threads`` is not given."""

TRAINING_TASK_TYPES = ("chief", "worker", "ps")
"""Task types that belong to the training cluster (the evaluator does not)."""


class Strategy(str, enum.Enum):
    """The ``tf.distribute`` strategy the tasks train with."""

    MIRRORED = "mirrored"
    MULTI_WORKER_MIRRORED = "multi_worker_mirrored"
    PARAMETER_SERVER = "parameter_server"
    HOGWILD = "hogwild"
    """One task; ``training.threads`` Python threads run compiled train steps on one shared
    model and optimizer without locks (Hogwild!, Niu et al. 2011): not a ``tf.distribute``
    strategy, the built-in program's own."""

    @classmethod
    def parse(cls, value: str) -> "Strategy":
        """Parse a strategy name; accepts ``-`` for ``_`` and the short names ``mwms`` / ``pss``.

        Raises:
            SpecError: for an unknown name.
        """
        text = str(value).strip().lower().replace("-", "_")
        aliases = {"mwms": cls.MULTI_WORKER_MIRRORED, "pss": cls.PARAMETER_SERVER}
        if text in aliases:
            return aliases[text]
        for member in cls:
            if member.value == text:
                return member
        raise SpecError(
            "strategy",
            value,
            "unknown strategy",
            "use one of: " + ", ".join(m.value for m in cls),
        )


_TASK_RE = re.compile(r"^(dispatcher|data_worker|chief|worker|ps|evaluator)[:\-](\d+)$")


@dataclass(frozen=True, order=True)
class TaskId:
    """One task of the cluster: its TF task type and task index."""

    task_type: str
    task_index: int

    @property
    def name(self) -> str:
        """``worker-1``: the name used for directories and log prefixes."""
        return f"{self.task_type}-{self.task_index}"

    def __str__(self) -> str:
        return f"{self.task_type}:{self.task_index}"

    @classmethod
    def parse(cls, text: str, field_name: str = "task") -> "TaskId":
        """Parse ``worker:1`` or ``worker-1``.

        Raises:
            SpecError: when the text is not ``<type>:<index>`` with a known type.
        """
        match = _TASK_RE.match(str(text).strip())
        if not match:
            raise SpecError(
                field_name,
                text,
                "not a task",
                "write <type>:<index> with type one of " + ", ".join(TASK_TYPES) + ", e.g. worker:1",
            )
        return cls(match.group(1), int(match.group(2)))


@dataclass(frozen=True)
class TrainingSpec:
    """Options of the built-in training program (``python -m worker``).

    Attributes:
        epochs: passes over the training split.
        batch_size_per_replica: examples per replica per step; the global batch
            size is this times the number of replicas in sync.
        steps_per_epoch: training steps per epoch; ``None`` means
            ``ceil(train examples / global batch size)``.
        learning_rate: Adam learning rate.
        seed: seed of the train/test split and of the model's initial weights.
        loop: ``fit`` (tf-keras ``Model.fit``) or ``custom`` (``strategy.run`` +
            ``strategy.reduce``; ``ClusterCoordinator.schedule`` under PSS).
        data: ``None`` for the embedded digits, else a ``.npz`` file (x_train, y_train,
            x_test, y_test) or a directory of TFRecord files (``train*``/``test*``).
        replicas: replicas of the single ``mirrored`` task (logical CPU devices).
        checkpoint_every: also checkpoint every this many global steps (tf-keras
            ``BackupAndRestore(save_freq=N)``; a ``tf.train.CheckpointManager`` save every N
            steps in the custom loops), so a task killed without warning (SIGKILL, OOM) loses
            at most N steps; ``None``: at the end of each epoch only.
        threads: Python threads of the ``hogwild`` strategy (``None``: :data:`HOGWILD_THREADS`);
            only with hogwild.
    """

    epochs: int = 10
    batch_size_per_replica: int = 16
    steps_per_epoch: int | None = None
    learning_rate: float = 0.005
    seed: int = 0
    loop: str = "fit"
    data: str | None = None
    replicas: int = 2
    checkpoint_every: int | None = None
    threads: int | None = None

    @property
    def hogwild_threads(self) -> int:
        """The threads a ``hogwild`` task runs: ``threads``, else :data:`HOGWILD_THREADS`."""
        return self.threads or HOGWILD_THREADS

    def validate(self) -> None:
        """Raises SpecError naming the first bad field."""
        _positive_int("training.epochs", self.epochs, "e.g. --epochs 5")
        _positive_int("training.batch_size_per_replica", self.batch_size_per_replica, "e.g. --batch-size 32")
        if self.steps_per_epoch is not None:
            _positive_int("training.steps_per_epoch", self.steps_per_epoch, "omit it to derive it from the data")
        if not isinstance(self.learning_rate, (int, float)) or isinstance(self.learning_rate, bool) or not (
            0 < float(self.learning_rate) <= 10 and math.isfinite(float(self.learning_rate))
        ):
            raise SpecError(
                "training.learning_rate", self.learning_rate, "must be a number in (0, 10]",
                "e.g. --learning-rate 0.005",
            )
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise SpecError("training.seed", self.seed, "must be a whole number >= 0", "e.g. --seed 0")
        if self.loop not in LOOPS:
            raise SpecError("training.loop", self.loop, "unknown training loop", "use fit or custom")
        _positive_int("training.replicas", self.replicas, "e.g. --replicas 2")
        if self.checkpoint_every is not None:
            _positive_int("training.checkpoint_every", self.checkpoint_every,
                          "e.g. --checkpoint-every 50, or omit it to checkpoint at the end of each epoch")
        if self.threads is not None:
            _positive_int("training.threads", self.threads, "e.g. --threads 2")
        if self.data is not None:
            check_data_path(self.data)


@dataclass(frozen=True)
class JobSpec:
    """What the user wants run. Build it with :func:`JobSpec.create` (which validates).

    Attributes:
        strategy: the tf.distribute strategy.
        chief: 0 or 1 chief task.
        workers: number of worker tasks; ``{min: 2, max: 4}`` (``--workers 2:4``): elastic, from max, a resumed
            run at any size in between (``start``); ``batch_policy`` (``keep-global``, ``keep-per-replica``)
            and ``lr_scaling`` (``none``, ``linear``) say what a size does to the batch (docs/elastic.md).
        ps: number of parameter-server tasks.
        evaluator: 0 or 1 evaluator task (not part of the training cluster).
        training: options of the built-in training program.
        heartbeat_interval_s: seconds between two heartbeats of a task.
        threads_per_task: TF intra-op threads per task; ``None`` means
            ``max(1, cores // training tasks)``.
        supervision: restart policy, timeouts and deadline.
        addresses: fixed ``host:port`` of every task (a spec file's ``addresses``), or
            ``None`` to let the backend choose. The local backend runs loopback addresses
            only and reserves exactly those ports; ``render`` takes any.
        gpus_per_task: GPUs per task of a role, for the roles given (``--gpus-per-task N``
            gives chief and worker N; a spec file may give any role). A training role left
            out gets the node's GPUs split evenly (:mod:`orchestrator.resources.placement`); ps and
            evaluator left out get none.
        share_gpus: tasks may share a device (``--share-gpus``), then with memory growth on.
        pin_cpus: pin each training task to its own cores on a backend whose tasks run on
            this machine (:mod:`orchestrator.resources.cpus`); False: ``--no-pin``.
        data_service: the tf.data service (one dispatcher, N data workers) the trainers read
            through (``--data-service N``), or None.
        elastic: the elastic bounds and batch policy of the workers (``workers: {min, max}``), or None.
        containers: the size of each task's container (``/dev/shm``, memory) where tasks run in
            containers: docker backend, Compose, Kubernetes (:mod:`orchestrator.spec.containers`).
    """

    strategy: Strategy = Strategy.MULTI_WORKER_MIRRORED
    chief: int = 0
    workers: int = 4
    ps: int = 0
    evaluator: int = 0
    training: TrainingSpec = field(default_factory=TrainingSpec)
    heartbeat_interval_s: float = 1.0
    threads_per_task: int | None = None
    supervision: SupervisionSpec = field(default_factory=SupervisionSpec)
    addresses: Mapping[TaskId, str] | None = None
    gpus_per_task: Mapping[str, int] = field(default_factory=dict)
    share_gpus: bool = False
    pin_cpus: bool = True
    data_service: DataServiceSpec | None = None
    elastic: ElasticSpec | None = None
    containers: ContainerSpec = field(default_factory=ContainerSpec)

    @classmethod
    def create(cls, **fields: object) -> "JobSpec":
        """Build and validate a spec.

        For ParameterServerStrategy without a chief, one chief is added: TF's
        coordinator must run in the ``chief`` task (TF parameter-server tutorial).

        Raises:
            SpecError: naming the first invalid field.
        """
        if "strategy" in fields and not isinstance(fields["strategy"], Strategy):
            fields["strategy"] = Strategy.parse(str(fields["strategy"]))
        spec = cls(**fields)  # type: ignore[arg-type]
        if spec.strategy is Strategy.PARAMETER_SERVER and spec.chief == 0:
            spec = replace(spec, chief=1)
        spec.validate()
        return spec

    def validate(self) -> None:
        """Check the TF topology rules and option ranges.

        Raises:
            SpecError: naming the first invalid field, its value and the fix.
        """
        if not isinstance(self.strategy, Strategy):
            raise SpecError("strategy", self.strategy, "unknown strategy",
                            "use one of: " + ", ".join(m.value for m in Strategy))
        for name, upper in (("chief", 1), ("evaluator", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value not in range(upper + 1):
                raise SpecError(name, value, f"TensorFlow allows at most one {name}", f"set {name} to 0 or 1")
        for name in ("workers", "ps"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SpecError(name, value, "must be a whole number >= 0", f"e.g. --{name} 2")
        if self.strategy is Strategy.MIRRORED:
            if self.ps or self.chief or self.workers != 1:
                field_name, value = (("ps", self.ps) if self.ps else ("chief", self.chief) if self.chief
                                     else ("workers", self.workers))
                raise SpecError(
                    field_name,
                    value,
                    "MirroredStrategy runs in one task (replicas are devices of that task)",
                    "use --workers 1 --replicas N, or --strategy multi_worker_mirrored",
                )
        elif self.strategy is Strategy.HOGWILD:
            if self.ps or self.chief or self.workers != 1:
                field_name, value = (("ps", self.ps) if self.ps else ("chief", self.chief) if self.chief
                                     else ("workers", self.workers))
                raise SpecError(
                    field_name,
                    value,
                    "hogwild runs in exactly one task (its threads share one model in one process)",
                    "use --strategy hogwild --threads N without --workers/--ps/--chief (or --workers 1)",
                )
        elif self.strategy is Strategy.MULTI_WORKER_MIRRORED:
            if self.ps:
                raise SpecError(
                    "ps",
                    self.ps,
                    "MultiWorkerMirroredStrategy has no parameter servers",
                    "drop --ps, or use --strategy parameter_server",
                )
            if self.chief + self.workers < 1:
                raise SpecError("workers", self.workers, "the job has no chief and no worker",
                                "use --workers 1 or more")
        else:
            if self.chief != 1:
                raise SpecError(
                    "chief",
                    self.chief,
                    "ParameterServerStrategy needs one chief to run the ClusterCoordinator",
                    "set chief to 1",
                )
            if self.workers < 1:
                raise SpecError(
                    "workers", self.workers, "ParameterServerStrategy needs at least one worker",
                    "use --workers 1 or more",
                )
            if self.ps < 1:
                raise SpecError(
                    "ps", self.ps, "ParameterServerStrategy needs at least one parameter server", "use --ps 1 or more"
                )
        if (not isinstance(self.heartbeat_interval_s, (int, float))
                or not (0.05 <= float(self.heartbeat_interval_s) <= 60)):
            raise SpecError(
                "heartbeat_interval_s", self.heartbeat_interval_s, "must be between 0.05 and 60 seconds", "e.g. 1.0"
            )
        if self.threads_per_task is not None:
            _positive_int("threads_per_task", self.threads_per_task, "omit it to divide the cores among the tasks")
        if not isinstance(self.training, TrainingSpec):
            raise SpecError("training", self.training, "must be a mapping of training options",
                            "see docs/reference/spec.md")
        self.training.validate()
        self._validate_training_for_strategy()
        if not isinstance(self.supervision, SupervisionSpec):
            raise SpecError("supervision", self.supervision, "must be a mapping of supervision options",
                            "see docs/reference/spec.md")
        self.supervision.validate()
        if self.strategy is Strategy.PARAMETER_SERVER and self.supervision.success_policy is SuccessPolicy.ALL_WORKERS:
            raise SpecError("supervision.success_policy", "all-workers",
                            "parameter-server workers serve until stopped, so they never exit 0 on their own",
                            "use --success-policy chief (the default under parameter_server)")
        if self.addresses is not None:
            self._validate_addresses()
        self._validate_gpus()
        check_data_service(self.data_service, self.strategy.value)
        if self.elastic is not None:
            check_elastic(self.elastic, self.strategy.value, self.chief, self.workers,
                          self.training.batch_size_per_replica, fixed_addresses=self.addresses is not None)

    def _validate_gpus(self) -> None:
        if not isinstance(self.gpus_per_task, Mapping):
            raise SpecError("gpus_per_task", self.gpus_per_task, "must be a count or a mapping role -> count",
                            "e.g. --gpus-per-task 1, or gpus_per_task: {worker: 1, evaluator: 1}")
        for role, count in self.gpus_per_task.items():
            if role not in TASK_TYPES or role in SERVICE_TASK_TYPES:
                raise SpecError("gpus_per_task", role, "not a task type", "use one of: " + ", ".join(TASK_TYPES))
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise SpecError("gpus-per-task", count, "must be a whole number >= 0",
                                "e.g. --gpus-per-task 1 (0: no GPU)")
        if not isinstance(self.share_gpus, bool):
            raise SpecError("share_gpus", self.share_gpus, "must be true or false", "e.g. share_gpus: true")
        if not isinstance(self.pin_cpus, bool):
            raise SpecError("pin_cpus", self.pin_cpus, "must be true or false", "e.g. pin_cpus: false")

    def _validate_training_for_strategy(self) -> None:
        """Training options that only some strategies take.

        Raises:
            SpecError: ``training.threads`` without hogwild; ``training.checkpoint_every`` with hogwild,
                or with ``parameter_server`` and the ``fit`` loop (tf-keras ``BackupAndRestore``
                skips its batch-level saves under ParameterServerStrategy:
                ``on_train_batch_end`` returns early).
        """
        t = self.training
        if t.threads is not None and self.strategy is not Strategy.HOGWILD:
            raise SpecError("training.threads", t.threads,
                            f"threads are for --strategy hogwild, not {self.strategy.value}",
                            "drop --threads, or use --strategy hogwild")
        if t.checkpoint_every is not None and self.strategy is Strategy.HOGWILD:
            raise SpecError("training.checkpoint_every", t.checkpoint_every,
                            "hogwild checkpoints at the end of each epoch only",
                            "drop --checkpoint-every")
        if (t.checkpoint_every is not None and self.strategy is Strategy.PARAMETER_SERVER and t.loop == "fit"):
            raise SpecError("training.checkpoint_every", t.checkpoint_every,
                            "tf-keras BackupAndRestore saves only per epoch under ParameterServerStrategy",
                            "use --loop custom (its coordinator checkpoints every N steps), or drop --checkpoint-every")

    def _validate_addresses(self) -> None:
        """One address per task, none for a task the job does not have, all distinct."""
        if not isinstance(self.addresses, Mapping):
            raise SpecError("addresses", self.addresses, "must map task types to lists of host:port",
                            "see docs/reference/spec.md")
        for task_type in TASK_TYPES:
            listed = sorted(t.task_index for t in self.addresses if t.task_type == task_type)
            wanted = self.count(task_type)
            if listed != list(range(wanted)):
                counts = {"chief": "chief", "worker": "workers", "ps": "ps", "evaluator": "evaluator",
                          "dispatcher": "data_service (1 dispatcher)", "data_worker": "data_service.workers"}
                raise SpecError(
                    f"addresses.{task_type}",
                    len(listed),
                    f"{len(listed)} address(es) listed but the job has {counts[task_type]}={wanted}",
                    f"list exactly {wanted} {task_type} address(es), or drop the count to take it from addresses",
                )
        check_addresses((f"addresses.{t.task_type}[{t.task_index}]", self.addresses[t]) for t in self.tasks())

    def count(self, task_type: str) -> int:
        """Number of tasks of ``task_type``."""
        if task_type in SERVICE_TASK_TYPES:
            service = self.data_service
            return 0 if service is None else 1 if task_type == "dispatcher" else service.workers
        return {"chief": self.chief, "worker": self.workers, "ps": self.ps, "evaluator": self.evaluator}[task_type]

    def tasks(self) -> list[TaskId]:
        """Every task: the tf.data service's (dispatcher, data workers) first, then chief, workers,
        ps, evaluator."""
        return [TaskId(t, i) for t in TASK_TYPES for i in range(self.count(t))]

    def serves_forever(self, task: TaskId) -> bool:
        """True for tasks that only run ``tf.distribute.Server.join()`` and never exit on
        their own: ps tasks, and workers under ParameterServerStrategy (TF PSS tutorial;
        tensorflow#25858); the tf.data service's dispatcher and data workers (their ``join()``
        "currently blocks forever": TF's ``WorkerServer`` docs)."""
        return task.task_type in ("ps", *SERVICE_TASK_TYPES) or (
            self.strategy is Strategy.PARAMETER_SERVER and task.task_type == "worker"
        )

    @property
    def success_policy(self) -> SuccessPolicy:
        """The effective success policy: the spec's, else all-workers under MWMS and mirrored
        (every trainer must exit 0: torchrun, TF multi_process_runner), chief under PSS."""
        if self.supervision.success_policy is not None:
            return self.supervision.success_policy
        return SuccessPolicy.CHIEF if self.strategy is Strategy.PARAMETER_SERVER else SuccessPolicy.ALL_WORKERS

    def trainers(self) -> list[TaskId]:
        """Tasks that train to the end and exit on their own: chief and workers, except PSS
        workers (they serve until stopped)."""
        return [t for t in self.tasks() if t.task_type in ("chief", "worker") and not self.serves_forever(t)]

    @property
    def coordinator(self) -> TaskId:
        """The task whose exit 0 means the job succeeded: the chief, or worker 0 without one."""
        return TaskId("chief", 0) if self.chief else TaskId("worker", 0)

    @property
    def replicas(self) -> int:
        """Replicas in sync per training step (one per CPU task in this orchestrator).

        Mirrored: ``training.replicas`` logical CPU devices of the one task. MWMS: every
        chief and worker holds one replica. PSS: each step runs on one worker, so one
        replica per step (``strategy.num_replicas_in_sync`` == 1 on CPU). Hogwild: one
        (each step is one thread's batch; the threads' steps are counted together).
        """
        if self.strategy is Strategy.MIRRORED:
            return self.training.replicas
        if self.strategy is Strategy.HOGWILD:
            return 1  # every step is one thread's batch on the shared model
        if self.strategy is Strategy.MULTI_WORKER_MIRRORED:
            return self.chief + self.workers
        return 1

    @property
    def global_batch_size(self) -> int:
        """Examples per training step across the replicas in sync (elastic: :mod:`orchestrator.spec.elastic`)."""
        return batch_facts(self).global_batch_size

    def tf_process_count(self) -> int:
        """Processes that import TensorFlow (every task)."""
        return len(self.tasks())


def _positive_int(name: str, value: object, fix: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SpecError(name, value, "must be a whole number >= 1", fix)
