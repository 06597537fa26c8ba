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
    __slots__ = ("task", "sequence", "pid", "phase", "step", "epoch", "loss", "examples_per_second", "cpu_percent", "rss_bytes", "metrics", "message", "exiting", "gpus", "formed")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
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
    def __init__(self, task: _Optional[_Union[TaskKey, _Mapping]] = ..., sequence: _Optional[int] = ..., pid: _Optional[int] = ..., phase: _Optional[_Union[Phase, str]] = ..., step: _Optional[int] = ..., epoch: _Optional[int] = ..., loss: _Optional[float] = ..., examples_per_second: _Optional[float] = ..., cpu_percent: _Optional[float] = ..., rss_bytes: _Optional[int] = ..., metrics: _Optional[_Mapping[str, float]] = ..., message: _Optional[str] = ..., exiting: _Optional[bool] = ..., gpus: _Optional[_Iterable[_Union[GpuSample, _Mapping]]] = ..., formed: _Optional[_Union[Formed, _Mapping]] = ...) -> None: ...

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
    __slots__ = ("ready", "address", "tf_config", "error")
    READY_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TF_CONFIG_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ready: bool
    address: str
    tf_config: str
    error: str
    def __init__(self, ready: _Optional[bool] = ..., address: _Optional[str] = ..., tf_config: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("history", "history_since")
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    HISTORY_SINCE_FIELD_NUMBER: _ClassVar[int]
    history: bool
    history_since: int
    def __init__(self, history: _Optional[bool] = ..., history_since: _Optional[int] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("status_json",)
    STATUS_JSON_FIELD_NUMBER: _ClassVar[int]
    status_json: str
    def __init__(self, status_json: _Optional[str] = ...) -> None: ...

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
