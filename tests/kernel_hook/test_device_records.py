"""The hook names the CUDA devices a process launches on (DEVICE records,
docs/records.md), so a job that never calls set_device still has its GPU
named (issue 34 item 6)."""

from diag.records import format as fmt
from tests.kernel_hook.conftest import read_regions, run_prog


def fake_gpu(d: int) -> tuple[str, str]:
    """(PCI bus id, UUID) the fake runtime gives device d (fake/fake_cudart.cc)."""
    return f"0000:{0x1b + 0x10 * d:02x}:00.0", f"GPU-fa4e0000-0000-0000-0000-0000000000{d:02x}"


def test_launches_without_set_device_name_each_device_once(built, tmp_path):
    # Kernels and GEMMs on device 0 (no set_device), then on device 1, then on
    # 0 again from two threads: one DEVICE record per device, in launch order,
    # with the runtime's PCI address and UUID and the CUDA_VISIBLE_DEVICES entry.
    out = run_prog("no_set_device", shm_dir=str(tmp_path),
                   env={"CUDA_VISIBLE_DEVICES": "3, GPU-abc", "XPU_TIMER_HOOK_COUNT_MS": "20"})
    assert (out.returncode, out.stdout, out.stderr) == (0, "launched\n", "")
    [region] = read_regions(str(tmp_path))
    devices = region.of(fmt.EVENT_DEVICE)
    assert [r.comm_rank for r in devices] == [0, 1]
    for rec, visible in zip(devices, ("3", "GPU-abc")):
        pci, uuid = fake_gpu(rec.comm_rank)
        assert rec.kind == 0 and rec.name == visible
        assert rec.flags == fmt.DEVICE_HAS_UUID | fmt.DEVICE_HAS_PCI
        assert fmt.pci_text(rec.bytes) == pci
        assert fmt.uuid_text(rec.comm_id, rec.seq) == uuid
    # The work itself is recorded as before.
    assert len(region.of(fmt.EVENT_END, "cublasGemmEx")) == 6


def test_no_visible_devices_gives_an_empty_entry(built, tmp_path):
    out = run_prog("no_set_device", shm_dir=str(tmp_path), env={"CUDA_VISIBLE_DEVICES": ""})
    assert out.returncode == 0, out.stderr
    [region] = read_regions(str(tmp_path))
    assert [(r.comm_rank, r.name) for r in region.of(fmt.EVENT_DEVICE)] == [(0, ""), (1, "")]
