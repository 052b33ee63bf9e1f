"""Plots written as PNG files (matplotlib's Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence


def _plt():
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


def goalpost_heatmap(matrix: Sequence[Sequence[float]], checkpoints: Sequence[str],
                     goalposts: Sequence[str], path: str | Path, title: str = "Goalposts solved") -> Path:
    """Checkpoint x goalpost grid: solved (pass@k > 0) in colour, unsolved blank; the value
    shown is the estimated pass@k. Rows are checkpoints in training order."""
    import numpy as np

    plt = _plt()
    m = np.asarray(matrix, dtype=float).reshape(len(checkpoints), len(goalposts))
    w = min(22.0, 2.5 + 0.18 * max(1, len(goalposts)))
    h = min(14.0, 1.6 + 0.32 * max(1, len(checkpoints)))
    fig, ax = plt.subplots(figsize=(w, h), dpi=110)
    shown = np.ma.masked_where(m <= 0, m)
    im = ax.imshow(shown, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_facecolor("#f2f2f2")
    ax.set_yticks(range(len(checkpoints)), labels=list(checkpoints), fontsize=7)
    step = max(1, len(goalposts) // 60)
    ax.set_xticks(range(0, len(goalposts), step), labels=list(goalposts)[::step], rotation=90, fontsize=6)
    ax.set_xlabel("goalpost")
    ax.set_ylabel("checkpoint")
    solved = (m > 0).sum(axis=1)
    ax.set_title(f"{title} (last: {int(solved[-1]) if len(solved) else 0}/{len(goalposts)}; "
                 f"union: {int((m > 0).any(axis=0).sum())})", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.025, pad=0.01, label="pass rate over k samples")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def curves(series: dict[str, Sequence[tuple[float, float]]], path: str | Path, title: str,
           ylabel: str = "") -> Path:
    """Several (x, y) series on one axes, e.g. pass@1 per run for `selfplay compare`."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for name, pts in series.items():
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o", markersize=3, label=name)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("iteration")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if series:
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
