"""The collector's start-up GPU lines (diag/collector/gpus.GpuWatch): said
once, so they wait for the identity the agent's NVML match completes."""

from diag.collector.gpus import NAMELESS_AFTER_S, NAMELESS_EVERY_S, SETTLE_S, GpuWatch
from diag.collector.state import RankEntry, Snapshot
from diag.gpu.api import NOT_SAMPLED
from diag.pb import collector_pb2 as pb

BUS, UUID = "0000:1b:00.0", "GPU-8c1f1234-aaaa-bbbb-cccc-000000000000"


def _snap(now: float, index: int, nvml: str) -> Snapshot:
    ranks = {}
    for rank in (0, 1):   # two ranks on cuda:0 of node 0
        gpu = pb.GpuHealth(identity=pb.GpuIdentity(pci_bus_id=BUS, uuid=UUID, index=index, cuda_device=0),
                           nvml=nvml)
        ranks[rank] = RankEntry(pb.RankProgress(rank=rank, local_rank=rank, gpu=gpu), now, 0)
    return Snapshot(now, 2, ranks, {})


def test_the_shared_gpu_line_waits_for_the_nvidia_smi_index():
    said = []
    watch = GpuWatch(said.append)
    watch.tick(_snap(0.0, -1, NOT_SAMPLED))        # the hook's DEVICE record alone: bus id and uuid
    assert said == []
    watch.tick(_snap(2.0, 0, ""))                  # NVML matched it
    assert said[0] == (f"GPU: ranks 0-1 share one GPU on node 0: gpu {BUS} (GPU-8c1f1234..., nvidia-smi index 0) "
                       f"(each gets a share of its SMs and memory)")
    watch.tick(_snap(4.0, 0, ""))
    assert len([s for s in said if "share one GPU" in s]) == 1, said


def test_a_device_nvml_never_matches_is_named_after_the_settling_time():
    said = []
    watch = GpuWatch(said.append)
    watch.tick(_snap(0.0, -1, NOT_SAMPLED))
    watch.tick(_snap(SETTLE_S - 1.0, -1, NOT_SAMPLED))
    assert said == []
    watch.tick(_snap(SETTLE_S + 1.0, -1, NOT_SAMPLED))
    assert said and said[0].startswith(f"GPU: ranks 0-1 share one GPU on node 0: gpu {BUS} (GPU-8c1f1234...)"), said


def test_without_nvml_the_line_is_said_at_once():
    said = []
    GpuWatch(said.append).tick(_snap(0.0, -1, "NVML is not available (libnvidia-ml.so.1 not found)"))
    assert said and "share one GPU" in said[0], said


class _Counted(dict):
    """A snapshot's ranks that count the entries read (the collector's
    RankMap makes each from its node's report when read)."""

    reads = 0

    def get(self, rank, default=None):
        self.reads += 1
        return super().get(rank, default)


def _nameless_snap(now: float, gpu_for: set[int] = frozenset()) -> Snapshot:
    ranks = _Counted()
    for rank in range(100):   # a CPU job's ranks name no GPU
        progress = pb.RankProgress(rank=rank, local_rank=rank % 8)
        if rank in gpu_for:
            progress.gpu.CopyFrom(pb.GpuHealth(identity=pb.GpuIdentity(pci_bus_id=BUS, uuid=UUID, index=0,
                                                                    cuda_device=0)))
        ranks[rank] = RankEntry(progress, now, rank // 8)
    return Snapshot(now, 100, ranks, {})


def test_ranks_that_name_no_gpu_are_read_less_often_after_a_minute_and_a_late_gpu_is_still_named():
    said = []
    watch = GpuWatch(said.append)
    reads = []
    for now in range(0, 120, 2):   # every check, for two minutes
        snap = _nameless_snap(float(now))
        watch.tick(snap)
        reads.append((now, snap.ranks.reads))
    assert all(n == 100 for t, n in reads if t < NAMELESS_AFTER_S), reads
    later = [(t, n) for t, n in reads if t >= NAMELESS_AFTER_S]
    assert all(n in (0, 100) for _, n in later), later
    assert sum(n for _, n in later) <= 100 * (1 + len(later) * 2 // NAMELESS_EVERY_S), later   # one look a NAMELESS_EVERY_S
    assert said == []
    # two ranks of node 0 start naming one GPU: said within NAMELESS_EVERY_S
    now = 120.0
    while not said and now < 120.0 + NAMELESS_EVERY_S + 2:
        watch.tick(_nameless_snap(now, gpu_for={0, 1}))
        now += 2
    assert said and "ranks 0-1 share one GPU on node 0" in said[0], said
