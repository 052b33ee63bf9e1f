"""pass@k for the toy world: the project's one estimator (`evaluation.passk`), with an empty
set of tasks reading as NaN (a depth with no tasks in a split) rather than an error."""

from __future__ import annotations

from selfplay_core.evaluation.passk import mean_pass_at_k_or_nan as mean_pass_at_k
from selfplay_core.evaluation.passk import pass_at_k

__all__ = ["pass_at_k", "mean_pass_at_k"]
