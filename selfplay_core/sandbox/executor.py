"""The batch API: verify (problem, sample) pairs, or run reference programs to get outputs.

Comparison happens here, in the trusted parent, as records stream in from the sandbox; with
`early_exit` the first failing test aborts the rest of that sample.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from selfplay_core.problems import Problem, Sample, SampleVerdict, TestResult, Verdict
from selfplay_core.sandbox import compare
from selfplay_core.sandbox.config import SandboxConfig
from selfplay_core.sandbox.pool import Job, JobOutcome, WorkerPool
from selfplay_core.sandbox.worker import _plain

# Outputs of untrusted code may be huge integers; decoding them must not trip CPython's
# int-to-str safety limit (the output size is already capped by the sandbox).
sys.set_int_max_str_digits(0)

_ERROR_VERDICT = {
    "__timeout__": Verdict.timeout,
    "__output_limit__": Verdict.output_limit,
    "MemoryError": Verdict.memory_limit,
    "UnserializableResult": Verdict.wrong_answer,
}
_END_VERDICT = {
    "timeout": Verdict.timeout,
    "output_limit": Verdict.output_limit,
    "harness": Verdict.harness_error,
}


def _inputs_json(problem: Problem) -> str:
    cached = problem.__dict__.get("_inputs_json")
    if cached is None:
        if problem.kind == "call":
            cached = "[" + ",".join(
                json.dumps(_plain(list(t.args or [])), separators=(",", ":")) for t in problem.tests
            ) + "]"
        else:
            cached = json.dumps([t.stdin or "" for t in problem.tests])
        problem.__dict__["_inputs_json"] = cached
    return cached


@dataclass
class RunResult:
    """Raw outputs of one program on a problem's inputs (no expected values involved)."""

    outputs: list[Any]
    errors: list[str | None]
    times: list[float]
    ok: bool
    detail: str | None = None


@dataclass
class _Tracker:
    problem: Problem
    atol: float
    stdout_tol: tuple[float, float]
    early_exit: bool
    compare: bool = True
    results: list[TestResult | None] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)
    load: dict | None = None

    def __post_init__(self):
        n = len(self.problem.tests)
        self.results = [None] * n
        self.outputs = [None] * n

    def on_record(self, rec: dict) -> bool:
        c = rec.get("c")
        if c is not None:
            if c in ("compile_error", "load_error", "harness", "corrupt") and self.load is None:
                self.load = rec
                return False
            return True
        i = rec.get("i")
        if type(i) is not int or not 0 <= i < len(self.results) or self.results[i] is not None:
            self.load = self.load or {"c": "corrupt"}
            return False
        t = rec.get("t")
        t = float(t) if type(t) in (int, float) and math.isfinite(t) and t >= 0 else 0.0
        if "e" in rec:
            v = _ERROR_VERDICT.get(rec.get("e"), Verdict.runtime_error)
            detail = {Verdict.timeout: "time limit exceeded",
                      Verdict.output_limit: "output limit exceeded"}.get(
                          v, f"{rec.get('e')}: {rec.get('m', '')}"[:300])
            self.results[i] = TestResult(v, t, detail)
            return not self.early_exit
        test = self.problem.tests[i]
        if self.problem.kind == "call":
            if "o" not in rec:
                self.results[i] = TestResult(Verdict.runtime_error, t, "no output recorded")
                return not self.early_exit
            out = rec["o"]
        else:
            out = rec.get("s")
            if type(out) is not str:
                self.results[i] = TestResult(Verdict.runtime_error, t, "no stdout recorded")
                return not self.early_exit
        self.outputs[i] = out
        if not self.compare:
            self.results[i] = TestResult(Verdict.passed, t)
            return True
        if self.problem.kind == "call":
            ok = compare.call_matches(out, test.expected, atol=self.atol,
                                      oracle=self.problem.oracle, args=test.args)
        else:
            ok = type(test.expected) is str and compare.stdout_matches(
                out, test.expected, abs_tol=self.stdout_tol[0], rel_tol=self.stdout_tol[1])
        self.results[i] = TestResult(Verdict.passed if ok else Verdict.wrong_answer, t)
        return ok or not self.early_exit

    def finalize(self, outcome: JobOutcome) -> tuple[Verdict, list[TestResult], str | None]:
        if outcome.harness_error:
            return Verdict.harness_error, [r for r in self.results if r], outcome.harness_error
        if self.load is not None:
            c = self.load.get("c")
            msg = self.load.get("m") or self.load.get("e") or ""
            if c == "compile_error":
                return Verdict.compile_error, [], str(msg)[:300]
            if c == "harness":
                return Verdict.harness_error, [], str(msg)[:300]
            if c == "corrupt":
                return Verdict.runtime_error, [], "program corrupted the result channel"
            v = _ERROR_VERDICT.get(self.load.get("e"), Verdict.runtime_error)
            if v is Verdict.wrong_answer:
                v = Verdict.runtime_error
            return v, [], f"while loading: {self.load.get('e')}: {msg}"[:300]
        tests: list[TestResult] = []
        end = outcome.end
        for r in self.results:
            if r is None:
                status = end.get("status")
                if status == "signal":
                    sig = end.get("signal")
                    name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else sig
                    r = TestResult(Verdict.runtime_error, 0.0, f"killed by signal {name}")
                elif status in _END_VERDICT:
                    r = TestResult(_END_VERDICT[status], 0.0, status)
                elif outcome.aborted or status == "aborted":
                    break  # early exit after an earlier failure
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

    Thread-safe: calls are serialized; each call fans out over all workers.
    """

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig()
        if self.config.backend == "docker":
            from selfplay_core.sandbox.docker_backend import DockerLauncher
            self.launcher = DockerLauncher(self.config)
        else:
            from selfplay_core.sandbox.backends import LocalLauncher
            self.launcher = LocalLauncher(self.config.isolation, self.config.require_isolation,
                                          self.config.uid_base)
        self.pool = WorkerPool(self.launcher, self.config.workers)
        self._lock = threading.Lock()

    @property
    def isolation(self) -> str:
        return self.launcher.isolation

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------
    def _job(self, problem: Problem, code: str, tracker: _Tracker) -> Job:
        n = len(problem.tests)
        limit = float(problem.time_limit_s)
        budget = limit * (n + 1) + 1.0
        return Job(
            mode=problem.kind, code=code, entry=problem.entry_point,
            inputs_json=_inputs_json(problem), n_tests=n, time_limit=limit,
            memory_mb=self.config.memory_limit_mb or problem.memory_limit_mb,
            output_mb=self.config.output_limit_mb,
            deadline=min(budget, self.config.max_sample_time_s),
            on_record=tracker.on_record,
        )

    def _tracker(self, problem: Problem, early_exit: bool, compare_: bool) -> _Tracker:
        return _Tracker(problem, float(problem.atol or 0.0),
                        (self.config.stdout_abs_tol, self.config.stdout_rel_tol),
                        early_exit, compare_)

    def verify(self, items: Sequence[tuple[Problem, Sample]], *, early_exit: bool = True,
               progress: Callable[[int], None] | None = None) -> list[SampleVerdict]:
        """Verdicts for (problem, sample) pairs, in input order."""
        trackers = [self._tracker(p, early_exit, True) for p, _ in items]
        jobs = [self._job(p, s.code, t) for (p, s), t in zip(items, trackers)]
        with self._lock:
            outcomes = self.pool.run(jobs, on_done=(lambda i, o: progress(1)) if progress else None)
        verdicts = []
        for (p, s), t, o in zip(items, trackers, outcomes):
            v, tests, detail = t.finalize(o)
            verdicts.append(SampleVerdict(p.id, s.sample_id, v, tests, o.wall, detail))
        return verdicts

    def run(self, items: Sequence[tuple[Problem, str]], *, rotate: int | None = None,
            progress: Callable[[int], None] | None = None) -> list[RunResult]:
        """Run reference programs on each problem's inputs and return their raw outputs.

        `rotate=r` pins item j to worker (j + r) mod workers. Two calls with different `r` run
        every program in two different worker processes, i.e. under two different hash seeds
        (workers start with random seeds), which is what a determinism check needs.
        """
        trackers = [self._tracker(p, True, False) for p, _ in items]
        jobs = [self._job(p, code, t) for (p, code), t in zip(items, trackers)]
        if rotate is not None:
            for j, job in enumerate(jobs):
                job.worker = j + rotate
        with self._lock:
            outcomes = self.pool.run(jobs, on_done=(lambda i, o: progress(1)) if progress else None)
        results = []
        for t, o in zip(trackers, outcomes):
            v, tests, detail = t.finalize(o)
            errors = [None if r.verdict is Verdict.passed else f"{r.verdict}: {r.detail or ''}"
                      for r in tests] + ["not run"] * (len(t.outputs) - len(tests))
            results.append(RunResult(t.outputs, errors, [r.time_s for r in tests],
                                     v is Verdict.passed, detail))
        return results
