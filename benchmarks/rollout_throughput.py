"""Rollouts on the toy model: the project's HF engine vs a real vLLM server (the CPU build from
`make vllm-venv`, or $SELFPLAY_VLLM_VENV), side by side in one run.

1. Generation throughput: the same prompts, samples, token budget, stop strings and temperature
   through both engines (after one warm-up call each), for the student's and the teacher's
   requests; completion tokens per second, medians of alternating rounds, and the ratio. The HF
   engine runs with the loop's thread setting (model.torch_threads = 1); vLLM's CPU build binds
   its engine to one core and leaves the other to its HTTP frontend.
2. The wall-time split of loop iterations (generation, verification, update, evaluation, goalpost
   tracking, orchestration; loop/timing.py) for GASP on the embedded default with each engine,
   same config and seed; vLLM with filesystem weight sync to a server the run starts itself.

    python benchmarks/rollout_throughput.py [--prompts 64] [--n 8] [--max-new-tokens 96]
        [--iterations 2] [--no-loop] [--prefect] [--venv DIR]

Absolute numbers depend on the machine's load; the ratios are measured side by side.
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


def workloads(k: int) -> list[tuple[str, list[str], tuple[str, ...], int]]:
    """(name, prompts, stop strings, max new tokens): the student's and the teacher's requests of
    a GASP iteration, built from toy-world held-out tasks."""
    from selfplay_core.roles.student import STOP
    from selfplay_core.roles.teacher import STOP as TEACHER_STOP
    from selfplay_core.roles.teacher import teacher_prompt
    from selfplay_core.solve import student_prompt_for
    from selfplay_core.toyworld.splits import build_world

    problems = build_world(0).eval.problems
    picked = [problems[i % len(problems)] for i in range(k)]
    student = [student_prompt_for(p) for p in picked]
    teacher = [teacher_prompt(p.prompt or "", p.metadata.get("reference", ""), "f", "easier")
               for p in picked]
    return [("student", student, tuple(STOP), 96), ("teacher", teacher, tuple(TEACHER_STOP), 192)]


def timed_generate(engine, prompts, n, sampling) -> tuple[float, int]:
    t0 = time.perf_counter()
    out = engine.generate(prompts, n, sampling)
    seconds = time.perf_counter() - t0
    return seconds, sum(len(c.token_ids) for g in out for c in g)


def throughput(args, model_dir: Path, venv: str, work: Path) -> None:
    """Both engines on each workload, `rounds` times, alternating (the load of a shared machine
    drifts; alternating puts both engines under the same drift); medians and per-round ratios."""
    import statistics

    import torch

    from selfplay_core.engines.base import SamplingParams
    from selfplay_core.engines.hf import HFEngine
    from selfplay_core.engines.vllm import VLLMEngine, VLLMEngineConfig
    from selfplay_core.engines.vllm_server import ServeOptions, launch
    from selfplay_core.engines.weight_sync import write_served_copy

    torch.set_num_threads(1)  # the loop's setting (model.torch_threads); vLLM's CPU build binds
    hf = HFEngine(str(model_dir), batch_size=64)  # its engine to one core and runs its frontend
    served = write_served_copy(model_dir, work / "served-throughput")  # on the other
    print("starting the vLLM server (1-3 min on a busy CPU) ...", flush=True)
    t0 = time.perf_counter()
    server = launch(ServeOptions(model=str(served), venv=venv, port=free_port(), dtype="float32",
                                 max_model_len=512, weight_sync="filesystem"),
                    wait_timeout_s=900, log_path=work / "vllm-throughput.log", poll_s=2.0)
    start_s = time.perf_counter() - t0
    try:
        vl = VLLMEngine(VLLMEngineConfig(base_url=server.url))
        version = f"{vl.server_info().version} ({vl.server_info().device})"
        results = []
        for name, prompts, stop, max_new in workloads(args.prompts):
            sp = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=max_new, stop=stop)
            for eng in (hf, vl):  # warm-up: allocator, caches, the server's first batch
                eng.generate(prompts[:4], 2, sp)
            rates = {"hf": [], "vllm": []}
            for _ in range(args.rounds):
                for key, eng in (("hf", hf), ("vllm", vl)):
                    sec, tok = timed_generate(eng, prompts, args.n, sp)
                    rates[key].append(tok / sec)
            results.append((name, max_new, rates))
    finally:
        server.stop()
    print(f"\n== generation, HF engine (1 thread) vs vLLM {version}: {args.prompts} prompts x "
          f"{args.n} samples, T=1.0, each role's stop strings, {args.rounds} alternating rounds "
          f"(vLLM server start-up: {start_s:.0f} s)")
    print(f"{'workload':<22}{'hf tok/s':>10}{'vllm tok/s':>12}{'vllm/hf':>9}   per round")
    for name, max_new, r in results:
        hf_m, vl_m = statistics.median(r["hf"]), statistics.median(r["vllm"])
        per = " ".join(f"{v / h:.2f}" for h, v in zip(r["hf"], r["vllm"]))
        print(f"{name + f' (<= {max_new} tok)':<22}{hf_m:>10.0f}{vl_m:>12.0f}{vl_m / hf_m:>9.2f}   {per}")


def loop_split(args, venv: str, work: Path) -> None:
    from mlflow.tracking import MlflowClient

    from selfplay_core.config import load_config
    from selfplay_core.loop.timing import PARTS

    base = [f"iterations={args.iterations}", "eval.goalpost_every=1"]
    engines = {
        "hf": [],
        "vllm": ["engine.backend=vllm", "engine.launch_server=true",
                 f"engine.vllm_url=http://127.0.0.1:{free_port()}"],
    }
    results = {}
    for name, sets in engines.items():
        cfg = load_config(str(ROOT / "configs" / "tiny-cpu.yaml"),
                          base + sets + [f"out_dir={work / 'runs'}", f"tracking.run_name=split-{name}",
                                         f"tracking.mlflow_uri=sqlite:///{work / 'mlflow.db'}"])
        print(f"\nrunning {args.iterations} GASP iterations with the {name} engine ...", flush=True)
        t0 = time.perf_counter()
        if args.prefect:
            from flows.selfplay import for_config

            out = for_config(cfg)(config=cfg)
            run_id, uri = out["run_id"], out["tracking_uri"]
        else:
            from selfplay_core.loop.driver import run_selfplay

            summary = run_selfplay(cfg)
            run_id, uri = summary.run_id, summary.tracking_uri
        wall = time.perf_counter() - t0
        client = MlflowClient(uri)
        per = {}
        for part in PARTS + ("iteration",):
            key = f"time/split/{part}_s" if part != "iteration" else "time/iteration_s"
            vals = [m.value for m in client.get_metric_history(run_id, key)]
            per[part] = sum(vals) / max(1, len(vals))
        per["run"] = wall
        results[name] = per
    print(f"\n== iteration wall time, mean over {args.iterations} GASP iterations "
          f"({'Prefect flow' if args.prefect else 'loop without Prefect'}), seconds")
    print(f"{'part':<16}{'hf':>9}{'vllm':>9}{'hf/vllm':>9}")
    for part in PARTS + ("iteration",):
        hf, vl = results["hf"][part], results["vllm"][part]
        ratio = f"{hf / vl:.2f}" if vl > 0.05 else "-"
        print(f"{part:<16}{hf:>9.1f}{vl:>9.1f}{ratio:>9}")
    print(f"{'whole run':<16}{results['hf']['run']:>9.0f}{results['vllm']['run']:>9.0f}  "
          "(with start-up: model, goalposts, the vLLM server)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3, help="alternating measurement rounds")
    p.add_argument("--no-loop", action="store_true", help="only the generation throughput")
    p.add_argument("--no-throughput", action="store_true", help="only the loop split")
    p.add_argument("--prefect", action="store_true", help="run the loop through the Prefect flow")
    p.add_argument("--venv", default=os.environ.get("SELFPLAY_VLLM_VENV"),
                   help="the vLLM venv (default: $SELFPLAY_VLLM_VENV; `make vllm-venv` builds one)")
    args = p.parse_args()
    for k, v in {"HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "true", "MLFLOW_ENABLE_TELEMETRY": "false",
                 "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                 "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}.items():
        os.environ.setdefault(k, v)
    if not args.venv:
        print("no vLLM venv: run `make vllm-venv` and set SELFPLAY_VLLM_VENV (or pass --venv)",
              file=sys.stderr)
        return 2
    os.environ["SELFPLAY_VLLM_VENV"] = args.venv
    from selfplay_core.toyworld.bootstrap import default_model_dir

    with tempfile.TemporaryDirectory(prefix="rollout-bench-") as tmp:
        work = Path(tmp)
        if not args.no_throughput:
            throughput(args, default_model_dir(), args.venv, work)
        if not args.no_loop:
            loop_split(args, args.venv, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
