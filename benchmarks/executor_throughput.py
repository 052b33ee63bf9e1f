"""Executor throughput, measured side by side on the same machine and the same work.

Harnesses, each verifying every HumanEval+ canonical solution on its base + plus inputs:

  executor     this project's executor, default config (warm bwrap fork servers, all cores)
  per-process  an evalplus-style harness: a fresh `python` process per sample and suite
               (base, plus), run on as many parallel slots as the executor has workers
  in-process   the unisolated limit: exec + call + compare in this very process, one core

A second workload, "rl", is shaped like RL verification: 8 samples per problem, base inputs
only (small suites, many samples), which is what the self-play loop sends.

Prints samples/s, tests/s, the ratios, and whether all harnesses agree on every verdict.

    python benchmarks/executor_throughput.py [--workload full|rl|both] [--limit N]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import copy
import dataclasses
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.set_int_max_str_digits(0)

from selfplay_core.datasets.evalplus import file_sha256, load_humanevalplus  # noqa: E402
from selfplay_core.datasets.expected import attach_expected  # noqa: E402
from selfplay_core.problems import Sample  # noqa: E402
from selfplay_core.sandbox import Executor, SandboxConfig  # noqa: E402
from selfplay_core.sandbox.compare import call_matches  # noqa: E402
from selfplay_core.sandbox.worker import Digest, _digest, _plain  # noqa: E402


def same(out, exp, p, args) -> bool:
    """The executor's comparison, for baselines that hold the output object itself: an
    expected value too large to ship is a digest, so digest the output the same way."""
    if type(exp) is Digest:
        try:
            out = Digest(_digest(out))
        except ValueError:
            return False
    return call_matches(out, exp, atol=p.atol, oracle=p.oracle, args=args)

# The per-process child: decode inputs/expected, run, compare with the same rules, print 0/1.
CHILD = r"""
import json, sys
sys.set_int_max_str_digits(0)
sys.path.insert(0, sys.argv[1])
from selfplay_core.sandbox.worker import Digest, _digest, from_json_obj
from selfplay_core.sandbox.compare import call_matches
job = json.loads(sys.stdin.read())
g = {}
ok = True
try:
    exec(job["code"], g)
    fn = g[job["entry"]]
    for args, exp in zip(from_json_obj(job["inputs"]), from_json_obj(job["expected"])):
        out = fn(*args)
        if type(exp) is Digest:
            out = Digest(_digest(out))
        if not call_matches(out, exp, atol=job["atol"], oracle=job["oracle"], args=args):
            ok = False
            break
except BaseException:
    ok = False
print(1 if ok else 0)
"""


def per_process(items, workers):
    def one(item):
        p, code = item
        ok = True
        nb = p.metadata.get("n_base", len(p.tests))
        for suite in (p.tests[:nb], p.tests[nb:]):
            if not suite or not ok:
                continue
            payload = json.dumps({"code": code, "entry": p.entry_point, "atol": p.atol,
                                  "oracle": p.oracle, "inputs": _plain([t.args for t in suite]),
                                  "expected": _plain([t.expected for t in suite])})
            r = subprocess.run([sys.executable, "-c", CHILD, ROOT], input=payload,
                               capture_output=True, text=True, timeout=600)
            ok = r.stdout.strip() == "1"
        return ok

    with cf.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, items))


def in_process(items):
    out = []
    for p, code in items:
        g = {}
        ok = True
        try:
            exec(code, g)
            fn = g[p.entry_point]
            for t in p.tests:
                args = copy.deepcopy(t.args)
                if not same(fn(*args), t.expected, p, args):
                    ok = False
                    break
        except BaseException:
            ok = False
        out.append(ok)
    return out


def measure(name, fn, n_samples, n_tests):
    t0 = time.perf_counter()
    verdicts = fn()
    dt = time.perf_counter() - t0
    print(f"  {name:<12} {dt:8.2f} s  {n_samples / dt:9.1f} samples/s  {n_tests / dt:11.0f} tests/s",
          flush=True)
    return verdicts, dt


def run_workload(title, items, ex):
    n_samples = len(items)
    n_tests = sum(len(p.tests) for p, _ in items)
    print(f"\n[{title}] {n_samples} samples, {n_tests} tests, executor workers={ex.config.workers} "
          f"isolation={ex.isolation}")
    ex.pool.start()  # warm-up is start-up cost, paid once per run; reported separately
    v_ex, t_ex = measure("executor", lambda: [v.passed for v in ex.verify(
        [(p, Sample(p.id, i, c)) for i, (p, c) in enumerate(items)])], n_samples, n_tests)
    v_pp, t_pp = measure("per-process", lambda: per_process(items, ex.config.workers), n_samples, n_tests)
    v_ip, t_ip = measure("in-process", lambda: in_process(items), n_samples, n_tests)
    same = v_ex == v_pp == v_ip
    print(f"  executor vs per-process: {t_pp / t_ex:5.2f}x   executor vs in-process limit: "
          f"{t_ip / t_ex:5.2f}x   identical verdicts: {same} ({sum(v_ex)}/{n_samples} passed)")
    return {"workload": title, "samples": n_samples, "tests": n_tests, "executor_s": t_ex,
            "per_process_s": t_pp, "in_process_s": t_ip, "vs_per_process": t_pp / t_ex,
            "vs_in_process": t_ip / t_ex, "identical_verdicts": same}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", choices=["full", "rl", "both"], default="both")
    ap.add_argument("--limit", type=int, default=None, help="first N problems only")
    ap.add_argument("--json", help="also write the summary here")
    args = ap.parse_args()

    t0 = time.perf_counter()
    with Executor(SandboxConfig(max_sample_time_s=3600.0)) as ex:
        start = time.perf_counter()
        ex.pool.start()
        print(f"executor start-up: {ex.config.workers} workers in {time.perf_counter() - start:.3f} s")
        problems, canon, path = load_humanevalplus(with_path=True)
        problems = attach_expected(problems, canon, executor=ex,
                                   dataset_key=f"humanevalplus-{file_sha256(path)[:16]}")
        print(f"data ready in {time.perf_counter() - t0:.1f} s (expected outputs cached after the first run)")
        if args.limit:
            problems = problems[: args.limit]
        results = []
        if args.workload in ("full", "both"):
            results.append(run_workload("full: HumanEval+ canonical, base + plus inputs",
                                        [(p, canon[p.id]) for p in problems], ex))
        if args.workload in ("rl", "both"):
            base = [dataclasses.replace(p, tests=p.tests[: p.metadata["n_base"]],
                                        metadata={"n_base": p.metadata["n_base"]}) for p in problems]
            results.append(run_workload("rl: 8 samples/problem, base inputs",
                                        [(p, canon[p.id]) for p in base for _ in range(8)], ex))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
