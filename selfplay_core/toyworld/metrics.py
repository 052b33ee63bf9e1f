"""pass@k, the unbiased estimator of Chen et al. (2021)."""

from __future__ import annotations


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k) for n samples of which c passed, as a stable product:
    C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"need 0 <= c <= n and k >= 1 (n={n}, c={c}, k={k})")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per task, got {n}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def mean_pass_at_k(counts: list[tuple[int, int]], k: int) -> float:
    """Mean over tasks of pass@k; `counts` holds (n, c) per task."""
    if not counts:
        return float("nan")
    return sum(pass_at_k(n, c, k) for n, c in counts) / len(counts)
