"""One-line verdicts: is a checkpoint better or worse than the one it started from?

Both evaluations must be of the same problems (the held-out split at step 0 and at the end of
a run). The difference of mean pass@k is compared with its standard error over problems,
*paired* (each problem's own change), so a split that is mostly unsolvable or mostly easy does
not inflate the noise. Two standard errors either way is a change; less is "no clear change".
Sampling noise within a problem is part of what the per-problem differences show, which is
why the estimate needs no model of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from selfplay_core.evaluation.passk import pass_at_k

Counts = Mapping[str, tuple[int, int]]   # problem id -> (n samples, c correct)


class VerdictError(ValueError):
    """The two evaluations cannot be compared (no shared problems, too few samples)."""


@dataclass(frozen=True)
class Verdict:
    metric: str
    start: float
    end: float
    se: float        # standard error of the paired difference
    problems: int
    z: float = 2.0   # standard errors that make a change

    @property
    def diff(self) -> float:
        return self.end - self.start

    @property
    def word(self) -> str:
        if self.diff > self.z * self.se:
            return "better"
        if self.diff < -self.z * self.se:
            return "worse"
        return "no clear change"

    @property
    def not_worse(self) -> bool:
        return self.word != "worse"

    def line(self, against: str = "the start checkpoint") -> str:
        tail = {"better": f"better than {against}", "worse": f"worse than {against}",
                "no clear change": f"no clear change from {against} (within {self.z:g} s.e.)"}[self.word]
        return (f"{self.metric} {self.start:.3f} -> {self.end:.3f} ({self.diff:+.3f} ± "
                f"{self.se:.3f} s.e., {self.problems} problems): {tail}")


def compare(start: Counts, end: Counts, k: int, metric: str | None = None, z: float = 2.0) -> Verdict:
    """Mean pass@k of `end` vs `start` over the problems both evaluated."""
    shared = sorted(set(start) & set(end))
    if not shared:
        raise VerdictError("the two evaluations share no problem")
    d, s, e = [], [], []
    for pid in shared:
        a, b = pass_at_k(*start[pid], k), pass_at_k(*end[pid], k)
        s.append(a)
        e.append(b)
        d.append(b - a)
    m = len(d)
    mean = sum(d) / m
    var = sum((x - mean) ** 2 for x in d) / (m - 1) if m > 1 else 0.0
    return Verdict(metric or f"held-out pass@{k}", sum(s) / m, sum(e) / m, math.sqrt(var / m), m, z)
