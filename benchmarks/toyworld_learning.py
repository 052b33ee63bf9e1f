"""GASP vs AZR vs RLVR on the toy world, same budget (iterations), same starting checkpoint.

Prints per iteration: teacher acceptance, lemma/lift pass rates, student reward on accepted tasks,
goalposts solved, held-out pass@1/pass@8; then a side-by-side summary. Each run is also an MLflow
run (runs/bench/mlruns), so the comparison can be made in the MLflow UI too.

    python benchmarks/toyworld_learning.py [--iterations 8] [--methods gasp,azr,rlvr] [--seeds 0,1]

With several seeds it ends with mean ± half-range per method (DESIGN §5: separating methods by
0.1 in pass@1 needs 2 seeds per arm, by 0.05 3+). Runs are sequential: one at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")

CONFIGS = {"gasp": "tiny-cpu.yaml", "azr": "azr-tiny-cpu.yaml", "rlvr": "rlvr-tiny-cpu.yaml",
           "gasp+rlvr": "gasp-rlvr-tiny-cpu.yaml", "gasp-band": "ablation-student-band.yaml"}
COLUMNS = [
    ("acc", ("teacher/lemma/acceptance", "teacher/azr/acceptance")),
    ("lift acc", ("teacher/lift/acceptance",)),
    ("p lemma", ("teacher/lemma/pass_rate", "teacher/azr/pass_rate")),
    ("p lift", ("teacher/lift/pass_rate",)),
    ("fidelity", ("teacher/lemma/fidelity", "teacher/azr/fidelity")),
    ("stud reward", ("student/accepted/reward", "student/real/pass_rate")),
    ("trained", ("student/trained/tasks",)),
    ("gp solved", ("goalposts/solved",)),
    ("gp union", ("goalposts/solved_union",)),
    ("eval p@1", ("eval/all/pass@1",)),
    ("eval p@8", ("eval/all/pass@8",)),
    ("d2 p@1", ("eval/d2/pass@1",)),
]


def pick(h: dict, keys) -> str:
    for k in keys:
        if k in h:
            v = h[k]
            return f"{v:9.0f}" if k.startswith(("goalposts/", "student/trained/tasks")) else f"{v:9.3f}"
    return f"{'':>9}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--methods", default="gasp,azr,rlvr")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--out", default="runs/bench")
    ap.add_argument("--json", default=None, help="also write the per-run summary to this file")
    args = ap.parse_args()

    from selfplay_core.config import load_config
    from selfplay_core.loop.driver import run_selfplay
    from selfplay_core.sandbox import Executor

    summary = {}
    for method in args.methods.split(","):
        for seed in [int(s) for s in args.seeds.split(",")]:
            cfg = load_config(ROOT / "configs" / CONFIGS[method],
                              [f"iterations={args.iterations}", f"seed={seed}", f"out_dir={args.out}",
                               f"tracking.run_name=bench-{method}-s{seed}", "tracking.experiment=toyworld-learning",
                               *args.overrides])
            run_dir = Path(args.out) / f"bench-{method}-s{seed}"
            t0 = time.perf_counter()
            with Executor(cfg.sandbox) as ex:
                res = run_selfplay(cfg, run_dir=run_dir, executor=ex)
            wall = time.perf_counter() - t0
            print(f"\n== {method}, seed {seed}: {args.iterations} iterations in {wall:.0f} s "
                  f"(MLflow run {res.run_id})")
            print("step " + "".join(f"{name:>12}" for name, _ in COLUMNS))
            for h in res.history:
                print(f"{h['step']:>4} " + "".join(f"   {pick(h, keys)}" for _, keys in COLUMNS))
            last = res.history[-1]
            summary[f"{method}/s{seed}"] = {
                "wall_s": round(wall), "goalposts_solved_union": last.get("goalposts/solved_union"),
                "goalposts_total": last.get("goalposts/total"),
                "eval_pass@1": last.get("eval/all/pass@1"), "eval_pass@8": last.get("eval/all/pass@8"),
                "eval_pass@1_base": res.history[0].get("eval/all/pass@1"),
                # one evaluation is 60 tasks x 8 samples: the last three are steadier than one
                "eval_pass@1_last3": _mean([h["eval/all/pass@1"] for h in res.history[1:]
                                            if "eval/all/pass@1" in h][-3:]),
                "student_reward_first": next((h.get("student/accepted/reward") for h in res.history[1:]
                                              if "student/accepted/reward" in h), None),
                "student_reward_last": last.get("student/accepted/reward", last.get("student/real/pass_rate")),
            }
    print("\nsummary:")
    print(json.dumps(summary, indent=2))
    print_aggregate(summary)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))


def _mean(xs):
    return sum(xs) / len(xs) if xs else None


AGG = [("wall s", "wall_s", "{:.0f}"), ("eval p@1", "eval_pass@1", "{:.3f}"),
       ("p@1 last 3", "eval_pass@1_last3", "{:.3f}"),
       ("eval p@8", "eval_pass@8", "{:.3f}"), ("gp union", "goalposts_solved_union", "{:.1f}"),
       ("stud first", "student_reward_first", "{:.2f}"), ("stud last", "student_reward_last", "{:.2f}")]


def print_aggregate(summary: dict) -> None:
    """Per method over its seeds: mean ± half the range (with 2 seeds, each seed is mean ± that)."""
    methods: dict[str, list[dict]] = {}
    for key, row in summary.items():
        methods.setdefault(key.rsplit("/s", 1)[0], []).append(row)
    print("\nper method, mean ± half-range over seeds:")
    print(f"{'method':<12}{'seeds':>6}" + "".join(f"{name:>16}" for name, _, _ in AGG))
    for m, rows in methods.items():
        cells = []
        for _, key, fmt in AGG:
            vals = [r[key] for r in rows if r.get(key) is not None]
            if not vals:
                cells.append(f"{'-':>16}")
                continue
            mean, half = sum(vals) / len(vals), (max(vals) - min(vals)) / 2
            cells.append(f"{(fmt.format(mean) + ' ± ' + fmt.format(half)):>16}")
        print(f"{m:<12}{len(rows):>6}" + "".join(cells))
    base = [r["eval_pass@1_base"] for rows in methods.values() for r in rows if r.get("eval_pass@1_base") is not None]
    if base:
        print(f"(start checkpoint: eval p@1 {sum(base) / len(base):.3f})")


if __name__ == "__main__":
    main()
