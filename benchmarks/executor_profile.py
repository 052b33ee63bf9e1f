"""Where one sample's time goes in the executor, on the RL-shaped workload of
`executor_throughput.py` (HumanEval+ canonical solutions, base inputs, 8 samples per problem).

The worker's program is run with time stamps added at each phase boundary (a copy of its
source with a few lines inserted; the real worker is unchanged), reported in the job's end
record, and the parent is profiled with cProfile. Phases, per call-mode sample, as the worker
sees them:

  scratch    job line parsed -> scratch dir made
  fork       fork() in the worker (page tables of the warm worker copied)
  confine    child runs until its "S" line: setpgid, fds, setuid, rlimits (+ scheduling)
  load       "S" -> "L": compile + exec of the program, entry found
  tests      "L" -> last result line
  sweep      kill(-1) of the job's processes + reap (includes the child's exit)
  cleanup    scratch dir removed, end record sent

    python benchmarks/executor_profile.py [--limit N] [--workers 1] [--cprofile]
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import os
import pstats
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.set_int_max_str_digits(0)

from selfplay_core.datasets.evalplus import file_sha256, load_humanevalplus  # noqa: E402
from selfplay_core.datasets.expected import attach_expected  # noqa: E402
from selfplay_core.problems import Sample  # noqa: E402
from selfplay_core.sandbox import Executor, SandboxConfig, backends  # noqa: E402
from selfplay_core.sandbox.pool import WorkerPool  # noqa: E402

_PATCHES = [
    ("_queued = []  #", "_PROF = {}\n_queued = []  #"),
    ("    scratch = _make_scratch(job_id)\n    try:\n",
     "    scratch = _make_scratch(job_id)\n    _PROF.clear(); _PROF['scratch'] = time.monotonic()\n    try:\n"),
    ("            pid, r = _fork_child(job, scratch, None, _child_call)\n",
     "            pid, r = _fork_child(job, scratch, None, _child_call)\n"
     "            _PROF['fork'] = time.monotonic()\n"),
    ('            if line == b"S":\n                self.open("load", now, cpu)\n',
     '            if line == b"S":\n                _PROF["confine"] = now\n                self.open("load", now, cpu)\n'),
    ('            if line == b"L":\n', '            if line == b"L":\n                _PROF["load"] = now\n'),
    ("        if self.k == self.n:\n", "        if self.k == self.n:\n            _PROF['tests'] = now\n"),
    ("            clean = _sweep(pid)\n            end = res if",
     "            clean = _sweep(pid)\n            _PROF['sweep'] = time.monotonic()\n            end = res if"),
    ('    _remove_tree(scratch)\n    end["wall"] = time.monotonic() - t0\n',
     '    _remove_tree(scratch)\n    end["wall"] = time.monotonic() - t0\n'
     '    _PROF["cleanup"] = time.monotonic()\n    end["prof"] = dict((k, v - t0) for k, v in _PROF.items())\n'),
]
# Child-side stamps (fork returned in the child, _confine start and end), written to a file
# in the job's scratch dir and read by the worker before it removes the dir.
_PATCHES += [
    ("""            try:
                _confine(job, scratch, w, in_path)
            except BaseException as e:""",
     """            try:
                _c1 = __import__("time").monotonic()
                _confine(job, scratch, w, in_path)
                _c2 = __import__("time").monotonic()
                _fd = os.open("prof", os.O_WRONLY | os.O_CREAT, 0o600)
                os.write(_fd, ("%r %r %r" % (_c0, _c1, _c2)).encode())
                os.close(_fd)
            except BaseException as e:"""),
    ("""    if pid == 0:  # ---- child
        status = 0
""", """    if pid == 0:  # ---- child
        _c0 = __import__("time").monotonic()
        status = 0
"""),
    ("""    _remove_tree(scratch)
    end["wall"]""", """    try:
        with open(os.path.join(scratch, "prof")) as _f:
            _PROF["child_start"], _PROF["child_confine0"], _PROF["child_confine1"] = map(float, _f.read().split())
    except (OSError, ValueError, KeyError):
        pass
    _remove_tree(scratch)
    end["wall"]"""),
]
CHILD = ["child_start", "child_confine0", "child_confine1"]
PHASES = ["scratch", "fork", "confine", "load", "tests", "sweep", "cleanup"]


def patched_source() -> str:
    src = backends.worker_source()
    for old, new in _PATCHES:
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    return src


FAULTS = [0, 0]


def tree_cpu(pid: int) -> float:
    """CPU seconds of `pid` and every descendant, reaped ones included (utime, stime,
    cutime, cstime from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, stack = 0.0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / tick
            FAULTS[0] += int(fields[7]) + int(fields[8])
            FAULTS[1] += int(fields[8])
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=40, help="first N problems (default 40)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--cprofile", action="store_true", help="also profile the parent")
    args = ap.parse_args()
    src = patched_source()
    backends.worker_source = lambda: src
    ends = []
    real_run = WorkerPool.run

    def run(self, jobs, on_done=None):
        outs = real_run(self, jobs, on_done)
        ends.extend(o.end for o in outs)
        return outs

    WorkerPool.run = run
    with Executor(SandboxConfig(workers=args.workers, max_sample_time_s=3600.0)) as ex:
        problems, canon, path = load_humanevalplus(with_path=True)
        problems = attach_expected(problems, canon, executor=ex,
                                   dataset_key=f"humanevalplus-{file_sha256(path)[:16]}")
        problems = problems[: args.limit]
        base = [dataclasses.replace(p, tests=p.tests[: p.metadata["n_base"]],
                                    metadata={"n_base": p.metadata["n_base"]}) for p in problems]
        items = [(p, Sample(p.id, i, canon[p.id])) for i, p in enumerate(b for b in base for _ in range(8))]
        ex.pool.start()
        ex.verify(items[:16])
        ends.clear()
        prof = cProfile.Profile() if args.cprofile else None
        pids = [s.proc.popen.pid for s in ex.pool._slots]
        FAULTS[:] = [0, 0]
        w0 = sum(tree_cpu(p) for p in pids)
        f0, g0 = FAULTS
        c0 = time.process_time()
        t0 = time.perf_counter()
        if prof:
            prof.enable()
        vs = ex.verify(items)
        if prof:
            prof.disable()
        dt = time.perf_counter() - t0
        c1 = time.process_time()
        FAULTS[:] = [0, 0]
        w1 = sum(tree_cpu(p) for p in pids)
        f1, g1 = FAULTS
    n = len(items)
    print(f"{n} samples, {sum(len(p.tests) for p, _ in items)} tests, workers={args.workers}, "
          f"isolation={ex.isolation}; {sum(v.passed for v in vs)} passed")
    print(f"parent wall per sample x workers: {dt / n * args.workers * 1e3:.3f} ms")
    print(f"CPU per sample: parent {(c1 - c0) / n * 1e3:.3f} ms, workers + children "
          f"{(w1 - w0) / n * 1e3:.3f} ms, {(f1 - f0) / n:.0f} minor faults ({(g1 - g0) / n:.0f} in children) (wall {dt / n * 1e3:.3f} ms)")
    walls = [e["wall"] for e in ends]
    print(f"worker wall per job (median / mean): {statistics.median(walls) * 1e3:.3f} / "
          f"{statistics.mean(walls) * 1e3:.3f} ms")
    rows = [e["prof"] for e in ends if all(k in e.get("prof", {}) for k in PHASES)]
    print(f"phases (ms, from {len(rows)} jobs): median  mean")
    prev = {id(r): 0.0 for r in rows}
    for k in PHASES:
        d = []
        for r in rows:
            d.append(r[k] - prev[id(r)])
            prev[id(r)] = r[k]
        print(f"  {k:<9} {statistics.median(d) * 1e3:7.3f} {statistics.mean(d) * 1e3:7.3f}")
    crow = [r for r in rows if all(k in r for k in CHILD)]
    if crow:
        print(f"inside the child (ms, from {len(crow)} jobs; the stamps' own file adds to cleanup):")
        for a, b, what in (("scratch", "child_start", "fork until the child runs"),
                           ("child_start", "child_confine0", "after fork, before _confine"),
                           ("child_confine0", "child_confine1", "_confine (fds, uid, rlimits)"),
                           ("child_confine1", "confine", "-> its S line seen by the worker")):
            d = [r[b] - r[a] for r in crow]
            print(f"  {what:<34} {statistics.median(d) * 1e3:7.3f} {statistics.mean(d) * 1e3:7.3f}")
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
