"""Real network namespaces as netcheck "nodes": one bridge, one veth per node.

Used by bench/netcheck_scale.py, bench/netcheck_rank_order.py and tests/netcheck
(through conftest.py; tests/netcheck/netns_cluster.py re-exports it). It lives
in bench/ so that no bench imports a test module.
Every name carries a per-run id, so parallel runs do not clash; the only
addresses used are the ones given to the namespaces made here, and down()
removes the namespaces (and with them the veths) and the bridge.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


class Cluster:
    """``n`` namespaces on one bridge, node k at 10.X.Y.(k+1)."""

    def __init__(self, n: int, split: bool = False):
        self.id = f"{os.getpid() % 100000:05d}{random.randint(0, 99):02d}"
        self.n = n
        self.bridge = f"ncb{self.id}"
        self.ns = [f"nc{self.id}-{k}" for k in range(n)]
        self.host_if = [f"nh{self.id}{k:x}" for k in range(n)]
        self.node_if = [f"nn{self.id}{k:x}" for k in range(n)]
        x, y = random.randint(200, 250), random.randint(0, 255)
        self.addr = [f"10.{x}.{y}.{k + 1}" for k in range(n)]
        self.procs: list[subprocess.Popen] = []
        # split: two bridges joined by one veth (``throttle_link``); node k on bridge k % 2,
        # so the bridges interleave by node rank as a job's order often does.
        self.bridges = [self.bridge, f"ncc{self.id}"] if split else [self.bridge]
        self.link_if = (f"nx{self.id}a", f"nx{self.id}b")

    def up(self) -> None:
        # Bridged frames skip iptables: a host firewall (e.g. Docker's FORWARD
        # DROP) must not decide whether the namespaces can talk.
        if _ip("link", "add", self.bridge, "type", "bridge", "nf_call_iptables", "0", "nf_call_ip6tables", "0",
               check=False).returncode != 0:
            _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")
        if len(self.bridges) == 2:
            if _ip("link", "add", self.bridges[1], "type", "bridge", "nf_call_iptables", "0", "nf_call_ip6tables",
                   "0", check=False).returncode != 0:
                _ip("link", "add", self.bridges[1], "type", "bridge")
            _ip("link", "set", self.bridges[1], "up")
            _ip("link", "add", self.link_if[0], "type", "veth", "peer", "name", self.link_if[1])
            for end, br in zip(self.link_if, self.bridges):
                _ip("link", "set", end, "master", br)
                _ip("link", "set", end, "up")
        for k in range(self.n):
            _ip("netns", "add", self.ns[k])
            _ip("link", "add", self.host_if[k], "type", "veth", "peer", "name", self.node_if[k])
            _ip("link", "set", self.node_if[k], "netns", self.ns[k])
            _ip("link", "set", self.host_if[k], "master", self.bridges[k % len(self.bridges)])
            _ip("link", "set", self.host_if[k], "up")
            _ip("-n", self.ns[k], "addr", "add", f"{self.addr[k]}/24", "dev", self.node_if[k])
            _ip("-n", self.ns[k], "link", "set", self.node_if[k], "up")
            _ip("-n", self.ns[k], "link", "set", "lo", "up")

    def throttle(self, k: int, rate: str = "16mbit") -> None:
        """tbf on both ends of node k's veth: its traffic both ways goes at ``rate``."""
        tbf = ["root", "tbf", "rate", rate, "burst", "32kbit", "latency", "200ms"]
        subprocess.run(["tc", "qdisc", "add", "dev", self.host_if[k], *tbf], check=True)
        subprocess.run(["ip", "netns", "exec", self.ns[k], "tc", "qdisc", "add", "dev", self.node_if[k], *tbf],
                       check=True)

    def isolate(self, k: int) -> None:
        """Node k reaches node 0 (the store) but no other node: its subnet route is
        replaced by a host route to node 0 (gVisor's tc has no filters)."""
        subnet = self.addr[0].rsplit(".", 1)[0] + ".0/24"
        _ip("-n", self.ns[k], "route", "del", subnet, "dev", self.node_if[k])
        _ip("-n", self.ns[k], "route", "add", f"{self.addr[0]}/32", "dev", self.node_if[k])

    def throttle_link(self, rate: str) -> None:
        """tbf on both ends of the veth between the two bridges."""
        tbf = ["root", "tbf", "rate", rate, "burst", "32kbit", "latency", "200ms"]
        for end in self.link_if:
            subprocess.run(["tc", "qdisc", "add", "dev", end, *tbf], check=True)

    def node_argv(self, k: int, args: list[str], port: int, plain: bool = False) -> list[str]:
        """Node k's netcheck command line, after ``python``. ``plain``: no
        --iface and no --node-name, as a new user would run it (every
        namespace shares the host's hostname)."""
        return ["-m", "diag.netcheck.cli", "--nnodes", str(self.n), "--node-rank", str(k),
                "--master-addr", self.addr[0], "--master-port", str(port),
                *([] if plain else ["--node-name", f"node{k}", "--iface", self.node_if[k]]),
                "--backend", "gloo", "--no-progress", *args]

    @staticmethod
    def node_env() -> dict:
        """A node's environment: this one's, less what would tell netcheck a rendezvous of its own."""
        return {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT",
                                                                 "XPU_TIMER_NODE_NAME", "GLOO_SOCKET_IFNAME",
                                                                 "SLURM_JOB_NODELIST")}

    def start(self, k: int, args: list[str], port: int, plain: bool = False) -> subprocess.Popen:
        """Node k's netcheck, started (``node_argv``)."""
        # nice -10: other jobs on a shared CI host must not decide a bandwidth
        # verdict; the throttled link is what the test is about.
        cmd = ["ip", "netns", "exec", self.ns[k], "nice", "-n", "-10", PYTHON, *self.node_argv(k, args, port, plain)]
        proc = subprocess.Popen(cmd, cwd=REPO, env=self.node_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        self.procs.append(proc)
        return proc

    def run_all(self, args_for, port: int = 29500, timeout: float = 90.0, on_line=None,
                hung: frozenset = frozenset(), plain: bool = False) -> list[tuple[int, str, str]]:
        """Start every node (node 0 first), wait for all; returns [(rc, stdout, stderr)].

        ``on_line(line, procs)`` sees node 0's stderr lines as they come.
        Nodes in ``hung`` are not waited for: they are killed once the others end.
        """
        procs = [self.start(k, args_for(k), port, plain) for k in range(self.n)]
        streams: dict[tuple[int, str], list[str]] = {}

        def pump(k: int, name: str, stream) -> None:
            for line in stream:
                streams.setdefault((k, name), []).append(line)
                if on_line is not None and k == 0 and name == "err":
                    on_line(line, procs)

        readers = [threading.Thread(target=pump, args=(k, name, getattr(p, "std" + name)), daemon=True)
                   for k, p in enumerate(procs) for name in ("out", "err")]
        for r in readers:
            r.start()
        deadline = time.monotonic() + timeout
        for k, proc in enumerate(procs):
            if k in hung:
                continue
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                self.kill_all()
                raise AssertionError(f"netcheck node{k} did not finish within {timeout}s")
        for k in hung:
            procs[k].send_signal(signal.SIGKILL)
            procs[k].wait(10)
        for r in readers:
            r.join(5)
        return [(p.returncode, "".join(streams.get((k, "out"), [])), "".join(streams.get((k, "err"), [])))
                for k, p in enumerate(procs)]

    def exec(self, k: int, cmd: list[str], env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run ``cmd`` in node k's namespace."""
        return subprocess.run(["ip", "netns", "exec", self.ns[k], *cmd], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=timeout)

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)

    def down(self) -> None:
        self.kill_all()
        for ns in self.ns:
            _ip("netns", "del", ns, check=False)
        if len(self.bridges) == 2:
            _ip("link", "del", self.link_if[0], check=False)
        for br in self.bridges:
            _ip("link", "del", br, check=False)


def namespaces_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"ncprobe{os.getpid()}"
    try:
        res = _ip("netns", "add", probe, check=False)
    except FileNotFoundError:
        return "iproute2 (ip) is not installed; run make system-deps"
    if res.returncode != 0:
        return f"cannot make a network namespace: {res.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    if subprocess.run(["which", "tc"], capture_output=True).returncode != 0:
        return "tc is not installed (iproute2)"
    return None
