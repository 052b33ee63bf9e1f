"""Side-by-side comparison of self-play runs from MLflow: the table one would build in the
MLflow UI (final and best value of each metric per run), goalposts solved per run and as the
union over seeds of each method, and a PNG of the curves."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field

from selfplay_core.tracking.plots import curves

DEFAULT_METRICS = ("eval/all/pass@1", "eval/all/pass@8", "goalposts/solved",
                   "student/accepted/reward", "teacher/lemma/acceptance")
# The asymptote A of the scaling-law fit of a run's cumulative target solve rate (SGS logs it;
# evaluation.solve_curve), shown per run when any run has it.
ASYMPTOTE = "targets/fit/A"


def _key(metric: str) -> str:
    return metric.replace("@", "_at_")  # how RunTracker stores it


@dataclass
class RunRow:
    run_id: str
    name: str
    method: str
    seed: str
    final: dict = field(default_factory=dict)
    best: dict = field(default_factory=dict)
    curves: dict = field(default_factory=dict)
    solved_ids: set = field(default_factory=set)
    goalposts_total: int | None = None
    asymptote: float | None = None     # the last fitted A
    solve_rate: float | None = None    # the last cumulative target solve rate


def collect(tracking_uri: str, run_ids: list[str], metrics=DEFAULT_METRICS) -> list[RunRow]:
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    rows = []
    for rid in run_ids:
        try:
            run = client.get_run(rid)
        except MlflowException:
            raise ValueError(f"run {rid!r} not found in {tracking_uri}") from None
        tags = run.data.tags
        row = RunRow(rid, tags.get("mlflow.runName", rid[:8]), tags.get("method", "?"), tags.get("seed", "?"))
        for m in metrics:
            hist = sorted((h.step, h.value) for h in client.get_metric_history(rid, _key(m)))
            if hist:
                row.curves[m] = hist
                row.final[m] = hist[-1][1]
                row.best[m] = max(v for _, v in hist)
        fit = client.get_metric_history(rid, ASYMPTOTE)
        if fit:
            row.asymptote = max(fit, key=lambda h: h.step).value
        rate = client.get_metric_history(rid, "targets/cumulative_solve_rate")
        if rate:
            row.solve_rate = max(rate, key=lambda h: h.step).value
        try:
            path = client.download_artifacts(rid, "goalposts/matrix.json")
            mat = json.load(open(path))
            row.goalposts_total = len(mat["goalposts"])
            row.solved_ids = {g for j, g in enumerate(mat["goalposts"])
                              if any(r[j] > 0 for r in mat["pass_rate"][1:])}  # after the base row
        except (MlflowException, OSError, KeyError, ValueError):
            pass
        rows.append(row)
    return rows


def render_table(rows: list[RunRow], metrics=DEFAULT_METRICS) -> str:
    targets = any(r.solve_rate is not None or r.asymptote is not None for r in rows)
    head = ["run", "method", "seed"] + [f"{m} (final/best)" for m in metrics] + ["goalposts solved (any ckpt)"]
    if targets:
        head += ["target solve rate", "asymptote A (fit)"]
    lines = [head]
    for r in rows:
        cells = [r.name, r.method, r.seed]
        for m in metrics:
            cells.append(f"{r.final[m]:.3f}/{r.best[m]:.3f}" if m in r.final else "-")
        cells.append(f"{len(r.solved_ids)}/{r.goalposts_total}" if r.goalposts_total else "-")
        if targets:
            cells.append(f"{r.solve_rate:.3f}" if r.solve_rate is not None else "-")
            cells.append(f"{r.asymptote:.3f}" if r.asymptote is not None else "-")
        lines.append(cells)
    by_method: dict[str, list[RunRow]] = defaultdict(list)
    for r in rows:
        by_method[r.method].append(r)
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    out = ["  ".join(str(c).ljust(w) for c, w in zip(line, widths)) for line in lines]
    out.append("")
    out.append("goalposts solved, union over seeds:")
    for method, rs in sorted(by_method.items()):
        union = set().union(*(r.solved_ids for r in rs))
        total = next((r.goalposts_total for r in rs if r.goalposts_total), None)
        out.append(f"  {method}: {len(union)}/{total if total else '?'} over {len(rs)} run(s)")
    return "\n".join(out)


def render_png(rows: list[RunRow], path: str, metric: str = "eval/all/pass@1") -> str:
    series = {f"{r.method} s{r.seed} ({r.name})": r.curves.get(metric, []) for r in rows}
    return str(curves(series, path, title=f"{metric} per iteration", ylabel=metric))
