"""The batch API: verify (problem, sample) pairs, run reference programs to get outputs, and
check self-play references (allow-listed imports, determinism).

Comparison happens here, in the trusted parent, as results stream in from the sandbox; with
`early_exit` the first failing test aborts the rest of that sample. A harness error (a fault
of the sandbox itself, never something a program can cause or claim) is retried
`harness_retries` times before it is reported; callers exclude what remains from pass rates.
"""

from __future__ import annotations

import math
import random
import signal
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from selfplay_core.problems import Problem, Sample, SampleVerdict, TestCase, TestResult, Verdict
from selfplay_core.sandbox import compare
from selfplay_core.sandbox.channel import (BadRecord, decode_json_fields, decode_output,
                                           decode_stdout)
from selfplay_core.sandbox.config import SandboxConfig
from selfplay_core.sandbox.pool import Job, JobOutcome, WorkerPool
from selfplay_core.values import to_json_obj

_ERROR_VERDICT = {"MemoryError": Verdict.memory_limit}
_END_VERDICT = {
    "timeout": Verdict.timeout,
    "output_limit": Verdict.output_limit,
    "memory_limit": Verdict.memory_limit,
    "harness": Verdict.harness_error,
}


def _inputs_json(problem: Problem) -> str:
    import json
    cached = problem.__dict__.get("_inputs_json")
    if cached is None:
        if problem.kind == "call":
            cached = "[" + ",".join(
                json.dumps(to_json_obj(list(t.args or [])), separators=(",", ":")) for t in problem.tests
            ) + "]"
        else:
            cached = json.dumps([t.stdin or "" for t in problem.tests])
        problem.__dict__["_inputs_json"] = cached
    return cached


@dataclass
class RunResult:
    """Raw outputs of one program on a problem's inputs (no expected values involved).
    `errors[i]` is None for a test that returned a value, else "<verdict>: <detail>"."""

    outputs: list[Any]
    errors: list[str | None]
    times: list[float]
    ok: bool
    detail: str | None = None
    harness_error: bool = False
    error_names: list[str | None] = field(default_factory=list)  # exception type per test
    cpu_times: list[float] = field(default_factory=list)  # CPU seconds per test (the limit's clock)
    stderr: str = ""  # the head of what the program wrote to stderr (never compared)


@dataclass
class ReferenceCheck:
    """Outcome of `Executor.check_references` for one reference program.

    `rejection` is None (accepted: `outputs` are its outputs on the problem's inputs) or one
    of `REFERENCE_REJECTIONS`; `harness_error` rejections are the sandbox's fault and should
    be retried or excluded, not scored."""

    outputs: list[Any] | None
    rejection: str | None
    detail: str | None = None
    extra_outcomes: list[Any] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.rejection is None


REFERENCE_REJECTIONS = ("banned_import", "reference_timeout", "reference_error",
                        "nondeterministic", "harness_error")


@dataclass
class _Tracker:
    problem: Problem
    atol: float
    stdout_tol: tuple[float, float]
    early_exit: bool
    compare: bool = True
    results: list[TestResult | None] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)
    names: list[str | None] = field(default_factory=list)
    broken: str | None = None  # the worker broke the framing (trusted side: a harness error)
    cpu: float = 0.0           # CPU seconds of the record being handled

    def __post_init__(self):
        n = len(self.problem.tests)
        self.results = [None] * n
        self.outputs = [None] * n
        self.names = [None] * n

    def _set(self, i: int, result: TestResult) -> bool:
        if result.cpu_s is None:
            result.cpu_s = self.cpu
        self.results[i] = result
        return result.verdict is Verdict.passed or not self.early_exit

    def on_record(self, i: int, t: float, cpu: float, payload: bytes) -> bool:
        if not 0 <= i < len(self.results) or self.results[i] is not None:
            self.broken = "sandbox worker reported a test out of order"
            return False
        self.cpu = cpu
        limit = float(self.problem.time_limit_s)
        if cpu > limit:  # the worker enforces every window; this is the parent's own check
            return self._set(i, TestResult(Verdict.timeout, t, "time limit exceeded", cpu))
        tag, body = payload[:2], payload[2:]
        try:
            if tag == b"E ":
                err = decode_json_fields(body, ("e", "m"))
                self.names[i] = err["e"]
                v = _ERROR_VERDICT.get(err["e"], Verdict.runtime_error)
                return self._set(i, TestResult(v, t, f"{err['e']}: {err['m']}"[:300]))
            if tag == b"U ":
                err = decode_json_fields(body, ("m",))
                self.names[i] = "UnserializableResult"
                return self._set(i, TestResult(Verdict.wrong_answer, t,
                                               f"result not serializable: {err['m']}"[:300]))
            if tag == b"O " and self.problem.kind == "call":
                out = decode_output(body)
            elif tag == b"S " and self.problem.kind == "stdin":
                out = decode_stdout(body)
            else:
                raise BadRecord("record of the wrong kind")
        except BadRecord as e:
            self.names[i] = "BadRecord"
            return self._set(i, TestResult(Verdict.runtime_error, t, f"malformed result: {e}"))
        self.outputs[i] = out
        if not self.compare:
            return self._set(i, TestResult(Verdict.passed, t))
        test = self.problem.tests[i]
        if self.problem.kind == "call":
            ok = compare.call_matches(out, test.expected, atol=self.atol,
                                      oracle=self.problem.oracle, args=test.args)
        else:
            ok = type(test.expected) is str and compare.stdout_matches(
                out, test.expected, abs_tol=self.stdout_tol[0], rel_tol=self.stdout_tol[1])
        return self._set(i, TestResult(Verdict.passed if ok else Verdict.wrong_answer, t))

    def finalize(self, outcome: JobOutcome) -> tuple[Verdict, list[TestResult], str | None]:
        if outcome.harness_error or self.broken:
            return (Verdict.harness_error, [r for r in self.results if r],
                    outcome.harness_error or self.broken)
        end = outcome.end
        status = end.get("status")
        if status == "harness":
            return Verdict.harness_error, [], str(end.get("note") or "sandbox failure")[:300]
        if status == "compile_error":
            return Verdict.compile_error, [], str(end.get("m", ""))[:300]
        if status == "load_error":
            name = str(end.get("e", ""))
            self.names[0:1] = [name]
            v = _ERROR_VERDICT.get(name, Verdict.runtime_error)
            return v, [], f"while loading: {name}: {end.get('m', '')}"[:300]
        tests: list[TestResult] = []
        for r in self.results:
            if r is None:
                if status == "signal":
                    sig = end.get("signal")
                    name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else sig
                    r = TestResult(Verdict.runtime_error, 0.0, f"killed by signal {name}")
                elif status in _END_VERDICT:
                    detail = "time limit exceeded" if status == "timeout" else status.replace("_", " ")
                    if end.get("phase") == "load":
                        detail += " (while loading)"
                    r = TestResult(_END_VERDICT[status], 0.0, detail)
                elif status == "cleanup":
                    r = TestResult(Verdict.runtime_error, 0.0,
                                   "the program left files the sandbox could not remove")
                elif status == "corrupt":
                    r = TestResult(Verdict.runtime_error, 0.0, "program corrupted the result channel")
                elif outcome.aborted or status == "aborted":
                    break  # early exit after an earlier failure
                elif status == "exited" and end.get("code") not in (None, 0):
                    r = TestResult(Verdict.runtime_error, 0.0, f"exit status {end.get('code')}")
                else:
                    r = TestResult(Verdict.runtime_error, 0.0,
                                   "program exited before finishing the tests")
                tests.append(r)
                break
            tests.append(r)
        verdict = Verdict.passed
        for r in tests:
            if r.verdict is not Verdict.passed:
                verdict = r.verdict
                break
        if verdict is Verdict.passed and len(tests) < len(self.results):
            verdict = Verdict.runtime_error
        detail = next((r.detail for r in tests if r.verdict is verdict and r.detail), None)
        return verdict, tests, detail


class Executor:
    """Verifies untrusted programs in a pool of warm, isolated workers.

    Thread-safe: calls are serialized; each call fans out over all workers. `stats` counts
    harness errors (after retries) and retries since the executor started.
    """

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig()
        if self.config.backend == "docker":
            from selfplay_core.sandbox.docker_backend import DockerLauncher
            self.launcher = DockerLauncher(self.config)
        else:
            from selfplay_core.sandbox.backends import LocalLauncher
            self.launcher = LocalLauncher(self.config.isolation, self.config.require_isolation,
                                          self.config.uid_base, scratch_mb=self.config.scratch_mb,
                                          memory_cgroup=self.config.memory_cgroup)
        self.pool = WorkerPool(self.launcher, self.config.workers)
        self._ref_pools: dict[frozenset, WorkerPool] = {}
        self._lock = threading.Lock()
        self._rng = random.SystemRandom()
        # Cumulative: jobs judged, harness errors left after retries, retries made. The loop
        # reads the difference per iteration (`harness_errors`) and fails past a share.
        self.stats = {"jobs": 0, "harness_errors": 0, "harness_retries": 0}

    @property
    def isolation(self) -> str:
        return self.launcher.isolation

    def close(self) -> None:
        self.pool.close()
        for p in self._ref_pools.values():
            p.close()
        self._ref_pools.clear()
        release = getattr(self.launcher, "release", None)
        if release:
            release()

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------
    def _job(self, problem: Problem, code: str, tracker: _Tracker, pure: dict | None = None,
             max_sample_time_s: float | None = None) -> Job:
        n = len(problem.tests)
        limit = float(problem.time_limit_s)
        # Whole-sample wall deadline: every window's wall backstop, plus set-up.
        budget = (2.0 * limit + 1.0) * (n + 1) + 10.0
        cap = self.config.max_sample_time_s if max_sample_time_s is None else max_sample_time_s
        return Job(
            mode=problem.kind, code=code, entry=problem.entry_point,
            inputs_json=_inputs_json(problem), n_tests=n, time_limit=limit,
            memory_mb=self.config.memory_limit_mb or problem.memory_limit_mb,
            output_mb=self.config.output_limit_mb,
            deadline=min(budget, cap),
            on_record=tracker.on_record, pure=pure,
        )

    def _tracker(self, problem: Problem, early_exit: bool, compare_: bool) -> _Tracker:
        return _Tracker(problem, float(problem.atol or 0.0),
                        (self.config.stdout_abs_tol, self.config.stdout_rel_tol),
                        early_exit, compare_)

    def _execute(self, pool: WorkerPool, items: Sequence[tuple[Problem, str]], *, early_exit: bool,
                 compare_: bool, pure: Sequence[dict | None] | None = None,
                 slots: Sequence[int | None] | None = None,
                 progress: Callable[[int], None] | None = None,
                 max_sample_time_s: float | None = None) -> list[tuple[_Tracker, JobOutcome]]:
        """Run every item, retrying harness errors; (tracker, outcome) per item, in order."""
        def batch(idx: list[int], report) -> list[tuple[_Tracker, JobOutcome]]:
            trackers = [self._tracker(items[k][0], early_exit, compare_) for k in idx]
            jobs = []
            for k, t in zip(idx, trackers):
                job = self._job(items[k][0], items[k][1], t, pure[k] if pure else None,
                                max_sample_time_s)
                job.worker = slots[k] if slots else None
                jobs.append(job)
            outs = pool.run(jobs, on_done=(lambda i, o: report(1)) if report else None)
            return list(zip(trackers, outs))

        def failed(tr: _Tracker, out: JobOutcome) -> bool:
            return bool(out.harness_error or tr.broken or out.end.get("status") == "harness")

        with self._lock:
            done = batch(list(range(len(items))), progress)
            for _ in range(self.config.harness_retries):
                again = [k for k, (tr, out) in enumerate(done) if failed(tr, out)]
                if not again:
                    break
                self.stats["harness_retries"] += len(again)
                for k, res in zip(again, batch(again, None)):
                    done[k] = res
            self.stats["harness_errors"] += sum(failed(tr, out) for tr, out in done)
            self.stats["jobs"] += len(done)
        return done

    def verify(self, items: Sequence[tuple[Problem, Sample]], *, early_exit: bool = True,
               progress: Callable[[int], None] | None = None) -> list[SampleVerdict]:
        """Verdicts for (problem, sample) pairs, in input order. A `harness_error` verdict is
        one the sandbox could not produce after its retries: exclude it, never score it."""
        done = self._execute(self.pool, [(p, s.code) for p, s in items], early_exit=early_exit,
                             compare_=True, progress=progress)
        verdicts = []
        for (p, s), (t, o) in zip(items, done):
            v, tests, detail = t.finalize(o)
            verdicts.append(SampleVerdict(p.id, s.sample_id, v, tests, o.wall, detail))
        return verdicts

    def run(self, items: Sequence[tuple[Problem, str]], *, rotate: int | None = None,
            early_exit: bool = True, max_sample_time_s: float | None = None,
            progress: Callable[[int], None] | None = None) -> list[RunResult]:
        """Run reference programs on each problem's inputs and return their raw outputs.

        `early_exit=False` runs every test even after one failed (call mode: the tests after
        a timeout or crash cannot run in that process). `max_sample_time_s` overrides the
        config's whole-sample cap (a canonical solution over a long benchmark row, say).
        `rotate=r` pins item j to worker (j + r) mod workers (kept for callers that spread
        runs; a determinism check should use `check_references`, which runs in two processes
        with different hash seeds and clocks whatever the pool size)."""
        slots = [j + rotate for j in range(len(items))] if rotate is not None else None
        done = self._execute(self.pool, items, early_exit=early_exit, compare_=False,
                             slots=slots, max_sample_time_s=max_sample_time_s, progress=progress)
        return [self._run_result(t, o) for t, o in done]

    @staticmethod
    def _run_result(t: _Tracker, o: JobOutcome) -> RunResult:
        v, tests, detail = t.finalize(o)
        errors = [None if r.verdict is Verdict.passed else f"{r.verdict}: {r.detail or ''}"
                  for r in tests] + ["not run"] * (len(t.outputs) - len(tests))
        return RunResult(t.outputs, errors, [r.time_s for r in tests], v is Verdict.passed,
                         detail, harness_error=v is Verdict.harness_error,
                         error_names=list(t.names),
                         cpu_times=[r.cpu_s or 0.0 for r in tests],
                         stderr=str(o.end.get("stderr") or "")[:2000])

    # ---- self-play references -----------------------------------------------------------------
    def _ref_pool(self, allowed: frozenset) -> WorkerPool:
        pool = self._ref_pools.get(allowed)
        if pool is None:
            # gate_bits + 1 processes of their own, whatever `workers` is, each with its own
            # hash seed (and, being a fresh interpreter, its own address layout).
            n = self.config.gate_bits + 1
            seeds: list[int] = []
            while len(seeds) < n:
                x = self._rng.randrange(1, 1 << 31)
                if x not in seeds:
                    seeds.append(x)
            preload = ",".join(sorted(allowed))
            pool = WorkerPool(self.launcher, n, index_base=self.config.workers,
                              spawn_args=[{"hash_seed": x, "preload": preload} for x in seeds])
            self._ref_pools[allowed] = pool
        return pool

    def check_references(self, items: Sequence[tuple[Problem, str]], *, allowed_imports,
                         extra_inputs: Sequence[Sequence[list]] | None = None) -> list[ReferenceCheck]:
        """Gate self-play reference programs (call problems) at run time.

        Each program runs `gate_bits + 1` times, in fresh child processes of as many reference
        workers (each with its own hash seed and address layout), the second with a broken
        clock (every reading NaN or an error); all under an import allow-list enforced in the
        child (every import, and audit events for files/processes/sockets, raise) and the pure
        seccomp profile (no files, processes, sockets, randomness or pids at the kernel). An
        output that depends on one random bit of the process therefore agrees in every run
        with probability 2**-gate_bits. Inputs are the problem's plus `extra_inputs[k]` (more
        probes for nondeterminism: their outcome, value or exception type, must also agree
        between the runs; they may fail). Every later run of an accepted reference (an
        abduction check: `verify_references`) happens in these same conditions.

        Rejection reasons: `banned_import`, `reference_timeout`, `reference_error` (on the
        problem's own inputs), `nondeterministic`, `harness_error` (after retries)."""
        allowed = frozenset(allowed_imports)
        pool = self._ref_pool(allowed)
        runs = pool.n
        probes = []
        for k, (p, code) in enumerate(items):
            extra = list(extra_inputs[k]) if extra_inputs else []
            tests = list(p.tests) + [TestCase(args=list(a), has_expected=False) for a in extra]
            probes.append((Problem(id=p.id, kind="call", entry_point=p.entry_point, tests=tests,
                                   time_limit_s=p.time_limit_s, memory_limit_mb=p.memory_limit_mb),
                           code))
        n = len(probes)
        names = sorted(allowed)
        pure = []
        for j in range(runs):
            pure += [{"allowed": names, "clock_probe": True} if j == 1 else {"allowed": names}] * n
        # All runs in one batch: run j pinned to reference worker j.
        done = self._execute(pool, probes * runs, early_exit=False, compare_=False, pure=pure,
                             slots=[j for j in range(runs) for _ in range(n)])
        res = [self._run_result(t, o) for t, o in done]
        return [self._judge_reference(len(p.tests), [res[j * n + k] for j in range(runs)])
                for k, (p, _) in enumerate(items)]

    def verify_references(self, items: Sequence[tuple[Problem, Sample]], *, allowed_imports
                          ) -> list[SampleVerdict]:
        """Verify reference programs (an abduction check: the task's reference on a proposed
        input) in the conditions the gate labelled them in: pure mode under the allow-list,
        once on each reference worker. Passed only if every run passes; a harness error in
        any run is the verdict's harness error."""
        allowed = frozenset(allowed_imports)
        pool = self._ref_pool(allowed)
        runs, n = pool.n, len(items)
        pure = [{"allowed": sorted(allowed)}] * (n * runs)
        done = self._execute(pool, [(p, s.code) for p, s in items] * runs, early_exit=True,
                             compare_=True, pure=pure,
                             slots=[j for j in range(runs) for _ in range(n)])
        verdicts = []
        for k, (p, s) in enumerate(items):
            mine = []
            for j in range(runs):
                t, o = done[j * n + k]
                v, tests, detail = t.finalize(o)
                mine.append(SampleVerdict(p.id, s.sample_id, v, tests, o.wall, detail))
            bad = [v for v in mine if v.verdict is Verdict.harness_error] or \
                [v for v in mine if not v.passed]
            verdicts.append(bad[0] if bad else mine[0])
        return verdicts

    @staticmethod
    def _judge_reference(n: int, rs: list[RunResult]) -> ReferenceCheck:
        for r in rs:
            if r.harness_error:
                return ReferenceCheck(None, "harness_error", r.detail)
        for r in rs:
            names = [x for x in r.error_names if x]
            if "BannedImport" in names or "BannedImport" in (r.detail or ""):
                return ReferenceCheck(None, "banned_import", r.detail)
        a = rs[0]
        own_ok = all(e is None for e in a.errors[:n]) and len(a.errors) >= n
        if not own_ok:
            err = next((e for e in a.errors[:n] if e), a.detail or "failed")
            reason = "reference_timeout" if str(err).startswith("timeout") else "reference_error"
            return ReferenceCheck(None, reason, str(err)[:200])
        for j, b in enumerate(rs[1:], 1):
            if not all(e is None for e in b.errors[:n]):
                return ReferenceCheck(None, "nondeterministic", f"run {j + 1} failed: " + str(
                    next((e for e in b.errors[:n] if e), b.detail))[:180])

        def outcome(r: RunResult, i: int):
            e = r.errors[i]
            if e is None:
                return ("value", r.outputs[i])
            if e.startswith("timeout") or e == "not run":
                return None  # load-dependent: not evidence either way
            return ("error", r.error_names[i] if i < len(r.error_names) else None, e.split(":")[0])

        extra = []
        for i in range(len(a.errors)):
            x = outcome(a, i)
            if i >= n:
                extra.append(x)
            for b in rs[1:]:
                y = outcome(b, i)
                if x is None or y is None:
                    continue
                if not _same_outcome(x, y):
                    return ReferenceCheck(None, "nondeterministic",
                                          f"input {i} gives different results in two runs")
        return ReferenceCheck(a.outputs[:n], None, None, extra)


def _same_outcome(x, y) -> bool:
    if x[0] != y[0]:
        return False
    if x[0] == "error":
        return x[1:] == y[1:]
    return _identical(x[1], y[1])


def _identical(a: Any, b: Any) -> bool:
    """Exact equality with types at every depth, NaN equal to NaN: a program's output
    compared with its own output from another run (no tolerance, dict order ignored)."""
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is float:
        return a == b or (a != a and b != b)
    if ta is complex:
        return _identical(a.real, b.real) and _identical(a.imag, b.imag)
    if ta is list or ta is tuple:
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b))
    if ta is dict:
        if len(a) != len(b):
            return False
        kb = {compare._key(k): v for k, v in b.items()}
        return all(compare._key(k) in kb and _identical(v, kb[compare._key(k)])
                   for k, v in a.items())
    if ta is set or ta is frozenset:
        return {compare._key(x) for x in a} == {compare._key(x) for x in b}
    return compare.values_match(a, b, 0.0, 0.0)
