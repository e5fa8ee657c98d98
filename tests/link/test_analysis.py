"""diag/link's analysis: which side of a stuck NCCL link is to blame, from the
step counters every member reports (docs/link.md). Pure: entries built as the
plugin fills them for a ring (tests/kernel_hook/fake/fake_nccl_profiler.cc
plays the same shapes through the real plugin)."""

import dataclasses

from diag.link import analysis
from diag.link.api import (KIND_KERNEL, KIND_RECV, KIND_SEND, STATE_KERNEL_CH_STOP, STATE_RECV_GPU_WAIT,
                           STATE_RECV_WAIT, STATE_SEND_GPU_WAIT, STATE_SEND_PEER_WAIT, STATE_SEND_WAIT, LinkEntry)

COMM = 0xC0FFEE
NODES = {0: "a", 1: "a", 2: "b", 3: "b"}


def entry(rank, world, channel, kind, peer, *, ops=4, done_ops=None, nsteps=8, posted=8, moved=8, done=8,
          state=STATE_RECV_GPU_WAIT, comm=COMM):
    return LinkEntry(comm, rank, world, channel, kind, peer, ops, ops if done_ops is None else done_ops, nsteps,
                     posted, moved, done, 100, state, 0)


def healthy(rank, world, channel):
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    return [entry(rank, world, channel, KIND_SEND, nxt, state=STATE_SEND_WAIT),
            entry(rank, world, channel, KIND_RECV, prv),
            entry(rank, world, channel, KIND_KERNEL, -1, nsteps=0, posted=0, moved=0, done=0,
                  state=STATE_KERNEL_CH_STOP)]


def stuck_ring(world, channel, src, step, *, sender_ahead=2, sender_state=STATE_SEND_WAIT):
    """Every rank's entries of ``channel`` when the link src -> src+1 stops at
    ``step``: the receiver never gets it, the ring downstream starves."""
    out = {}
    for r in range(world):
        nxt, prv = (r + 1) % world, (r - 1) % world
        recv = entry(r, world, channel, KIND_RECV, prv, done_ops=3, posted=step + 1, moved=step, done=step,
                     state=STATE_RECV_WAIT)
        if r == src:
            send = entry(r, world, channel, KIND_SEND, nxt, done_ops=3, posted=step + sender_ahead + 1,
                         moved=step + sender_ahead, done=step + sender_ahead, state=sender_state)
        else:
            send = entry(r, world, channel, KIND_SEND, nxt, done_ops=3, posted=step + 1, moved=step, done=step,
                         state=STATE_SEND_GPU_WAIT)
        kernel = entry(r, world, channel, KIND_KERNEL, -1, done_ops=3, nsteps=0, posted=0, moved=0, done=0,
                       state=0)
        out[r] = [send, recv, kernel]
    return out


def merge(*parts):
    out = {}
    for part in parts:
        for r, entries in part.items():
            out.setdefault(r, []).extend(entries)
    return out


def test_the_link_whose_sender_ran_ahead_is_named_and_the_starved_ring_is_not():
    per_rank = merge({r: healthy(r, 4, 0) for r in range(4)}, stuck_ring(4, 1, src=1, step=3))
    found = analysis.analyse(per_rank, NODES)
    [link] = found.links
    assert (link.src_rank, link.dst_rank, link.channels, link.step) == (1, 2, (1,), 3)
    assert (link.sender_state, link.receiver_state, link.sender_moved) == ("SendWait", "RecvWait", 5)
    assert link.others_advanced and found.nodes == ("a", "b")
    assert analysis.clause(found) == ("link rank 1 -> rank 2 (node a -> node b), channel 1, stuck at step 3; "
                                      "every other channel advanced")


def test_a_sender_waiting_on_the_network_with_nothing_more_moved_is_named():
    # The socket buffered nothing: the sender moved what the receiver got, but waits in SendWait.
    per_rank = merge({r: healthy(r, 4, 0) for r in range(4)}, stuck_ring(4, 1, src=3, step=5, sender_ahead=0))
    [link] = analysis.analyse(per_rank, NODES).links
    assert (link.src_rank, link.dst_rank, link.step, link.sender_moved) == (3, 0, 5, 5)


def test_a_sender_waiting_for_credit_is_named():
    per_rank = stuck_ring(4, 0, src=0, step=2, sender_ahead=0, sender_state=STATE_SEND_PEER_WAIT)
    [link] = analysis.analyse(per_rank, NODES).links
    assert (link.src_rank, link.dst_rank, link.sender_state) == (0, 1, "SendPeerWait")


def test_starvation_alone_names_nothing():
    # Every sender waits for its GPU and moved what its receiver got: no link is to blame from the counters.
    per_rank = stuck_ring(4, 1, src=1, step=3, sender_ahead=0, sender_state=STATE_SEND_GPU_WAIT)
    found = analysis.analyse(per_rank, NODES)
    assert not found and analysis.clause(found) == ""


def test_several_channels_of_one_link_are_one_clause():
    per_rank = merge({r: healthy(r, 4, 0) for r in range(4)}, stuck_ring(4, 1, src=2, step=4),
                     stuck_ring(4, 3, src=2, step=6), {r: healthy(r, 4, 2) for r in range(4)})
    found = analysis.analyse(per_rank, NODES)
    [link] = found.links
    assert (link.src_rank, link.dst_rank, link.channels, link.step) == (2, 3, (1, 3), 4)
    assert "channels 1,3, stuck at step 4; every other channel advanced" in analysis.clause(found)
    assert found.nodes == ("b",)


def test_two_links_are_both_named():
    per_rank = merge(stuck_ring(4, 0, src=0, step=1), stuck_ring(4, 1, src=2, step=7))
    found = analysis.analyse(per_rank, NODES)
    assert [(l.src_rank, l.dst_rank) for l in found.links] == [(0, 1), (2, 3)]
    # Each link's clause says the other one's channel did not advance either.
    assert found.links[0].waiting_channels == (1,) and found.links[1].waiting_channels == (0,)
    assert found.nodes == ("a", "b")


def test_another_channel_still_waiting_is_said():
    # Channel 2 waits too, but its senders starve: named as waiting, not as the link.
    per_rank = merge(stuck_ring(4, 1, src=1, step=3),
                     stuck_ring(4, 2, src=1, step=3, sender_ahead=0, sender_state=STATE_SEND_GPU_WAIT))
    [link] = analysis.analyse(per_rank, NODES).links
    assert not link.others_advanced and link.waiting_channels == (2,)
    assert analysis.link_phrase(link).endswith("channel 1, stuck at step 3; channel 2 wait too")


def test_a_sender_that_finished_the_receivers_op_is_named():
    per_rank = stuck_ring(4, 1, src=1, step=3)
    # Rank 1 finished op 4 on channel 1 (every step left it) and is on op 5; rank 2 still waits in op 4.
    per_rank[1][0] = entry(1, 4, 1, KIND_SEND, 2, ops=5, done_ops=4, posted=1, moved=0, done=0,
                           state=STATE_SEND_GPU_WAIT)
    [link] = analysis.analyse(per_rank, NODES).links
    assert (link.src_rank, link.dst_rank, link.step, link.sender_moved) == (1, 2, 3, 8)


def test_a_sender_still_on_an_earlier_op_makes_no_claim():
    per_rank = stuck_ring(4, 1, src=1, step=3)
    # Rank 1's send on channel 1 has not finished op 3 while rank 2 waits in op 4: not the same op.
    per_rank[1][0] = entry(1, 4, 1, KIND_SEND, 2, ops=4, done_ops=2, posted=6, moved=5, done=5,
                           state=STATE_SEND_WAIT)
    assert not analysis.analyse(per_rank, NODES)


def test_queued_ops_compare_the_oldest_in_flight():
    """As two H100s over NCCL's socket transport showed: NCCL starts the proxy
    ops of every queued collective (12 here), and the table shows each
    entry's oldest op in flight; the link is judged op for op (ops_done)."""
    per_rank = stuck_ring(2, 0, src=1, step=5)
    for r in per_rank:
        per_rank[r] = [dataclasses.replace(e, ops=e.ops_done + 12) for e in per_rank[r]]
    [link] = analysis.analyse(per_rank, {0: "a", 1: "b"}).links
    assert (link.src_rank, link.dst_rank, link.step) == (1, 0, 5)


def test_a_missing_sender_makes_no_claim():
    per_rank = stuck_ring(4, 1, src=1, step=3)
    del per_rank[1]
    assert not analysis.analyse(per_rank, NODES)


def test_healthy_counters_name_nothing():
    found = analysis.analyse({r: healthy(r, 4, 0) + healthy(r, 4, 1) for r in range(4)}, NODES)
    assert not found and analysis.document(found)["links"] == []


def test_comm_ranks_map_to_global_ranks():
    # A sub-communicator of global ranks 4 and 6 (comm ranks 0, 1).
    sub = stuck_ring(2, 0, src=1, step=2)
    per_rank = {4: sub[0], 6: sub[1]}
    [link] = analysis.analyse(per_rank, {4: "c", 6: "d"}).links
    assert (link.src_rank, link.dst_rank, link.src_node, link.dst_node) == (6, 4, "d", "c")


def test_within_a_node_the_channel_whose_kernel_never_stopped_is_named():
    def kernels(rank, open_channel):
        return [entry(rank, 2, ch, KIND_KERNEL, -1, nsteps=0, posted=0, moved=0, done=0,
                      done_ops=3 if ch == open_channel else 4, state=0 if ch == open_channel else STATE_KERNEL_CH_STOP)
                for ch in range(4)]
    found = analysis.analyse({0: kernels(0, 2), 1: kernels(1, 2)}, {0: "a", 1: "a"})
    assert not found.links and found.nodes == ()
    [k] = found.kernels
    assert (k.channel, k.ranks, k.others_stopped) == (2, (0, 1), True)
    assert analysis.clause(found) == "channel 2's kernel never stopped on ranks 0-1; every other channel's kernel stopped"


def test_every_kernel_running_singles_out_none():
    running = {r: [entry(r, 2, ch, KIND_KERNEL, -1, nsteps=0, posted=0, moved=0, done=0, done_ops=3, state=0)
                   for ch in range(2)] for r in range(2)}
    assert not analysis.analyse(running, {0: "a", 1: "a"})


def test_a_stuck_rank_sends_only_what_the_analysis_needs_and_it_still_names_the_link():
    per_rank = merge({r: healthy(r, 4, 0) for r in range(4)}, stuck_ring(4, 1, src=1, step=3))
    sent = {r: analysis.worth_sending(entries, 512) for r, entries in per_rank.items()}
    # Channel 0 completed: none of its proxy entries; its stopped kernel rides along with channel 1's running one.
    assert all({(e.channel, e.kind) for e in entries} == {(1, KIND_SEND), (1, KIND_RECV), (1, KIND_KERNEL),
                                                           (0, KIND_KERNEL)} for entries in sent.values())
    assert analysis.analyse(sent, NODES) == analysis.analyse(per_rank, NODES)
    assert analysis.worth_sending([e for r in per_rank.values() for e in r], 5) == \
        analysis.worth_sending([e for r in per_rank.values() for e in r], 512)[:5]


def test_a_channel_whose_kernel_stopped_is_not_said_to_wait():
    """Two H100s, socket transport: channel 1's proxy ops wait for the next
    collective's data, but its kernel of the stuck one stopped: only the
    broken channel 0 is stuck, every other channel advanced."""
    per_rank = stuck_ring(2, 0, src=1, step=1)
    for r in per_rank:
        nxt = (r + 1) % 2
        per_rank[r] += [entry(r, 2, 1, KIND_SEND, nxt, ops=10, done_ops=5, posted=4, moved=0, done=0,
                              state=STATE_SEND_GPU_WAIT),
                        entry(r, 2, 1, KIND_RECV, nxt, ops=10, done_ops=5, posted=4, moved=0, done=0,
                              state=STATE_RECV_WAIT),
                        entry(r, 2, 1, KIND_KERNEL, -1, ops=5, nsteps=0, posted=0, moved=0, done=0,
                              state=STATE_KERNEL_CH_STOP)]
    [link] = analysis.analyse(per_rank, {0: "a", 1: "b"}).links
    assert link.others_advanced and link.channels == (0,)
    assert analysis.link_phrase(link).endswith("channel 0, stuck at step 1; every other channel advanced")
