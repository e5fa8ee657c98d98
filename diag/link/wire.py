"""diag.link.api.LinkEntry <-> the proto's LinkChannel (one place)."""

from __future__ import annotations

import dataclasses

from diag.link.api import LinkEntry
from diag.pb import collector_pb2 as pb

_FIELDS = [f.name for f in dataclasses.fields(LinkEntry)]


def entry_msg(e: LinkEntry) -> pb.LinkChannel:
    return pb.LinkChannel(**{name: getattr(e, name) for name in _FIELDS})


def entry_of(msg: pb.LinkChannel) -> LinkEntry:
    return LinkEntry(**{name: getattr(msg, name) for name in _FIELDS})
