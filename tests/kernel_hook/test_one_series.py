"""One op, one series (issue 20): an all-reduce seen by both the tracer
(dist.all_reduce) and the hook (the ncclAllReduce the backend issues inside
it) is one series on the agent's /metrics, under the process group's id, and
no bus bandwidth is shown where it is undefined (one rank). Real launcher,
agent and tracer; a torch backend issuing fake-NCCL calls as ProcessGroupNCCL
does (scripts/nccl_backend.py), under the real hook."""

import os
import re
import urllib.request

import pytest

from diag.common.net import free_port
from tests.functional.launch import Launch
from tests.kernel_hook.conftest import BUILD, HERE
from tests.waiting import poll_until

SCRIPT = os.path.join(HERE, "scripts", "nccl_backend.py")
STEPS = 40


def _series(text: str, name: str) -> list[tuple[dict, float]]:
    out = []
    for labels, value in re.findall(rf"^{name}\{{([^}}]*)\}} (\S+)$", text, re.M):
        out.append((dict(re.findall(r'(\w+)="([^"]*)"', labels)), float(value)))
    return out


def _scrape(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.read().decode()
    except OSError:
        return None


@pytest.mark.parametrize("nranks", [1, 2])
def test_an_all_reduce_seen_by_tracer_and_hook_is_one_series(built, tmp_path, nranks):
    port, stop = free_port(), tmp_path / "stop"
    launch = Launch(["--nproc-per-node", str(nranks), "--rdzv-id", f"series{nranks}",
                     "--timeline-path", str(tmp_path), "--metrics-port", str(port),
                     "--metrics-addr", "127.0.0.1", "--hook-time-every", "1", SCRIPT],
                    env={"LD_LIBRARY_PATH": os.path.join(BUILD, "fake"), "STOP_FILE": str(stop),
                         "STEPS": str(STEPS)})
    url = f"http://127.0.0.1:{port}/metrics"

    def all_counted():   # every rank's hook END and launch count read, and the tracer's
        text = _scrape(url) or ""
        calls = _series(text, "xpu_diag_op_calls_total")
        done = {c["rank"] for c, v in calls if c["op"] == "ncclAllReduce" and v == STEPS}
        # At least STEPS, not merely some: the launch count comes in its own
        # sample and can trail the calls' (a rank at 1 of 40 was read once).
        launched = {c["rank"] for c, v in _series(text, "xpu_diag_kernel_launches_total") if v >= STEPS}
        return text if len(done) == len(launched) == nranks and launch.matching(r"reduced") else None
    try:
        text = poll_until(all_counted, 120, 0.5)
        assert text, (_series(_scrape(url) or "", "xpu_diag_kernel_launches_total"), launch.output())
        calls = _series(text, "xpu_diag_op_calls_total")
        # One series per rank: the hook's call, under the default group's id
        # (the tracer names it 0), not the tracer's all_reduce beside it.
        assert sorted((c["rank"], c["op"], c["comm"], v) for c, v in calls) == [
            (str(r), "ncclAllReduce", "0" * 16, STEPS) for r in range(nranks)], calls
        busbw = _series(text, "xpu_diag_op_busbw_bytes_per_second")
        if nranks == 1:
            assert busbw == [], busbw   # a local copy: nothing crosses a bus
        else:
            assert sorted(c["rank"] for c, _ in busbw) == ["0", "1"]
            assert all(c["op"] == "ncclAllReduce" and v > 0 for c, v in busbw), busbw
        # The backend's NCCL kernels, launched through the driver, are counted.
        launches = _series(text, "xpu_diag_kernel_launches_total")
        assert sorted(v for _, v in launches) == [STEPS] * nranks, launches
        stop.write_text("")
        assert launch.wait(60) == 0, launch.output()
    finally:
        launch.kill()
