from hypothesis import given, strategies as st
import pytest

from diag.common.ranks import fold, unfold


@pytest.mark.parametrize("ranks, text", [
    ([], ""),
    ([5], "5"),
    ([0, 1, 2, 3, 9, 11, 12, 13, 14, 15], "0-3,9,11-15"),
    ([3, 1, 2, 2], "1-3"),
    ([0, 2, 4], "0,2,4"),                               # three equally spaced: listed
    (range(0, 1017, 8), "0-1016/8"),                     # one rank per node of 128: by its stride
    ([0, 1, 8, 16, 24, 32], "0-1,8-32/8"),
    ([1, 3, 5, 7, 9, 10], "1-7/2,9-10"),                 # a stride run stops where a consecutive one starts
    ([0, 8, 16, 17, 18], "0,8,16-18"),
])
def test_fold(ranks, text):
    assert fold(ranks) == text


def test_fold_16k_ranks_with_one_missing_stays_short():
    assert fold(r for r in range(16384) if r != 4711) == "0-4710,4712-16383"


@given(st.sets(st.integers(0, 20000)))
def test_unfold_inverts_fold(ranks):
    assert unfold(fold(ranks)) == sorted(ranks)


@given(st.sets(st.integers(0, 64), max_size=40), st.integers(1, 9), st.integers(0, 40))
def test_unfold_inverts_fold_of_strided_sets(extra, step, count):
    ranks = set(range(100, 100 + step * count, step)) | extra
    assert unfold(fold(ranks)) == sorted(ranks)


def test_fold_of_a_tensor_parallel_position_across_100k_ranks_stays_short():
    assert fold(range(3, 100_000, 8)) == "3-99995/8"


@pytest.mark.parametrize("bad", ["x", "3-1", "-2", "1-b", "0-8/0", "4/2", "0-8/x"])
def test_unfold_rejects_with_the_bad_part(bad):
    with pytest.raises(ValueError, match="bad rank range"):
        unfold(bad)
