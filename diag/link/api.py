"""Contracts of the link view (docs/link.md): what the NCCL profiler plugin
counts per (communicator, channel, peer, direction) and what the analysis
concludes from every member's counters.

Pure data. The plugin writes the counters (kernel_hook/nccl_profiler), the
agent reads them (``diag.link.table``) and sends them in RankProgress
(``diag.link.wire``), the collector's HANG verdict calls
``diag.link.analysis.analyse``.
"""

from __future__ import annotations

import dataclasses

from diag.pb.collector_pb2 import LinkChannel

KIND_SEND, KIND_RECV, KIND_KERNEL = 0, 1, 2
KIND_WORDS = {KIND_SEND: "send", KIND_RECV: "recv", KIND_KERNEL: "kernel"}

# NCCL's ncclProfilerEventState_t values (profiler.h, NCCL 2.28) the analysis reads.
STATE_SEND_GPU_WAIT = 8
STATE_SEND_WAIT = 9
STATE_RECV_WAIT = 10
STATE_RECV_FLUSH_WAIT = 11
STATE_RECV_GPU_WAIT = 12
STATE_SEND_PEER_WAIT = 20
STATE_KERNEL_CH_STOP = 22
STATE_NAMES = {STATE_SEND_GPU_WAIT: "SendGPUWait", STATE_SEND_WAIT: "SendWait", STATE_RECV_WAIT: "RecvWait",
               STATE_RECV_FLUSH_WAIT: "RecvFlushWait", STATE_RECV_GPU_WAIT: "RecvGPUWait",
               STATE_SEND_PEER_WAIT: "SendPeerWait", STATE_KERNEL_CH_STOP: "KernelChStop"}


class LinkTableError(ValueError):
    """A link table that cannot be read; the message is one line naming the file."""


class _LinkEntryReads:
    """One (communicator, channel, peer, direction), or one channel's kernel.

    Steps count within the entry's oldest proxy op in flight (NCCL starts
    the ops of every queued collective at once; the last op's when none is in
    flight): ``posted`` started, ``moved`` whose data arrived (recv) or
    completed (send), ``done`` finished; ``ops``/``ops_done`` count the ops
    (kernel entries: the channel's kernels) started and stopped, so
    ``ops_done`` is the shown op's number on both ends of a connection.
    """

    @property
    def in_flight(self) -> bool:
        return self.ops > self.ops_done

    @property
    def waiting(self) -> bool:
        """An op started and not all of its steps arrived (recv) / completed (send)."""
        return self.in_flight and self.moved < max(self.nsteps, 1)

    @property
    def state_name(self) -> str:
        return STATE_NAMES.get(self.last_state, str(self.last_state) if self.last_state else "none")


# The fields are the proto's LinkChannel's, in its order (every one an int),
# named there once: the plugin's table (diag.link.table) fills them
# positionally and diag.link.wire copies them to and from the message by name.
LinkEntry = dataclasses.make_dataclass(
    "LinkEntry", [(f.name, int) for f in LinkChannel.DESCRIPTOR.fields], bases=(_LinkEntryReads,),
    frozen=True, namespace={"__module__": __name__, "__doc__": _LinkEntryReads.__doc__})


@dataclasses.dataclass(frozen=True)
class StuckLink:
    """Data from ``src`` to ``dst`` stopped on ``channels``: the receiver
    waits for step ``step`` that its sender sent or holds ready."""

    comm_hash: int
    src_rank: int
    dst_rank: int
    src_node: str
    dst_node: str
    channels: tuple[int, ...]
    step: int
    sender_state: str
    receiver_state: str
    sender_moved: int
    others_advanced: bool
    waiting_channels: tuple[int, ...] = ()   # other channels of the comm still waiting (starved)
    src_node_rank: int | None = None
    dst_node_rank: int | None = None


@dataclasses.dataclass(frozen=True)
class KernelStall:
    """A channel whose kernel started and never stopped while the comm's other
    channels' kernels did (within a node, where no proxy peer exists)."""

    comm_hash: int
    channel: int
    ranks: tuple[int, ...]
    others_stopped: bool


@dataclasses.dataclass(frozen=True)
class LinkFinding:
    """What the analysis found; empty: no claim (no data, or nothing singled out)."""

    links: tuple[StuckLink, ...] = ()
    kernels: tuple[KernelStall, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.links or self.kernels)

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes at either end of a stuck link, for the fault list."""
        out: list[str] = []
        for link in self.links:
            for node in (link.src_node, link.dst_node):
                if node and node not in out:
                    out.append(node)
        return tuple(out)
