#!/usr/bin/env python
"""The prepared check for a lent accelerator: under 8 minutes (219 s on an H200), one JSON line per section.

Each section runs in its own process with its own timeout (a hung kernel, an OOM or a crash
costs that section only) and its line is appended to OUT/sections.jsonl the moment it ends, so a
run cut short still leaves every finished section's numbers. Sections (`--dry-run` prints the
expected time of each on an H200):

  probe            versions, free memory, a bf16 matmul as the real peak, copy bandwidth
  learner_7b       the shared learner on the Qwen2.5-Coder-7B shape (random weights, no
                   download) at the configured micro-batch (4 x 2048) under a memory fraction
                   that emulates an 80 GB card, then a smaller shape: step time, MFU,
                   allocated / reserved / driver-free memory next to the plan's estimate
  bf16_visibility  share of weights a step changes at lr 1e-6 and the share of the intended
                   update that arrives: torch's AdamW on bf16 (before) vs rl.optim (after)
  sync             filesystem weight sync (HF checkpoint write, reload in a second process,
                   checksums); CUDA IPC handles of every weight opened in a second process
  colocation       a second process holding 7B-sized weights + KV cache sleeps (weights to
                   pinned CPU memory, cache freed) and wakes around learner steps; memory
                   per phase
  generation       HF engine tokens/s vs the memory-bandwidth roofline
  logprobs         engine vs learner logprobs of the same tokens at T = 1.0 and 0.4
  toy_iteration    one headless GASP iteration of the embedded default (hard timeout)

The target machine has torch, transformers, accelerate and peft but no pydantic, vLLM, TRL,
Prefect, MLflow or datasets. vLLM/TRL/Prefect/MLflow/datasets are blocked here too (so a CPU run
behaves the same); pydantic comes from `.gpu_check_deps` (made by tools/gpu_check_deps.py)
when it is not installed. `--smoke` runs every section it can on CPU with tiny shapes and marks
the GPU-only ones (the test suite does, so the script does not rot).

    python tools/gpu_check.py --out gpu_check_out       # on the GPU machine
    python tools/gpu_check.py --dry-run                  # the sections and their times
    python tools/gpu_check.py --smoke --out /tmp/smoke   # anywhere
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEPS_ENV = "GPU_CHECK_DEPS"
DEFAULT_DEPS = ROOT / ".gpu_check_deps"
BUDGET_S = 480.0

# name: (expected seconds on an H200, timeout seconds, runs on CPU too). Expected times are those
# measured on a lent H200 on 4 Dec 2026 (lab/gpu-check-h200-2026-12-04.jsonl; 219 s in all);
# timeouts are about 2x those, more for sync (a slow disk) and the 7B step (another driver's
# first step), within the 8-minute budget.
SECTIONS = {
    "probe": (22, 45, True),
    "learner_7b": (34, 100, True),
    "bf16_visibility": (18, 40, True),
    "sync": (43, 70, True),
    "colocation": (33, 60, False),
    "generation": (24, 45, True),
    "logprobs": (23, 45, True),
    "toy_iteration": (22, 60, True),
}
SMOKE_TIMEOUT_S = 420  # a ceiling for hangs on a loaded 2-core CI box, not a time target


class DepsError(SystemExit):
    pass


def carried_site(deps: Path | None) -> Path | None:
    """Where pydantic comes from: None when installed, else the carried folder's `site`
    (checked against this interpreter). One clear error when neither works."""
    import importlib.util

    if importlib.util.find_spec("pydantic") is not None:
        return None
    deps = Path(deps or os.environ.get(DEPS_ENV) or DEFAULT_DEPS)
    manifest = deps / "manifest.json"
    if not manifest.is_file():
        raise DepsError(f"gpu_check: pydantic is not installed and there is no carried copy in "
                        f"{deps}: where a package index is reachable run `python "
                        f"tools/gpu_check_deps.py --python {sys.version_info.major}."
                        f"{sys.version_info.minor}` and carry {DEFAULT_DEPS.name} along "
                        f"(or pass --deps DIR)")
    m = json.loads(manifest.read_text())
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if m.get("python") != here:
        raise DepsError(f"gpu_check: {deps} was made for CPython {m.get('python')}, this is "
                        f"{here}: rerun tools/gpu_check_deps.py --python {here}")
    return deps / "site"


def plan_text(smoke: bool) -> str:
    lines = [f"{'section':<16} {'where':<9} {'expected_s':>10} {'timeout_s':>9}"]
    for name, (expected, timeout, cpu) in SECTIONS.items():
        where = "gpu only" if not cpu else "gpu+cpu"
        lines.append(f"{name:<16} {where:<9} {expected:>10} {timeout:>9}")
    exp = sum(v[0] for v in SECTIONS.values())
    cap = sum(v[1] for v in SECTIONS.values())
    lines.append(f"{'total':<16} {'':<9} {exp:>10} {cap:>9}   (budget {BUDGET_S:.0f} s; expected "
                 "times as measured on one H200 on 4 Dec 2026, timeouts are hard limits)")
    if smoke:
        lines.append(f"--smoke: tiny shapes on CPU, GPU-only sections reported as gpu_only, "
                     f"each section capped at {SMOKE_TIMEOUT_S} s")
    return "\n".join(lines)


def _tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def run_section(name: str, out: Path, *, smoke: bool, timeout: float, deps: Path | None,
                extra: list[str]) -> dict:
    """One section in its own process group; its JSON result or why there is none."""
    result_file, log_file = out / f"{name}.json", out / f"{name}.log"
    result_file.unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--out", str(out)]
    cmd += (["--smoke"] if smoke else []) + extra
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if deps is not None:
        env[DEPS_ENV] = str(deps)
    t0 = time.monotonic()
    with open(log_file, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
            status = None
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the section and anything it spawned
            proc.wait()
            rc, status = None, "timeout"
    line = {"section": name, "seconds": round(time.monotonic() - t0, 1), "timeout_s": timeout}
    if result_file.is_file():
        try:
            line.update(json.loads(result_file.read_text()))
        except ValueError:
            line.update(status="error", error="unreadable result file")
    if status == "timeout":
        line["status"] = "timeout"
    elif "status" not in line:
        line.update(status="crashed", exit_code=rc)
    if line["status"] in ("timeout", "crashed", "error"):
        line["log_tail"] = _tail(log_file)
    return line


def drive(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    deps_site = carried_site(args.deps)  # fails here, once, before any section starts
    deps = deps_site.parent if deps_site is not None else None
    names = args.sections.split(",") if args.sections else list(SECTIONS)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        raise SystemExit(f"gpu_check: unknown sections {unknown}; choose from {list(SECTIONS)}")
    extra = ["--peak-tflops", str(args.peak_tflops)] if args.peak_tflops else []
    lines_path = out / "sections.jsonl"
    lines_path.write_text("")
    t_start = time.monotonic()
    lines = []
    for name in names:
        expected, timeout, _ = SECTIONS[name]
        timeout = args.smoke_timeout_s if args.smoke else timeout
        left = args.budget_s - (time.monotonic() - t_start)
        if not args.smoke and left < min(timeout, expected * 1.5):
            line = {"section": name, "status": "skipped", "reason": f"{left:.0f} s of budget left"}
        else:
            print(f"[gpu_check] {name} (timeout {timeout:.0f} s)", file=sys.stderr, flush=True)
            line = run_section(name, out, smoke=args.smoke,
                               timeout=timeout if args.smoke else min(timeout, max(left, 1.0)),
                               deps=deps, extra=extra)
        lines.append(line)
        with open(lines_path, "a") as f:  # as each section ends: a cut run keeps what finished
            f.write(json.dumps(line, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        print(json.dumps(line, sort_keys=True), flush=True)
    summary = {"mode": "smoke" if args.smoke else "full", "wall_s": round(time.monotonic() - t_start, 1),
               "status": {l["section"]: l["status"] for l in lines},
               "pydantic": "carried" if deps is not None else "installed"}
    (out / "summary.json").write_text(json.dumps(summary, sort_keys=True) + "\n")
    print(json.dumps({"summary": summary}, sort_keys=True), flush=True)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="gpu_check_out", help="folder for sections.jsonl and logs")
    p.add_argument("--smoke", action="store_true", help="tiny shapes on CPU; GPU-only sections marked")
    p.add_argument("--dry-run", action="store_true", help="print the sections and expected times")
    p.add_argument("--sections", help="comma-separated subset, in the listed order")
    p.add_argument("--deps", help=f"carried dependency folder (default ${DEPS_ENV} or {DEFAULT_DEPS})")
    p.add_argument("--peak-tflops", type=float, help="override the dense bf16 peak for MFU")
    p.add_argument("--budget-s", type=float, default=BUDGET_S)
    p.add_argument("--smoke-timeout-s", type=float, default=SMOKE_TIMEOUT_S,
                   help="per-section ceiling with --smoke (default %(default)s)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.dry_run:
        print(plan_text(args.smoke))
        return 0
    if args.child:
        site = carried_site(args.deps)
        if site is not None:
            sys.path.insert(0, str(site))
        sys.path.insert(0, str(ROOT / "tools"))
        from gpu_check_sections import run_child

        return run_child(args.child, Path(args.out), smoke=args.smoke, peak_tflops=args.peak_tflops,
                         carried=site is not None)
    try:
        return drive(args)
    except DepsError as e:
        print(str(e), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
