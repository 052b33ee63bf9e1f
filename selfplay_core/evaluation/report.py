"""Writing an evaluation's outputs: report.json (the aggregate), results.jsonl / results.csv (one
row per problem), samples.jsonl (every program that was run, re-scorable with `--samples`) and
summary.csv (one row per metric, overall and per group)."""

from __future__ import annotations

import csv
import io
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from selfplay_core.evaluation.runner import EvalRun
from selfplay_core.problems import write_jsonl
from selfplay_core.storage.files import atomic_write_text


def environment_info() -> dict:
    """Where the numbers came from: interpreter, machine, package version, git commit."""
    from importlib import metadata

    try:
        version = metadata.version("selfplay")
    except metadata.PackageNotFoundError:
        version = None
    sha = None
    try:
        here = Path(__file__).resolve().parent
        sha = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    return {"python": sys.version.split()[0], "platform": platform.platform(),
            "cpus": os.cpu_count(), "selfplay": version, "git_sha": sha}


def summary_rows(run: EvalRun) -> list[dict]:
    """Flat (group, value, n_problems, metric, score) rows: overall first, then per group."""
    rows = []
    overall = {"group": "all", "value": "all", "n_problems": run.report["counts"]["problems"]}
    for metric, v in run.report["metrics"].items():
        rows.append({**overall, "metric": metric, "score": v})
    for field, groups in run.report["breakdown"].items():
        for value, m in groups.items():
            for metric, v in m.items():
                if metric != "n_problems":
                    rows.append({"group": field, "value": value, "n_problems": m["n_problems"],
                                 "metric": metric, "score": v})
    return rows


def _csv(rows: list[dict], columns: list[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()})
    return buf.getvalue()


def write_outputs(run: EvalRun, out_dir: str | Path) -> dict[str, str]:
    """Write every output file into `out_dir`; returns {kind: path}."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    run.report.setdefault("environment", environment_info())
    paths = {k: out / name for k, name in (("report", "report.json"), ("results", "results.jsonl"),
                                            ("results_csv", "results.csv"),
                                            ("samples", "samples.jsonl"),
                                            ("summary_csv", "summary.csv"))}
    atomic_write_text(paths["report"], json.dumps(run.report, indent=2, ensure_ascii=False) + "\n")
    write_jsonl(paths["results"], run.results)
    ks = [m for m in run.report["metrics"] if m.startswith("pass@")]
    cols = ["problem_id", "n", "c", *ks, "greedy_passed", "platform", "difficulty",
            "harness_errors", "dataset_version", "content_hash"]
    present = [c for c in cols if any(c in r for r in run.results)]
    atomic_write_text(paths["results_csv"], _csv(run.results, present))
    write_jsonl(paths["samples"], ({
        "problem_id": s.problem_id, "sample_id": s.sample_id, "code": s.code,
        "verdict": s.verdict.verdict.value,
        **({"completion": s.completion} if s.completion is not None else {}),
        **({"finish_reason": s.finish_reason} if s.finish_reason else {}),
    } for s in run.samples))
    atomic_write_text(paths["summary_csv"], _csv(summary_rows(run),
                                             ["group", "value", "n_problems", "metric", "score"]))
    return {k: str(v) for k, v in paths.items()}


def format_summary(run: EvalRun) -> str:
    """A plain-text table (for logs; the CLI prints a rich table)."""
    lines = []
    d = run.report["dataset"]
    lines.append(f"{d['name']} {d['version']}  content {d['content_hash'][:12]}  "
                 f"{d['n_problems']} problems")
    for r in summary_rows(run):
        lines.append(f"  {r['group']:<10} {str(r['value']):<10} {r['n_problems']:>5}  "
                     f"{r['metric']:<14} {100 * r['score']:6.2f}%")
    return "\n".join(lines)
