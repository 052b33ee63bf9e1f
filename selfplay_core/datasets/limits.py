"""The one rule for a benchmark problem's time limit.

evalplus derives each test's limit from the canonical solution's measured time:
max(1 s, 4 x its time). We keep one limit per problem and apply the rule to the slowest test:

    time_limit = max(MIN_TIME_LIMIT_S, TIME_FACTOR * slowest canonical test)

measured as *CPU* seconds in the sandbox, which is also the clock the sandbox enforces limits
on (with a wall-clock backstop that does not count time spent waiting for a CPU). CPU time
does not stretch when other processes load the machine, so a limit measured on a busy box
holds on a quiet one and the other way round; the 4x margin covers what load does change
(caches, frequency).
"""

from __future__ import annotations

from typing import Sequence

MIN_TIME_LIMIT_S = 1.0
TIME_FACTOR = 4.0


def time_limit_from_reference(cpu_seconds: Sequence[float]) -> float:
    """Per-problem time limit (CPU seconds) from the reference's CPU seconds per test."""
    slowest = max((float(t) for t in cpu_seconds), default=0.0)
    return round(max(MIN_TIME_LIMIT_S, TIME_FACTOR * slowest), 3)
