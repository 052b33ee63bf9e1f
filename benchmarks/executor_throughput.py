"""Executor throughput, measured side by side on the same machine and the same work.

Harnesses, each verifying HumanEval+ canonical solutions:

  executor     this project's executor, default config (warm bwrap fork servers, all cores)
  baseline     (with --baseline-tree DIR) the executor of another checkout, e.g. the commit
               before a change, on the same problems in the same run
  per-process  an evalplus-style harness: a fresh `python` process per sample and suite (call
               workloads) or per test (stdin, as a judge runs it), on as many parallel slots
               as executor workers
  per-sample   (workloads with stdin samples) the same, but a sample's stdin tests share one
               fresh process (exec per test with redirected streams): the cheapest fresh-
               process-per-sample harness
  in-process   the unisolated limit: exec + call + compare in this very process, one core

Workloads:

  full   HumanEval+ canonical solutions on base + plus inputs (164 samples, 124k tests)
  rl     shaped like RL verification: 8 samples per problem, base inputs only (many small jobs)
  stdin  the same solutions as stdin programs (arguments in, repr of the result out), base
         inputs, 4 samples per problem (small stdin problems)
  mixed  rl and stdin together: 4 call samples and 4 stdin samples per problem, interleaved

Prints samples/s, tests/s, the ratios, and whether all harnesses agree on every verdict.
Absolute times on a shared machine are noisy; the ratios in one run are what to compare.

    python benchmarks/executor_throughput.py [--workload full,rl,stdin] [--limit N]
        [--baseline-tree DIR] [--json OUT]

Before/after a change: pass the earlier checkout as --baseline-tree (e.g. `git archive <commit>
selfplay_core | tar -x -C /tmp/before`); "executor vs baseline" is then the change's speed-up
(below 1: the cost of what it added), measured side by side.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import copy
import dataclasses
import io
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.set_int_max_str_digits(0)

from selfplay_core.datasets.evalplus import file_sha256, load_humanevalplus  # noqa: E402
from selfplay_core.datasets.expected import attach_expected  # noqa: E402
from selfplay_core.problems import Problem, Sample, TestCase  # noqa: E402
from selfplay_core.sandbox import Executor, SandboxConfig  # noqa: E402
from selfplay_core.sandbox.compare import call_matches, stdout_matches  # noqa: E402
from selfplay_core.values import Digest, _digest, _plain  # noqa: E402


def same(out, exp, p, args) -> bool:
    """The executor's comparison, for baselines that hold the output object itself: an
    expected value too large to ship is a digest, so digest the output the same way."""
    if type(exp) is Digest:
        try:
            out = Digest(_digest(out))
        except ValueError:
            return False
    return call_matches(out, exp, atol=p.atol, oracle=p.oracle, args=args)


# Both children below load only the codec and the comparison rules: empty package stubs keep
# the sandbox package's __init__, and its pydantic import, out (an evalplus-style harness has
# neither).
CHILD_PREAMBLE = r"""
import io, json, os, sys, types
sys.set_int_max_str_digits(0)
for name in ("selfplay_core", "selfplay_core.sandbox"):
    mod = types.ModuleType(name)
    mod.__path__ = [os.path.join(sys.argv[1], *name.split("."))]
    sys.modules[name] = mod
"""

# The per-process child: decode inputs/expected, run, compare with the same rules, print 0/1.
CHILD = CHILD_PREAMBLE + r"""
from selfplay_core.values import Digest, _digest, from_json_obj
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
        if p.kind == "stdin":
            for t in p.tests:  # a fresh interpreter per test, as a judge runs it
                r = subprocess.run([sys.executable, "-c", code], input=t.stdin,
                                   capture_output=True, text=True, timeout=600)
                if r.returncode != 0 or not stdout_matches(r.stdout, t.expected):
                    return False
            return True
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


# The per-sample child for stdin samples: every test of the sample in this one process.
SAMPLE_CHILD = CHILD_PREAMBLE + r"""
from selfplay_core.sandbox.compare import stdout_matches
job = json.loads(sys.stdin.read())
code = compile(job["code"], "solution.py", "exec")
ok = True
real_in, real_out = sys.stdin, sys.stdout
for text, exp in zip(job["inputs"], job["expected"]):
    buf = io.StringIO()
    sys.stdin, sys.stdout = io.StringIO(text), buf
    try:
        exec(code, {"__name__": "__main__"})
    except SystemExit as e:
        ok = e.code in (None, 0)
    except BaseException:
        ok = False
    finally:
        sys.stdin, sys.stdout = real_in, real_out
    if not ok or not stdout_matches(buf.getvalue(), exp):
        ok = False
        break
print(1 if ok else 0)
"""


def per_sample(items, workers):
    """Call samples as in per_process; a stdin sample's tests in one fresh process."""
    def one(item):
        p, code = item
        if p.kind != "stdin":
            return per_process([item], 1)[0]
        payload = json.dumps({"code": code, "inputs": [t.stdin for t in p.tests],
                              "expected": [t.expected for t in p.tests]})
        r = subprocess.run([sys.executable, "-c", SAMPLE_CHILD, ROOT], input=payload,
                           capture_output=True, text=True, timeout=600)
        return r.stdout.strip() == "1"

    with cf.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, items))


def in_process(items):
    out = []
    for p, code in items:
        ok = True
        try:
            if p.kind == "stdin":
                for t in p.tests:
                    buf, real_in, real_out = io.StringIO(), sys.stdin, sys.stdout
                    sys.stdin, sys.stdout = io.StringIO(t.stdin), buf
                    try:
                        exec(code, {"__name__": "__main__"})
                    finally:
                        sys.stdin, sys.stdout = real_in, real_out
                    if not stdout_matches(buf.getvalue(), t.expected):
                        ok = False
                        break
            else:
                g = {}
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


# The baseline executor runs in its own process, importing another checkout's code.
BASELINE = r"""
import json, sys, time
sys.set_int_max_str_digits(0)
sys.path.insert(0, sys.argv[1])
from selfplay_core.problems import Sample, problem_from_json
from selfplay_core.sandbox import Executor, SandboxConfig
rows = [json.loads(line) for line in open(sys.argv[2])]
items = [(problem_from_json(r["problem"]), r["code"]) for r in rows]
with Executor(SandboxConfig(max_sample_time_s=3600.0)) as ex:
    ex.pool.start()
    t0 = time.perf_counter()
    vs = ex.verify([(p, Sample(p.id, i, c)) for i, (p, c) in enumerate(items)])
    dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "verdicts": [v.passed for v in vs]}))
"""


def baseline(items, tree):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for p, code in items:
            f.write(json.dumps({"problem": p.to_json(), "code": code}) + "\n")
        path = f.name
    try:
        r = subprocess.run([sys.executable, "-c", BASELINE, os.path.abspath(tree), path],
                           capture_output=True, text=True, timeout=7200,
                           env=dict(os.environ, PYTHONPATH=os.path.abspath(tree)))
    finally:
        os.unlink(path)
    if r.returncode != 0:
        raise SystemExit(f"baseline executor failed: {r.stderr.strip()[-800:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out["verdicts"], out["seconds"]


def timed(fn):
    t0 = time.perf_counter()
    res = fn()
    return res if isinstance(res, tuple) else (res, time.perf_counter() - t0)


def report(name, dt, n_samples, n_tests, note=""):
    print(f"  {name:<12} {dt:8.2f} s  {n_samples / dt:9.1f} samples/s  {n_tests / dt:11.0f} tests/s"
          f"{note}", flush=True)


def run_workload(title, items, ex, tree=None, repeat=3):
    """Executor, baseline and in-process run `repeat` times, interleaved (the load of a shared
    machine drifts), best time kept; the per-process harness (minutes) runs once."""
    n_samples = len(items)
    n_tests = sum(len(p.tests) for p, _ in items)
    print(f"\n[{title}] {n_samples} samples, {n_tests} tests, executor workers={ex.config.workers} "
          f"isolation={ex.isolation} memory_cgroup={ex.launcher.memory_cgroups}")
    ex.pool.start()  # warm-up is start-up cost, paid once per run; reported separately
    res = {"workload": title, "samples": n_samples, "tests": n_tests, "repeat": repeat}
    fns = {"executor": lambda: [v.passed for v in ex.verify(
        [(p, Sample(p.id, i, c)) for i, (p, c) in enumerate(items)])],
           "in-process": lambda: in_process(items)}
    if tree:
        fns["baseline"] = lambda: baseline(items, tree)
    best, verdicts = {}, {}
    for _ in range(repeat):
        for name, fn in fns.items():
            v, dt = timed(fn)
            verdicts[name] = v
            best[name] = min(best.get(name, dt), dt)
    note = f"  (best of {repeat})" if repeat > 1 else ""
    for name in ("executor", "baseline", "in-process"):
        if name in best:
            report(name, best[name], n_samples, n_tests, note)
    v_pp, t_pp = timed(lambda: per_process(items, ex.config.workers))
    report("per-process", t_pp, n_samples, n_tests)
    has_stdin = any(p.kind == "stdin" for p, _ in items)
    if has_stdin:
        v_ps, t_ps = timed(lambda: per_sample(items, ex.config.workers))
        report("per-sample", t_ps, n_samples, n_tests)
    v_ex, t_ex, t_ip = verdicts["executor"], best["executor"], best["in-process"]
    runs = [v_ex, verdicts["in-process"], v_pp] + ([verdicts["baseline"]] if tree else [])
    if tree:
        t_bl = best["baseline"]
        res.update(baseline_s=t_bl, vs_baseline=t_bl / t_ex)
    if has_stdin:
        runs.append(v_ps)
    ident = all(r == v_ex for r in runs)
    if not ident:
        names = ["in-process", "per-process"] + (["baseline"] if tree else [])
        names += ["per-sample"] if has_stdin else []
        for name, r in zip(names, runs[1:]):
            diff = [items[k][0].id for k in range(n_samples) if r[k] != v_ex[k]]
            if diff:
                print(f"  {name} disagrees with the executor on {len(diff)}: {', '.join(diff[:8])}")
    line = (f"  executor vs per-process: {t_pp / t_ex:5.2f}x   executor vs in-process limit: "
            f"{t_ip / t_ex:5.2f}x")
    if has_stdin:
        line += f"   executor vs per-sample: {t_ps / t_ex:5.2f}x"
        res.update(per_sample_s=t_ps, vs_per_sample=t_ps / t_ex)
    if tree:
        line += f"   executor vs baseline: {t_bl / t_ex:5.2f}x (baseline vs in-process: {t_ip / t_bl:5.2f}x)"
    print(f"{line}   identical verdicts: {ident} ({sum(v_ex)}/{n_samples} passed)")
    res.update(executor_s=t_ex, per_process_s=t_pp, in_process_s=t_ip, vs_per_process=t_pp / t_ex,
               vs_in_process=t_ip / t_ex, identical_verdicts=ident)
    return res


STDIN_WRAPPER = "\n\nimport sys\n__args = eval(sys.stdin.read())\nprint(repr({entry}(*__args)))\n"


def stdin_items(problems, canon):
    """HumanEval+ canonical solutions as stdin programs, base inputs whose repr reads back."""
    out = []
    for p in problems:
        tests = []
        for t in p.tests[: p.metadata["n_base"]]:
            try:
                if eval(repr(t.args)) != t.args or type(t.expected) is Digest:
                    continue
            except Exception:
                continue
            tests.append(TestCase(stdin=repr(t.args), expected=repr(t.expected)))
        if tests and p.oracle == "default" and not p.atol:
            out.append((Problem(id=p.id, kind="stdin", tests=tests, time_limit_s=p.time_limit_s,
                                memory_limit_mb=p.memory_limit_mb),
                        canon[p.id] + STDIN_WRAPPER.format(entry=p.entry_point)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="full,rl,stdin",
                    help="comma-separated: full, rl, stdin, mixed (default: full,rl,stdin)")
    ap.add_argument("--limit", type=int, default=None, help="first N problems only")
    ap.add_argument("--baseline-tree", help="a checkout whose executor runs beside this one")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of the executor, baseline and in-process harness (best kept)")
    ap.add_argument("--json", help="also write the summary here")
    args = ap.parse_args()
    wanted = [w.strip() for w in args.workload.split(",") if w.strip()]
    bad = set(wanted) - {"full", "rl", "stdin", "mixed"}
    if bad:
        ap.error(f"unknown workload(s): {', '.join(sorted(bad))}")
    if args.baseline_tree and not os.path.isdir(os.path.join(args.baseline_tree, "selfplay_core")):
        ap.error(f"--baseline-tree {args.baseline_tree}: no selfplay_core package there")

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
        if "full" in wanted:
            results.append(run_workload("full: HumanEval+ canonical, base + plus inputs",
                                        [(p, canon[p.id]) for p in problems], ex, args.baseline_tree, args.repeat))
        if "rl" in wanted:
            base = [dataclasses.replace(p, tests=p.tests[: p.metadata["n_base"]],
                                        metadata={"n_base": p.metadata["n_base"]}) for p in problems]
            results.append(run_workload("rl: 8 samples/problem, base inputs",
                                        [(p, canon[p.id]) for p in base for _ in range(8)], ex,
                                        args.baseline_tree, args.repeat))
        if "stdin" in wanted:
            results.append(run_workload("stdin: canonical solutions as stdin programs, 4 samples/problem",
                                        [it for it in stdin_items(problems, canon) for _ in range(4)],
                                        ex, args.baseline_tree, args.repeat))
        if "mixed" in wanted:
            base = {p.id: dataclasses.replace(p, tests=p.tests[: p.metadata["n_base"]],
                                              metadata={"n_base": p.metadata["n_base"]})
                    for p in problems}
            std = {p.id: (p, c) for p, c in stdin_items(problems, canon)}
            mixed = []
            for p in problems:
                for _ in range(4):
                    mixed.append((base[p.id], canon[p.id]))
                    if p.id in std:
                        mixed.append(std[p.id])
            results.append(run_workload("mixed: 4 call + 4 stdin samples/problem, interleaved",
                                        mixed, ex, args.baseline_tree, args.repeat))
        print(f"\nharness errors: {ex.stats['harness_errors']} (retried: {ex.stats['harness_retries']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
