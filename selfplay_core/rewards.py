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


# ---- SGS (Self-Guided Self-Play) ----------------------------------------------------------------

# The Guide's scales (roles.guide): relevance 0-5, redundancy 0/1, complexity 0-4.
R_GUIDE_MAX = 5 + 2 + 1   # relevance 5, complexity 0, no redundancy


def r_guide(relevance: int, redundancy: int, complexity: int) -> float:
    """SGS's Guide reward: 0 if complexity >= 3, else max(0, relevance + (2 - complexity) +
    (1 - redundancy)); at most R_GUIDE_MAX = 8."""
    if not (0 <= relevance <= 5 and redundancy in (0, 1) and 0 <= complexity <= 4):
        raise ValueError(f"Guide scores out of range: relevance {relevance} (0-5), redundancy "
                         f"{redundancy} (0/1), complexity {complexity} (0-4)")
    if complexity >= 3:
        return 0.0
    return float(max(0, relevance + (2 - complexity) + (1 - redundancy)))


def easiest_share(pass_rates: list[float], share: float = 0.3) -> list[bool]:
    """Which problems of a batch are in its easiest `share`: a problem is when the problems at
    least as easy as it (pass rate >= its own, itself included) are at most `share` of the
    batch. Ties are one block (equal pass rates, equal verdicts), so at most `share` of the batch
    is ever marked, and a batch of equal pass rates has no easiest share."""
    for p in pass_rates:
        _check_p(p)
    n = len(pass_rates)
    return [sum(q >= p for q in pass_rates) <= share * n for p in pass_rates]


def r_solve(pass_rates: list[float], share: float = 0.3) -> list[float]:
    """SGS's solve reward of each synthetic problem of a batch: 0 when the Solver never solves
    it (p = 0) or it is in the batch's easiest `share`, else 1 - p."""
    easy = easiest_share(pass_rates, share)
    return [0.0 if p == 0.0 or e else 1.0 - p for p, e in zip(pass_rates, easy)]


def min_max_normalise(values: list[float]) -> list[float]:
    """(v - min) / (max - min) over the batch; all 0 when the batch has one value (no signal)."""
    if not values:
        return []
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12:
        return [0.0] * len(values)
    return [(v - lo) / (hi - lo) for v in values]


def r_synth(pass_rates: list[float], guide_rewards: list[float], share: float = 0.3) -> list[float]:
    """The Conjecturer's reward in SGS: R_solve x R_guide, min-max normalised within the batch."""
    if len(pass_rates) != len(guide_rewards):
        raise ValueError(f"{len(pass_rates)} pass rates but {len(guide_rewards)} Guide rewards")
    return min_max_normalise([s * g for s, g in zip(r_solve(pass_rates, share), guide_rewards)])


def guided_band(band_reward: float, guide_weight: float) -> float:
    """GASP x Guide: an in-band (positive) reward times the normalised Guide score in [0, 1];
    a penalty (out of band, <= 0) is left as it is, so a poor Guide score never softens it."""
    if not 0.0 <= guide_weight <= 1.0:
        raise ValueError(f"normalised Guide score must be in [0, 1], got {guide_weight!r}")
    return band_reward * guide_weight if band_reward > 0 else band_reward


def spice_challenger(p: float, *, target: float = 0.25, width: float = 0.02) -> float:
    """SPICE's Challenger reward `exp(-(Var - target)^2 / width)`, Var = p(1 - p): the variance
    of the Reasoner's 0/1 correctness over its samples (population variance; p its pass rate).
    Peak 1 at p = 1/2 (Var = 1/4); exp(-3.125) ~ 0.044 at p in {0, 1}."""
    _check_p(p)
    var = p * (1.0 - p)
    return math.exp(-((var - target) ** 2) / width)
