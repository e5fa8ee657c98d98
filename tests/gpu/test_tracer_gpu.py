"""The tracer's completion watcher on a real NCCL op (issue 32): the op ends
when the GPU finishes it, not when it is queued, and looking for its end
makes none of the user's streams wait on NCCL.
    python3 -m pytest -q -s tests/gpu/test_tracer_gpu.py"""

import json
import os
import subprocess
import sys

from diag.common.net import free_port
from diag.records import format as fmt
from tests.gpu.conftest import ROOT, SCRIPTS


def test_an_async_nccl_op_ends_at_completion_and_leaves_the_users_streams_alone(tmp_path):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1",
               LOCAL_RANK="0", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, os.path.join(SCRIPTS, "tracer_nccl_async.py"), str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.split("RESULT ", 1)[1])
    print(result)
    assert result["y"] == [2.0] * 4
    assert result["side_stream_s"] < 0.2          # the other stream never waited for the all-reduce
    assert result["ended"] and result["op_s"] > 0.4   # ended after the ~0.8 s queued before it, not at its call


def test_device_collectives_are_left_to_the_hook_once_their_group_is_tied(tmp_path):
    """With the hook preloaded (the launcher's default), the tracer records a
    group's first TIE_OPS device ops and then leaves them to the hook; the
    agent still reports the group by name, with every op counted (the hook's)."""
    hook = os.path.join(ROOT, "diag", "lib", "libxpu_timer_hook.so")
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1",
               LOCAL_RANK="0", PYTHONPATH=ROOT, LD_PRELOAD=hook, XPU_TIMER_SHM_DIR=str(tmp_path),
               XPU_TIMER_TRACER_PID="")
    out = subprocess.run([sys.executable, os.path.join(SCRIPTS, "tracer_hook_share.py")],
                         env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.split("RESULT ", 1)[1])
    print(result)
    assert result["present"] and result["y"] == [1.0, 1.0]
    tp = [lane for lane in result["lanes"] if lane["name"] == "TENSOR_MODEL_PARALLEL_GROUP"]
    assert len(tp) == 1 and tp[0]["started"] == result["n"], result   # the hook's count, under the group's name
    tracer_lanes = {k: v for k, v in result["producer_lanes"].items() if k.startswith(f"{fmt.PRODUCER_PYTHON}:")}
    assert result["tie_ops"] in tracer_lanes.values(), result   # the tracer stopped after its first ops
