"""Reward functions: pure, scalar, table-tested. Formulas from DESIGN.md §1.

p is always the student's empirical pass rate on a proposed task (passed samples / samples).
Constants marked configurable in the spec are keyword arguments here; configs pass them in.
"""

from __future__ import annotations

import math

OUT_OF_BAND = -0.5   # GASP teacher reward outside its learnability band (secondary source)
FORMAT_FAIL = -1.0   # AZR: a proposal or answer that does not parse / run


def _check_p(p: float) -> float:
    if not (0.0 <= p <= 1.0) or math.isnan(p):
        raise ValueError(f"pass rate must be in [0, 1], got {p!r}")
    return p


def r_lemma(p: float, *, band: tuple[float, float] = (0.3, 0.7), out_of_band: float = OUT_OF_BAND) -> float:
    """GASP lemma (easier variant): (4p(1-p))^5 inside the band, peak 1 at p = 0.5."""
    _check_p(p)
    if band[0] <= p <= band[1]:
        return (4.0 * p * (1.0 - p)) ** 5
    return out_of_band


def r_lift(p: float, *, band: tuple[float, float] = (0.1, 0.5), out_of_band: float = OUT_OF_BAND) -> float:
    """GASP lift (harder variant): 10p((1-p)/0.9)^9 inside the band, peak 1 at p = 0.1."""
    _check_p(p)
    if band[0] <= p <= band[1]:
        return 10.0 * p * ((1.0 - p) / 0.9) ** 9
    return out_of_band


def azr_propose(p: float, *, extreme: float = OUT_OF_BAND) -> float:
    """AZR learnability: 1 - p for tasks the solver sometimes solves; `extreme` when it always
    or never does (the AZR paper uses 0 there; DESIGN.md's table uses -0.5)."""
    _check_p(p)
    return 1.0 - p if 0.0 < p < 1.0 else extreme


def rzero_challenger(p_hat: float, r_rep: float) -> float:
    """R-Zero's Challenger: the solver's uncertainty 1 - 2|p̂ - 1/2| (peak 1 when half of the
    answers agree with the majority) less the repetition penalty, floored at 0. p̂ is the share
    of the solver's answers that agree with the majority vote."""
    _check_p(p_hat)
    if r_rep < 0 or math.isnan(r_rep):
        raise ValueError(f"repetition penalty must be >= 0, got {r_rep!r}")
    return max(0.0, 1.0 - 2.0 * abs(p_hat - 0.5) - r_rep)


def student(passed: bool, *, well_formatted: bool = True, format_penalty: float = 0.0) -> float:
    """The solver's binary reward; optionally a penalty when no code could be extracted."""
    if not well_formatted:
        return format_penalty
    return 1.0 if passed else 0.0


def invalid_proposal(*, parsed: bool, format_fail: float = FORMAT_FAIL,
                     invalid: float = OUT_OF_BAND) -> float:
    """A proposal rejected before reaching the student: unparseable output gets the format
    penalty; one that parsed but failed validation (banned import, non-deterministic, error,
    duplicate) gets the milder `invalid` value (AZR's -0.5 for well-formatted failures)."""
    return invalid if parsed else format_fail


def spice_challenger(p: float, *, target: float = 0.25, width: float = 0.02) -> float:
    """SPICE's Challenger reward `exp(-(Var - target)^2 / width)`, Var = p(1 - p): the variance
    of the Reasoner's 0/1 correctness over its samples (population variance; p its pass rate).
    Peak 1 at p = 1/2 (Var = 1/4); exp(-3.125) ~ 0.044 at p in {0, 1}."""
    _check_p(p)
    var = p * (1.0 - p)
    return math.exp(-((var - target) ** 2) / width)
