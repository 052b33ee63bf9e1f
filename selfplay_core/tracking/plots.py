"""Plots written as PNG files (matplotlib's Agg backend: no display needed)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence


def _plt():
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


# Cell categories of the goalpost heatmap, and how each is drawn.
NOT_EVALUATED, UNSOLVED, SOLVED = 0, 1, 2
CATEGORY_COLOURS = {NOT_EVALUATED: "#ffffff", UNSOLVED: "#d9d9d9", SOLVED: "#1a9850"}
UNION = "union"


@dataclass
class HeatmapLayout:
    """What the goalpost heatmap shows, before any drawing: one row per goalpost (grouped, e.g.
    by depth), one column per iteration of the timeline plus the union column; `cells` holds
    NOT_EVALUATED / UNSOLVED / SOLVED, `passes` the passing samples of k where known."""

    row_labels: list[str]
    groups: list[tuple[str, int, int]]          # (label, first row, row count), in row order
    col_labels: list[str]                       # checkpoints, then "union"
    cells: list[list[int]]                      # rows x columns
    passes: list[list[int | None]]              # rows x columns (None: not evaluated / union)
    solved_last: int
    solved_union: int
    total: int
    # Goalposts solved per column (None: not evaluated), the union's last.
    solved_per_col: list[int | None] | None = None
    # The start model's floor: goalposts it is expected to solve in a fresh draw of k samples
    # (floor) and over all the run's checks (floor_union); None when not measured.
    floor: float | None = None
    floor_union: float | None = None


def _step_of(label: str) -> int | None:
    """The iteration a checkpoint label names ("base" = 0, "iter 12" = 12), else None."""
    if label == "base":
        return 0
    head, _, num = label.partition(" ")
    return int(num) if head == "iter" and num.isdigit() else None


def _short_ids(ids: Sequence[str], width: int = 24) -> list[str]:
    """Labels without the prefix every id shares up to a '/', cut to `width` characters."""
    prefix = os.path.commonprefix(list(ids)) if len(ids) > 1 else ""
    prefix = prefix[:prefix.rfind("/") + 1]
    out = [i[len(prefix):] or i for i in ids]
    return [o if len(o) <= width else o[:width - 1] + "…" for o in out]


def goalpost_groups(problems) -> list[str]:
    """A group label per goalpost problem: its depth (toy world), else its difficulty."""
    out = []
    for p in problems:
        meta = getattr(p, "metadata", {}) or {}
        if meta.get("depth") is not None:
            out.append(f"depth {meta['depth']}")
        elif meta.get("difficulty"):
            out.append(str(meta["difficulty"]))
        else:
            out.append("")
    return out


def heatmap_layout(matrix: Sequence[Sequence[float | None]], checkpoints: Sequence[str],
                   goalposts: Sequence[str], *, groups: Sequence[str] | None = None,
                   k: int | None = None, iterations: int | None = None,
                   max_timeline: int = 60, floor: float | None = None,
                   floor_union: float | None = None) -> HeatmapLayout:
    """Lay the checkpoint x goalpost pass-rate matrix out for reading: goalposts as rows
    (grouped, in id order within a group), checkpoints as columns. With `iterations`, and when
    every label names its iteration, the columns are the whole timeline 0..iterations (at most
    `max_timeline`), so iterations without a goalpost evaluation, and those still to come, show
    as not evaluated. A None or NaN rate is not evaluated too; solved = pass rate > 0."""
    n = len(goalposts)
    rows = [list(r) for r in matrix]
    if any(len(r) != n for r in rows) or len(rows) != len(checkpoints):
        raise ValueError(f"matrix is {len(rows)} x {[len(r) for r in rows][:3]}..., expected "
                         f"{len(checkpoints)} checkpoints x {n} goalposts")
    cols: list[str] = list(checkpoints)
    by_col: list[list | None] = list(rows)
    steps = [_step_of(c) for c in checkpoints]
    if iterations is not None and None not in steps and iterations + 1 <= max_timeline:
        last = max([iterations, *steps])
        at = dict(zip(steps, rows))
        cols = [str(s) for s in range(last + 1)]
        by_col = [at.get(s) for s in range(last + 1)]

    def rate(col, j):
        v = None if col is None else col[j]
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)

    group_of = list(groups) if groups is not None else [""] * n
    if len(group_of) != n:
        raise ValueError(f"{len(group_of)} group labels for {n} goalposts")
    order = sorted(range(n), key=lambda j: (_group_key(group_of[j]), goalposts[j]))
    cells, passes = [], []
    for j in order:
        rates = [rate(col, j) for col in by_col]
        row = [NOT_EVALUATED if r is None else SOLVED if r > 0 else UNSOLVED for r in rates]
        row.append(SOLVED if SOLVED in row else UNSOLVED if UNSOLVED in row else NOT_EVALUATED)
        cells.append(row)
        passes.append([None if r is None or k is None else int(round(r * k)) for r in rates] + [None])
    spans: list[tuple[str, int, int]] = []
    for i, j in enumerate(order):
        if spans and spans[-1][0] == group_of[j]:
            spans[-1] = (spans[-1][0], spans[-1][1], spans[-1][2] + 1)
        else:
            spans.append((group_of[j], i, 1))
    evaluated = [c for c, col in enumerate(by_col) if col is not None]
    solved_last = sum(1 for row in cells if evaluated and row[evaluated[-1]] == SOLVED)
    per_col = [None if col is None else sum(1 for row in cells if row[c] == SOLVED)
               for c, col in enumerate(by_col)]
    union = sum(1 for row in cells if row[-1] == SOLVED)
    return HeatmapLayout(row_labels=_short_ids([goalposts[j] for j in order]), groups=spans,
                         col_labels=cols + [UNION], cells=cells, passes=passes,
                         solved_last=solved_last, solved_union=union, total=n,
                         solved_per_col=per_col + [union], floor=floor, floor_union=floor_union)


def _group_key(label: str):
    """Groups in natural order: 'depth 3' before 'depth 10'."""
    head, _, num = label.rpartition(" ")
    return (head, int(num), "") if num.isdigit() else (label, -1, label)


def draw_goalpost_heatmap(layout: HeatmapLayout, title: str = "Goalposts solved", k: int | None = None):
    """The figure for a layout (see `heatmap_layout`): discrete colours with a legend, group
    bands with labels on the left, the union column set apart on the right."""
    import numpy as np
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    plt = _plt()
    nr, nc = len(layout.row_labels), len(layout.col_labels)
    cells = np.asarray(layout.cells, dtype=float).reshape(nr, nc)
    width = min(24.0, 3.2 + 0.34 * nc + 2.6)
    height = min(30.0, 1.9 + 0.24 * max(nr, 4))
    floor = layout.floor is not None
    if floor:  # a strip under the matrix: goalposts solved per column against the floor
        fig, (ax, strip) = plt.subplots(2, 1, figsize=(width, height + 1.4), dpi=110, sharex=True,
                                        gridspec_kw={"height_ratios": [max(nr, 4), 4.5], "hspace": 0.08})
    else:
        fig, ax = plt.subplots(figsize=(width, height), dpi=110)
    cmap = ListedColormap([CATEGORY_COLOURS[c] for c in (NOT_EVALUATED, UNSOLVED, SOLVED)])
    ax.imshow(cells, cmap=cmap, vmin=-0.5, vmax=2.5, aspect="auto", interpolation="nearest")
    for r in range(nr):  # hatch "not evaluated" so it never reads as a blank "unsolved"
        for c in range(nc):
            if layout.cells[r][c] == NOT_EVALUATED:
                ax.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, hatch="///",
                                           edgecolor="#c8c8c8", linewidth=0))
            elif layout.passes[r][c]:
                ax.text(c, r, str(layout.passes[r][c]), ha="center", va="center", fontsize=7,
                        color="white", fontweight="bold")
    # Cell borders, a thick line before the union column and between groups.
    ax.set_xticks(np.arange(-0.5, nc, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, nr, 1), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.0)
    ax.tick_params(which="minor", length=0)
    ax.axvline(nc - 1.5, color="#333333", linewidth=2.5)
    for label, first, count in layout.groups[1:]:
        ax.axhline(first - 0.5, color="#333333", linewidth=1.5)
    ax.set_xticks(range(nc), labels=layout.col_labels, fontsize=8)
    ax.xaxis.tick_top()
    ax.set_yticks(range(nr), labels=layout.row_labels, fontsize=8)
    named = [g for g in layout.groups if g[0]]
    for label, first, count in named:  # the group's name and union count, left of its rows
        solved = sum(1 for row in layout.cells[first:first + count] if row[-1] == SOLVED)
        ax.annotate(f"{label}\n{solved} of {count}\nsolved", xy=(0, first + (count - 1) / 2), xycoords=("axes fraction", "data"),
                    xytext=(-70, 0), textcoords="offset points", ha="right", va="center",
                    fontsize=9, fontweight="bold", annotation_clip=False)
    timeline = layout.col_labels[0] == "0"
    ax.set_xlabel("iteration (0 = the start checkpoint); union = solved at any checkpoint"
                  if timeline else "checkpoint; union = solved at any checkpoint", fontsize=9)
    ax.xaxis.set_label_position("top")
    solved = ("solved (pass@k > 0)" if k is None
              else f"solved: at least 1 of {k} samples passes (number = how many)")
    handles = [Patch(facecolor=CATEGORY_COLOURS[SOLVED], label=solved),
               Patch(facecolor=CATEGORY_COLOURS[UNSOLVED], label="unsolved: every sample fails"),
               Patch(facecolor=CATEGORY_COLOURS[NOT_EVALUATED], edgecolor="#999999", hatch="///",
                     label="not evaluated at this iteration")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8,
              frameon=False, borderaxespad=0)
    against = (f" (floor {layout.floor:.2f})", f" (floor {layout.floor_union:.2f})") if floor else ("", "")
    ax.set_title(f"{title}\nlast checkpoint: {layout.solved_last} of {layout.total} solved{against[0]}; "
                 f"union: {layout.solved_union} of {layout.total}{against[1]}", fontsize=10, pad=28)
    if floor:
        _draw_floor(strip, layout, k)
    return fig


def _draw_floor(ax, layout: HeatmapLayout, k: int | None) -> None:
    """Bars: goalposts solved per checkpoint and in the union; dashed: the start model's floor,
    what it solves by chance in the same samples (k per checkpoint; all checks' for the union).
    Bars at the floor are no gain, however green the cells above them."""
    nc = len(layout.col_labels)
    per_col = layout.solved_per_col or []
    xs = [c for c, v in enumerate(per_col) if v is not None]
    ax.bar(xs, [per_col[c] for c in xs], width=0.6,
           color=[CATEGORY_COLOURS[SOLVED]] * len(xs), label="goalposts solved")
    ks = f"{k} samples" if k else "k samples"
    ax.hlines(layout.floor, -0.5, nc - 1.5, colors="#d62728", linestyles="--", linewidth=1.8,
              label=f"floor {layout.floor:.2f}: expected solved by the start model itself in a fresh "
                    f"draw of {ks}")
    union_floor = layout.floor_union if layout.floor_union is not None else layout.floor
    ax.hlines(union_floor, nc - 1.5, nc - 0.5, colors="#d62728", linestyles=":", linewidth=1.8,
              label=f"union floor {union_floor:.2f}: the same over all the run's checks")
    ax.axvline(nc - 1.5, color="#333333", linewidth=2.5)
    top = max([v for v in per_col if v is not None] + [layout.floor, union_floor, 1.0])
    ax.set_ylim(0, top * 1.15)
    ax.set_ylabel("solved", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False, borderaxespad=0)


def goalpost_heatmap(matrix: Sequence[Sequence[float | None]], checkpoints: Sequence[str],
                     goalposts: Sequence[str], path: str | Path, title: str = "Goalposts solved",
                     *, groups: Sequence[str] | None = None, k: int | None = None,
                     iterations: int | None = None, floor: float | None = None,
                     floor_union: float | None = None) -> Path:
    """The checkpoint x goalpost matrix (rows = checkpoints in training order, values = pass
    rate over k samples) as a PNG a person reads at a glance: see `heatmap_layout` and
    `draw_goalpost_heatmap`."""
    plt = _plt()
    layout = heatmap_layout(matrix, checkpoints, goalposts, groups=groups, k=k, iterations=iterations,
                            floor=floor, floor_union=floor_union)
    fig = draw_goalpost_heatmap(layout, title=title, k=k)
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


def solve_curve(points: Sequence[tuple[float, float]], path: str | Path, title: str,
                fit=None, targets: int | None = None) -> Path:
    """Cumulative solve rate of a target set against the generations spent (points), with the
    scaling-law fit R(C) = R0 + (A - R0) / (1 + (Cmid/C)^B) and its asymptote A when given
    (`evaluation.solve_curve.ScalingFit`). Log-scaled C, as SGS plots it."""
    import numpy as np

    from selfplay_core.evaluation.solve_curve import scaling_law

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    pts = [(c, r) for c, r in points if c > 0]
    if pts:
        xs, ys = zip(*pts)
        ax.plot(xs, ys, "o", color="#1f77b4", markersize=4, label="cumulative solve rate (measured)")
        if fit is not None and not fit.flat:
            grid = np.geomspace(min(xs), max(xs) * 10, 200)
            ax.plot(grid, scaling_law(grid, fit.r0, fit.a, fit.cmid, fit.b), "-", color="#ff7f0e",
                    label=f"fit: R0={fit.r0:.3f}, Cmid={fit.cmid:.3g}, B={fit.b:.2f} (rmse {fit.rmse:.3f})")
        if fit is not None:
            ax.axhline(fit.a, ls="--", color="#d62728", lw=1,
                       label=f"asymptote A = {fit.a:.3f}" + (" (flat curve)" if fit.flat else ""))
        ax.set_xscale("log")
    else:
        ax.text(0.5, 0.5, "no attempts yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("generations spent on the target set (C, log scale)")
    ax.set_ylabel("cumulative solve rate" + (f" of {targets} targets" if targets else ""))
    ax.grid(alpha=0.3, which="both")
    if pts:
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
