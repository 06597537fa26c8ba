from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PHASE_UNSPECIFIED: _ClassVar[Phase]
    PHASE_INITIALIZING: _ClassVar[Phase]
    PHASE_SERVING: _ClassVar[Phase]
    PHASE_TRAINING: _ClassVar[Phase]
    PHASE_EVALUATING: _ClassVar[Phase]
    PHASE_SAVING: _ClassVar[Phase]
    PHASE_DONE: _ClassVar[Phase]
    PHASE_FINISHING: _ClassVar[Phase]

class Handover(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HANDOVER_UNSPECIFIED: _ClassVar[Handover]
    HANDOVER_TAKEN: _ClassVar[Handover]
    HANDOVER_EARLY: _ClassVar[Handover]
    HANDOVER_MISSED: _ClassVar[Handover]
PHASE_UNSPECIFIED: Phase
PHASE_INITIALIZING: Phase
PHASE_SERVING: Phase
PHASE_TRAINING: Phase
PHASE_EVALUATING: Phase
PHASE_SAVING: Phase
PHASE_DONE: Phase
PHASE_FINISHING: Phase
HANDOVER_UNSPECIFIED: Handover
HANDOVER_TAKEN: Handover
HANDOVER_EARLY: Handover
HANDOVER_MISSED: Handover

class TaskKey(_message.Message):
    __slots__ = ("task_type", "task_index", "attempt")
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    task_type: str
    task_index: int
    attempt: int
    def __init__(self, task_type: _Optional[str] = ..., task_index: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("task", "sequence", "pid", "phase", "step", "epoch", "loss", "examples_per_second", "cpu_percent", "rss_bytes", "metrics", "message", "exiting", "gpus", "formed", "resumed_from_step", "evaluated_step", "rejoined", "non_finite_step")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class RejoinedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TASK_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EXITING_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    FORMED_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FROM_STEP_FIELD_NUMBER: _ClassVar[int]
    EVALUATED_STEP_FIELD_NUMBER: _ClassVar[int]
    REJOINED_FIELD_NUMBER: _ClassVar[int]
    NON_FINITE_STEP_FIELD_NUMBER: _ClassVar[int]
    task: TaskKey
    sequence: int
    pid: int
    phase: Phase
    step: int
    epoch: int
    loss: float
    examples_per_second: float
    cpu_percent: float
    rss_bytes: int
    metrics: _containers.ScalarMap[str, float]
    message: str
    exiting: bool
    gpus: _containers.RepeatedCompositeFieldContainer[GpuSample]
    formed: Formed
    resumed_from_step: int
    evaluated_step: int
    rejoined: _containers.ScalarMap[str, int]
    non_finite_step: int
    def __init__(self, task: _Optional[_Union[TaskKey, _Mapping]] = ..., sequence: _Optional[int] = ..., pid: _Optional[int] = ..., phase: _Optional[_Union[Phase, str]] = ..., step: _Optional[int] = ..., epoch: _Optional[int] = ..., loss: _Optional[float] = ..., examples_per_second: _Optional[float] = ..., cpu_percent: _Optional[float] = ..., rss_bytes: _Optional[int] = ..., metrics: _Optional[_Mapping[str, float]] = ..., message: _Optional[str] = ..., exiting: _Optional[bool] = ..., gpus: _Optional[_Iterable[_Union[GpuSample, _Mapping]]] = ..., formed: _Optional[_Union[Formed, _Mapping]] = ..., resumed_from_step: _Optional[int] = ..., evaluated_step: _Optional[int] = ..., rejoined: _Optional[_Mapping[str, int]] = ..., non_finite_step: _Optional[int] = ...) -> None: ...

class Formed(_message.Message):
    __slots__ = ("replicas_in_sync", "cluster_workers")
    REPLICAS_IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_WORKERS_FIELD_NUMBER: _ClassVar[int]
    replicas_in_sync: int
    cluster_workers: int
    def __init__(self, replicas_in_sync: _Optional[int] = ..., cluster_workers: _Optional[int] = ...) -> None: ...

class GpuSample(_message.Message):
    __slots__ = ("uuid", "index", "utilization_percent", "memory_used_bytes", "memory_total_bytes")
    UUID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    index: int
    utilization_percent: float
    memory_used_bytes: int
    memory_total_bytes: int
    def __init__(self, uuid: _Optional[str] = ..., index: _Optional[int] = ..., utilization_percent: _Optional[float] = ..., memory_used_bytes: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ...) -> None: ...

class StreamSummary(_message.Message):
    __slots__ = ("received",)
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    received: int
    def __init__(self, received: _Optional[int] = ...) -> None: ...

class PortRequest(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: TaskKey
    def __init__(self, task: _Optional[_Union[TaskKey, _Mapping]] = ...) -> None: ...

class PortReply(_message.Message):
    __slots__ = ("port",)
    PORT_FIELD_NUMBER: _ClassVar[int]
    port: int
    def __init__(self, port: _Optional[int] = ...) -> None: ...

class AddressRequest(_message.Message):
    __slots__ = ("task", "host", "port", "wait_s")
    TASK_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    task: TaskKey
    host: str
    port: int
    wait_s: float
    def __init__(self, task: _Optional[_Union[TaskKey, _Mapping]] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., wait_s: _Optional[float] = ...) -> None: ...

class ClusterReply(_message.Message):
    __slots__ = ("ready", "address", "tf_config", "error", "env")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    READY_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TF_CONFIG_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    ready: bool
    address: str
    tf_config: str
    error: str
    env: _containers.ScalarMap[str, str]
    def __init__(self, ready: _Optional[bool] = ..., address: _Optional[str] = ..., tf_config: _Optional[str] = ..., error: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("history", "history_since")
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    HISTORY_SINCE_FIELD_NUMBER: _ClassVar[int]
    history: bool
    history_since: int
    def __init__(self, history: _Optional[bool] = ..., history_since: _Optional[int] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("job", "history")
    JOB_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    job: JobStatus
    history: StatusHistory
    def __init__(self, job: _Optional[_Union[JobStatus, _Mapping]] = ..., history: _Optional[_Union[StatusHistory, _Mapping]] = ...) -> None: ...

class JobStatus(_message.Message):
    __slots__ = ("run_id", "run_dir", "status", "exit_code", "reason", "wall_time_s", "started_at", "strategy", "topology", "cluster", "threads_per_task", "program", "training", "metrics", "evaluation", "model_dir", "tensorboard_dir", "root_cause", "restarts", "max_restarts", "restart_policy", "recoveries", "failures", "lives", "late_failures", "warnings", "faults", "cluster_check", "spares", "tasks", "peak_gpu_memory_bytes", "orchestrator", "data_service", "live", "elapsed_s", "global_batch_size", "updated_at", "segments", "elastic")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_DIR_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    WALL_TIME_S_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    THREADS_PER_TASK_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_FIELD_NUMBER: _ClassVar[int]
    TRAINING_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_FIELD_NUMBER: _ClassVar[int]
    MODEL_DIR_FIELD_NUMBER: _ClassVar[int]
    TENSORBOARD_DIR_FIELD_NUMBER: _ClassVar[int]
    ROOT_CAUSE_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    MAX_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    RESTART_POLICY_FIELD_NUMBER: _ClassVar[int]
    RECOVERIES_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    LIVES_FIELD_NUMBER: _ClassVar[int]
    LATE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    FAULTS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_CHECK_FIELD_NUMBER: _ClassVar[int]
    SPARES_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    PEAK_GPU_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    ORCHESTRATOR_FIELD_NUMBER: _ClassVar[int]
    DATA_SERVICE_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_S_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    ELASTIC_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    run_dir: str
    status: str
    exit_code: int
    reason: str
    wall_time_s: float
    started_at: str
    strategy: str
    topology: Topology
    cluster: _containers.RepeatedCompositeFieldContainer[Addresses]
    threads_per_task: int
    program: _containers.RepeatedScalarFieldContainer[str]
    training: Value
    metrics: Record
    evaluation: Value
    model_dir: str
    tensorboard_dir: str
    root_cause: Value
    restarts: int
    max_restarts: int
    restart_policy: _containers.RepeatedCompositeFieldContainer[NamedText]
    recoveries: _containers.RepeatedCompositeFieldContainer[Recovery]
    failures: _containers.RepeatedCompositeFieldContainer[Record]
    lives: _containers.RepeatedCompositeFieldContainer[Record]
    late_failures: _containers.RepeatedCompositeFieldContainer[Record]
    warnings: _containers.RepeatedScalarFieldContainer[str]
    faults: _containers.RepeatedCompositeFieldContainer[Record]
    cluster_check: Record
    spares: _containers.RepeatedCompositeFieldContainer[Spare]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskStatus]
    peak_gpu_memory_bytes: int
    orchestrator: OrchestratorProcess
    data_service: Value
    live: bool
    elapsed_s: float
    global_batch_size: int
    updated_at: float
    segments: _containers.RepeatedCompositeFieldContainer[Record]
    elastic: Value
    def __init__(self, run_id: _Optional[str] = ..., run_dir: _Optional[str] = ..., status: _Optional[str] = ..., exit_code: _Optional[int] = ..., reason: _Optional[str] = ..., wall_time_s: _Optional[float] = ..., started_at: _Optional[str] = ..., strategy: _Optional[str] = ..., topology: _Optional[_Union[Topology, _Mapping]] = ..., cluster: _Optional[_Iterable[_Union[Addresses, _Mapping]]] = ..., threads_per_task: _Optional[int] = ..., program: _Optional[_Iterable[str]] = ..., training: _Optional[_Union[Value, _Mapping]] = ..., metrics: _Optional[_Union[Record, _Mapping]] = ..., evaluation: _Optional[_Union[Value, _Mapping]] = ..., model_dir: _Optional[str] = ..., tensorboard_dir: _Optional[str] = ..., root_cause: _Optional[_Union[Value, _Mapping]] = ..., restarts: _Optional[int] = ..., max_restarts: _Optional[int] = ..., restart_policy: _Optional[_Iterable[_Union[NamedText, _Mapping]]] = ..., recoveries: _Optional[_Iterable[_Union[Recovery, _Mapping]]] = ..., failures: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., lives: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., late_failures: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., warnings: _Optional[_Iterable[str]] = ..., faults: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., cluster_check: _Optional[_Union[Record, _Mapping]] = ..., spares: _Optional[_Iterable[_Union[Spare, _Mapping]]] = ..., tasks: _Optional[_Iterable[_Union[TaskStatus, _Mapping]]] = ..., peak_gpu_memory_bytes: _Optional[int] = ..., orchestrator: _Optional[_Union[OrchestratorProcess, _Mapping]] = ..., data_service: _Optional[_Union[Value, _Mapping]] = ..., live: _Optional[bool] = ..., elapsed_s: _Optional[float] = ..., global_batch_size: _Optional[int] = ..., updated_at: _Optional[float] = ..., segments: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., elastic: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...

class Topology(_message.Message):
    __slots__ = ("chief", "worker", "ps", "evaluator")
    CHIEF_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    PS_FIELD_NUMBER: _ClassVar[int]
    EVALUATOR_FIELD_NUMBER: _ClassVar[int]
    chief: int
    worker: int
    ps: int
    evaluator: int
    def __init__(self, chief: _Optional[int] = ..., worker: _Optional[int] = ..., ps: _Optional[int] = ..., evaluator: _Optional[int] = ...) -> None: ...

class Addresses(_message.Message):
    __slots__ = ("task_type", "addresses")
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    task_type: str
    addresses: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, task_type: _Optional[str] = ..., addresses: _Optional[_Iterable[str]] = ...) -> None: ...

class NamedText(_message.Message):
    __slots__ = ("name", "text")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    name: str
    text: str
    def __init__(self, name: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class Recovery(_message.Message):
    __slots__ = ("cause", "scope", "tasks", "detected_at_s", "restarted_at_s", "resumed_at_s", "detection_to_resumed_training_s", "resumed_from_step")
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    DETECTED_AT_S_FIELD_NUMBER: _ClassVar[int]
    RESTARTED_AT_S_FIELD_NUMBER: _ClassVar[int]
    RESUMED_AT_S_FIELD_NUMBER: _ClassVar[int]
    DETECTION_TO_RESUMED_TRAINING_S_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FROM_STEP_FIELD_NUMBER: _ClassVar[int]
    cause: str
    scope: str
    tasks: _containers.RepeatedScalarFieldContainer[str]
    detected_at_s: float
    restarted_at_s: float
    resumed_at_s: float
    detection_to_resumed_training_s: float
    resumed_from_step: int
    def __init__(self, cause: _Optional[str] = ..., scope: _Optional[str] = ..., tasks: _Optional[_Iterable[str]] = ..., detected_at_s: _Optional[float] = ..., restarted_at_s: _Optional[float] = ..., resumed_at_s: _Optional[float] = ..., detection_to_resumed_training_s: _Optional[float] = ..., resumed_from_step: _Optional[int] = ...) -> None: ...

class Spare(_message.Message):
    __slots__ = ("pid", "state", "task")
    PID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    pid: int
    state: str
    task: str
    def __init__(self, pid: _Optional[int] = ..., state: _Optional[str] = ..., task: _Optional[str] = ...) -> None: ...

class OrchestratorProcess(_message.Message):
    __slots__ = ("pid", "peak_rss_bytes")
    PID_FIELD_NUMBER: _ClassVar[int]
    PEAK_RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    pid: int
    peak_rss_bytes: int
    def __init__(self, pid: _Optional[int] = ..., peak_rss_bytes: _Optional[int] = ...) -> None: ...

class TaskStatus(_message.Message):
    __slots__ = ("task", "state", "address", "attempts", "restarts", "pid", "exit_code", "signal", "exit", "reason", "stdout", "stderr", "last_heartbeat", "process_sample", "earlier_attempts", "gpus", "left_behind", "name", "task_type", "task_index", "attempt", "heartbeat_age_s")
    TASK_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    PROCESS_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    EARLIER_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    LEFT_BEHIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    TASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_AGE_S_FIELD_NUMBER: _ClassVar[int]
    task: str
    state: str
    address: str
    attempts: int
    restarts: int
    pid: int
    exit_code: int
    signal: str
    exit: str
    reason: str
    stdout: str
    stderr: str
    last_heartbeat: LastHeartbeat
    process_sample: ProcessSample
    earlier_attempts: _containers.RepeatedCompositeFieldContainer[Record]
    gpus: TaskGpus
    left_behind: _containers.RepeatedCompositeFieldContainer[Record]
    name: str
    task_type: str
    task_index: int
    attempt: int
    heartbeat_age_s: float
    def __init__(self, task: _Optional[str] = ..., state: _Optional[str] = ..., address: _Optional[str] = ..., attempts: _Optional[int] = ..., restarts: _Optional[int] = ..., pid: _Optional[int] = ..., exit_code: _Optional[int] = ..., signal: _Optional[str] = ..., exit: _Optional[str] = ..., reason: _Optional[str] = ..., stdout: _Optional[str] = ..., stderr: _Optional[str] = ..., last_heartbeat: _Optional[_Union[LastHeartbeat, _Mapping]] = ..., process_sample: _Optional[_Union[ProcessSample, _Mapping]] = ..., earlier_attempts: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., gpus: _Optional[_Union[TaskGpus, _Mapping]] = ..., left_behind: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., name: _Optional[str] = ..., task_type: _Optional[str] = ..., task_index: _Optional[int] = ..., attempt: _Optional[int] = ..., heartbeat_age_s: _Optional[float] = ...) -> None: ...

class LastHeartbeat(_message.Message):
    __slots__ = ("phase", "cpu_percent", "rss_bytes", "heartbeats", "step", "epoch", "loss", "examples_per_second", "metrics", "formed", "first_step_s")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    PHASE_FIELD_NUMBER: _ClassVar[int]
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    HEARTBEATS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    FORMED_FIELD_NUMBER: _ClassVar[int]
    FIRST_STEP_S_FIELD_NUMBER: _ClassVar[int]
    phase: str
    cpu_percent: float
    rss_bytes: int
    heartbeats: int
    step: int
    epoch: int
    loss: float
    examples_per_second: float
    metrics: _containers.ScalarMap[str, float]
    formed: Formed
    first_step_s: float
    def __init__(self, phase: _Optional[str] = ..., cpu_percent: _Optional[float] = ..., rss_bytes: _Optional[int] = ..., heartbeats: _Optional[int] = ..., step: _Optional[int] = ..., epoch: _Optional[int] = ..., loss: _Optional[float] = ..., examples_per_second: _Optional[float] = ..., metrics: _Optional[_Mapping[str, float]] = ..., formed: _Optional[_Union[Formed, _Mapping]] = ..., first_step_s: _Optional[float] = ...) -> None: ...

class ProcessSample(_message.Message):
    __slots__ = ("cpu_percent", "rss_bytes")
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    cpu_percent: float
    rss_bytes: int
    def __init__(self, cpu_percent: _Optional[float] = ..., rss_bytes: _Optional[int] = ...) -> None: ...

class TaskGpus(_message.Message):
    __slots__ = ("count", "devices", "utilization_percent", "memory_used_bytes", "memory_total_bytes", "peak_memory_bytes", "samples")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    count: int
    devices: _containers.RepeatedScalarFieldContainer[str]
    utilization_percent: float
    memory_used_bytes: int
    memory_total_bytes: int
    peak_memory_bytes: int
    samples: _containers.RepeatedCompositeFieldContainer[Record]
    def __init__(self, count: _Optional[int] = ..., devices: _Optional[_Iterable[str]] = ..., utilization_percent: _Optional[float] = ..., memory_used_bytes: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ..., peak_memory_bytes: _Optional[int] = ..., samples: _Optional[_Iterable[_Union[Record, _Mapping]]] = ...) -> None: ...

class StatusHistory(_message.Message):
    __slots__ = ("seq", "samples", "events")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    samples: _containers.RepeatedCompositeFieldContainer[Sample]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    def __init__(self, seq: _Optional[int] = ..., samples: _Optional[_Iterable[_Union[Sample, _Mapping]]] = ..., events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ...) -> None: ...

class Sample(_message.Message):
    __slots__ = ("seq", "t", "task", "attempt", "step", "loss", "examples_per_second", "cpu_percent", "rss_bytes")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    T_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    EXAMPLES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    seq: int
    t: float
    task: str
    attempt: int
    step: int
    loss: float
    examples_per_second: float
    cpu_percent: float
    rss_bytes: int
    def __init__(self, seq: _Optional[int] = ..., t: _Optional[float] = ..., task: _Optional[str] = ..., attempt: _Optional[int] = ..., step: _Optional[int] = ..., loss: _Optional[float] = ..., examples_per_second: _Optional[float] = ..., cpu_percent: _Optional[float] = ..., rss_bytes: _Optional[int] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("seq", "t", "text", "kind")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    T_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    seq: int
    t: float
    text: str
    kind: str
    def __init__(self, seq: _Optional[int] = ..., t: _Optional[float] = ..., text: _Optional[str] = ..., kind: _Optional[str] = ...) -> None: ...

class Value(_message.Message):
    __slots__ = ("null", "bool_value", "int_value", "double_value", "string_value", "list_value", "record_value")
    NULL_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    LIST_VALUE_FIELD_NUMBER: _ClassVar[int]
    RECORD_VALUE_FIELD_NUMBER: _ClassVar[int]
    null: bool
    bool_value: bool
    int_value: int
    double_value: float
    string_value: str
    list_value: Values
    record_value: Record
    def __init__(self, null: _Optional[bool] = ..., bool_value: _Optional[bool] = ..., int_value: _Optional[int] = ..., double_value: _Optional[float] = ..., string_value: _Optional[str] = ..., list_value: _Optional[_Union[Values, _Mapping]] = ..., record_value: _Optional[_Union[Record, _Mapping]] = ...) -> None: ...

class Values(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[Value]
    def __init__(self, items: _Optional[_Iterable[_Union[Value, _Mapping]]] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ("fields",)
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    fields: _containers.RepeatedCompositeFieldContainer[Field]
    def __init__(self, fields: _Optional[_Iterable[_Union[Field, _Mapping]]] = ...) -> None: ...

class Field(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: Value
    def __init__(self, name: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...

class StopRequest(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class StopReply(_message.Message):
    __slots__ = ("accepted", "state")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    state: str
    def __init__(self, accepted: _Optional[bool] = ..., state: _Optional[str] = ...) -> None: ...

class ResizeRequest(_message.Message):
    __slots__ = ("workers", "reason")
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    workers: int
    reason: str
    def __init__(self, workers: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class ResizeReply(_message.Message):
    __slots__ = ("accepted", "state", "refusal")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    state: str
    refusal: str
    def __init__(self, accepted: _Optional[bool] = ..., state: _Optional[str] = ..., refusal: _Optional[str] = ...) -> None: ...

class FaultHandover(_message.Message):
    __slots__ = ("task", "fault", "job_step", "wait_s")
    TASK_FIELD_NUMBER: _ClassVar[int]
    FAULT_FIELD_NUMBER: _ClassVar[int]
    JOB_STEP_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    task: TaskKey
    fault: str
    job_step: int
    wait_s: float
    def __init__(self, task: _Optional[_Union[TaskKey, _Mapping]] = ..., fault: _Optional[str] = ..., job_step: _Optional[int] = ..., wait_s: _Optional[float] = ...) -> None: ...

class HandoverReply(_message.Message):
    __slots__ = ("outcome",)
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    outcome: Handover
    def __init__(self, outcome: _Optional[_Union[Handover, str]] = ...) -> None: ...

class FaultPoll(_message.Message):
    __slots__ = ("task", "wait_s")
    TASK_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    task: TaskKey
    wait_s: float
    def __init__(self, task: _Optional[_Union[TaskKey, _Mapping]] = ..., wait_s: _Optional[float] = ...) -> None: ...
