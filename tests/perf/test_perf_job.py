"""The performance view end to end, with real parts: a 2-rank gloo job under
xpu_timer_launch --metrics-port, scraped by a real Prometheus server (Debian
package ``prometheus``) that answers PromQL with one series per rank, and
``xpu-diag top`` rendered in a real tmux, its screen captured."""

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest

from diag.common.net import free_port
from tests.functional.launch import ROOT, SCRIPTS, Launch
from tests.waiting import poll_until, wait_for

TRAIN = os.path.join(SCRIPTS, "perf_train.py")


def _get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("perfjob")
    port = free_port()
    stop = tmp / "stop"
    launch = Launch(["--nproc-per-node", "2", "--rdzv-id", "perfjob", "--timeline-path", str(tmp),
                     "--metrics-port", str(port), "--metrics-addr", "127.0.0.1",
                     "--perf-window", "10s", TRAIN], env={"STOP_FILE": str(stop), "SLOW_MS": "20"})
    url = f"http://127.0.0.1:{port}/metrics"

    def both_ranks():
        try:
            text = _get(url)
        except OSError:
            return None
        found = re.findall(r'xpu_diag_op_calls_total\{[^}]*op="all_reduce"[^}]*\}', text)
        return text if len({re.search(r'rank="(\d+)"', f).group(1) for f in found}) == 2 else None
    try:
        first = poll_until(both_ranks, 120, 0.5)
        assert first, launch.output()
        yield {"launch": launch, "url": url, "port": port, "dir": tmp / "perfjob", "first": first}
        stop.write_text("")
        assert launch.wait(60) == 0, launch.output()
        assert len(re.findall(r"rank \d done after", launch.output())) == 2, launch.output()
    finally:
        launch.kill()


def test_metrics_endpoint_speaks_the_text_format(job):
    text = _get(job["url"])
    assert "# TYPE xpu_diag_op_calls_total counter" in text
    assert "# TYPE xpu_diag_collective_wait_ratio gauge" in text
    line = re.search(r'^xpu_diag_op_bytes_total\{([^}]*)\} (\S+)$', text, re.M)
    labels = dict(re.findall(r'(\w+)="([^"]*)"', line.group(1)))
    assert set(labels) == {"job", "node", "rank", "local_rank", "gpu", "op", "comm", "group"}
    assert labels["job"] == "perfjob" and float(line.group(2)) > 0
    # the default group by the name the HANG line and hang.json give it, its id beside it
    ar = re.findall(r'^xpu_diag_op_calls_total\{([^}]*op="all_reduce"[^}]*)\}', text, re.M)
    assert ar and all('group="default"' in f and 'comm="0000000000000000"' in f for f in ar), ar


@pytest.fixture(scope="module")
def prometheus(job, tmp_path_factory):
    exe = shutil.which("prometheus")
    if exe is None:
        pytest.skip("prometheus is not installed (make system-deps)")
    tmp = tmp_path_factory.mktemp("prom")
    port = free_port()
    (tmp / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: xpu-diag\n"
        "    honor_labels: true\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{job['port']}']}}]\n")
    proc = subprocess.Popen([exe, f"--config.file={tmp / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def _query(base: str, promql: str) -> list:
    body = json.loads(_get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})))
    assert body["status"] == "success", body
    return body["data"]["result"]


def _per_rank(base, promql, until=lambda by_rank: True):
    """The query's value by rank, once both ranks answer and ``until`` holds
    of them; not within a minute fails the test."""
    def got():
        try:
            result = _query(base, promql)
        except OSError:
            return None
        by_rank = {r["metric"].get("rank"): float(r["value"][1]) for r in result}
        return by_rank if set(by_rank) == {"0", "1"} and until(by_rank) else None
    return wait_for(got, f"PromQL {promql!r} with ranks 0 and 1", timeout=60)


def test_prometheus_scrapes_one_series_per_rank(prometheus):
    # A rate needs two scrapes that saw the counter move: the agent publishes
    # about once a second, so the first scrapes of a loaded machine's
    # Prometheus may hold one value twice (a rate of 0) before it moves.
    calls = _per_rank(prometheus, 'sum by (rank) (rate(xpu_diag_op_calls_total{op="all_reduce"}[5s]))',
                      until=lambda by_rank: all(v > 0 for v in by_rank.values()))
    assert calls and all(v > 0 for v in calls.values()), calls
    # The queries docs/metrics.md puts on a dashboard all answer per rank.
    busbw = _per_rank(prometheus, 'max by (rank) (xpu_diag_op_busbw_bytes_per_second{op="all_reduce"})')
    assert all(v > 0 for v in busbw.values()), busbw
    wait = _per_rank(prometheus, "max by (rank) (xpu_diag_collective_wait_ratio)")
    # Rank 1 sleeps 20 ms before each all_reduce: rank 0 spends that time waiting in it.
    assert 0 <= wait["1"] < wait["0"] <= 1, wait
    step = _per_rank(prometheus, "max by (rank) (xpu_diag_step_seconds)")
    assert all(v >= 0.015 for v in step.values()), step


def _tmux(*args, check=True):
    # No COLUMNS/LINES from the test's environment: top must size itself from the pane.
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TMUX")}
    return subprocess.run(["tmux", "-L", f"xpu-diag-test-{os.getpid()}", "-f", "/dev/null", *args],
                          capture_output=True, text=True, timeout=20, check=check, env=env)


def test_top_renders_under_tmux(job):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (make system-deps)")
    cmd = f"{sys.executable} -m diag.cli top --job {job['dir']} --sort wait"
    _tmux("new-session", "-d", "-s", "top", "-x", "160", "-y", "20", "-c", ROOT, cmd)
    _tmux("resize-window", "-t", "top", "-x", "160", "-y", "20", check=False)
    try:
        def screen(want):
            text = _tmux("capture-pane", "-p", "-t", "top").stdout
            return text if want in text else None
        text = wait_for(lambda: screen("sort: wait"), "top's first frame", timeout=30)
        text = poll_until(lambda: (t := screen("busbw")) and re.search(r"all_reduce", t) and t, 30)
        assert text, _tmux("capture-pane", "-p", "-t", "top").stdout
        rows = [ln for ln in text.splitlines() if re.match(r"^\W*[01]\W", ln)]
        assert len(rows) == 2, text
        # sorted by wait share, highest first: rank 0 (it waits for rank 1)
        assert re.match(r"^\W*0\W", rows[0]), text
        _tmux("send-keys", "-t", "top", "r")
        wait_for(lambda: screen("sort: rank"), "re-sort on the r key", timeout=10)
        _tmux("send-keys", "-t", "top", "q")
        wait_for(lambda: _tmux("has-session", "-t", "top", check=False).returncode != 0,
                 "top to quit on q", timeout=10)
        print(text)
    finally:
        _tmux("kill-server", check=False)


def test_top_once_and_its_plain_text_form(job):
    from diag.perf import top
    # The agents' metrics count ops from the first; a rank's window reaches
    # the collector with a later report (alone, this test can come first).
    wait_for(lambda: len(top.Source(None, str(job["dir"])).fetch().ranks) == 2,
             "both ranks' windows at the collector", timeout=60)
    # Piped (a log, a script) with no COLUMNS: the full table, never cut to 80 columns.
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    out = subprocess.run([sys.executable, "-m", "diag.cli", "top", "--job", str(job["dir"]), "--once",
                          "--sort", "rank"], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert "…" not in out.stdout, out.stdout
    lines = out.stdout.splitlines()
    head = next(ln for ln in lines if ln.split()[:3] == ["rank", "hang", "node"])
    assert all(h in head for h in top.HEADS), out.stdout
    got = [ln.split() for ln in lines[lines.index(head) + 1:]]
    assert [r[0] for r in got] == ["0", "1"] and all(len(r) >= len(top.HEADS) for r in got), out.stdout
    # --json: the same rows, machine-readable
    js = subprocess.run([sys.executable, "-m", "diag.cli", "top", "--job", str(job["dir"]), "--json"],
                        cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert js.returncode == 0, js.stderr
    doc = json.loads(js.stdout)
    assert doc["job_id"] == "perfjob" and [r["rank"] for r in doc["ranks"]] == [0, 1], js.stdout
    assert all(r["hostname"] and 0 <= r["wait_share"] <= 1 and r["window_s"] > 0 for r in doc["ranks"]), js.stdout
    # A healthy job: nothing marked, and an op caught in flight is a young one
    # (at the collector: its age in the report, plus the report's, up to the
    # 1 s interval; a loaded host starves a rank for a while).
    assert all(r["verdict"] is None and (r["in_flight"] is None or r["in_flight"]["seconds"] < 3)
               for r in doc["ranks"]), js.stdout
    ages = re.findall(r'^xpu_diag_op_in_flight_seconds\{[^}]*\} (\S+)$', _get(job["url"]), re.M)
    assert all(float(a) < 1 for a in ages), ages
    view = top.Source(None, str(job["dir"])).fetch()
    assert view.job_id == "perfjob" and [r.rank for r in view.ranks] == [0, 1]
    text = top.plain(view, "rank").splitlines()
    assert text[2].split()[0] == "rank" and [ln.split()[0] for ln in text[3:]] == ["0", "1"]
    # a wrong token is one line, not a traceback
    bad = subprocess.run([sys.executable, "-m", "diag.cli", "top", "--collector", view_address(job),
                          "--once"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "XPU_TIMER_JOB_TOKEN": "wrong"})
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "job's token" in bad.stderr, bad.stderr


def view_address(job) -> str:
    with open(job["dir"] / "collector.json") as f:
        return json.load(f)["address"]
