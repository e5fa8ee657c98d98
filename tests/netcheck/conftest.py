"""Fixtures for tests/netcheck: real network namespaces (netns_cluster.py), each
node a fork of the preloaded-torch server in its namespace."""

from __future__ import annotations

import pytest

from tests.netcheck.netns_cluster import Cluster, namespaces_unavailable


@pytest.fixture
def netns_cluster():
    """Factory: ``netns_cluster(n)`` -> a Cluster that is torn down after the test."""
    reason = namespaces_unavailable()
    if reason:
        pytest.skip(reason)
    made: list[Cluster] = []

    def make(n: int, split: bool = False) -> Cluster:
        cluster = Cluster(n, split)
        made.append(cluster)
        cluster.up()
        return cluster

    yield make
    for cluster in made:
        cluster.down()
