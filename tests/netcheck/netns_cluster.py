"""The namespace test bed, kept once in bench/netns_cluster.py (the benches use
it too, and a bench imports no test module), with its nodes forked from the
preloaded-torch server (tests/preloaded.py).

A netcheck node imports torch (gloo is its engine): about 1.3 of the 1.5
CPU-seconds a node of these tests costs, some fifty nodes a run of
make test, which is bound by CPU. A fork joins the node's namespace and
nice level as ``ip netns exec NS nice -n -10`` would, and then runs the same
CLI; what it skips is the interpreter's start and torch's import."""

from __future__ import annotations

import io

from bench import netns_cluster as bench
from bench.netns_cluster import REPO, namespaces_unavailable  # noqa: F401 (conftest.py)
from tests import preloaded


class Cluster(bench.Cluster):

    def fork(self, k: int, argv: list[str], env: dict, nice: int = 0, streams: bool = False) -> preloaded.Forked:
        """``python *argv`` in node k's namespace, forked; ``streams``: its
        stdout and stderr read as text as they come (``subprocess``'s
        ``text=True`` pipes), else ``output()``."""
        proc = preloaded.Forked(argv, env, str(REPO), streams=streams, netns=self.ns[k], nice=nice)
        if streams:
            proc.stdout, proc.stderr = (io.TextIOWrapper(f, errors="replace") for f in (proc.stdout, proc.stderr))
        return proc

    def start(self, k: int, args: list[str], port: int, plain: bool = False) -> preloaded.Forked:
        # nice -10 as the bench's nodes: other tests must not decide a bandwidth verdict
        proc = self.fork(k, self.node_argv(k, args, port, plain), self.node_env(), nice=-10, streams=True)
        self.procs.append(proc)
        return proc
