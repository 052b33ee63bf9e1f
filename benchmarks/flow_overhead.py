"""What Prefect costs per iteration: the self-play flow against the loop without Prefect, side
by side, on the same config and seed.

    python benchmarks/flow_overhead.py [--config configs/tiny-cpu.yaml] [--iterations 2]
        [--rounds 2] [--set KEY=VALUE ...]

Each round runs the config twice, each time in a fresh process: through the flow
(`flows.selfplay`: every stage a Prefect task, Prefect's temporary local server, as
`selfplay run` does it) and through `run_selfplay` calling the stages directly
(`selfplay run --no-prefect`). The order alternates from round to round, so a machine that
gets busier or quieter does not favour one arm. Both arms must compute the same metrics
(rewards, learner loss and tokens, pass rates): the script says so, or lists what differs.

Per iteration it reads from each run's MLflow store `time/iteration_s` and the split's
orchestration part, `time/split/orchestration_s` (loop/timing.py: the iteration's time outside
generation, verification, update, evaluation and goalpost tracking, i.e. task wrappers, prompt
building, parsing, rewards and buffers). It prints medians over rounds and iterations:

* each arm's iteration time and orchestration time, and the share of the iteration that is
  orchestration; the flow's share is what the project holds to <= 5 %;
* Prefect's own cost per iteration: the flow's orchestration minus the direct loop's, and that
  as a share of the flow's iteration;
* where each arm's iterations spent their time (generation, verification, update, evaluation,
  goalposts, orchestration): on a loaded machine the iteration times of the two arms differ by
  more than Prefect costs, and this line shows in which part;
* each process's wall time, which for the flow also holds Prefect's start (its temporary server),
  paid once per run.

Absolute numbers depend on the machine's load; the comparison is side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys
from mlflow.tracking import MlflowClient
from selfplay_core.config import load_config
arm, config, out_dir, result = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
cfg = load_config(config, [*sys.argv[5:], f"out_dir={out_dir}", "tracking.run_name=bench"])
run_dir = os.path.join(out_dir, "bench")
if arm == "flow":
    from flows.selfplay import for_config
    out = for_config(cfg).with_options(retries=0)(config=cfg, run_dir=run_dir)
    run_id, uri = out["run_id"], out["tracking_uri"]
else:
    from selfplay_core.loop.driver import run_selfplay
    summary = run_selfplay(cfg, run_dir=run_dir)
    run_id, uri = summary.run_id, summary.tracking_uri
client = MlflowClient(uri)
metrics = {}
for key in client.get_run(run_id).data.metrics:
    for m in client.get_metric_history(run_id, key):
        metrics.setdefault(str(m.step), {})[key] = m.value
json.dump(metrics, open(result, "w"))
"""

QUIET = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "true",
         "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120", "MLFLOW_ENABLE_TELEMETRY": "false",
         "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "PREFECT_LOGGING_LEVEL": "WARNING"}


def run_arm(arm: str, config: str, sets: list[str], tmp: Path) -> tuple[dict, float]:
    """One run in a fresh process: ({step: {metric: value}}, the process's wall seconds)."""
    out_dir, result = tmp / f"{arm}-out", tmp / f"{arm}.json"
    env = {**os.environ, **QUIET,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("MLFLOW_TRACKING_URI", None)  # each run logs to a store of its own
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, arm, config, str(out_dir), str(result), *sets],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"the {arm} run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(result.read_text()), wall


def differences(a: dict, b: dict) -> list[str]:
    """Metrics (timings aside) whose values differ between two runs, as 'step key: a vs b'."""
    out = []
    for step in sorted(set(a) | set(b), key=int):
        ma, mb = a.get(step, {}), b.get(step, {})
        for key in sorted(set(ma) | set(mb)):
            if key.startswith("time/"):
                continue
            va, vb = ma.get(key), mb.get(key)
            if va != vb:
                out.append(f"step {step} {key}: {va} vs {vb}")
    return out


PARTS = ("generation", "verification", "update", "evaluation", "goalposts", "orchestration")


def per_iteration(metrics: dict) -> list[tuple[float, float]]:
    """(iteration seconds, orchestration seconds) of each iteration (steps 1..)."""
    return [(m["time/iteration_s"], m["time/split/orchestration_s"]) for m in iterations(metrics)]


def iterations(metrics: dict) -> list[dict]:
    return [m for step, m in sorted(metrics.items(), key=lambda kv: int(kv[0]))
            if int(step) > 0 and "time/iteration_s" in m]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/tiny-cpu.yaml")
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2, help="rounds of one run per arm (default 2)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for both arms (repeatable)")
    args = p.parse_args(argv)
    sets = [f"iterations={args.iterations}", *args.sets]
    iters = {"flow": [], "direct": []}
    splits = {"flow": [], "direct": []}
    walls = {"flow": [], "direct": []}
    diffs: list[str] = []
    with tempfile.TemporaryDirectory(prefix="flow-overhead-") as tmp:
        for r in range(args.rounds):
            order = ("direct", "flow") if r % 2 == 0 else ("flow", "direct")
            got = {}
            for arm in order:
                metrics, wall = run_arm(arm, args.config, sets, Path(tmp) / f"r{r}")
                got[arm] = metrics
                iters[arm] += per_iteration(metrics)
                splits[arm] += iterations(metrics)
                walls[arm].append(wall)
                its = ", ".join(f"{t:.1f} s (orchestration {o:.2f} s)" for t, o in per_iteration(metrics))
                print(f"round {r + 1} {arm:<6} process {wall:6.1f} s; iterations: {its}", flush=True)
            diffs += [f"round {r + 1} {d}" for d in differences(got["direct"], got["flow"])]

    med = {arm: (statistics.median(t for t, _ in rows), statistics.median(o for _, o in rows))
           for arm, rows in iters.items()}
    print(f"\n{args.config}, {args.iterations} iterations, {args.rounds} rounds "
          f"(medians over {len(iters['flow'])} iterations per arm):")
    for arm in ("direct", "flow"):
        t, o = med[arm]
        print(f"  {arm:<6} iteration {t:6.2f} s   orchestration {o:5.2f} s = {100 * o / t:4.1f} % of it   "
              f"process {statistics.median(walls[arm]):6.1f} s")
    print("  where the iterations' time went (medians, s):  "
          + "  ".join(f"{p} {statistics.median(m[f'time/split/{p}_s'] for m in splits['direct']):.2f}"
                      f" / {statistics.median(m[f'time/split/{p}_s'] for m in splits['flow']):.2f}"
                      for p in PARTS) + "   (direct / flow)")
    prefect = med["flow"][1] - med["direct"][1]
    print(f"  Prefect's cost per iteration: {prefect:+.2f} s = {100 * prefect / med['flow'][0]:+.1f} % of a "
          f"flow iteration; flow / direct iteration time = {med['flow'][0] / med['direct'][0]:.2f}")
    print(f"  flow orchestration share {100 * med['flow'][1] / med['flow'][0]:.1f} % (target <= 5 %)")
    if diffs:
        print(f"  metrics DIFFER between the arms ({len(diffs)}):")
        for d in diffs[:20]:
            print(f"    {d}")
        return 1
    print("  metrics: identical in both arms (every metric but timings, every step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
