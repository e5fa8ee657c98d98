"""diag.gpu.api <-> the proto's GpuIdentity / GpuSample / GpuHealth (one place)."""

from __future__ import annotations

import dataclasses

from diag.gpu.api import GpuEvent, GpuHealth, GpuIdentity, GpuSample
from diag.pb import collector_pb2 as pb

_SAMPLE_FIELDS = [f.name for f in dataclasses.fields(GpuSample) if f.name != "unix_s"]


def identity_msg(gpu: GpuIdentity) -> pb.GpuIdentity:
    return pb.GpuIdentity(pci_bus_id=gpu.pci_bus_id, uuid=gpu.uuid, index=gpu.index,
                          cuda_device=gpu.cuda_device, name=gpu.name)


def identity_of(msg: pb.GpuIdentity) -> GpuIdentity:
    return GpuIdentity(msg.pci_bus_id, msg.uuid, msg.index, msg.cuda_device, msg.name)


def health_msg(health: GpuHealth) -> pb.GpuHealth:
    msg = pb.GpuHealth(identity=identity_msg(health.identity),
                       throttled_since_unix_s=health.throttled_since_unix_s, nvml=health.nvml)
    if health.latest is not None:
        s = health.latest
        msg.latest.unix_s = s.unix_s
        for name in _SAMPLE_FIELDS:
            value = getattr(s, name)
            if value is not None:
                setattr(msg.latest, name, value)
    msg.events.extend(pb.GpuEvent(unix_s=e.unix_s, kind=e.kind, code=e.code, text=e.text, fatal=e.fatal)
                      for e in health.events)
    return msg


def health_of(msg: pb.GpuHealth) -> GpuHealth:
    latest = None
    if msg.HasField("latest"):
        s = msg.latest
        latest = GpuSample(s.unix_s, **{n: getattr(s, n) if s.HasField(n) else None for n in _SAMPLE_FIELDS})
    return GpuHealth(identity_of(msg.identity), latest, msg.throttled_since_unix_s,
                     tuple(GpuEvent(e.unix_s, e.kind, e.code, e.text, e.fatal) for e in msg.events), msg.nvml)


def rank_health(progress: pb.RankProgress) -> GpuHealth | None:
    """The rank's GpuHealth, or None when its agent named no GPU."""
    if not progress.HasField("gpu"):
        return None
    return health_of(progress.gpu)
