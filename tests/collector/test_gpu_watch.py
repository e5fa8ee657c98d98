"""The collector's start-up GPU lines (diag/collector/gpus.GpuWatch): said
once, so they wait for the identity the agent's NVML match completes."""

from diag.collector.gpus import SETTLE_S, GpuWatch
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
