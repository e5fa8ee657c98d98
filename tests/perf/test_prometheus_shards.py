"""docs/prometheus/ as docs/metrics.md ("At 12,500 nodes") tells to run it,
with real parts: a two-node gloo job (two launchers on loopback, one rank
each, each node's agent on its own --metrics-port), two Prometheus shards
built from shard.yml and rules.yml, each keeping the nodes whose address
hashes to it, and a global Prometheus built from global.yml that federates
only the shards' job-level series and finishes the aggregates across them."""

import hashlib
import json
import os
import shutil
import string
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from diag.common.net import free_port
from tests.functional.launch import ROOT, SCRIPTS, Launch
from tests.waiting import wait_for

DOCS = os.path.join(ROOT, "docs", "prometheus")
SHARDS = 2
JOB = "shardjob"


def _hashmod(address: str, modulus: int) -> int:
    """Prometheus' hashmod relabel action: the md5 of the value, its last 8 bytes big-endian."""
    return int.from_bytes(hashlib.md5(address.encode()).digest()[8:], "big") % modulus


def _ports_one_per_shard() -> list[int]:
    """Two free metrics ports whose addresses hash to different shards, so
    each shard has one node to keep and one to drop."""
    first = free_port()
    while True:
        second = free_port()
        if second != first and _hashmod(f"127.0.0.1:{first}", SHARDS) != _hashmod(f"127.0.0.1:{second}", SHARDS):
            return [first, second]


def _render(name: str, out, **values) -> str:
    with open(os.path.join(DOCS, name)) as f:
        text = string.Template(f.read()).substitute(**values)
    out.write_text(text)
    return str(out)


def _prometheus(exe, config, tmp, port):
    return subprocess.Popen([exe, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _query(port: int, promql: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def _answer(port, promql, want, what):
    def got():
        try:
            result = _query(port, promql)
        except OSError:
            return None
        return result if want(result) else None
    return wait_for(got, what, timeout=90)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    exe = shutil.which("prometheus")
    if exe is None:
        pytest.skip("prometheus is not installed (make system-deps)")
    tmp = tmp_path_factory.mktemp("shards")
    metrics = _ports_one_per_shard()
    master = free_port()
    stop = tmp / "stop"
    nodes = [Launch(["--nnodes", "2", "--node-rank", str(n), "--nproc-per-node", "1",
                     "--master-addr", "127.0.0.1", "--master-port", str(master), "--rdzv-id", JOB,
                     "--timeline-path", str(tmp / "tl"), "--metrics-port", str(metrics[n]),
                     "--metrics-addr", "127.0.0.1", "--perf-window", "5s", os.path.join(SCRIPTS, "perf_train.py")],
                    env={"STOP_FILE": str(stop), "SLOW_MS": "20", "XPU_TIMER_JOB_TOKEN": "shard-test-token"})
             for n in (0, 1)]
    targets = tmp / "nodes.json"     # file_sd: what the scheduler's node list becomes
    targets.write_text(json.dumps([{"targets": [f"127.0.0.1:{p}" for p in metrics]}]))
    rules = str(tmp / "rules.yml")
    shutil.copy(os.path.join(DOCS, "rules.yml"), rules)
    procs, shard_ports = [], []
    try:
        for shard in range(SHARDS):
            d = tmp / f"shard{shard}"
            d.mkdir()
            port = free_port()
            config = _render("shard.yml", d / "prometheus.yml", SHARD=shard, SHARDS=SHARDS,
                             TARGETS=targets, RULES=rules, SCRAPE_INTERVAL="1s")
            procs.append(_prometheus(exe, config, d, port))
            shard_ports.append(port)
        d = tmp / "global"
        d.mkdir()
        global_port = free_port()
        config = _render("global.yml", d / "prometheus.yml", SCRAPE_INTERVAL="1s",
                         SHARD_ADDRESSES=", ".join(f"'127.0.0.1:{p}'" for p in shard_ports))
        procs.append(_prometheus(exe, config, d, global_port))
        yield {"metrics": metrics, "shards": shard_ports, "global": global_port, "nodes": nodes}
        stop.write_text("")
        for node in nodes:
            try:
                code = node.wait(60)
            except subprocess.TimeoutExpired:
                code = None
            assert code == 0, "\n".join(n.output()[-3000:] for n in nodes)
    finally:
        for node in nodes:
            node.kill()
        for p in procs:
            p.terminate()
            p.wait(10)


def test_each_shard_scrapes_only_the_nodes_that_hash_to_it(setup):
    for shard, port in enumerate(setup["shards"]):
        up = _answer(port, 'up{job="xpu-diag"}', lambda r: len(r) == 1 and r[0]["value"][1] == "1",
                     f"shard {shard} scraping one node")
        mine = [p for p in setup["metrics"] if _hashmod(f"127.0.0.1:{p}", SHARDS) == shard]
        assert up[0]["metric"]["instance"] == f"127.0.0.1:{mine[0]}"
        ranks = _answer(port, "xpu_diag_steps_total", lambda r: len(r) == 1, f"shard {shard}'s rank")
        assert ranks[0]["metric"]["job"] == JOB        # honor_labels kept the training job's id


def test_the_global_server_finishes_the_job_aggregates_across_shards(setup):
    g = setup["global"]
    # Each shard counted its own rank; the global sum is the job's two.
    per_shard = _answer(g, "job:xpu_diag_ranks:count", lambda r: len(r) == SHARDS, "both shards' rank counts")
    assert sorted(r["metric"]["shard"] for r in per_shard) == [str(s) for s in range(SHARDS)]
    total = _answer(g, "sum by (job) (job:xpu_diag_ranks:count)", lambda r: len(r) == 1, "the job's rank count")
    assert total[0]["metric"]["job"] == JOB and float(total[0]["value"][1]) == 2
    # Rank 1 sleeps 20 ms before each all_reduce: rank 0 waits for it. The
    # global bottomk over the shards' bottomk names rank 1 as the one behind,
    # once the 5 s windows hold steady steps (during start-up either rank may
    # wait at the first rendezvous), and keeps naming it.
    query = "bottomk by (job) (1, job:xpu_diag_collective_wait_ratio:bottom1)"
    _answer(g, query, lambda r: len(r) == 1 and r[0]["metric"]["rank"] == "1", "rank 1 as the rank that waits least")
    for _ in range(3):
        time.sleep(1.0)
        behind = _query(g, query)
        waits = _query(g, "job:xpu_diag_collective_wait_ratio:max")
        assert len(behind) == 1 and behind[0]["metric"]["rank"] == "1", behind
        assert len(waits) == SHARDS, waits
        assert float(behind[0]["value"][1]) < max(float(w["value"][1]) for w in waits)
    # Only job-level series crossed: no per-rank series reached the global server.
    assert _query(g, "xpu_diag_steps_total") == []
