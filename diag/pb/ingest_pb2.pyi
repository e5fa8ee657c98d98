from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RelayedReport(_message.Message):
    __slots__ = ("stream", "report", "held_us", "digest")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    HELD_US_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    stream: int
    report: bytes
    held_us: int
    digest: ReportDigest
    def __init__(self, stream: _Optional[int] = ..., report: _Optional[bytes] = ..., held_us: _Optional[int] = ..., digest: _Optional[_Union[ReportDigest, _Mapping]] = ...) -> None: ...

class ReportDigest(_message.Message):
    __slots__ = ("node_rank", "hostname", "agent_pid", "sent_mono_ns", "world_size", "ranks", "perf", "in_flight", "min_idle_ns", "superseded")
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_PID_FIELD_NUMBER: _ClassVar[int]
    SENT_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    PERF_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    MIN_IDLE_NS_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_FIELD_NUMBER: _ClassVar[int]
    node_rank: int
    hostname: str
    agent_pid: int
    sent_mono_ns: int
    world_size: int
    ranks: _containers.RepeatedScalarFieldContainer[int]
    perf: bool
    in_flight: bool
    min_idle_ns: int
    superseded: int
    def __init__(self, node_rank: _Optional[int] = ..., hostname: _Optional[str] = ..., agent_pid: _Optional[int] = ..., sent_mono_ns: _Optional[int] = ..., world_size: _Optional[int] = ..., ranks: _Optional[_Iterable[int]] = ..., perf: bool = ..., in_flight: bool = ..., min_idle_ns: _Optional[int] = ..., superseded: _Optional[int] = ...) -> None: ...

class RelayUp(_message.Message):
    __slots__ = ("reports", "closed")
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    reports: _containers.RepeatedCompositeFieldContainer[RelayedReport]
    closed: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, reports: _Optional[_Iterable[_Union[RelayedReport, _Mapping]]] = ..., closed: _Optional[_Iterable[int]] = ...) -> None: ...

class RelayedCommand(_message.Message):
    __slots__ = ("stream", "command", "abort_code", "abort_message")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ABORT_CODE_FIELD_NUMBER: _ClassVar[int]
    ABORT_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    stream: int
    command: bytes
    abort_code: int
    abort_message: str
    def __init__(self, stream: _Optional[int] = ..., command: _Optional[bytes] = ..., abort_code: _Optional[int] = ..., abort_message: _Optional[str] = ...) -> None: ...

class RelayDown(_message.Message):
    __slots__ = ("commands",)
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    commands: _containers.RepeatedCompositeFieldContainer[RelayedCommand]
    def __init__(self, commands: _Optional[_Iterable[_Union[RelayedCommand, _Mapping]]] = ...) -> None: ...
