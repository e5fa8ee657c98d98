"""The NCCL profiler plugin (kernel_hook/nccl_profiler, docs/link.md) loaded by
the fake NCCL from NCCL_PROFILER_PLUGIN exactly as NCCL does (dlopen, dlsym
ncclProfiler_v5 or v4, init per communicator, proxy and kernel-channel events
on a proxy thread), read back through diag/link/table.py; the agent's side;
the RAS client against the fake NCCL's RAS listener."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from diag.common.net import free_port
from diag.agent import state as agent_state
from diag.agent.links import LinkTables
from diag.link import analysis, ras, table
from diag.link.api import KIND_KERNEL, KIND_RECV, KIND_SEND
from tests.kernel_hook.conftest import BUILD, ROOT

LINKPROG = os.path.join(BUILD, "progs", "linkprog")
PLUGIN = os.path.join(ROOT, "diag", "lib", "libxpu_nccl_profiler.so")


def _env(shm_dir, rank=0, world=1, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XPU_TIMER_", "FAKE_", "NCCL_", "LD_PRELOAD"))}
    env.update(RANK=str(rank), WORLD_SIZE=str(world), NCCL_PROFILER_PLUGIN=PLUGIN)
    if shm_dir:
        env["XPU_TIMER_SHM_DIR"] = str(shm_dir)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _ring(shm_dir, world, steps=5, **extra):
    procs = [subprocess.Popen([LINKPROG, "ring", str(steps), "0"], env=_env(shm_dir, r, world, **extra),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(world)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    return outs


def _tables(shm_dir):
    out = {}
    for path, (rank, _pid) in table.find(str(shm_dir)).items():
        tab = table.LinkTable(path)
        out[rank] = tab.read(destroyed=True)   # linkprog destroys its communicator before it exits
        tab.close()
    return out


def test_a_healthy_ring_advances_every_counter_and_names_no_link(built, tmp_path):
    outs = _ring(tmp_path, 2, steps=5)
    assert all("Loaded xpu_timer_link (v5)" in err for _, err in outs)
    per_rank = _tables(tmp_path)
    assert sorted(per_rank) == [0, 1]
    for rank, entries in per_rank.items():
        proxy = [e for e in entries if e.kind in (KIND_SEND, KIND_RECV)]
        kernels = [e for e in entries if e.kind == KIND_KERNEL]
        # 2 channels (FAKE_NCCL_CHANNELS default): a send to the next rank and a receive from the previous.
        assert sorted((e.channel, e.kind, e.peer) for e in proxy) == [(0, 0, 1 - rank), (0, 1, 1 - rank),
                                                                       (1, 0, 1 - rank), (1, 1, 1 - rank)]
        for e in proxy:
            assert (e.ops, e.ops_done, e.nsteps, e.posted, e.moved, e.done, e.steps_total) == (5, 5, 8, 8, 8, 8, 40)
            assert (e.comm_rank, e.comm_size) == (rank, 2)
        assert sorted(k.channel for k in kernels) == [0, 1]
        assert all((k.ops, k.ops_done, k.state_name) == (5, 5, "KernelChStop") for k in kernels)
    assert len({e.comm_hash for entries in per_rank.values() for e in entries}) == 1   # NCCL's commHash: shared
    assert not analysis.analyse(per_rank, {0: "a", 1: "a"})
    # The agent leaves a destroyed communicator out.
    path = next(iter(table.find(str(tmp_path))))
    assert table.LinkTable(path).read() == []


def test_ncclprofiler_v4_is_used_when_asked_and_counts_alike(built, tmp_path):
    outs = _ring(tmp_path, 1, steps=3, FAKE_NCCL_PROFILER_V4=1, FAKE_NCCL_CHANNELS=1)
    assert "Loaded xpu_timer_link (v4)" in outs[0][1]
    [send] = [e for e in _tables(tmp_path)[0] if e.kind == KIND_SEND]
    assert (send.ops, send.ops_done, send.steps_total) == (3, 3, 24)


def test_kernel_channel_events_can_be_left_out(built, tmp_path):
    _ring(tmp_path, 1, steps=2, XPU_TIMER_LINK_KERNEL=0)
    kinds = {e.kind for e in _tables(tmp_path)[0]}
    assert kinds == {KIND_SEND, KIND_RECV}


@pytest.mark.parametrize("extra,why", [({}, "XPU_TIMER_SHM_DIR is not set"),
                                       ({"XPU_TIMER_LINK_DISABLE": 1}, "switched off")])
def test_without_a_table_the_plugin_switches_off_says_so_once_and_the_job_runs(built, tmp_path, extra, why):
    env_dir = None if not extra else tmp_path
    procs = subprocess.run([LINKPROG, "ring", "4", "0"], env=_env(env_dir, **extra), capture_output=True,
                           text=True, timeout=60)
    assert procs.returncode == 0 and "4 all-reduces done" in procs.stdout
    lines = [l for l in procs.stderr.splitlines() if l.startswith("xpu_timer: NCCL profiler plugin")]
    assert len(lines) == 1 and why in lines[0], procs.stderr
    assert not table.find(str(tmp_path))


def test_the_agent_sends_link_counters_only_while_an_op_is_stuck(built, tmp_path):
    # Rank 0 of 2, hung in its 2nd all-reduce, whose link to rank 1 stopped on channel 1: the
    # agent attaches its table to the rank and sends what is in flight.
    proc = subprocess.Popen([LINKPROG, "ring", "3", "0"],
                            env=_env(tmp_path, 0, 2, FAKE_HANG="ncclAllReduce:2", FAKE_NCCL_BREAK="0>1:1:2@2"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 20
        while time.time() < deadline:   # until the proxy thread played the broken all-reduce
            found = table.find(str(tmp_path))
            if found and any(e.kind == KIND_SEND and e.channel == 1 and e.in_flight and e.moved == 4
                             for e in table.LinkTable(next(iter(found))).read()):
                break
            time.sleep(0.05)
        node = agent_state.NodeState()
        now = time.monotonic_ns()
        node.ranks[0] = agent_state.RankState(0, 0, 1, proc.pid, now, now)
        links = LinkTables(str(tmp_path), node, os.getpid(), print)
        links.sample()
        rank = node.ranks[0]
        assert rank.links is not None
        rank.in_flight[("r", 1)] = agent_state.InFlight("ncclAllReduce", 3, 2, 7, 2, now, 4, 0, 1)
        young = agent_state.NodeState._rank_progress(rank, now + 10_000_000)
        stuck = agent_state.NodeState._rank_progress(rank, now + agent_state.FINGERPRINTS_AFTER_NS)
        assert not young.links
        # Channel 0 advanced: only its stopped kernel rides along (it tells channel 1's apart).
        assert {(m.channel, m.kind) for m in stuck.links} == {(1, KIND_SEND), (1, KIND_RECV), (1, KIND_KERNEL),
                                                               (0, KIND_KERNEL)}
        [send] = [m for m in stuck.links if m.kind == KIND_SEND]
        assert (send.peer, send.moved, send.last_state) == (1, 4, 9)   # 2 steps past the break, in SendWait
        # Ended: the table is closed and removed.
        proc.kill()
        proc.wait(10)
        links.sample()
        assert not table.find(str(tmp_path))
    finally:
        proc.kill()
        proc.wait(10)


def test_ras_is_asked_as_ncclras_does_and_its_answer_kept(built, tmp_path):
    port = free_port()
    proc = subprocess.Popen([LINKPROG, "ring", "2", "0"],
                            env=_env(tmp_path, FAKE_HANG="ncclAllReduce:2", NCCL_RAS_ADDR=f"127.0.0.1:{port}"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        text, deadline = None, time.time() + 20
        while not (text and "2 collectives issued" in text) and time.time() < deadline:   # once the 2nd hangs
            text = ras.ask(("127.0.0.1", port), deadline_s=5)
            time.sleep(0.05)
        assert text and "fake NCCL RAS" in text and "Communicators" in text and "2 collectives issued" in text
        event = tmp_path / "event"
        event.mkdir()
        ras.ask_in_background(str(event), lambda m: None, ("127.0.0.1", port)).join(10)
        assert "Communicators" in (event / ras.RAS_FILE).read_text()
    finally:
        proc.kill()
        proc.wait(10)
    # Nothing listens: no answer, nothing written, quickly.
    t0 = time.monotonic()
    assert ras.ask(("127.0.0.1", port), deadline_s=5) is None and time.monotonic() - t0 < 3
    empty = tmp_path / "empty"
    empty.mkdir()
    ras.ask_in_background(str(empty), lambda m: None, ("127.0.0.1", port)).join(10)
    assert not os.listdir(empty)


def test_within_a_node_the_channel_whose_kernel_never_stopped_is_named(built, tmp_path):
    # P2P: no proxy peers, kernel-channel events only; channel 1's kernel of the 3rd all-reduce never stops.
    extra = dict(FAKE_NCCL_TRANSPORT="p2p", FAKE_NCCL_CHANNELS=4, FAKE_HANG="ncclAllReduce:3",
                 FAKE_NCCL_BREAK="0>1:1:0@3")
    procs = [subprocess.Popen([LINKPROG, "ring", "5", "0"], env=_env(tmp_path, r, 2, **extra),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for r in range(2)]
    try:
        deadline, per_rank = time.time() + 20, {}
        while time.time() < deadline:
            per_rank = {}
            for path, (rank, _) in table.find(str(tmp_path)).items():
                per_rank[rank] = analysis.worth_sending(table.LinkTable(path).read(), 512)
            if len(per_rank) == 2 and all(any(e.in_flight for e in v) for v in per_rank.values()):
                break
            time.sleep(0.05)
        assert all(e.kind == KIND_KERNEL for entries in per_rank.values() for e in entries)
        found = analysis.analyse(per_rank, {0: "a", 1: "a"})
        assert not found.links and found.nodes == ()
        assert analysis.clause(found) == ("channel 1's kernel never stopped on ranks 0-1; "
                                          "every other channel's kernel stopped")
    finally:
        for p in procs:
            p.kill()
            p.wait(10)


def test_proxy_ops_started_ahead_as_nccl_does_still_name_the_link(built, tmp_path):
    """NCCL starts the proxy ops of every queued collective at once (12 per
    channel on two H100s with DDP): the table shows each entry's oldest op in
    flight, so the broken all-reduce's counters are not hidden by the ops
    queued behind it. Four all-reduces enqueued at a time, the 6th hangs with
    the link 0 -> 1 broken on channel 1 at step 2."""
    extra = dict(FAKE_NCCL_QUEUE=1, LINKPROG_AHEAD=4, FAKE_HANG="ncclAllReduce:6", FAKE_NCCL_BREAK="0>1:1:2@6")
    procs = [subprocess.Popen([LINKPROG, "ring", "8", "0"], env=_env(tmp_path, r, 2, **extra),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for r in range(2)]
    try:
        deadline, per_rank = time.time() + 20, {}
        while time.time() < deadline:   # every queued op started, the broken one's steps played
            per_rank = {rank: table.LinkTable(path).read() for path, (rank, _) in table.find(str(tmp_path)).items()}
            sends = [e for v in per_rank.values() for e in v if e.kind == KIND_SEND and e.channel == 1]
            if len(per_rank) == 2 and len(sends) == 2 and all(e.ops == 8 and e.posted for e in sends):
                break
            time.sleep(0.05)
        [send] = [e for e in per_rank[0] if e.kind == KIND_SEND and e.channel == 1]
        [recv] = [e for e in per_rank[1] if e.kind == KIND_RECV and e.channel == 1]
        # 8 ops started, 5 done: the 6th (ops_done 5 on both ends) is the one shown.
        assert (send.ops, send.ops_done, send.moved, send.state_name) == (8, 5, 4, "SendWait")
        assert (recv.ops, recv.ops_done, recv.moved, recv.state_name) == (8, 5, 2, "RecvWait")
        sent = {r: analysis.worth_sending(v, 512) for r, v in per_rank.items()}
        [link] = analysis.analyse(sent, {0: "a", 1: "b"}).links
        assert (link.src_rank, link.dst_rank, link.channels, link.step) == (0, 1, (1,), 2)
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
