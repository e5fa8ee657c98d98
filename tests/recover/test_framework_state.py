"""State a snapshot would hold only in part (issues 32, 42): a module whose
parameters ZeRO-3 partitioned and a ZeRO optimizer registered without their
engine, and an engine whose ZeRO-Offload keeps the optimizer's state outside
what a snapshot reads. register() refuses each with one line naming the fix
and snapshots are off: never a partial snapshot, and no restore from one."""

from __future__ import annotations

import json
import os

import pytest

from diag.common.net import free_port
from tests import preloaded

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "framework_state.py")
SAYS = {
    "module": "with DeepSpeed ZeRO-3 partitioned parameters: this rank holds a partition",
    "zero_optimizer": "is a DeepSpeedZeroOptimizer_Stage3: its partition is restored only with the engine's counters",
    "offload": "is a DeepSpeedEngine with zero_optimization.offload_optimizer.device=cpu: ZeRO-Offload keeps",
}
pytestmark = pytest.mark.timeout(180)


def test_state_a_snapshot_would_hold_in_part_is_refused_with_one_line(tmp_path):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1",
               LOCAL_RANK="0", PYTHONWARNINGS="ignore")
    # forked with torch imported (tests/preloaded.py); DeepSpeed and Megatron are imported by the child
    proc = preloaded.Forked([SCRIPT, str(tmp_path / "store")], env, preloaded.ROOT)
    stdout, stderr = proc.communicate(150)
    assert proc.returncode == 0, stderr[-3000:]
    results = json.loads(stdout.split("RESULT ", 1)[1])
    assert sorted(results) == sorted(SAYS)
    for which, says in SAYS.items():
        r = results[which]
        assert (r["saved"], r["restored"], r["enabled"], r["files"]) == (False, None, False, []), (which, r)
        assert len(r["said"]) == 1 and says in r["said"][0] and "snapshots are off" in r["said"][0], (which, r)
