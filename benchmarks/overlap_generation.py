"""overlap_generation on vs off: wall time per iteration and the learning curves, side by side.

The same GASP run on the embedded default (same config, seeds and engine), once with every
update in line and once with iteration t's update running while iteration t+1 generates
(overlap.py). Prints the mean iteration time of each, the speed-up, and held-out pass@1 /
pass@8 per iteration for both (DESIGN §5: seed-to-seed spread ~0.03 on held-out pass@1, so one
seed per arm tells apart only differences larger than that).

    python benchmarks/overlap_generation.py [--engine vllm|hf] [--iterations 6] [--seeds 0]

With vllm the run starts a CPU server from $SELFPLAY_VLLM_VENV. On a 2-core machine the learner
and the server share the cores, so the overlap can hide little; on GPUs (server and learner on
their own devices) it hides the shorter of the two phases.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(engine: str, overlap: bool, seed: int, iterations: int, work: Path) -> dict:
    from mlflow.tracking import MlflowClient

    from selfplay_core.config import load_config
    from selfplay_core.loop.driver import run_selfplay

    sets = [f"iterations={iterations}", f"seed={seed}", f"overlap_generation={str(overlap).lower()}",
            f"out_dir={work / 'runs'}", f"tracking.run_name={engine}-{'ov' if overlap else 'seq'}-s{seed}",
            f"tracking.mlflow_uri=sqlite:///{work / 'mlflow.db'}", "eval.goalpost_every=100"]
    if engine == "vllm":
        sets += ["engine.backend=vllm", "engine.launch_server=true",
                 f"engine.vllm_url=http://127.0.0.1:{free_port()}"]
    cfg = load_config(str(ROOT / "configs" / "tiny-cpu.yaml"), sets)
    t0 = time.perf_counter()
    summary = run_selfplay(cfg)
    wall = time.perf_counter() - t0
    client = MlflowClient(summary.tracking_uri)

    def hist(key):
        return {m.step: m.value for m in client.get_metric_history(summary.run_id, key)}

    its = hist("time/iteration_s")
    return {"wall": wall, "iteration_s": sum(its.values()) / max(1, len(its)),
            # MLflow keys cannot hold "@": the driver logs pass@k as pass_at_k.
            "p1": hist("eval/all/pass_at_1"), "p8": hist("eval/all/pass_at_8"),
            "wait": hist("time/update_wait_s"), "learner": hist("time/learner_s")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=["vllm", "hf"], default="vllm")
    p.add_argument("--iterations", type=int, default=6)
    p.add_argument("--seeds", default="0")
    args = p.parse_args()
    for k, v in {"HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "true", "MLFLOW_ENABLE_TELEMETRY": "false"}.items():
        os.environ.setdefault(k, v)
    if args.engine == "vllm" and not os.environ.get("SELFPLAY_VLLM_VENV"):
        print("--engine vllm needs SELFPLAY_VLLM_VENV (make vllm-venv builds one)", file=sys.stderr)
        return 2
    seeds = [int(s) for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory(prefix="overlap-bench-") as tmp:
        rows = {}
        for i, seed in enumerate(seeds):
            # ABBA order: load that drifts during the session favours neither arm.
            for overlap in ((False, True) if i % 2 == 0 else (True, False)):
                print(f"seed {seed}, overlap {overlap} ...", flush=True)
                rows[(seed, overlap)] = one_run(args.engine, overlap, seed, args.iterations, Path(tmp))
    print(f"\n== {args.engine} engine, GASP, {args.iterations} iterations, tiny-cpu.yaml")
    print(f"{'seed':>4} {'overlap':>8} {'s/iteration':>12} {'run s':>7}  pass@1 by iteration (0 = start)")
    for (seed, overlap), r in sorted(rows.items()):
        curve = " ".join(f"{r['p1'][k]:.3f}" for k in sorted(r["p1"]))
        print(f"{seed:>4} {str(overlap):>8} {r['iteration_s']:>12.1f} {r['wall']:>7.0f}  {curve}")
    for seed in seeds:
        seq, ov = rows[(seed, False)], rows[(seed, True)]
        last = max(seq["p1"])
        hidden = sum(ov["learner"].values()) - sum(ov["wait"].values())
        print(f"seed {seed}: speed-up per iteration {seq['iteration_s'] / ov['iteration_s']:.2f}x; "
              f"final pass@1 {seq['p1'][last]:.3f} (in line) vs {ov['p1'][last]:.3f} (overlap), "
              f"pass@8 {seq['p8'][last]:.3f} vs {ov['p8'][last]:.3f}; learner time hidden by the "
              f"overlap {hidden:.0f} s of {sum(ov['learner'].values()):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
