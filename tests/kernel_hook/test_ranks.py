"""Communicator ids and sequence numbers agree across ranks (separate
processes) without reading NCCL's private structs: the ids come only from the
ncclUniqueId bytes and the split parameters every member passes."""

import collections
import secrets
import subprocess

from diag.records import format as fmt
from tests.kernel_hook.conftest import HOOK, HOOKPROG, read_regions

NRANKS, N_ALLREDUCE = 4, 5


def _run_ranks(shm, unique_id, n_allreduce=N_ALLREDUCE, extra_env=None):
    shm.mkdir(exist_ok=True)
    procs = []
    for rank in range(NRANKS):
        env = {"LD_PRELOAD": HOOK, "XPU_TIMER_SHM_DIR": str(shm), "RANK": str(rank),
               "WORLD_SIZE": str(NRANKS), **(extra_env or {})}
        procs.append(subprocess.Popen(
            [HOOKPROG, "ranks", str(rank), str(NRANKS), unique_id, str(n_allreduce)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0 and err == "", err
    regions = {r.header.rank: r for r in read_regions(str(shm))}
    assert sorted(regions) == list(range(NRANKS))
    return regions


def _ops(region, name):
    return [r for r in region.of(fmt.EVENT_END, name)]


def test_world_comm_id_and_seqs_agree(built, tmp_path):
    regions = _run_ranks(tmp_path, secrets.token_hex(128))
    world_ids = set()
    for rank, region in regions.items():
        ars = _ops(region, "ncclAllReduce")
        assert [r.seq for r in ars] == list(range(1, N_ALLREDUCE + 1))
        assert {(r.comm_rank, r.comm_size) for r in ars} == {(rank, NRANKS)}
        world_ids |= {r.comm_id for r in ars}
    assert len(world_ids) == 1


def test_split_children_agree_within_a_color_only(built, tmp_path):
    regions = _run_ranks(tmp_path, secrets.token_hex(128))
    world = {r.comm_id for r in _ops(regions[0], "ncclAllReduce")}
    child_of = collections.defaultdict(set)
    for rank, region in regions.items():
        gathers = _ops(region, "ncclAllGather")
        assert [r.seq for r in gathers] == [1, 2]  # a new comm counts from 1
        child_of[rank % 2] |= {r.comm_id for r in gathers}
    assert all(len(ids) == 1 for ids in child_of.values())
    assert len(child_of[0] | child_of[1] | world) == 3


def test_p2p_has_its_own_sequence(built, tmp_path):
    # A send only some ranks make must not shift the collectives' seqs.
    regions = _run_ranks(tmp_path, secrets.token_hex(128))
    for region in regions.values():
        [send] = _ops(region, "ncclSend")
        assert (send.kind, send.seq, send.bytes) == (fmt.KIND_P2P, 1, 40)


def test_another_job_gets_other_ids(built, tmp_path):
    a = _run_ranks(tmp_path / "a", "11" * 128)
    b = _run_ranks(tmp_path / "b", "22" * 128)
    again = _run_ranks(tmp_path / "c", "11" * 128)
    ids = [{r.comm_id for r in _ops(x[0], "ncclAllReduce")} for x in (a, b, again)]
    assert ids[0] != ids[1] and ids[0] == ids[2]


def test_every_rank_samples_the_same_collectives(built, tmp_path):
    # Sampling hashes (comm id, seq): all ranks device-time the same ones, so
    # their durations can be compared op by op.
    regions = _run_ranks(tmp_path, secrets.token_hex(128), n_allreduce=48,
                         extra_env={"XPU_TIMER_HOOK_TIME_EVERY": "4"})
    sampled = set()
    for region in regions.values():
        ars = _ops(region, "ncclAllReduce")
        assert len(ars) == 48
        sampled.add(tuple(r.seq for r in ars if r.flags & fmt.FLAG_DEVICE_TIMED))
    [seqs] = sampled
    assert 3 <= len(seqs) <= 24, seqs
