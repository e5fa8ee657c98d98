"""One GPU: the four frameworks of tests/frameworks/ on CUDA with NCCL, at world
size 1 (NCCL runs no two ranks on one GPU; the pipeline puts both its stages
on the one rank), under the launcher with the hook: healthy, bitwise equal to
plain torchrun, no HANG/SLOW, and /metrics against what the script timed.
    python3 -m pytest -q -s tests/gpu/test_frameworks_gpu.py"""

import pytest

from tests.frameworks import jobs

pytestmark = pytest.mark.timeout(400)


@pytest.mark.parametrize("name", ["lightning_ddp", "hf_trainer", "fsdp2", "pipeline"])
def test_framework_on_one_gpu(name, tmp_path):
    run = jobs.healthy(name, tmp_path, world=1, args=["--cuda"])
    print(f"== {name}: exit {run.code}, HANG/SLOW lines {run.hang_lines}")
    jobs.assert_bitwise(run)
    jobs.assert_no_alarm(run)
    assert "xpu-diag hook" not in run.output, run.output[-3000:]   # the hook never switched itself off
    if name == "hf_trainer":   # world size 1: the Trainer wraps no DDP, so there is no collective
        last = [m for m in (jobs.rank_metrics(s, 0) for s in run.scrapes) if m is not None][-1]
        print(f"hf_trainer: steps_total {last.steps_total:.0f}, step {last.step_s * 1e3:.1f} ms")
        assert last.steps_total >= 50 and last.step_s > 0
    else:
        jobs.assert_metrics(run, wait=False)
