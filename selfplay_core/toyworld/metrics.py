"""pass@k for the toy world: the project's one estimator (`evaluation.passk`), with an empty
set of tasks reading as NaN (a depth with no tasks in a split) rather than an error."""

from __future__ import annotations

from selfplay_core.evaluation import passk
from selfplay_core.evaluation.passk import pass_at_k

__all__ = ["pass_at_k", "mean_pass_at_k"]


def mean_pass_at_k(counts: list[tuple[int, int]], k: int) -> float:
    """Mean over tasks of pass@k; `counts` holds (n, c) per task."""
    counts = list(counts)
    return float("nan") if not counts else passk.mean_pass_at_k(counts, k)
