"""One owner per rank (a spawned child that inherits RANK and LD_PRELOAD stays
inert) and the fingerprint fields of the hook's collective records (dtype,
reduce op, root/peer) with collectives and p2p counted in separate lanes."""

from diag.records import format as fmt
from tests.kernel_hook.conftest import read_regions, run_prog


def test_a_spawned_child_of_the_owner_writes_no_region(built, tmp_path):
    proc = run_prog("spawn", shm_dir=str(tmp_path), env={"RANK": "0", "WORLD_SIZE": "1"})
    assert proc.returncode == 0 and "exit 0" in proc.stdout, proc.stdout + proc.stderr
    child = int(proc.stdout.split()[1])
    regions = read_regions(str(tmp_path))
    assert [r.header.pid for r in regions] != [] and child not in [r.header.pid for r in regions]
    [region] = regions
    assert [r.name for r in region.of(fmt.EVENT_END)] == ["ncclAllReduce"]


def test_an_owner_pid_of_another_process_keeps_the_hook_inert(built, tmp_path):
    proc = run_prog("timed", shm_dir=str(tmp_path), env={"RANK": "0", "XPU_TIMER_TRACER_PID": "1"})
    assert proc.returncode == 0, proc.stderr
    assert read_regions(str(tmp_path)) == [] and proc.stderr == ""


def test_collective_records_carry_dtype_reduce_op_and_peer_per_lane(built, tmp_path):
    ops = "ar:1024:9:2,bc:16:7:1,send:8:6:1,ag:4:7,recv:8:6:1,red:2:4:0"
    proc = run_prog("script", "1", shm_dir=str(tmp_path), env={"RANK": "1", "WORLD_SIZE": "2", "OPS_R1": ops})
    assert proc.returncode == 0, proc.stderr
    [region] = read_regions(str(tmp_path))
    got = [(r.name, r.kind, r.seq, r.bytes, fmt.dtype_of(r.flags), *fmt.unpack_coll_args(r.flops))
           for r in region.of(fmt.EVENT_START)]
    C, P = fmt.KIND_COLLECTIVE, fmt.KIND_P2P
    assert got == [("ncclAllReduce", C, 1, 2048, 9, 2, -1), ("ncclBroadcast", C, 2, 64, 7, -1, 1),
                   ("ncclSend", P, 1, 16, 6, -1, 1), ("ncclAllGather", C, 3, 32, 7, -1, -1),
                   ("ncclRecv", P, 2, 16, 6, -1, 1), ("ncclReduce", C, 4, 16, 4, 0, 0)]
    assert [r.flops for r in region.of(fmt.EVENT_END)] == [r.flops for r in region.of(fmt.EVENT_START)]
