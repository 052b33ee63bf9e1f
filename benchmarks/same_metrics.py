"""Do two versions of the code give the same numbers? Runs a few short self-play runs (no
Prefect; local MLflow in a temp folder) with the code of a git ref and with this checkout, and
compares every per-iteration metric except timings. A refactor that changes no behaviour must
print IDENTICAL for each run.

    python benchmarks/same_metrics.py --ref main                        # GASP, 2 iterations
    python benchmarks/same_metrics.py --ref main --runs gasp,azr,rlvr,gasp+rlvr,azr3,one-step

Each run is a fresh process per side (the same seed, same machine); the ref's code comes from
`git archive REF` into a temp folder and is put first on PYTHONPATH. A run may give the method's
config keys in either layout: `--set` keys are spelled per side (`azr.task_types` before the
method section existed, `method.task_types` after); see RUNS.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# name: (config file, overrides for code with method sections, overrides for older code)
RUNS = {
    "gasp": ("configs/tiny-cpu.yaml", ["iterations=2"], ["iterations=2"]),
    "azr": ("configs/azr-tiny-cpu.yaml", ["iterations=2"], ["iterations=2"]),
    "rlvr": ("configs/rlvr-tiny-cpu.yaml", ["iterations=2"], ["iterations=2"]),
    "gasp+rlvr": ("configs/gasp-rlvr-tiny-cpu.yaml", ["iterations=2"], ["iterations=2"]),
    "azr3": ("configs/azr-tiny-cpu.yaml", ["iterations=1", "method.task_types=[deduction,abduction,induction]"],
             ["iterations=1", "azr.task_types=[deduction,abduction,induction]"]),
    "one-step": ("configs/ablation-one-step-hard.yaml", ["iterations=1"], ["iterations=1"]),
    "student-band": ("configs/ablation-student-band.yaml", ["iterations=2"], ["iterations=2"]),
    "grpo": ("configs/tiny-cpu.yaml", ["iterations=1", "method.advantage=grpo"], ["iterations=1", "advantage=grpo"]),
    "sgs": ("configs/sgs-tiny-cpu.yaml", ["iterations=2"], ["iterations=2"]),
    # The oracle arms (toy-world methods; `diagnostics.*` is their spelling on both sides).
    "oracle-curriculum": ("configs/tiny-cpu.yaml", ["iterations=2", "diagnostics.oracle_curriculum=true"],
                          ["iterations=2", "diagnostics.oracle_curriculum=true"]),
    "oracle-filter": ("configs/tiny-cpu.yaml", ["iterations=2", "diagnostics.oracle_filter=true"],
                      ["iterations=2", "diagnostics.oracle_filter=true"]),
    # GASP's judges (the config file spells the judge per side), and the old keys below.
    "gasp-guide": ("configs/gasp-guide-tiny-cpu.yaml", ["iterations=2"], ["iterations=2"]),
    "gasp-code": ("configs/gasp-sighted-tiny-cpu.yaml",
                  ["iterations=2", "method.code_relevance={power: 4, gate: 0.85}"], ["iterations=2"]),
    "gasp-grad": ("configs/gasp-sighted-tiny-cpu.yaml",
                  ["iterations=1", "method.gradient_relevance={gate: 0.0}"], ["iterations=1"]),
    "gasp-edit": ("configs/gasp-sighted-tiny-cpu.yaml",
                  ["iterations=2", "method.lemma_program=statement_deletion"], ["iterations=2"]),
}
# Runs whose keys moved once more: code that has the marker file takes these overrides instead
# (GASP's judges became one slot, `method.judge`, and statement-deletion lemmas method gasp-edit).
RESPELLED = {
    "gasp-code": ("selfplay_core/methods/judges/__init__.py",
                  ["iterations=2", "method.judge={name: code, power: 4, gate: 0.85}"]),
    "gasp-grad": ("selfplay_core/methods/judges/__init__.py",
                  ["iterations=1", "method.judge={name: gradient, gate: 0.0}"]),
    "gasp-edit": ("selfplay_core/methods/judges/__init__.py",
                  ["iterations=2", "method.name=gasp-edit", "method.privileged_sighted_teacher=true"]),
}

CHILD = r"""
import json, os, sys, tempfile
from selfplay_core.config import load_config
from selfplay_core.loop.driver import run_selfplay
config, out, overrides = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = []
with tempfile.TemporaryDirectory() as tmp:
    cfg = load_config(config, [*overrides, f"out_dir={tmp}"])
    def keep(step, metrics):
        rows.append({"step": step, **{k: v for k, v in sorted(metrics.items())
                                      if not (k.startswith("time/") or k.endswith("_time_s"))
                                      and isinstance(v, (int, float))}})
    run_selfplay(cfg, run_dir=os.path.join(tmp, "run"), on_iteration=keep)
    history = json.load(open(os.path.join(tmp, "run", "state.json")))["history"]
json.dump({"iterations": rows, "history": history}, open(out, "w"))
"""


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def has_method_sections(code: Path) -> bool:
    return (code / "selfplay_core" / "methods" / "base.py").exists()


def run(code: Path, name: str, out: Path) -> dict:
    config, new, old = RUNS[name]
    overrides = new if has_method_sections(code) else old
    if name in RESPELLED and (code / RESPELLED[name][0]).exists():
        overrides = RESPELLED[name][1]
    env = {**os.environ, "PYTHONPATH": str(code), "MLFLOW_ENABLE_TELEMETRY": "false",
           "DO_NOT_TRACK": "true", "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-c", CHILD, str(code / config), str(out), *overrides],
                   cwd=code, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return json.loads(out.read_text())


def export(ref: str, dest: Path) -> Path:
    data = subprocess.run(["git", "archive", ref], cwd=ROOT, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", default="main", help="the git ref to compare with (default main)")
    ap.add_argument("--runs", default="gasp", help=f"comma-separated, of {', '.join(RUNS)}")
    args = ap.parse_args()
    names = [n for n in args.runs.split(",") if n]
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        ap.error(f"unknown run(s) {unknown}; choose from {', '.join(RUNS)}")
    ok = True
    with tempfile.TemporaryDirectory(prefix="same-metrics-") as tmp:
        ref_code = export(args.ref, Path(tmp) / "ref")
        for name in names:
            a = run(ref_code, name, Path(tmp) / f"{name}-ref.json")
            b = run(ROOT, name, Path(tmp) / f"{name}-here.json")
            diffs = [(ra["step"], k, ra.get(k), rb.get(k)) for ra, rb in zip(a["iterations"], b["iterations"])
                     for k in sorted(set(ra) | set(rb)) if not same(ra.get(k), rb.get(k))]
            n = sum(len(r) - 1 for r in a["iterations"])
            identical = not diffs and len(a["iterations"]) == len(b["iterations"]) and same(a["history"], b["history"])
            ok &= identical
            print(f"{name:<14} {len(a['iterations'])} iterations, {n} metric values: "
                  f"{'IDENTICAL' if identical else 'DIFFERENT'}")
            for step, k, x, y in diffs[:20]:
                print(f"    step {step} {k}: {x!r} ({args.ref}) vs {y!r} (here)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
