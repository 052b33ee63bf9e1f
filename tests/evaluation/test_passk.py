"""pass@k against brute-force enumeration and hand-computed values."""

import itertools
import math
from fractions import Fraction

import pytest

from selfplay_core.evaluation.passk import PassAtKError, mean_pass_at_k, parse_ks, pass_at_k, pass_at_ks


def brute_force(n: int, c: int, k: int) -> Fraction:
    """Share of all k-subsets of n samples (the first c correct) containing a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    good = sum(any(i < c for i in s) for s in subsets)
    return Fraction(good, len(subsets))


@pytest.mark.parametrize("n", range(1, 9))
def test_matches_brute_force_for_every_small_case(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(float(brute_force(n, c, k)), abs=1e-12), (n, c, k)


@pytest.mark.parametrize("n,c,k,expected", [
    (20, 1, 1, 0.05),
    (20, 1, 20, 1.0),
    (10, 3, 2, 1 - 21 / 45),        # 1 - C(7,2)/C(10,2)
    (5, 2, 3, 1 - 1 / 10),          # 1 - C(3,3)/C(5,3)
    (100, 0, 10, 0.0),
    (100, 100, 100, 1.0),
    (4, 1, 2, 0.5),
])
def test_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_1_is_the_fraction_correct():
    for n in (1, 7, 20, 200):
        for c in range(0, n + 1, max(1, n // 7)):
            assert pass_at_k(n, c, 1) == pytest.approx(c / n, abs=1e-12)


def test_stable_where_binomials_are_huge():
    # C(1000, 500) has 300 digits; the product form stays accurate.
    n, c, k = 1000, 7, 500
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-10)


def test_edge_cases_c_zero_and_c_n():
    assert pass_at_k(20, 0, 1) == 0.0
    assert pass_at_k(20, 0, 20) == 0.0
    assert pass_at_k(20, 20, 1) == 1.0
    assert pass_at_k(20, 19, 2) == 1.0  # n - c < k: every pair contains a correct sample


@pytest.mark.parametrize("n,c,k,message", [
    (5, 1, 6, "pass@6 needs at least 6 samples per problem, got n=5"),
    (5, 6, 1, "c cannot exceed n"),
    (5, 1, 0, "k must be >= 1"),
    (-1, 0, 1, "must be >= 0"),
    (5, 1.0, 1, "c must be an integer"),
    (5, True, 1, "c must be an integer"),
])
def test_bad_arguments_raise_one_clear_error(n, c, k, message):
    with pytest.raises(PassAtKError, match=message.replace("(", r"\(").replace(")", r"\)")):
        pass_at_k(n, c, k)


def test_mean_and_named_shortfall():
    counts = {"a": (4, 1), "b": (4, 4), "c": (4, 0)}
    assert pass_at_ks(counts, [1, 2]) == {"pass@1": pytest.approx((0.25 + 1 + 0) / 3),
                                          "pass@2": pytest.approx((0.5 + 1 + 0) / 3)}
    assert mean_pass_at_k([(2, 1), (2, 2)], 1) == pytest.approx(0.75)
    with pytest.raises(PassAtKError, match=r"1 problem\(s\) have fewer \(e.g. 'x' with 2\)"):
        pass_at_ks({"x": (2, 1), "y": (5, 1)}, [5])
    with pytest.raises(PassAtKError, match="no problems"):
        mean_pass_at_k([], 1)


def test_parse_ks():
    assert parse_ks("20,1, 10,1") == [1, 10, 20]
    for bad in ("", "a", "0,1", "-1"):
        with pytest.raises(PassAtKError):
            parse_ks(bad)
