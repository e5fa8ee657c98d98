"""Which link stopped, from every member's NCCL step counters (docs/link.md).

Pure: the collector calls :func:`analyse` on a HANG where every member of the
group waits in the same collective at the same seq, with each hung rank's
LinkEntry list and its node's name.

For each receive that waits (an op started, not all its steps arrived), the
matching send of the peer (same communicator and channel, the receiver as its
peer) in the same op (``ops_done``: the op's number on both ends) tells a
broken link from a starved one:
- broken: the sender moved more steps than the receiver got (or finished that
  op and is on a later one), or it waits on the network or on the peer
  (SendWait, SendPeerWait) with a step posted that the receiver never got;
- starved: the sender itself waits for its GPU (SendGPUWait) and moved what
  the receiver got: it has nothing to send because its own input stopped
  upstream. Not named: the broken link is upstream of it on the ring.
No matching send, or a sender still on an earlier op: no claim.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping

from diag.common.ranks import fold
from diag.link.api import (KIND_KERNEL, KIND_RECV, KIND_SEND, STATE_KERNEL_CH_STOP, STATE_SEND_PEER_WAIT,
                           STATE_SEND_WAIT, KernelStall, LinkEntry, LinkFinding, StuckLink)

MAX_LINKS_IN_LINE = 2


def analyse(per_rank: Mapping[int, Iterable[LinkEntry]], nodes: Mapping[int, str],
            node_ranks: Mapping[int, int] | None = None) -> LinkFinding:
    """``per_rank``: global rank -> its entries; ``nodes``: global rank -> node name."""
    node_ranks = node_ranks or {}
    by_comm: dict[int, dict[int, list[LinkEntry]]] = defaultdict(lambda: defaultdict(list))
    for rank, entries in per_rank.items():
        for e in entries:
            by_comm[e.comm_hash][rank].append(e)
    links: list[StuckLink] = []
    kernels: list[KernelStall] = []
    for comm_hash, members in sorted(by_comm.items()):
        found = _links(comm_hash, members, nodes, node_ranks)
        links.extend(found)
        if not found:
            kernels.extend(_kernels(comm_hash, members))
    return LinkFinding(tuple(links), tuple(kernels))


def worth_sending(entries: Iterable[LinkEntry], cap: int) -> list[LinkEntry]:
    """What a stuck rank reports: the entries in flight (a channel with none in
    flight advanced, which is all the analysis needs to know of it) and, for a
    communicator with a channel kernel in flight, its stopped kernel entries
    too (they tell that channel apart). Keeps a 16k-rank hang's reports small."""
    entries = list(entries)
    kernel_comms = {e.comm_hash for e in entries if e.kind == KIND_KERNEL and e.in_flight}
    out = [e for e in entries if e.in_flight or (e.kind == KIND_KERNEL and e.comm_hash in kernel_comms)]
    return out[:cap]


def _global_ranks(members: Mapping[int, list[LinkEntry]]) -> dict[int, int]:
    """comm rank -> global rank, from each member's own entries."""
    out = {}
    for rank, entries in members.items():
        for e in entries:
            out.setdefault(e.comm_rank, rank)
    return out


def _sender_moved(send: LinkEntry, recv: LinkEntry) -> int | None:
    """Steps of the receiver's op the sender moved when the link is broken, else None."""
    if send.ops_done > recv.ops_done:   # it finished that op: every step left it
        return max(recv.nsteps, 1)
    if send.ops_done < recv.ops_done or not send.in_flight:
        return None
    if send.moved > recv.moved:
        return send.moved
    if send.last_state in (STATE_SEND_WAIT, STATE_SEND_PEER_WAIT) and send.posted > recv.moved:
        return send.moved
    return None


def _links(comm_hash: int, members: Mapping[int, list[LinkEntry]], nodes, node_ranks) -> list[StuckLink]:
    to_global = _global_ranks(members)
    sends = {(rank, e.channel, e.peer): e for rank, entries in members.items() for e in entries if e.kind == KIND_SEND}
    stuck: dict[tuple[int, int], list[tuple[int, LinkEntry, LinkEntry]]] = defaultdict(list)
    for dst, entries in members.items():
        for recv in entries:
            if recv.kind != KIND_RECV or not recv.waiting or recv.peer not in to_global:
                continue
            src = to_global[recv.peer]
            send = sends.get((src, recv.channel, recv.comm_rank))
            moved = None if send is None else _sender_moved(send, recv)
            if moved is not None:
                stuck[(src, dst)].append((recv.channel, send, recv, moved))
    if not stuck:
        return []
    waiting_any = _waiting_channels(members)
    out = []
    for (src, dst), found in sorted(stuck.items()):
        found.sort(key=lambda f: f[0])
        _, send, recv, moved = found[0]
        channels = tuple(f[0] for f in found)
        waiting = tuple(sorted(waiting_any - set(channels)))
        out.append(StuckLink(comm_hash, src, dst, nodes.get(src, "?"), nodes.get(dst, "?"), channels,
                             min(f[2].moved for f in found), send.state_name, recv.state_name, moved,
                             not waiting, waiting, node_ranks.get(src), node_ranks.get(dst)))
    return out


def _waiting_channels(members: Mapping[int, list[LinkEntry]]) -> set[int]:
    """Channels where a transfer waits (a link's own channels starve downstream
    of it). Not a channel whose kernel has stopped on that rank: its proxy ops
    belong to a later collective the GPU has not reached (NCCL starts the
    proxy ops of every queued collective at once)."""
    out = set()
    for entries in members.values():
        idle = {e.channel for e in entries if e.kind == KIND_KERNEL and not e.in_flight}
        out.update(e.channel for e in entries
                   if e.kind in (KIND_SEND, KIND_RECV) and e.waiting and e.channel not in idle)
    return out


def _kernels(comm_hash: int, members: Mapping[int, list[LinkEntry]]) -> list[KernelStall]:
    """Channels whose kernel started and never stopped on some ranks while the
    other channels' kernels of the same op count stopped."""
    open_by_channel: dict[int, list[int]] = defaultdict(list)
    others_stopped = True
    for rank, entries in members.items():
        ks = [e for e in entries if e.kind == KIND_KERNEL]
        running = [e for e in ks if e.in_flight and e.last_state != STATE_KERNEL_CH_STOP]
        if not running or len(running) == len(ks):
            if running:
                others_stopped = False
            continue
        for e in running:
            open_by_channel[e.channel].append(rank)
    return [KernelStall(comm_hash, ch, tuple(sorted(ranks)), others_stopped)
            for ch, ranks in sorted(open_by_channel.items())]


def _ranks(ranks) -> str:
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {fold(ranks)}"


def _channels(channels) -> str:
    return f"channel {channels[0]}" if len(channels) == 1 else f"channels {fold(channels)}"


def link_phrase(link: StuckLink) -> str:
    """``link rank 3 -> rank 4 (node a -> node b), channel 5, stuck at step 12; every other channel advanced``"""
    text = (f"link rank {link.src_rank} -> rank {link.dst_rank} (node {link.src_node} -> node {link.dst_node}), "
            f"{_channels(link.channels)}, stuck at step {link.step}")
    if link.others_advanced:
        return text + "; every other channel advanced"
    return text + f"; {_channels(link.waiting_channels)} wait too"


def clause(finding: LinkFinding) -> str:
    """The HANG line's clause ("" when nothing is claimed)."""
    if finding.links:
        parts = [link_phrase(link) for link in finding.links[:MAX_LINKS_IN_LINE]]
        if len(finding.links) > MAX_LINKS_IN_LINE:
            parts.append(f"{len(finding.links) - MAX_LINKS_IN_LINE} more stuck links in hang.json")
        return "; ".join(parts)
    parts = []
    for k in finding.kernels[:MAX_LINKS_IN_LINE]:
        tail = "; every other channel's kernel stopped" if k.others_stopped else ""
        parts.append(f"channel {k.channel}'s kernel never stopped on {_ranks(k.ranks)}{tail}")
    return "; ".join(parts)


def document(finding: LinkFinding) -> dict:
    """hang.json's ``link`` section (docs/link.md)."""
    return {
        "summary": clause(finding),
        "links": [{"comm_hash": f"{link.comm_hash:016x}", "src_rank": link.src_rank, "dst_rank": link.dst_rank,
                   "src_node": link.src_node, "dst_node": link.dst_node, "channels": list(link.channels),
                   "stuck_step": link.step, "sender_moved": link.sender_moved,
                   "sender_state": link.sender_state, "receiver_state": link.receiver_state,
                   "others_advanced": link.others_advanced, "waiting_channels": list(link.waiting_channels)}
                  for link in finding.links],
        "kernels": [{"comm_hash": f"{k.comm_hash:016x}", "channel": k.channel, "ranks": list(k.ranks),
                     "others_stopped": k.others_stopped} for k in finding.kernels],
        "fault_nodes": list(finding.nodes),
    }
