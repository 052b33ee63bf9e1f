"""Unbiased pass@k (Chen et al., 2021, "Evaluating Large Language Models Trained on Code").

With n samples of which c are correct, the probability that at least one of k samples drawn
without replacement is correct is 1 - C(n-c, k) / C(n, k). Binomials overflow and lose precision
for realistic n, so we use the paper's product form

    1 - prod_{i = n-c+1}^{n} (1 - k / i)

which is exact in real arithmetic and numerically stable. It equals 1 when n - c < k (every
k-subset must contain a correct sample).
"""

from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np


class PassAtKError(ValueError):
    """pass@k is undefined for these numbers (k > n, c > n, negative values)."""


def _check(n: int, c: int, k: int) -> None:
    for name, v in (("n", n), ("c", c), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise PassAtKError(f"{name} must be an integer, got {v!r}")
    if k < 1:
        raise PassAtKError(f"k must be >= 1, got {k}")
    if n < 0 or c < 0:
        raise PassAtKError(f"n and c must be >= 0, got n={n}, c={c}")
    if c > n:
        raise PassAtKError(f"c={c} correct samples out of n={n}: c cannot exceed n")
    if k > n:
        raise PassAtKError(f"pass@{k} needs at least {k} samples per problem, got n={n}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of pass@k for one problem with n samples, c of them correct."""
    _check(n, c, k)
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def mean_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> float:
    """Mean of per-problem pass@k over (n, c) pairs (every problem must have n >= k)."""
    vals = [pass_at_k(n, c, k) for n, c in counts]
    if not vals:
        raise PassAtKError("no problems to average over")
    return float(np.mean(vals))


def mean_pass_at_k_or_nan(counts: Iterable[tuple[int, int]], k: int) -> float:
    """`mean_pass_at_k`, with no problems reading as NaN (an empty group of a split, say)."""
    counts = list(counts)
    return float("nan") if not counts else mean_pass_at_k(counts, k)


def pass_at_ks(counts: Mapping[str, tuple[int, int]], ks: Iterable[int]) -> dict[str, float]:
    """{"pass@k": value} for each k, naming the first problem with too few samples."""
    out = {}
    for k in ks:
        short = [pid for pid, (n, _) in counts.items() if n < k]
        if short:
            raise PassAtKError(f"pass@{k} needs at least {k} samples per problem; {len(short)} "
                               f"problem(s) have fewer (e.g. {short[0]!r} with "
                               f"{counts[short[0]][0]})")
        out[f"pass@{k}"] = mean_pass_at_k(counts.values(), k)
    return out


def parse_ks(text: str) -> list[int]:
    """'1,10,20' -> [1, 10, 20] (sorted, unique), with one clear error for bad input."""
    try:
        ks = sorted({int(part) for part in str(text).split(",") if part.strip()})
    except ValueError:
        raise PassAtKError(f"k must be a comma-separated list of integers, got {text!r}") from None
    if not ks or ks[0] < 1:
        raise PassAtKError(f"k values must be >= 1, got {text!r}")
    return ks
