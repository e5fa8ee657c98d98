"""Property tests: rank bitsets, labels, and the merge's accounting invariants."""

from hypothesis import given, settings, strategies as st

from diag.common.ranks import unfold
from viewer.api import PYTHON, Frame
from viewer.load import thread_keys
from viewer.api import ThreadStack
from viewer.merge import RankLabels, Tree, bits_of, ranks_of, walk
from viewer.outputs.folded import Folded

FRAMES = [Frame(f"f{i}", "m.py", i, PYTHON) for i in range(6)]
stacks = st.lists(st.sampled_from(FRAMES), min_size=0, max_size=5).map(tuple)
# rank -> {thread name -> stack}
jobs = st.dictionaries(st.integers(0, 200), st.dictionaries(st.sampled_from(["Main", "io", "gc"]), stacks,
                                                           min_size=1, max_size=3), min_size=1, max_size=40)


def build(job, cls=Tree):
    groups = {}
    for rank, threads in job.items():
        for name, frames in threads.items():
            groups.setdefault((name, frames), []).append(rank)
    tree = cls() if cls is Tree else cls(max(job) + 1)
    for (name, frames), ranks in groups.items():
        tree.add_stack(name, frames, bits_of(ranks)) if cls is not Tree else tree.add(name, frames, bits_of(ranks))
    return tree


@settings(deadline=None)
@given(st.sets(st.integers(0, 20000)))
def test_bitset_round_trip(ranks):
    assert ranks_of(bits_of(ranks)) == sorted(ranks)


@settings(deadline=None)
@given(st.sets(st.integers(0, 300)), st.integers(301, 400))
def test_stuck_and_leak_partition_the_world(ranks, world):
    labels = RankLabels(world, limit=None)
    text = labels.label(FRAMES[0], bits_of(ranks))
    stuck, leak = text.rsplit("@", 1)[1].split("|")
    assert set(unfold(stuck)) == ranks
    assert set(unfold(leak)) == set(range(world)) - ranks


@settings(max_examples=200, deadline=None)
@given(jobs)
def test_every_rank_accounted_for_exactly_once_at_every_level(job):
    tree = build(job).finish()
    for thread in tree.root.children.values():
        expected = {r for r, ts in job.items() if thread.frame.func in ts}
        assert set(ranks_of(thread.ranks)) == expected
        for node, depth in walk(thread):
            kids = list(node.children.values())
            union = 0
            for k in kids:
                assert k.ranks & union == 0, "a rank sits in two sibling frames"
                assert k.ranks & ~node.ranks == 0, "a child holds a rank its parent lacks"
                union |= k.ranks
            assert node.width == sum(k.width for k in kids) + (node.ranks & ~union).bit_count()
            # Each rank's own stack passes through exactly the nodes its frames name.
            for r in ranks_of(node.ranks):
                assert job[r][thread.frame.func][:depth] == tuple(n.frame for n in _path(thread, node))
    assert tree.root.width == sum(len(ts) for ts in job.values())


def _path(top, target):
    """Frames from ``top`` (exclusive) down to ``target`` (inclusive)."""
    def rec(node, acc):
        if node is target:
            return acc
        for c in node.children.values():
            if c.ranks & target.ranks == target.ranks:
                found = rec(c, acc + [c])
                if found is not None:
                    return found
        return None
    return rec(top, [])


@settings(max_examples=100, deadline=None)
@given(jobs)
def test_folded_counts_sum_to_ranks_per_thread(job):
    folded = build(job, Folded).render()
    per_thread = {}
    for line in folded.splitlines():
        text, count = line.rsplit(" ", 1)
        thread = text.split(";")[0].split("@")[0]
        per_thread[thread] = per_thread.get(thread, 0) + int(count)
    expected = {}
    for ts in job.values():
        for name in ts:
            expected[name] = expected.get(name, 0) + 1
    assert per_thread == expected


@settings(deadline=None)
@given(st.lists(st.sampled_from(["python", "MainThread", "io"]), min_size=1, max_size=6), st.booleans())
def test_thread_keys_are_unique_per_process(names, has_main):
    threads = [ThreadStack(n, 100 + i, (), is_main=has_main and i == 0) for i, n in enumerate(names)]
    keys = [k for k, _ in thread_keys(threads)]
    assert len(keys) == len(set(keys))
    assert ("MainThread" in keys) == (has_main or "MainThread" in names)
