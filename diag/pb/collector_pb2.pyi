from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OpKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OP_KIND_UNSPECIFIED: _ClassVar[OpKind]
    OP_KIND_KERNEL: _ClassVar[OpKind]
    OP_KIND_GEMM: _ClassVar[OpKind]
    OP_KIND_COLLECTIVE: _ClassVar[OpKind]
    OP_KIND_P2P: _ClassVar[OpKind]
    OP_KIND_HOST_FUNC: _ClassVar[OpKind]

class Producer(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRODUCER_UNSPECIFIED: _ClassVar[Producer]
    PRODUCER_PYTHON: _ClassVar[Producer]
    PRODUCER_HOOK: _ClassVar[Producer]
OP_KIND_UNSPECIFIED: OpKind
OP_KIND_KERNEL: OpKind
OP_KIND_GEMM: OpKind
OP_KIND_COLLECTIVE: OpKind
OP_KIND_P2P: OpKind
OP_KIND_HOST_FUNC: OpKind
PRODUCER_UNSPECIFIED: Producer
PRODUCER_PYTHON: Producer
PRODUCER_HOOK: Producer

class InFlightOp(_message.Message):
    __slots__ = ("name", "kind", "producer", "comm_id", "seq", "age_ns", "bytes", "comm_rank", "comm_size", "dtype", "reduce_op", "peer")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    COMM_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    AGE_NS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    COMM_RANK_FIELD_NUMBER: _ClassVar[int]
    COMM_SIZE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    REDUCE_OP_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: OpKind
    producer: Producer
    comm_id: int
    seq: int
    age_ns: int
    bytes: int
    comm_rank: int
    comm_size: int
    dtype: int
    reduce_op: int
    peer: int
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[OpKind, str]] = ..., producer: _Optional[_Union[Producer, str]] = ..., comm_id: _Optional[int] = ..., seq: _Optional[int] = ..., age_ns: _Optional[int] = ..., bytes: _Optional[int] = ..., comm_rank: _Optional[int] = ..., comm_size: _Optional[int] = ..., dtype: _Optional[int] = ..., reduce_op: _Optional[int] = ..., peer: _Optional[int] = ...) -> None: ...

class OpStats(_message.Message):
    __slots__ = ("name", "kind", "count", "total_ns", "max_ns", "bytes", "flops")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_NS_FIELD_NUMBER: _ClassVar[int]
    MAX_NS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    FLOPS_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: OpKind
    count: int
    total_ns: int
    max_ns: int
    bytes: int
    flops: int
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[OpKind, str]] = ..., count: _Optional[int] = ..., total_ns: _Optional[int] = ..., max_ns: _Optional[int] = ..., bytes: _Optional[int] = ..., flops: _Optional[int] = ...) -> None: ...

class Fingerprint(_message.Message):
    __slots__ = ("name", "bytes", "dtype", "reduce_op", "peer", "nth")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    REDUCE_OP_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    NTH_FIELD_NUMBER: _ClassVar[int]
    name: str
    bytes: int
    dtype: int
    reduce_op: int
    peer: int
    nth: int
    def __init__(self, name: _Optional[str] = ..., bytes: _Optional[int] = ..., dtype: _Optional[int] = ..., reduce_op: _Optional[int] = ..., peer: _Optional[int] = ..., nth: _Optional[int] = ...) -> None: ...

class StepTimes(_message.Message):
    __slots__ = ("step", "into_step_ns", "start_ns")
    STEP_FIELD_NUMBER: _ClassVar[int]
    INTO_STEP_NS_FIELD_NUMBER: _ClassVar[int]
    START_NS_FIELD_NUMBER: _ClassVar[int]
    step: _containers.RepeatedScalarFieldContainer[int]
    into_step_ns: _containers.RepeatedScalarFieldContainer[int]
    start_ns: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, step: _Optional[_Iterable[int]] = ..., into_step_ns: _Optional[_Iterable[int]] = ..., start_ns: _Optional[_Iterable[int]] = ...) -> None: ...

class FingerprintWindow(_message.Message):
    __slots__ = ("first_seq", "ops")
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    first_seq: int
    ops: _containers.RepeatedCompositeFieldContainer[Fingerprint]
    def __init__(self, first_seq: _Optional[int] = ..., ops: _Optional[_Iterable[_Union[Fingerprint, _Mapping]]] = ...) -> None: ...

class CommProgress(_message.Message):
    __slots__ = ("comm_id", "last_started_seq", "last_completed_seq", "comm_size", "lane", "group_name", "recent", "comm_rank", "recent_steps")
    COMM_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_STARTED_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_COMPLETED_SEQ_FIELD_NUMBER: _ClassVar[int]
    COMM_SIZE_FIELD_NUMBER: _ClassVar[int]
    LANE_FIELD_NUMBER: _ClassVar[int]
    GROUP_NAME_FIELD_NUMBER: _ClassVar[int]
    RECENT_FIELD_NUMBER: _ClassVar[int]
    COMM_RANK_FIELD_NUMBER: _ClassVar[int]
    RECENT_STEPS_FIELD_NUMBER: _ClassVar[int]
    comm_id: int
    last_started_seq: int
    last_completed_seq: int
    comm_size: int
    lane: OpKind
    group_name: str
    recent: FingerprintWindow
    comm_rank: int
    recent_steps: StepTimes
    def __init__(self, comm_id: _Optional[int] = ..., last_started_seq: _Optional[int] = ..., last_completed_seq: _Optional[int] = ..., comm_size: _Optional[int] = ..., lane: _Optional[_Union[OpKind, str]] = ..., group_name: _Optional[str] = ..., recent: _Optional[_Union[FingerprintWindow, _Mapping]] = ..., comm_rank: _Optional[int] = ..., recent_steps: _Optional[_Union[StepTimes, _Mapping]] = ...) -> None: ...

class RankProgress(_message.Message):
    __slots__ = ("rank", "local_rank", "world_size", "pid", "alive", "oldest_in_flight", "stats", "comms", "dropped_records", "idle_ns", "last_op", "perf", "gpu", "links", "parallel_coords", "activity", "unfinished_kernel", "exit", "exited_unix")
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    OLDEST_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    COMMS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    IDLE_NS_FIELD_NUMBER: _ClassVar[int]
    LAST_OP_FIELD_NUMBER: _ClassVar[int]
    PERF_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_COORDS_FIELD_NUMBER: _ClassVar[int]
    ACTIVITY_FIELD_NUMBER: _ClassVar[int]
    UNFINISHED_KERNEL_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    EXITED_UNIX_FIELD_NUMBER: _ClassVar[int]
    rank: int
    local_rank: int
    world_size: int
    pid: int
    alive: bool
    oldest_in_flight: InFlightOp
    stats: _containers.RepeatedCompositeFieldContainer[OpStats]
    comms: _containers.RepeatedCompositeFieldContainer[CommProgress]
    dropped_records: int
    idle_ns: int
    last_op: str
    perf: PerfRank
    gpu: GpuHealth
    links: _containers.RepeatedCompositeFieldContainer[LinkChannel]
    parallel_coords: str
    activity: RankActivity
    unfinished_kernel: KernelProbe
    exit: RankExit
    exited_unix: float
    def __init__(self, rank: _Optional[int] = ..., local_rank: _Optional[int] = ..., world_size: _Optional[int] = ..., pid: _Optional[int] = ..., alive: bool = ..., oldest_in_flight: _Optional[_Union[InFlightOp, _Mapping]] = ..., stats: _Optional[_Iterable[_Union[OpStats, _Mapping]]] = ..., comms: _Optional[_Iterable[_Union[CommProgress, _Mapping]]] = ..., dropped_records: _Optional[int] = ..., idle_ns: _Optional[int] = ..., last_op: _Optional[str] = ..., perf: _Optional[_Union[PerfRank, _Mapping]] = ..., gpu: _Optional[_Union[GpuHealth, _Mapping]] = ..., links: _Optional[_Iterable[_Union[LinkChannel, _Mapping]]] = ..., parallel_coords: _Optional[str] = ..., activity: _Optional[_Union[RankActivity, _Mapping]] = ..., unfinished_kernel: _Optional[_Union[KernelProbe, _Mapping]] = ..., exit: _Optional[_Union[RankExit, _Mapping]] = ..., exited_unix: _Optional[float] = ...) -> None: ...

class RankExit(_message.Message):
    __slots__ = ("exit_code", "signal", "error", "oom_kill", "torchrun_root", "stopped")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    OOM_KILL_FIELD_NUMBER: _ClassVar[int]
    TORCHRUN_ROOT_FIELD_NUMBER: _ClassVar[int]
    STOPPED_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    signal: int
    error: str
    oom_kill: bool
    torchrun_root: bool
    stopped: bool
    def __init__(self, exit_code: _Optional[int] = ..., signal: _Optional[int] = ..., error: _Optional[str] = ..., oom_kill: bool = ..., torchrun_root: bool = ..., stopped: bool = ...) -> None: ...

class KernelProbe(_message.Message):
    __slots__ = ("name", "age_ns", "history_runs", "history_max_ns", "launches_since", "quiet_ns")
    NAME_FIELD_NUMBER: _ClassVar[int]
    AGE_NS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_RUNS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_MAX_NS_FIELD_NUMBER: _ClassVar[int]
    LAUNCHES_SINCE_FIELD_NUMBER: _ClassVar[int]
    QUIET_NS_FIELD_NUMBER: _ClassVar[int]
    name: str
    age_ns: int
    history_runs: int
    history_max_ns: int
    launches_since: int
    quiet_ns: int
    def __init__(self, name: _Optional[str] = ..., age_ns: _Optional[int] = ..., history_runs: _Optional[int] = ..., history_max_ns: _Optional[int] = ..., launches_since: _Optional[int] = ..., quiet_ns: _Optional[int] = ...) -> None: ...

class RankActivity(_message.Message):
    __slots__ = ("cpu_ns", "io_bytes", "procs", "launches_total", "disk_wait", "quiet_ns")
    CPU_NS_FIELD_NUMBER: _ClassVar[int]
    IO_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROCS_FIELD_NUMBER: _ClassVar[int]
    LAUNCHES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    DISK_WAIT_FIELD_NUMBER: _ClassVar[int]
    QUIET_NS_FIELD_NUMBER: _ClassVar[int]
    cpu_ns: int
    io_bytes: int
    procs: int
    launches_total: int
    disk_wait: bool
    quiet_ns: int
    def __init__(self, cpu_ns: _Optional[int] = ..., io_bytes: _Optional[int] = ..., procs: _Optional[int] = ..., launches_total: _Optional[int] = ..., disk_wait: bool = ..., quiet_ns: _Optional[int] = ...) -> None: ...

class LinkChannel(_message.Message):
    __slots__ = ("comm_hash", "comm_rank", "comm_size", "channel", "kind", "peer", "ops", "ops_done", "nsteps", "posted", "moved", "done", "steps_total", "last_state", "idle_ns")
    COMM_HASH_FIELD_NUMBER: _ClassVar[int]
    COMM_RANK_FIELD_NUMBER: _ClassVar[int]
    COMM_SIZE_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    OPS_DONE_FIELD_NUMBER: _ClassVar[int]
    NSTEPS_FIELD_NUMBER: _ClassVar[int]
    POSTED_FIELD_NUMBER: _ClassVar[int]
    MOVED_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    STEPS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    LAST_STATE_FIELD_NUMBER: _ClassVar[int]
    IDLE_NS_FIELD_NUMBER: _ClassVar[int]
    comm_hash: int
    comm_rank: int
    comm_size: int
    channel: int
    kind: int
    peer: int
    ops: int
    ops_done: int
    nsteps: int
    posted: int
    moved: int
    done: int
    steps_total: int
    last_state: int
    idle_ns: int
    def __init__(self, comm_hash: _Optional[int] = ..., comm_rank: _Optional[int] = ..., comm_size: _Optional[int] = ..., channel: _Optional[int] = ..., kind: _Optional[int] = ..., peer: _Optional[int] = ..., ops: _Optional[int] = ..., ops_done: _Optional[int] = ..., nsteps: _Optional[int] = ..., posted: _Optional[int] = ..., moved: _Optional[int] = ..., done: _Optional[int] = ..., steps_total: _Optional[int] = ..., last_state: _Optional[int] = ..., idle_ns: _Optional[int] = ...) -> None: ...

class GpuIdentity(_message.Message):
    __slots__ = ("pci_bus_id", "uuid", "index", "cuda_device", "name")
    PCI_BUS_ID_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    CUDA_DEVICE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    pci_bus_id: str
    uuid: str
    index: int
    cuda_device: int
    name: str
    def __init__(self, pci_bus_id: _Optional[str] = ..., uuid: _Optional[str] = ..., index: _Optional[int] = ..., cuda_device: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class GpuSample(_message.Message):
    __slots__ = ("unix_s", "throttle_reasons", "sm_clock_mhz", "sm_clock_max_mhz", "temperature_c", "power_w", "power_limit_w", "ecc_uncorrected", "remapped_rows_pending", "remapped_rows_failed", "pcie_gen", "pcie_width", "pcie_max_gen", "pcie_max_width", "nvlink_errors")
    UNIX_S_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_REASONS_FIELD_NUMBER: _ClassVar[int]
    SM_CLOCK_MHZ_FIELD_NUMBER: _ClassVar[int]
    SM_CLOCK_MAX_MHZ_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_C_FIELD_NUMBER: _ClassVar[int]
    POWER_W_FIELD_NUMBER: _ClassVar[int]
    POWER_LIMIT_W_FIELD_NUMBER: _ClassVar[int]
    ECC_UNCORRECTED_FIELD_NUMBER: _ClassVar[int]
    REMAPPED_ROWS_PENDING_FIELD_NUMBER: _ClassVar[int]
    REMAPPED_ROWS_FAILED_FIELD_NUMBER: _ClassVar[int]
    PCIE_GEN_FIELD_NUMBER: _ClassVar[int]
    PCIE_WIDTH_FIELD_NUMBER: _ClassVar[int]
    PCIE_MAX_GEN_FIELD_NUMBER: _ClassVar[int]
    PCIE_MAX_WIDTH_FIELD_NUMBER: _ClassVar[int]
    NVLINK_ERRORS_FIELD_NUMBER: _ClassVar[int]
    unix_s: float
    throttle_reasons: int
    sm_clock_mhz: int
    sm_clock_max_mhz: int
    temperature_c: int
    power_w: float
    power_limit_w: float
    ecc_uncorrected: int
    remapped_rows_pending: bool
    remapped_rows_failed: bool
    pcie_gen: int
    pcie_width: int
    pcie_max_gen: int
    pcie_max_width: int
    nvlink_errors: int
    def __init__(self, unix_s: _Optional[float] = ..., throttle_reasons: _Optional[int] = ..., sm_clock_mhz: _Optional[int] = ..., sm_clock_max_mhz: _Optional[int] = ..., temperature_c: _Optional[int] = ..., power_w: _Optional[float] = ..., power_limit_w: _Optional[float] = ..., ecc_uncorrected: _Optional[int] = ..., remapped_rows_pending: bool = ..., remapped_rows_failed: bool = ..., pcie_gen: _Optional[int] = ..., pcie_width: _Optional[int] = ..., pcie_max_gen: _Optional[int] = ..., pcie_max_width: _Optional[int] = ..., nvlink_errors: _Optional[int] = ...) -> None: ...

class GpuEvent(_message.Message):
    __slots__ = ("unix_s", "kind", "code", "text", "fatal")
    UNIX_S_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FATAL_FIELD_NUMBER: _ClassVar[int]
    unix_s: float
    kind: str
    code: int
    text: str
    fatal: bool
    def __init__(self, unix_s: _Optional[float] = ..., kind: _Optional[str] = ..., code: _Optional[int] = ..., text: _Optional[str] = ..., fatal: bool = ...) -> None: ...

class GpuHealth(_message.Message):
    __slots__ = ("identity", "latest", "throttled_since_unix_s", "events", "nvml")
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    THROTTLED_SINCE_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NVML_FIELD_NUMBER: _ClassVar[int]
    identity: GpuIdentity
    latest: GpuSample
    throttled_since_unix_s: float
    events: _containers.RepeatedCompositeFieldContainer[GpuEvent]
    nvml: str
    def __init__(self, identity: _Optional[_Union[GpuIdentity, _Mapping]] = ..., latest: _Optional[_Union[GpuSample, _Mapping]] = ..., throttled_since_unix_s: _Optional[float] = ..., events: _Optional[_Iterable[_Union[GpuEvent, _Mapping]]] = ..., nvml: _Optional[str] = ...) -> None: ...

class PerfOp(_message.Message):
    __slots__ = ("name", "kind", "producer", "comm_id", "comm_size", "count", "timed_count", "timed_ns", "bytes", "timed_bytes", "flops", "timed_flops", "p50_ns", "p99_ns", "max_ns")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    COMM_ID_FIELD_NUMBER: _ClassVar[int]
    COMM_SIZE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TIMED_COUNT_FIELD_NUMBER: _ClassVar[int]
    TIMED_NS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    TIMED_BYTES_FIELD_NUMBER: _ClassVar[int]
    FLOPS_FIELD_NUMBER: _ClassVar[int]
    TIMED_FLOPS_FIELD_NUMBER: _ClassVar[int]
    P50_NS_FIELD_NUMBER: _ClassVar[int]
    P99_NS_FIELD_NUMBER: _ClassVar[int]
    MAX_NS_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: OpKind
    producer: Producer
    comm_id: int
    comm_size: int
    count: int
    timed_count: int
    timed_ns: int
    bytes: int
    timed_bytes: int
    flops: int
    timed_flops: int
    p50_ns: int
    p99_ns: int
    max_ns: int
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[OpKind, str]] = ..., producer: _Optional[_Union[Producer, str]] = ..., comm_id: _Optional[int] = ..., comm_size: _Optional[int] = ..., count: _Optional[int] = ..., timed_count: _Optional[int] = ..., timed_ns: _Optional[int] = ..., bytes: _Optional[int] = ..., timed_bytes: _Optional[int] = ..., flops: _Optional[int] = ..., timed_flops: _Optional[int] = ..., p50_ns: _Optional[int] = ..., p99_ns: _Optional[int] = ..., max_ns: _Optional[int] = ...) -> None: ...

class PerfTotal(_message.Message):
    __slots__ = ("name", "kind", "comm_id", "count", "timed_count", "timed_ns", "bytes", "flops")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    COMM_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TIMED_COUNT_FIELD_NUMBER: _ClassVar[int]
    TIMED_NS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    FLOPS_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: OpKind
    comm_id: int
    count: int
    timed_count: int
    timed_ns: int
    bytes: int
    flops: int
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[OpKind, str]] = ..., comm_id: _Optional[int] = ..., count: _Optional[int] = ..., timed_count: _Optional[int] = ..., timed_ns: _Optional[int] = ..., bytes: _Optional[int] = ..., flops: _Optional[int] = ...) -> None: ...

class PerfCommBusy(_message.Message):
    __slots__ = ("producer", "comm_id", "all_comms", "busy_ns", "open_ns")
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    COMM_ID_FIELD_NUMBER: _ClassVar[int]
    ALL_COMMS_FIELD_NUMBER: _ClassVar[int]
    BUSY_NS_FIELD_NUMBER: _ClassVar[int]
    OPEN_NS_FIELD_NUMBER: _ClassVar[int]
    producer: Producer
    comm_id: int
    all_comms: bool
    busy_ns: int
    open_ns: int
    def __init__(self, producer: _Optional[_Union[Producer, str]] = ..., comm_id: _Optional[int] = ..., all_comms: bool = ..., busy_ns: _Optional[int] = ..., open_ns: _Optional[int] = ...) -> None: ...

class PerfRank(_message.Message):
    __slots__ = ("window_s", "ops", "launches", "steps", "step_ns", "last_step_ns", "step_name", "totals", "launches_total", "steps_total", "comm_busy")
    WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    LAUNCHES_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    STEP_NS_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_NS_FIELD_NUMBER: _ClassVar[int]
    STEP_NAME_FIELD_NUMBER: _ClassVar[int]
    TOTALS_FIELD_NUMBER: _ClassVar[int]
    LAUNCHES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    STEPS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    COMM_BUSY_FIELD_NUMBER: _ClassVar[int]
    window_s: float
    ops: _containers.RepeatedCompositeFieldContainer[PerfOp]
    launches: int
    steps: int
    step_ns: int
    last_step_ns: int
    step_name: str
    totals: _containers.RepeatedCompositeFieldContainer[PerfTotal]
    launches_total: int
    steps_total: int
    comm_busy: _containers.RepeatedCompositeFieldContainer[PerfCommBusy]
    def __init__(self, window_s: _Optional[float] = ..., ops: _Optional[_Iterable[_Union[PerfOp, _Mapping]]] = ..., launches: _Optional[int] = ..., steps: _Optional[int] = ..., step_ns: _Optional[int] = ..., last_step_ns: _Optional[int] = ..., step_name: _Optional[str] = ..., totals: _Optional[_Iterable[_Union[PerfTotal, _Mapping]]] = ..., launches_total: _Optional[int] = ..., steps_total: _Optional[int] = ..., comm_busy: _Optional[_Iterable[_Union[PerfCommBusy, _Mapping]]] = ...) -> None: ...

class PerfViewRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PerfRankView(_message.Message):
    __slots__ = ("rank", "local_rank", "node_rank", "hostname", "age_s", "perf", "gpu", "in_flight", "in_flight_group", "verdict")
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    AGE_S_FIELD_NUMBER: _ClassVar[int]
    PERF_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_GROUP_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    rank: int
    local_rank: int
    node_rank: int
    hostname: str
    age_s: float
    perf: PerfRank
    gpu: GpuIdentity
    in_flight: InFlightOp
    in_flight_group: str
    verdict: str
    def __init__(self, rank: _Optional[int] = ..., local_rank: _Optional[int] = ..., node_rank: _Optional[int] = ..., hostname: _Optional[str] = ..., age_s: _Optional[float] = ..., perf: _Optional[_Union[PerfRank, _Mapping]] = ..., gpu: _Optional[_Union[GpuIdentity, _Mapping]] = ..., in_flight: _Optional[_Union[InFlightOp, _Mapping]] = ..., in_flight_group: _Optional[str] = ..., verdict: _Optional[str] = ...) -> None: ...

class PerfView(_message.Message):
    __slots__ = ("job_id", "ranks")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    ranks: _containers.RepeatedCompositeFieldContainer[PerfRankView]
    def __init__(self, job_id: _Optional[str] = ..., ranks: _Optional[_Iterable[_Union[PerfRankView, _Mapping]]] = ...) -> None: ...

class NodeReport(_message.Message):
    __slots__ = ("job_id", "node_rank", "hostname", "agent_pid", "report_seq", "ranks", "local_world_size", "sent_mono_ns")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_PID_FIELD_NUMBER: _ClassVar[int]
    REPORT_SEQ_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    LOCAL_WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    SENT_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    node_rank: int
    hostname: str
    agent_pid: int
    report_seq: int
    ranks: _containers.RepeatedCompositeFieldContainer[RankProgress]
    local_world_size: int
    sent_mono_ns: int
    def __init__(self, job_id: _Optional[str] = ..., node_rank: _Optional[int] = ..., hostname: _Optional[str] = ..., agent_pid: _Optional[int] = ..., report_seq: _Optional[int] = ..., ranks: _Optional[_Iterable[_Union[RankProgress, _Mapping]]] = ..., local_world_size: _Optional[int] = ..., sent_mono_ns: _Optional[int] = ...) -> None: ...

class Command(_message.Message):
    __slots__ = ("dump_stacks", "kill_workers", "collect_timeline", "persist_last_words", "report_pace", "serve_relay", "relay_via")
    DUMP_STACKS_FIELD_NUMBER: _ClassVar[int]
    KILL_WORKERS_FIELD_NUMBER: _ClassVar[int]
    COLLECT_TIMELINE_FIELD_NUMBER: _ClassVar[int]
    PERSIST_LAST_WORDS_FIELD_NUMBER: _ClassVar[int]
    REPORT_PACE_FIELD_NUMBER: _ClassVar[int]
    SERVE_RELAY_FIELD_NUMBER: _ClassVar[int]
    RELAY_VIA_FIELD_NUMBER: _ClassVar[int]
    dump_stacks: DumpStacks
    kill_workers: KillWorkers
    collect_timeline: CollectTimeline
    persist_last_words: PersistLastWords
    report_pace: ReportPace
    serve_relay: ServeRelay
    relay_via: RelayVia
    def __init__(self, dump_stacks: _Optional[_Union[DumpStacks, _Mapping]] = ..., kill_workers: _Optional[_Union[KillWorkers, _Mapping]] = ..., collect_timeline: _Optional[_Union[CollectTimeline, _Mapping]] = ..., persist_last_words: _Optional[_Union[PersistLastWords, _Mapping]] = ..., report_pace: _Optional[_Union[ReportPace, _Mapping]] = ..., serve_relay: _Optional[_Union[ServeRelay, _Mapping]] = ..., relay_via: _Optional[_Union[RelayVia, _Mapping]] = ...) -> None: ...

class ServeRelay(_message.Message):
    __slots__ = ("group", "nodes")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    group: int
    nodes: int
    def __init__(self, group: _Optional[int] = ..., nodes: _Optional[int] = ...) -> None: ...

class RelayVia(_message.Message):
    __slots__ = ("address", "perf_every")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PERF_EVERY_FIELD_NUMBER: _ClassVar[int]
    address: str
    perf_every: int
    def __init__(self, address: _Optional[str] = ..., perf_every: _Optional[int] = ...) -> None: ...

class ReportPace(_message.Message):
    __slots__ = ("interval_ms", "perf_every")
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    PERF_EVERY_FIELD_NUMBER: _ClassVar[int]
    interval_ms: int
    perf_every: int
    def __init__(self, interval_ms: _Optional[int] = ..., perf_every: _Optional[int] = ...) -> None: ...

class DumpStacks(_message.Message):
    __slots__ = ("event_id", "ranks")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    ranks: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, event_id: _Optional[str] = ..., ranks: _Optional[_Iterable[int]] = ...) -> None: ...

class KillWorkers(_message.Message):
    __slots__ = ("reason", "recover", "declared_unix", "leave_out_nodes", "nodes")
    REASON_FIELD_NUMBER: _ClassVar[int]
    RECOVER_FIELD_NUMBER: _ClassVar[int]
    DECLARED_UNIX_FIELD_NUMBER: _ClassVar[int]
    LEAVE_OUT_NODES_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    reason: str
    recover: bool
    declared_unix: float
    leave_out_nodes: _containers.RepeatedScalarFieldContainer[int]
    nodes: int
    def __init__(self, reason: _Optional[str] = ..., recover: bool = ..., declared_unix: _Optional[float] = ..., leave_out_nodes: _Optional[_Iterable[int]] = ..., nodes: _Optional[int] = ...) -> None: ...

class PersistLastWords(_message.Message):
    __slots__ = ("event_id",)
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    def __init__(self, event_id: _Optional[str] = ...) -> None: ...

class LastWordsDone(_message.Message):
    __slots__ = ("job_id", "event_id", "node_rank", "hostname", "ok", "step", "message", "seconds")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    event_id: str
    node_rank: int
    hostname: str
    ok: bool
    step: int
    message: str
    seconds: float
    def __init__(self, job_id: _Optional[str] = ..., event_id: _Optional[str] = ..., node_rank: _Optional[int] = ..., hostname: _Optional[str] = ..., ok: bool = ..., step: _Optional[int] = ..., message: _Optional[str] = ..., seconds: _Optional[float] = ...) -> None: ...

class StackDump(_message.Message):
    __slots__ = ("job_id", "event_id", "node_rank", "hostname", "rank", "world_size", "pid", "format", "content", "last")
    class Format(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        FORMAT_UNSPECIFIED: _ClassVar[StackDump.Format]
        FORMAT_PYSPY_JSON: _ClassVar[StackDump.Format]
        FORMAT_GDB_TEXT: _ClassVar[StackDump.Format]
        FORMAT_EU_STACK_TEXT: _ClassVar[StackDump.Format]
        FORMAT_ERROR_TEXT: _ClassVar[StackDump.Format]
    FORMAT_UNSPECIFIED: StackDump.Format
    FORMAT_PYSPY_JSON: StackDump.Format
    FORMAT_GDB_TEXT: StackDump.Format
    FORMAT_EU_STACK_TEXT: StackDump.Format
    FORMAT_ERROR_TEXT: StackDump.Format
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    event_id: str
    node_rank: int
    hostname: str
    rank: int
    world_size: int
    pid: int
    format: StackDump.Format
    content: bytes
    last: bool
    def __init__(self, job_id: _Optional[str] = ..., event_id: _Optional[str] = ..., node_rank: _Optional[int] = ..., hostname: _Optional[str] = ..., rank: _Optional[int] = ..., world_size: _Optional[int] = ..., pid: _Optional[int] = ..., format: _Optional[_Union[StackDump.Format, str]] = ..., content: _Optional[bytes] = ..., last: bool = ...) -> None: ...

class CollectTimeline(_message.Message):
    __slots__ = ("request_id", "last_ns")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_NS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    last_ns: int
    def __init__(self, request_id: _Optional[str] = ..., last_ns: _Optional[int] = ...) -> None: ...

class TimelineSpan(_message.Message):
    __slots__ = ("name", "kind", "producer", "device_timed", "in_flight", "failed", "start_unix_ns", "dur_ns", "comm_id", "seq", "bytes", "flops")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TIMED_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    START_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    DUR_NS_FIELD_NUMBER: _ClassVar[int]
    COMM_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    FLOPS_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: OpKind
    producer: Producer
    device_timed: bool
    in_flight: bool
    failed: bool
    start_unix_ns: int
    dur_ns: int
    comm_id: int
    seq: int
    bytes: int
    flops: int
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[OpKind, str]] = ..., producer: _Optional[_Union[Producer, str]] = ..., device_timed: bool = ..., in_flight: bool = ..., failed: bool = ..., start_unix_ns: _Optional[int] = ..., dur_ns: _Optional[int] = ..., comm_id: _Optional[int] = ..., seq: _Optional[int] = ..., bytes: _Optional[int] = ..., flops: _Optional[int] = ...) -> None: ...

class TimelineRank(_message.Message):
    __slots__ = ("rank", "local_rank", "world_size", "pid", "spans", "dropped_spans", "dropped_records", "gpu")
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    SPANS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_SPANS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_RECORDS_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    rank: int
    local_rank: int
    world_size: int
    pid: int
    spans: _containers.RepeatedCompositeFieldContainer[TimelineSpan]
    dropped_spans: int
    dropped_records: int
    gpu: GpuIdentity
    def __init__(self, rank: _Optional[int] = ..., local_rank: _Optional[int] = ..., world_size: _Optional[int] = ..., pid: _Optional[int] = ..., spans: _Optional[_Iterable[_Union[TimelineSpan, _Mapping]]] = ..., dropped_spans: _Optional[int] = ..., dropped_records: _Optional[int] = ..., gpu: _Optional[_Union[GpuIdentity, _Mapping]] = ...) -> None: ...

class TimelineUpload(_message.Message):
    __slots__ = ("job_id", "request_id", "node_rank", "hostname", "realtime_minus_monotonic_ns", "window_ns", "collected_unix_ns", "ranks")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    REALTIME_MINUS_MONOTONIC_NS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_NS_FIELD_NUMBER: _ClassVar[int]
    COLLECTED_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    request_id: str
    node_rank: int
    hostname: str
    realtime_minus_monotonic_ns: int
    window_ns: int
    collected_unix_ns: int
    ranks: _containers.RepeatedCompositeFieldContainer[TimelineRank]
    def __init__(self, job_id: _Optional[str] = ..., request_id: _Optional[str] = ..., node_rank: _Optional[int] = ..., hostname: _Optional[str] = ..., realtime_minus_monotonic_ns: _Optional[int] = ..., window_ns: _Optional[int] = ..., collected_unix_ns: _Optional[int] = ..., ranks: _Optional[_Iterable[_Union[TimelineRank, _Mapping]]] = ...) -> None: ...

class TimelineRequest(_message.Message):
    __slots__ = ("last_ns", "wait_ms")
    LAST_NS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    last_ns: int
    wait_ms: int
    def __init__(self, last_ns: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class TimelineReply(_message.Message):
    __slots__ = ("trace_json", "ranks", "nodes_missing")
    TRACE_JSON_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    NODES_MISSING_FIELD_NUMBER: _ClassVar[int]
    trace_json: bytes
    ranks: int
    nodes_missing: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, trace_json: _Optional[bytes] = ..., ranks: _Optional[int] = ..., nodes_missing: _Optional[_Iterable[int]] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("ok", "message")
    OK_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    message: str
    def __init__(self, ok: bool = ..., message: _Optional[str] = ...) -> None: ...

class HelloRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HelloReply(_message.Message):
    __slots__ = ("nonce", "proof")
    NONCE_FIELD_NUMBER: _ClassVar[int]
    PROOF_FIELD_NUMBER: _ClassVar[int]
    nonce: bytes
    proof: bytes
    def __init__(self, nonce: _Optional[bytes] = ..., proof: _Optional[bytes] = ...) -> None: ...
