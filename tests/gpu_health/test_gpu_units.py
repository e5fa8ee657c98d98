"""diag.gpu and the DEVICE record, on the hand-made H100 recordings
(fixtures/make_h100_nvml.py): identity resolution, one NVML sample, the
window (throttle onset, ECC sightings, XIDs), the verdict clauses, the
recording format's timeline, and the recorder writing what the replay reads."""

import json
import os
import time

import pytest

from diag.agent.gpu_health import GpuMonitor, claimed_identity
from diag.agent.config import AgentConfig
from diag.gpu import causes, sample, wire, xid
from diag.gpu.api import GpuError, GpuEvent, GpuHealth, GpuIdentity, GpuSample
from diag.gpu.nvml import ReplayNvml
from diag.gpu.window import GpuWindow
from diag.records import format as fmt
from diag.records.reader import RegionReader
from diag.records.writer import RecordWriter

FIX = os.path.join(os.path.dirname(__file__), "fixtures")
HEALTHY, THROTTLE, XID = (os.path.join(FIX, f"nvml_h100x4_{n}.json") for n in ("healthy", "throttle", "xid"))
UUID1 = "GPU-2d7e4f10-8a9b-4c3d-9e1f-0a2b3c4d5e6f"


def test_a_device_record_round_trips_through_the_one_reader(tmp_path):
    w = RecordWriter(str(tmp_path), producer=fmt.PRODUCER_PYTHON, rank=3, local_rank=1, world_size=4)
    w.device(1, "GPU-2d7e", UUID1, fmt.pack_pci(0, 0x43, 0))
    w.device(0, "")                       # the ordinal alone (no CUDA runtime answer)
    recs = RegionReader(w.path).poll()
    assert [r.event for r in recs] == [fmt.EVENT_DEVICE] * 2
    got = claimed_identity(recs[0])
    assert (got.uuid, got.pci_bus_id, got.cuda_device, recs[0].name) == (UUID1, "0000:43:00.0", 1, "GPU-2d7e")
    bare = claimed_identity(recs[1])
    assert (bare.uuid, bare.pci_bus_id, bare.cuda_device, bare.known) == ("", "", 0, False)


def test_pci_and_uuid_packing_are_exact():
    assert fmt.pci_text(fmt.pack_pci(0x10002, 0xDB, 0x1F, 3)) == "10002:db:1f.3"
    assert fmt.uuid_text(*fmt.pack_uuid(UUID1)) == UUID1
    assert fmt.pack_uuid("GPU-nothex") == (0, 0)
    assert sample.pci_bus_id("00000000:1B:00.0") == "0000:1b:00.0"


@pytest.mark.parametrize("want, visible, index", [
    (GpuIdentity(uuid=UUID1, cuda_device=0), "", 1),                       # the runtime's UUID
    (GpuIdentity(pci_bus_id="0000:52:00.0", cuda_device=0), "", 2),        # its bus id
    (GpuIdentity(cuda_device=0), "3", 3),                                   # CUDA_VISIBLE_DEVICES=3,...
    (GpuIdentity(cuda_device=1), "GPU-f3a9c5d1", 2),                        # a UUID prefix there
    (GpuIdentity(cuda_device=1), "", 1),                                    # no remapping: the ordinal
])
def test_a_ranks_device_resolves_to_the_nvml_index(want, visible, index):
    got = sample.resolve(ReplayNvml(HEALTHY), want, visible)
    assert got.index == index and got.name == "NVIDIA H100 80GB HBM3" and got.uuid.startswith("GPU-")
    assert got.cuda_device == want.cuda_device


def test_an_unknown_device_stays_as_the_rank_said():
    want = GpuIdentity(cuda_device=0)
    assert sample.resolve(ReplayNvml(HEALTHY), want, "MIG-abc") == want
    assert sample.resolve(None, want, "") == want


def test_the_phrase_names_bus_id_uuid_and_index():
    ident = sample.identity_of(ReplayNvml(HEALTHY), 3)
    assert ident.phrase() == "gpu 0000:61:00.0 (GPU-5b6c7d8e..., nvidia-smi index 3)"
    assert GpuIdentity(uuid=UUID1).phrase() == "gpu GPU-2d7e4f10..."
    assert ident.to_dict()["nvidia_smi_index"] == 3


def test_one_sample_reads_what_nvml_says():
    s = sample.read(ReplayNvml(THROTTLE), 1, 100.0)
    assert (s.throttle_reasons, s.sm_clock_mhz, s.sm_clock_max_mhz, s.temperature_c) == (0x40, 1215, 1980, 91)
    assert (s.power_w, s.power_limit_w, s.pcie_gen, s.pcie_width, s.nvlink_errors) == (402.0, 700.0, 5, 16, 0)
    assert (s.ecc_uncorrected, s.remapped_rows_pending, s.remapped_rows_failed) == (0, False, False)
    now = [0.0]
    lost = ReplayNvml(XID, clock=lambda: now[0])
    assert sample.read(lost, 2, 100.0).sm_clock_mhz == 1980
    now[0] = 3.0                                       # after the XID: the GPU answers errors
    gone = sample.read(lost, 2, 100.0)
    assert gone.throttle_reasons is None and gone.sm_clock_mhz is None and gone.pcie_gen == 5


def _health(nvml, index, t, window):
    window.add_sample(index, sample.read(nvml, index, t))
    return window.health(sample.identity_of(nvml, index), t)


def test_the_throttled_gpu_gets_its_cause_and_its_peers_none():
    nvml, window = ReplayNvml(THROTTLE), GpuWindow(60)
    first = {i: _health(nvml, i, 1000.0, window) for i in range(4)}
    later = {i: _health(nvml, i, 1005.0, window) for i in range(4)}
    assert first[1].throttled_since_unix_s == later[1].throttled_since_unix_s == 1000.0
    clause = causes.throttle_clause(later[1], list(later.values()))
    assert clause == f"throttled: HW thermal slowdown since {causes.when(1000.0)}, SM 1,215 MHz vs 1,980 on its peers"
    assert causes.throttle_clause(later[0], list(later.values())) == "no throttle reported"
    assert causes.throttle_clause(GpuHealth(later[0].identity), []) == ""      # no sample: nothing claimed


def test_idle_and_sync_boost_are_not_causes():
    assert causes.reason_names(0x1 | 0x2 | 0x10) == []
    assert causes.reason_names(0x80 | 0x4) == ["HW power brake slowdown", "SW power cap"]


def test_a_new_uncorrected_ecc_error_is_a_fatal_event_but_old_ones_are_history():
    w = GpuWindow(60)
    w.add_sample(0, GpuSample(10.0, ecc_uncorrected=3, remapped_rows_failed=False))   # before the job
    w.add_sample(0, GpuSample(15.0, ecc_uncorrected=3, remapped_rows_failed=False))
    assert w.health(GpuIdentity(index=0), 15.0).events == ()
    w.add_sample(0, GpuSample(20.0, ecc_uncorrected=5, remapped_rows_failed=True))
    events = w.health(GpuIdentity(index=0), 20.0).events
    assert [(e.kind, e.text, e.fatal) for e in events] == [("ecc", "2 new uncorrected ECC errors", True),
                                                           ("ecc", "row remapping failed", True)]
    assert w.health(GpuIdentity(index=0), 100.0).events == ()                           # out of the window


def test_xids_are_named_and_judged():
    assert xid.describe(79) == ("GPU fell off the bus", True)
    assert xid.describe(13)[1] is False and xid.describe(94)[1] is False and xid.describe(48)[1] is True
    assert xid.describe(9999) == ("see NVIDIA's XID catalogue", False)
    w = GpuWindow(60)
    w.add_xid(2, 79, 50.0)
    health = w.health(GpuIdentity("0000:52:00.0", index=2), 55.0)
    assert causes.fault_clause(health) == f"XID 79 (GPU fell off the bus) at {causes.when(50.0)}"


def test_replayed_xids_arrive_once_at_their_time():
    now = [0.0]
    nvml = ReplayNvml(XID, clock=lambda: now[0])
    assert nvml.wait_xid(0) == []
    now[0] = 2.5
    events = nvml.wait_xid(0)
    assert [(e["xid"], e["gpu_uuid"]) for e in events] == [(79, "GPU-f3a9c5d1-6b7e-48f0-a1b2-c3d4e5f60718")]
    assert nvml.wait_xid(0) == []
    assert nvml.query("nvmlDeviceGetPowerUsage", 0) == 638000    # the other GPUs answer on


def test_a_bad_recording_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1, "answers": {}, "timeline": [{"after_s": "soon"}]}')
    with pytest.raises(GpuError, match="'timeline' must be a list"):
        ReplayNvml(str(bad))
    with pytest.raises(GpuError, match="cannot read the NVML recording"):
        ReplayNvml(str(tmp_path))
    (tmp_path / "old.json").write_text('{"version": 7, "answers": {}}')
    with pytest.raises(GpuError, match="is not an NVML recording .*python -m diag.gpu.record"):
        ReplayNvml(str(tmp_path / "old.json"))


def test_health_survives_the_wire():
    h = GpuHealth(GpuIdentity("0000:43:00.0", UUID1, 1, 1, "NVIDIA H100 80GB HBM3"),
                  GpuSample(5.0, throttle_reasons=0x40, sm_clock_mhz=1215, power_w=402.5), 4.0,
                  (GpuEvent(4.5, "xid", 79, "GPU fell off the bus", True),), "")
    assert wire.health_of(wire.health_msg(h)) == h


def _monitor(tmp_path, replay, claims, interval=1.0):
    cfg = AgentConfig(shm_dir=str(tmp_path), collector=None, token="t", job_id="j", nvml_replay=replay,
                      gpu_sample_interval_s=interval)
    said = []
    import threading
    stop = threading.Event()
    mon = GpuMonitor(cfg, lambda m, every=60: said.append(m), stop, lambda: claims)
    return mon, said, stop


def test_the_monitor_names_ranks_by_nvml_and_samples_off_the_training_threads(tmp_path):
    w = RecordWriter(str(tmp_path), producer=fmt.PRODUCER_PYTHON, rank=0, local_rank=0, world_size=2)
    w.device(0, "1")
    rec = RegionReader(w.path).poll()[0]
    mon, said, stop = _monitor(tmp_path, THROTTLE, {0: rec})
    mon.start()
    try:
        assert {t.name for t in mon.threads} == {"xpu-diag-agent-gpu", "xpu-diag-agent-xid"}
        deadline = time.monotonic() + 10
        while (mon.health_for(rec).latest is None) and time.monotonic() < deadline:
            time.sleep(0.05)
        health = mon.health_for(rec)
        assert health.identity.phrase() == "gpu 0000:43:00.0 (GPU-2d7e4f10..., nvidia-smi index 1)"
        assert health.latest.throttle_reasons == 0x40 and health.throttled_since_unix_s > 0
    finally:
        stop.set()
        mon.join(5)
    assert not any(t.is_alive() for t in mon.threads) and said == []


def test_without_nvml_the_monitor_says_one_line_and_names_the_rank_anyway(tmp_path):
    w = RecordWriter(str(tmp_path), producer=fmt.PRODUCER_PYTHON, rank=0, local_rank=0, world_size=1)
    w.device(0, "", UUID1, fmt.pack_pci(0, 0x43, 0))
    rec = RegionReader(w.path).poll()[0]
    missing = tmp_path / "missing.json"
    mon, said, stop = _monitor(tmp_path, str(missing), {0: rec})
    mon.start()
    assert mon.threads == [] and said == []   # no rank has shown a GPU yet (a CPU job hears nothing)
    assert mon.health_for(None) is None and said == []
    health = mon.health_for(rec)
    assert len(said) == 1 and "everything else works" in said[0]
    mon.health_for(rec)
    assert len(said) == 1
    assert health.identity.phrase() == "gpu 0000:43:00.0 (GPU-2d7e4f10...)" and health.latest is None
    assert "cannot read the NVML recording" in health.nvml


def test_the_recorder_writes_what_the_replay_reads(tmp_path):
    from diag.gpu import record
    from diag.gpu.nvml import RecordingNvml
    out = tmp_path / "rec.json"
    doc = record.record(RecordingNvml(ReplayNvml(THROTTLE)), steps=3, interval_s=0.01)
    with open(out, "w") as f:
        json.dump(doc, f)
    again = ReplayNvml(str(out))
    assert sample.read(again, 1, 0.0) == sample.read(ReplayNvml(THROTTLE), 1, 0.0)
    assert doc["timeline"] == [] and doc["gpus"] == ["NVIDIA H100 80GB HBM3"] * 4   # nothing changed
    # a machine whose GPU 2 falls off the bus while recording: the answers turn and the XID is a step
    now = [0.0]
    source = ReplayNvml(XID, clock=lambda: now[0])
    steps = iter([0.0, 3.0, 3.0])
    import diag.gpu.record as rec_mod
    real_sleep = rec_mod.time.sleep
    rec_mod.time.sleep = lambda s: now.__setitem__(0, next(steps))
    try:
        doc = record.record(RecordingNvml(source), steps=3, interval_s=0.0)
    finally:
        rec_mod.time.sleep = real_sleep
    assert len(doc["timeline"]) == 1
    step = doc["timeline"][0]["answers"]
    assert step["xidEvents[]"]["value"] == [{"xid": 79, "gpu_uuid": "GPU-f3a9c5d1-6b7e-48f0-a1b2-c3d4e5f60718"}]
    assert step["nvmlDeviceGetClockInfo[2, 1]"]["error"] == 15


def test_a_real_h100_recording_under_load_reads_as_its_power_cap():
    """fixtures/nvml_h100x1_recorded.json was recorded by `python -m diag.gpu.record`
    on the session's H100 under a bf16 GEMM load (docs/gpu-runs/h100x1/gpu/): NVML
    answered clocks-event reason 0x4 (SW power cap) at 697 W of 700, SM 1,320 of
    1,980 MHz. The replay must read exactly that and the verdict clause name it."""
    nvml = ReplayNvml(os.path.join(os.path.dirname(__file__), "fixtures", "nvml_h100x1_recorded.json"))
    s = sample.read(nvml, 0, 100.0)
    assert (s.throttle_reasons, s.sm_clock_mhz, s.sm_clock_max_mhz, s.power_w, s.power_limit_w) == (4, 1320, 1980, 697.3, 700.0)
    assert (s.pcie_gen, s.pcie_width, s.ecc_uncorrected, s.nvlink_errors) == (5, 16, 0, None)   # no NVLink on this VM
    window = GpuWindow(60)
    window.add_sample(0, s)
    health = window.health(sample.identity_of(nvml, 0), 100.0)
    assert health.identity.pci_bus_id == "0000:00:06.0" and health.identity.uuid.startswith("GPU-6393d877")
    assert causes.throttle_clause(health, [health]) == \
        f"throttled: SW power cap since {causes.when(100.0)}, SM 1,320 MHz of 1,980 max"


def test_without_nvml_a_job_given_gpus_hears_it_at_start(tmp_path):
    cfg = AgentConfig(shm_dir=str(tmp_path), collector=None, token="t", job_id="j",
                      nvml_replay=str(tmp_path / "missing.json"), tool_env={"CUDA_VISIBLE_DEVICES": "0,1"})
    said = []
    import threading
    GpuMonitor(cfg, lambda m, every=60: said.append(m), threading.Event(), dict).start()
    assert len(said) == 1 and "everything else works" in said[0]
