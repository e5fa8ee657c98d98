"""diag/recover/attempt_store.py in a real worker interpreter: after a restart
the env:// rendezvous hands out the agent's store under the attempt's prefix,
so keys the killed attempt left are never read; the first attempt, or a worker
the launcher did not ask, is left exactly as torch makes it."""

import os
import sys
from datetime import timedelta

import pytest
import torch.distributed as dist

from diag.common.net import free_port
from diag.recover import attempt_store
from tests import preloaded

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = """
import torch.distributed as dist
from diag.recover import attempt_store
print("ATTEMPT", attempt_store.install())
store, rank, world = next(dist.rendezvous("env://", rank=0, world_size=1))
print("READ", store.get("rank_0").decode())
store.set("rank_0", "new")
"""


@pytest.mark.parametrize("restart, asked, reads, writes", [
    ("1", "1", "fresh", "xpu-diag/attempt1/rank_0"),   # the restarted attempt: its own keys
    ("0", "1", "stale", "rank_0"),                      # the first attempt: as torch makes it
    ("1", "", "stale", "rank_0"),                       # not asked (c10d, a user's own setting)
])
def test_a_restarted_worker_reads_only_its_attempts_keys(restart, asked, reads, writes):
    port = free_port()
    agent = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    agent.set("rank_0", "stale")                           # what the killed attempt left
    agent.set("xpu-diag/attempt1/rank_0", "fresh")         # what this attempt's rank 0 published
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCHELASTIC_USE_AGENT_STORE="True",
               TORCHELASTIC_RESTART_COUNT=restart, XPU_TIMER_ATTEMPT_STORE=asked, PYTHONPATH=ROOT)
    # forked with torch imported (tests/preloaded.py): torch's rendezvous handlers as a fresh interpreter has them
    worker = preloaded.Forked(["-c", WORKER], env, ROOT)
    stdout, stderr = worker.communicate(60)
    assert worker.returncode == 0, stderr
    assert f"READ {reads}" in stdout.splitlines(), stdout
    assert agent.get(writes) == b"new"
    assert stderr == ""


def test_nothing_is_wrapped_outside_a_restarted_agent_store_worker():
    base = {"XPU_TIMER_ATTEMPT_STORE": "1", "TORCHELASTIC_USE_AGENT_STORE": "True"}
    handlers = sys.modules["torch.distributed.rendezvous"]._rendezvous_handlers
    torchs = handlers["env"]
    try:
        assert attempt_store.install(dict(base, TORCHELASTIC_RESTART_COUNT="2")) == 2
        assert handlers["env"] is not torchs
    finally:
        handlers["env"] = torchs       # this test process's torch, as it was
    for env in (dict(base, TORCHELASTIC_RESTART_COUNT="0"), dict(base, TORCHELASTIC_RESTART_COUNT="x"),
                dict(base, TORCHELASTIC_USE_AGENT_STORE="False", TORCHELASTIC_RESTART_COUNT="1"), {}):
        assert attempt_store.install(env) is None
