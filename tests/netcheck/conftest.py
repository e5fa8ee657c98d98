"""Fixtures for tests/netcheck: real network namespaces (netns_cluster.py)."""

from __future__ import annotations

import pytest

from tests.netcheck.netns_cluster import Cluster, namespaces_unavailable


def _clusters():
    """Yields ``make(n, split=False)`` -> a Cluster that is up; downs them all after."""
    reason = namespaces_unavailable()
    if reason:
        pytest.skip(reason)
    made: list[Cluster] = []

    def make(n: int, split: bool = False) -> Cluster:
        cluster = Cluster(n, split)
        made.append(cluster)
        cluster.up()
        return cluster

    try:
        yield make
    finally:
        for cluster in made:
            cluster.down()


@pytest.fixture
def netns_cluster():
    """Factory: ``netns_cluster(n)`` -> a Cluster that is torn down after the test."""
    yield from _clusters()


@pytest.fixture(scope="module")
def module_netns_clusters():
    """As netns_cluster, for a module fixture: torn down after the module."""
    yield from _clusters()
