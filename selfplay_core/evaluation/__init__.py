"""Evaluation: unbiased pass@k, the benchmark runner and its reports."""

from selfplay_core.evaluation.passk import PassAtKError, mean_pass_at_k, pass_at_k, pass_at_ks
from selfplay_core.evaluation.runner import EvalConfig, EvalRun, evaluate

__all__ = ["EvalConfig", "EvalRun", "PassAtKError", "evaluate", "mean_pass_at_k", "pass_at_k",
           "pass_at_ks"]
