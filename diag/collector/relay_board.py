"""Report relays (--nodes-per-relay N, docs/collector.md "Report relays").

Nodes are grouped by ``node_rank // N``. The collector asks one agent of a
group that reports directly to serve the group's relay (ServeRelay); the
relay links back with its address; from then on every agent of the group
that reports directly is told to report through it (RelayVia). A relay whose
link ends is forgotten: its agents fall back to reporting directly, and one
of them is asked to serve a new one. The collector then takes one message per
relay per batch instead of one per node per second, which is what one Python
gRPC process cannot do for 12,500 nodes (docs/collector.md, "The floor").

Pure logic over a clock; the servicer and the link call it on the loop.
"""

from __future__ import annotations

import logging

from diag.pb import collector_pb2 as pb

log = logging.getLogger("diag.collector")
# A directly reporting agent is looked at this often: soon after its group's
# relay links, it is told to use it.
ADVISE_EVERY_S = 2.0
# An agent asked to serve that has not linked a relay by then is asked again
# while it still reports directly: its agent starts a relay only if none runs
# (report_relay.py), so a relay slow to start (12,500 nodes starting theirs at
# once take 40 s) is not doubled, and one that exited is started again. An
# asked agent that has not reported directly for this long (it left) is passed
# over: the next direct agent of the group is asked.
ASK_AGAIN_S = 15.0
# ... and so is one asked this long ago that still has no relay linked (an
# agent of an older release, or one whose relay cannot start or link).
PASS_OVER_S = 45.0
# Through a relay, agents send their performance window with one report in
# this many (RelayVia.perf_every): measured at 12,500 agents, the window is
# about half of a report's collector CPU (docs/collector.md, Report relays).
PERF_EVERY = 5
RELAY_METADATA = "x-xpu-diag-relay"   # GROUP@HOST:PORT, on a relay's link call (ingest.py)


class RelayBoard:
    def __init__(self, nodes_per_relay: int) -> None:
        self.nodes = nodes_per_relay
        self._relays: dict[int, str] = {}      # group -> HOST:PORT of its linked relay
        self._asked: dict[int, _Asked] = {}    # group -> the agent asked to serve its relay
        self.linked = 0                        # relays linked now (logs, tests, bench)

    def group(self, node_rank: int) -> int:
        return node_rank // self.nodes

    def advice(self, node_rank: int, now: float) -> pb.Command | None:
        """What a directly reporting agent should be told now, if anything."""
        group = node_rank // self.nodes
        address = self._relays.get(group)
        if address is not None:
            return pb.Command(relay_via=pb.RelayVia(address=address, perf_every=PERF_EVERY))
        asked = self._asked.get(group)
        if asked is not None and asked.node == node_rank:
            asked.seen = now
            if now - asked.last < ASK_AGAIN_S:
                return None
            asked.last = now
        elif asked is not None and now - asked.seen < ASK_AGAIN_S and now - asked.first < PASS_OVER_S:
            return None
        else:
            self._asked[group] = _Asked(node_rank, now)
        return pb.Command(serve_relay=pb.ServeRelay(group=group, nodes=self.nodes))

    def serving(self, relay_of: str) -> str | None:
        """The address of the relay linked for ``GROUP@HOST:PORT``'s group
        already, if another. A group whose asked agent was passed over (its
        relay linked later than PASS_OVER_S, or its reports stopped coming
        directly a while, as in a 12,500-agent connection storm) would
        otherwise keep two relays, each sending its batches: 563 links for
        391 groups on the device host. The second is refused and exits."""
        parsed = _parse(relay_of)
        serving = self._relays.get(parsed[0]) if parsed is not None else None
        return serving if serving is not None and serving != parsed[1] else None

    def link(self, relay_of: str) -> tuple[int, str] | None:
        """A relay linked with ``GROUP@HOST:PORT``; (group, address), or None
        when that is malformed (the link is refused)."""
        parsed = _parse(relay_of)
        if parsed is None:
            return None
        group, address = parsed
        if group not in self._relays:
            self.linked += 1
            log.info("relay of nodes %d-%d linked: %s", *self._span(group), address)
        self._relays[group] = address
        self._asked.pop(group, None)
        return group, address

    def lost(self, group: int, address: str) -> None:
        """The relay's link ended: its agents report directly until a new one links."""
        if self._relays.get(group) != address:
            return
        del self._relays[group]
        self.linked -= 1
        log.warning("relay of nodes %d-%d at %s lost; they report to the collector directly until "
                    "one of them serves a new one", *self._span(group), address)

    def _span(self, group: int) -> tuple[int, int]:
        return group * self.nodes, (group + 1) * self.nodes - 1


class _Asked:
    """The agent asked to serve a group's relay: when first and last asked,
    when last seen reporting directly."""

    __slots__ = ("node", "first", "last", "seen")

    def __init__(self, node: int, now: float) -> None:
        self.node, self.first, self.last, self.seen = node, now, now, now


def _parse(relay_of: str) -> tuple[int, str] | None:
    """``GROUP@HOST:PORT`` -> (group, HOST:PORT), or None when malformed."""
    group_text, sep, address = relay_of.partition("@")
    if not sep or not group_text.isdigit() or ":" not in address:
        return None
    return int(group_text), address
