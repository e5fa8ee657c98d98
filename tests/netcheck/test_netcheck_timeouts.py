"""Every wait ends: a collective whose peer never comes times out; a stuck job is abandoned."""

import threading
import time
from datetime import timedelta

import pytest
import torch
from torch.distributed import TCPStore

from diag.netcheck.api import RULE_ERROR, RULE_TIMEOUT, TestContext
from diag.netcheck.measure.allreduce import AllReduce
from diag.netcheck.pairjob import guarded, make_group

pytestmark = pytest.mark.timeout(60)


def test_all_reduce_without_its_peer_times_out_in_timeout():
    master = TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=20), wait_for_workers=False)
    groups = {}

    def build(rank):
        groups[rank] = make_group("127.0.0.1", master.port, "t/", rank, 1.5, "gloo", "lo")

    threads = [threading.Thread(target=build, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    test = AllReduce()
    test.setup(TestContext(size_bytes=4096, device=torch.device("cpu"), timeout_s=1.5, group=groups[0],
                           rank=0, nranks=2, peer=1))
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"all_reduce of 4096 bytes did not complete in 1.5s"):
        test.run_once()          # rank 1 never joins the collective: a hung peer
    assert time.monotonic() - start < 10


def test_group_setup_without_peer_fails_within_timeout():
    master = TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=20), wait_for_workers=False)
    result, abandoned = guarded(lambda: make_group("127.0.0.1", master.port, "lonely/", 0, 1.0, "gloo", "lo"),
                                budget_s=15, what="round 1 with node rank 1")
    assert not abandoned and result["ok"] is False
    assert result["rule"] in (RULE_TIMEOUT, RULE_ERROR) and result["error"].startswith("round 1 with node rank 1: ")


def test_guarded_abandons_a_job_that_ignores_its_deadline():
    release = threading.Event()
    start = time.monotonic()
    result, abandoned = guarded(lambda: release.wait(30), budget_s=0.5, what="round 2 with node rank 3")
    assert abandoned and result == {"ok": False, "rule": RULE_TIMEOUT,
                                    "error": "round 2 with node rank 3: stuck for 0.5s; abandoned"}
    assert time.monotonic() - start < 5
    release.set()


def test_guarded_maps_errors_to_one_line():
    def boom():
        raise RuntimeError("Connection reset by peer\n  at gloo/transport/tcp/pair.cc:598")
    result, abandoned = guarded(boom, budget_s=5, what="round 1 with node rank 2")
    assert not abandoned
    assert result == {"ok": False, "rule": RULE_ERROR, "error": "round 1 with node rank 2: Connection reset by peer"}
