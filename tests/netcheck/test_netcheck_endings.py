"""Every netcheck run ends with its verdict printed and written (issue 11, items 3-5), on loopback."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diag.common.net import free_port
from diag.netcheck.report import expand_hostlist
from tests import preloaded

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(120)


def _netcheck(*args, env=None, timeout=100):
    # forked with torch imported (tests/preloaded.py): netcheck imports it
    return preloaded.run(["-m", "diag.netcheck.cli", *args], REPO, env, timeout)


def test_missing_node_is_named_by_rank_and_slurm_name_and_the_run_ends(tmp_path):
    """Only node 0 of 2 starts: it used to print "1 of 2 node(s) joined" and wait forever."""
    import os
    out = tmp_path / "faults.json"
    env = dict(os.environ, SLURM_JOB_NODELIST="gpu[07-08]")
    start = time.monotonic()
    res = _netcheck("--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1", "--master-port",
                    str(free_port()), "--iface", "lo", "--backend", "gloo", "--join-timeout", "3s", "--timeout", "5s",
                    "--no-progress", "--format", "slurm", "--output", str(out), env=env, timeout=60)
    took = time.monotonic() - start
    assert res.returncode == 1, res.stderr
    assert took < 3 + 20, took             # the join timeout, plus start-up on a loaded host
    assert res.stdout.strip() == "gpu08"   # sbatch --exclude=$(netcheck ... --format slurm) works
    assert "missing: node rank 1 (Slurm node gpu08)" in res.stderr
    doc = json.loads(out.read_text())
    assert [f["node"] for f in doc["faulty"]] == ["gpu08"]
    assert "node rank 1" in doc["faulty"][0]["reason"] and "did not join within 3s" in doc["faulty"][0]["reason"]
    # The node that did join had no partner: it is unknown, never healthy.
    mine = [r for r in doc["records"] if r["metric"] == "node" and r["node"] != "gpu08"]
    assert [r["verdict"] for r in mine] == ["unknown"]


def test_expand_hostlist_reads_slurm_nodelists():
    assert expand_hostlist("gpu[01-03,7],cpu1") == ["gpu01", "gpu02", "gpu03", "gpu7", "cpu1"]
    assert expand_hostlist("n1") == ["n1"] and expand_hostlist("") == []


def test_nproc_per_node_verdict_survives_a_faulty_local_process(tmp_path):
    """Every unit is faulty (an impossible floor): the non-coordinating process exits 1
    first, and torchrun used to kill the coordinator before it printed or wrote anything."""
    out = tmp_path / "faults.json"
    res = _netcheck("--nnodes", "1", "--nproc-per-node", "2", "--master-port", str(free_port()), "--iface", "lo",
                    "--size", "128K", "--iters", "2", "--warmup", "0", "--node-name", "hostA", "--min-busbw",
                    "1e6", "--max-rounds", "1", "--no-progress", "--format", "slurm", "--output", str(out))
    assert res.returncode == 1, res.stderr[-3000:]
    assert res.stdout.strip() == "hostA", res.stdout + res.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert [f["node"] for f in doc["faulty"]] == ["hostA"]


def test_version_and_preflight_help():
    from diag import __version__
    res = _netcheck("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"netcheck {__version__}"
    res = _netcheck("preflight", "--help")
    assert res.returncode == 0
    assert res.stdout.startswith("usage: netcheck preflight") and "job hook" in res.stdout
    assert "--switchbox-check" not in res.stdout        # preflight always checks the switchbox
    check = _netcheck("--help").stdout
    assert "exit status" in check and "Slurm Prolog" not in check


def test_every_flag_has_help():
    from diag.netcheck.config import _parser
    for mode in ("check", "preflight"):
        for action in _parser(mode)._actions:
            assert action.help, (mode, action.option_strings or action.dest)


def test_without_torch_one_line_not_a_traceback():
    code = ("import sys; sys.modules['torch'] = None; from diag.netcheck.cli import main; "
            "main(['--nnodes', '2', '--master-port', '1', '--backend', 'gloo'])")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 3
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "torch is not installed" in res.stderr and "pip install torch" in res.stderr


def test_ctrl_c_stops_the_rich_progress_cleanly():
    """On a terminal the coordinator draws rich progress bars; Ctrl-C mid-round ends
    it with 130, the cursor shown again and no traceback."""
    import os
    import pty
    import select
    import signal
    port = str(free_port())
    common = ["--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", port, "--iface", "lo", "--backend",
              "gloo", "--size", "4M", "--iters", "100000", "--timeout", "60s"]
    master, slave = pty.openpty()
    # Node 0 starts as a user's shell starts it: SIGINT neither ignored nor
    # blocked (both are inherited through exec, and make test's worker has
    # run hundreds of tests before this one: CI-path runs 6 to 9 saw the node
    # never take its Ctrl-C, which was not seen alone).
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        node0 = subprocess.Popen([sys.executable, "-m", "diag.netcheck.cli", *common, "--node-rank", "0"],
                                 cwd=REPO, stdout=slave, stderr=slave, stdin=subprocess.DEVNULL)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        signal.signal(signal.SIGINT, handler)
    inherited = (handler, sorted(blocked))
    node1 = subprocess.Popen([sys.executable, "-m", "diag.netcheck.cli", *common, "--node-rank", "1",
                              "--no-progress"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(slave)
    seen = b""

    def read(until: float, first_round: bool = False) -> None:
        """The terminal read as a terminal would be, until ``until`` (or, with
        ``first_round``, until round 1 shows): a pty nobody reads blocks its
        writer once its buffer of a few KB is full, and rich redraws its bars
        several times a second."""
        nonlocal seen
        while time.monotonic() < until:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    return      # EIO: the node has exited, the terminal is closed
            if first_round and b"round 1" in seen:
                return
    try:
        read(time.monotonic() + 60, first_round=True)
        assert b"round 1" in seen, seen[-2000:]
        read(time.monotonic() + 1.0)       # mid-round
        node0.send_signal(signal.SIGINT)
        start = time.monotonic()
        while node0.poll() is None and time.monotonic() - start < 30:
            read(time.monotonic() + 0.5)
        if node0.poll() is None:
            # Still up (CI-path runs 6 and 7, not reproduced alone): where its threads are.
            spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
            where = subprocess.run([spy, "dump", "--pid", str(node0.pid)], capture_output=True, text=True,
                                   timeout=60)
            with open(f"/proc/{node0.pid}/status") as f:
                masks = [line for line in f if line.startswith(("SigBlk", "SigIgn", "SigCgt"))]
            raise AssertionError(f"node 0 still running 30 s after Ctrl-C (the worker's SIGINT handler and "
                                 f"blocked set: {inherited}; the node's {''.join(masks)}):\n"
                                 f"{where.stdout}{where.stderr}\n{seen[-1000:]!r}")
        read(time.monotonic() + 1)
        assert node0.returncode == 130 and time.monotonic() - start < 10, (node0.returncode, seen[-2000:])
        assert b"Traceback" not in seen and b"\x1b[?25h" in seen[-200:], seen[-2000:]   # cursor shown again
    finally:
        for p in (node0, node1):
            if p.poll() is None:
                p.kill()
                p.wait()
        os.close(master)


def test_loopback_towards_a_remote_master_stops_at_once_with_the_fix():
    """--iface lo (or a hostname resolving to 127.0.1.1) with peers elsewhere: every
    pair would be refused; netcheck says so before waiting for anything."""
    start = time.monotonic()
    res = _netcheck("--nnodes", "2", "--node-rank", "1", "--master-addr", "198.51.100.7", "--master-port", "29999",
                    "--iface", "lo", "--backend", "gloo", "--join-timeout", "60s", "--no-progress", timeout=60)
    assert res.returncode == 3 and time.monotonic() - start < 30
    lines = res.stderr.strip().splitlines()
    assert lines == ["netcheck: node rank 1: the --iface lo gives loopback 127.0.0.1, which other nodes cannot "
                     "reach; pass --iface <the interface that reaches 198.51.100.7>"], res.stderr
