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
    # 400 steps: a GPU step takes ~20 ms, and the metrics check needs the perf
    # window and the publishing lag inside the steady steps.
    run = jobs.healthy(name, tmp_path, world=1, args=["--cuda", "--steps", "400"])
    print(f"== {name}: exit {run.code}, HANG/SLOW lines {run.hang_lines}")
    jobs.assert_bitwise(run)
    jobs.assert_no_alarm(run)
    assert "xpu-diag hook" not in run.output, run.output[-3000:]   # the hook never switched itself off
    # Steps and step time judged; collective calls and wait printed (see assert_metrics).
    jobs.assert_metrics(run, wait=False, calls=False)
