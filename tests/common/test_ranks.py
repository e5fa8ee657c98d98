from hypothesis import given, strategies as st
import pytest

from diag.common.ranks import fold, unfold


@pytest.mark.parametrize("ranks, text", [
    ([], ""),
    ([5], "5"),
    ([0, 1, 2, 3, 9, 11, 12, 13, 14, 15], "0-3,9,11-15"),
    ([3, 1, 2, 2], "1-3"),
    ([0, 2, 4], "0,2,4"),
])
def test_fold(ranks, text):
    assert fold(ranks) == text


def test_fold_16k_ranks_with_one_missing_stays_short():
    assert fold(r for r in range(16384) if r != 4711) == "0-4710,4712-16383"


@given(st.sets(st.integers(0, 20000)))
def test_unfold_inverts_fold(ranks):
    assert unfold(fold(ranks)) == sorted(ranks)


@pytest.mark.parametrize("bad", ["x", "3-1", "-2", "1-b"])
def test_unfold_rejects_with_the_bad_part(bad):
    with pytest.raises(ValueError, match="bad rank range"):
        unfold(bad)
