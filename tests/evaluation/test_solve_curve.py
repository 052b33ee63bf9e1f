"""The cumulative solve rate of a target set and SGS's scaling-law fit
R(C) = R0 + (A - R0) / (1 + (Cmid / C)^B): the fit recovers the parameters of synthetic curves,
and the cumulative state counts generations and first solves as described."""

import math

import numpy as np
import pytest

from selfplay_core.evaluation.solve_curve import CumulativeSolve, fit_scaling_law, scaling_law

CURVES = [
    # R0, A, Cmid, B
    (0.05, 0.60, 200.0, 1.3),
    (0.0, 0.35, 2_000.0, 0.8),
    (0.10, 0.90, 50.0, 2.0),
]


def _curve(r0, a, cmid, b, cs):
    # Written out from the formula, independently of scaling_law.
    return [r0 + (a - r0) / (1 + (cmid / c) ** b) for c in cs]


@pytest.mark.parametrize("r0,a,cmid,b", CURVES)
def test_the_fit_recovers_a_noiseless_curve(r0, a, cmid, b):
    cs = list(np.geomspace(cmid / 30, cmid * 30, 14))
    fit = fit_scaling_law(cs, _curve(r0, a, cmid, b, cs))
    assert fit is not None and not fit.flat
    assert fit.a == pytest.approx(a, abs=1e-3)
    assert fit.r0 == pytest.approx(r0, abs=1e-3)
    assert fit.cmid == pytest.approx(cmid, rel=1e-2)
    assert fit.b == pytest.approx(b, rel=1e-2)
    assert fit.rmse < 1e-4


def test_the_fit_recovers_the_asymptote_of_a_noisy_curve():
    r0, a, cmid, b = CURVES[0]
    cs = list(np.geomspace(10, 8_000, 20))
    rng = np.random.default_rng(0)
    rs = [v + e for v, e in zip(_curve(r0, a, cmid, b, cs), rng.normal(0, 0.01, len(cs)))]
    fit = fit_scaling_law(cs, rs)
    assert fit.a == pytest.approx(a, abs=0.03)
    assert fit.cmid == pytest.approx(cmid, rel=0.3)
    assert 0.005 < fit.rmse < 0.02   # about the noise's standard deviation


def test_scaling_law_limits():
    assert float(scaling_law(1e-9, 0.1, 0.7, 100.0, 1.0)) == pytest.approx(0.1, abs=1e-6)
    assert float(scaling_law(1e12, 0.1, 0.7, 100.0, 1.0)) == pytest.approx(0.7, abs=1e-6)
    assert float(scaling_law(100.0, 0.1, 0.7, 100.0, 1.5)) == pytest.approx(0.4)   # halfway at Cmid


def test_too_few_points_give_no_fit_and_a_flat_curve_its_rate():
    assert fit_scaling_law([10, 20, 30], [0.1, 0.2, 0.3]) is None
    assert fit_scaling_law([10, 10, 10, 10, 10], [0.1, 0.2, 0.3, 0.3, 0.4]) is None  # one distinct C
    flat = fit_scaling_law([10, 20, 30, 40], [0.0] * 4)
    assert flat.flat and flat.a == 0.0 and flat.r0 == 0.0 and math.isnan(flat.cmid)
    assert "targets/fit/Cmid" not in flat.metrics("targets/fit") and flat.metrics("targets/fit")["targets/fit/A"] == 0.0


def test_cumulative_solve_counts_generations_and_first_solves():
    cs = CumulativeSolve(["a", "b", "c", "d"])
    cs.record([("a", [False, False]), ("b", [False, True])])     # generations 1-4; b at 4
    assert cs.solved == {"b": 4} and cs.generations == 4 and cs.rate == 0.25
    cs.record([("a", [True, False]), ("b", [True, True]), ("c", [False, False])])
    assert cs.solved == {"b": 4, "a": 5} and cs.generations == 10   # b stays solved at 4
    assert cs.curve == [[4.0, 0.25], [10.0, 0.5]]
    assert cs.unsolved() == ["c", "d"]
    again = CumulativeSolve.from_json(cs.to_json())   # what a resume reads back
    assert again == cs
