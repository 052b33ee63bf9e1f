"""Cumulative solve rate of a target set against the generations spent on it, and SGS's
scaling-law fit of that curve (DESIGN.md §1):

    R(C) = R0 + (A - R0) / (1 + (Cmid / C)^B)

R0 is the solve rate as C -> 0, A the asymptote as C -> infinity, Cmid the compute at which
half of the gain A - R0 is reached, B how sharply. A target counts as solved from the first
generation that passes it; C counts every Solver generation on a target so far.

`CumulativeSolve` is JSON state (kept in `RunState.method_state`, so a resume continues the
curve); `fit_scaling_law` fits the curve by bounded least squares (scipy's curve_fit) from a few
starting points and keeps the best.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np


def scaling_law(c, r0: float, a: float, cmid: float, b: float):
    """R(C) for C > 0 (array or scalar)."""
    c = np.asarray(c, dtype=float)
    return r0 + (a - r0) / (1.0 + (cmid / c) ** b)


@dataclass(frozen=True)
class ScalingFit:
    r0: float
    a: float          # the asymptote A
    cmid: float
    b: float
    rmse: float
    points: int
    flat: bool = False   # every point has the same rate: A is that rate, Cmid and B undefined

    def metrics(self, prefix: str) -> dict[str, float]:
        out = {f"{prefix}/A": self.a, f"{prefix}/R0": self.r0, f"{prefix}/rmse": self.rmse,
               f"{prefix}/points": float(self.points), f"{prefix}/flat": float(self.flat)}
        if not self.flat:
            out.update({f"{prefix}/Cmid": self.cmid, f"{prefix}/B": self.b})
        return out


MIN_POINTS = 4   # four parameters


def fit_scaling_law(c: Sequence[float], r: Sequence[float]) -> ScalingFit | None:
    """The least-squares fit of R(C) to points (C_i > 0, R_i in [0, 1]), with R0 and A in
    [0, 1], Cmid in (0, 1000 max C], B in [0.05, 20]. None with fewer than MIN_POINTS points of
    distinct C. A curve without any change is `flat` (A = R0 = its rate)."""
    from scipy.optimize import curve_fit

    pts = sorted({float(x): float(y) for x, y in zip(c, r) if x > 0}.items())
    if len(pts) < MIN_POINTS:
        return None
    cs = np.array([p[0] for p in pts])
    rs = np.array([p[1] for p in pts])
    if np.ptp(rs) < 1e-12:
        return ScalingFit(float(rs[0]), float(rs[0]), math.nan, math.nan, 0.0, len(pts), flat=True)
    lower = [0.0, 0.0, 1e-9, 0.05]
    upper = [1.0, 1.0, 1e3 * float(cs.max()), 20.0]
    best = None
    for cmid0 in np.quantile(cs, [0.25, 0.5, 0.75]):
        for b0 in (0.5, 1.0, 2.0):
            p0 = [float(rs.min()), float(min(1.0, rs.max() + 0.05)), float(cmid0), b0]
            try:
                par, _ = curve_fit(scaling_law, cs, rs, p0=p0, bounds=(lower, upper), maxfev=5000)
            except (RuntimeError, ValueError):
                continue
            sse = float(np.sum((scaling_law(cs, *par) - rs) ** 2))
            if best is None or sse < best[0]:
                best = (sse, par)
    if best is None:
        return None
    sse, (r0, a, cmid, b) = best
    return ScalingFit(float(r0), float(a), float(cmid), float(b), math.sqrt(sse / len(pts)), len(pts))


@dataclass
class CumulativeSolve:
    """Which targets are solved (from their first passing generation) and the curve so far:
    one (generations, solve rate) point per round of attempts."""

    target_ids: list[str]
    solved: dict[str, int] = field(default_factory=dict)   # target id -> generations when first solved
    generations: int = 0
    curve: list[list[float]] = field(default_factory=list)  # [C, R] per round

    @property
    def rate(self) -> float:
        return len(self.solved) / len(self.target_ids) if self.target_ids else 0.0

    def unsolved(self) -> list[str]:
        return [t for t in self.target_ids if t not in self.solved]

    def record(self, attempts: Sequence[tuple[str, Sequence[bool]]]) -> None:
        """One round of attempts: (target id, verdict per generation in the order drawn)."""
        for tid, verdicts in attempts:
            for v in verdicts:
                self.generations += 1
                if v and tid not in self.solved and tid in self.target_ids:
                    self.solved[tid] = self.generations
        self.curve.append([float(self.generations), self.rate])

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "CumulativeSolve":
        return cls(list(d["target_ids"]), dict(d["solved"]), int(d["generations"]),
                   [list(p) for p in d["curve"]])
