import itertools

import pytest

from diag.netcheck.pairing import FAULTY, HEALTHY, PairOutcome, Pinpointer


def simulate(n, faulty, max_rounds=10):
    """Run the rounds with a perfect oracle: a pair is bad iff a member is faulty."""
    pp = Pinpointer(list(range(n)), max_rounds=max_rounds)
    while (pairs := pp.plan()) is not None:
        assert len({u for p in pairs for u in p}) == 2 * len(pairs), "a unit is in two pairs"
        pp.record([PairOutcome(a, b, not ({a, b} & faulty), "slow") for a, b in pairs])
    return pp


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 8, 16, 17])
def test_every_single_fault_is_pinned_and_nothing_else(n):
    for bad in range(n):
        pp = simulate(n, {bad})
        assert set(pp.faulty) == {bad}, (n, bad, pp.faulty)
        assert all(pp.status[u] == HEALTHY for u in range(n) if u != bad)
        # even: 2 rounds; odd: the waiting unit may need a third (docs/netcheck.md)
        assert pp.rounds <= (2 if n % 2 == 0 else 3), (n, bad, pp.rounds)


@pytest.mark.parametrize("n", [4, 6, 8])
def test_no_fault_even_is_one_round(n):
    pp = simulate(n, set())
    assert pp.rounds == 1 and not pp.faulty


def test_odd_count_tests_the_leftover_in_round_two():
    pp = simulate(5, set())
    assert pp.rounds == 2 and not pp.faulty and all(s == HEALTHY for s in pp.status.values())


@pytest.mark.parametrize("n, k", [(6, 2), (8, 2), (8, 3), (16, 4), (9, 2)])
def test_k_faults_all_found(n, k):
    for faulty in itertools.islice(itertools.combinations(range(n), k), 60):
        pp = simulate(n, set(faulty))
        assert set(pp.faulty) == set(faulty), (n, faulty, pp.faulty)


def test_k_faults_two_rounds_with_enough_healthy_nodes():
    # n >= 4k: every suspect gets its own healthy partner in round 2.
    for faulty in itertools.combinations(range(16), 4):
        assert simulate(16, set(faulty)).rounds == 2


def test_two_nodes_cannot_be_separated_and_both_are_reported():
    pp = simulate(2, {1})
    assert set(pp.faulty) == {0, 1}
    assert "no healthy node left" in pp.faulty[0]


def test_dropped_node_partner_is_retested_not_blamed():
    pp = Pinpointer(list(range(4)))
    assert pp.plan() == [(0, 1), (2, 3)]
    pp.mark_faulty(3, "no result: dropped out")
    pp.record([PairOutcome(0, 1, True), PairOutcome(2, 3, False, "timeout")])
    pairs = pp.plan()
    assert pairs and any(2 in p for p in pairs) and all(3 not in p for p in pairs)
    pp.record([PairOutcome(a, b, True) for a, b in pairs])
    assert pp.plan() is None
    assert set(pp.faulty) == {3} and pp.status[2] == HEALTHY


def test_pinned_reason_names_the_healthy_partner():
    pp = Pinpointer([0, 1, 2, 3], names={0: "a", 1: "b", 2: "c", 3: "d"})
    pp.plan()
    pp.record([PairOutcome(0, 1, False, "busbw low"), PairOutcome(2, 3, True)])
    pairs = pp.plan()
    pp.record([PairOutcome(a, b, 1 not in (a, b), "busbw low") for a, b in pairs])
    assert pp.status[1] == FAULTY and pp.faulty[1].startswith("busbw low; partner ")
    assert pp.faulty[1].endswith(" is healthy") and pp.plan() is None


def test_max_rounds_gives_up_naming_partners():
    pp = simulate(4, {0, 1, 2, 3}, max_rounds=3)
    assert set(pp.faulty) == {0, 1, 2, 3}


def test_prefers_partners_on_another_host():
    pp = Pinpointer([0, 1, 2, 3, 4, 5], hosts={0: "h0", 1: "h1", 2: "h0", 3: "h1", 4: "h0", 5: "h1"})
    pp.plan()
    pp.record([PairOutcome(0, 1, False, "x"), PairOutcome(2, 3, True), PairOutcome(4, 5, True)])
    for a, b in pp.plan():
        assert pp.hosts[a] != pp.hosts[b]


from hypothesis import given, settings
from hypothesis import strategies as st


@st.composite
def fleets(draw):
    n = draw(st.integers(min_value=3, max_value=40))
    k = draw(st.integers(min_value=0, max_value=max(n // 4, 0)))
    faulty = draw(st.sets(st.integers(min_value=0, max_value=n - 1), min_size=k, max_size=k))
    return n, faulty


@settings(max_examples=300, deadline=None)
@given(fleets())
def test_property_faults_are_found_exactly_and_fast(fleet):
    """n >= 4k: every fault is pinned, no healthy unit is blamed, in <= 3 rounds."""
    n, faulty = fleet
    pp = simulate(n, faulty)
    assert set(pp.faulty) == faulty
    assert pp.rounds <= 3
    if n % 2 == 0 and faulty:
        assert pp.rounds == 2
