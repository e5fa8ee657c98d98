from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RelayedReport(_message.Message):
    __slots__ = ("stream", "report", "held_us")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    HELD_US_FIELD_NUMBER: _ClassVar[int]
    stream: int
    report: bytes
    held_us: int
    def __init__(self, stream: _Optional[int] = ..., report: _Optional[bytes] = ..., held_us: _Optional[int] = ...) -> None: ...

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
