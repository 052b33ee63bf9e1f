import math

import pytest

from selfplay_core.evaluation.verdict import VerdictError, compare


def test_paired_difference_and_standard_error_by_hand():
    start = {"a": (8, 0), "b": (8, 8), "c": (8, 4)}
    end = {"a": (8, 8), "b": (8, 8), "c": (8, 4), "extra": (8, 8)}   # "extra" is not shared
    v = compare(start, end, k=1)
    # per-problem pass@1: start 0, 1, .5; end 1, 1, .5 -> differences 1, 0, 0
    assert v.problems == 3
    assert v.start == pytest.approx(0.5) and v.end == pytest.approx(5 / 6)
    # sample variance of (1, 0, 0) = 1/3; s.e. = sqrt(1/3 / 3) = 1/3
    assert v.se == pytest.approx(1 / 3)
    assert v.word == "no clear change" and v.not_worse        # +0.333 is one s.e.


def test_a_uniform_small_gain_is_better_and_a_uniform_loss_worse():
    start = {f"p{i}": (8, 2) for i in range(20)}
    up = {f"p{i}": (8, 3) for i in range(20)}
    v = compare(start, up, k=1)
    assert v.diff == pytest.approx(0.125) and v.se == pytest.approx(0.0, abs=1e-12) and v.word == "better"
    assert compare(up, start, k=1).word == "worse"
    assert not compare(up, start, k=1).not_worse


def test_pass_at_8_with_8_samples_counts_any_pass():
    start = {"a": (8, 0), "b": (8, 1), "c": (8, 0), "d": (8, 2)}
    end = {"a": (8, 1), "b": (8, 1), "c": (8, 0), "d": (8, 0)}
    v = compare(start, end, k=8, metric="held-out pass@8")
    assert (v.start, v.end) == (0.5, 0.5)
    # differences +1, 0, 0, -1: variance 2/3, s.e. sqrt(2/3 / 4)
    assert v.se == pytest.approx(math.sqrt(2 / 3 / 4))
    line = v.line()
    assert line.startswith("held-out pass@8 0.500 -> 0.500 (+0.000") and "no clear change" in line


def test_no_shared_problem_is_an_error():
    with pytest.raises(VerdictError):
        compare({"a": (4, 1)}, {"b": (4, 1)}, k=1)
