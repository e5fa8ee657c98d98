"""The namespace test bed, kept once in bench/netns_cluster.py (the benches use
it too, and a bench imports no test module)."""

from bench.netns_cluster import PYTHON, REPO, Cluster, namespaces_unavailable  # noqa: F401
