"""Executor behaviour: test kinds, verdicts, early exit, timings, recovery."""

import os
import signal
import time

import pytest

from selfplay_core.problems import Problem, Sample, TestCase, Verdict
from selfplay_core.sandbox import Executor, SandboxConfig, SandboxUnavailable
from selfplay_core.sandbox import backends


def call_problem(pid="p", entry="f", tests=((1, 2), (2, 4), (3, 6)), **kw):
    kw.setdefault("time_limit_s", 1.0)
    return Problem(id=pid, kind="call", entry_point=entry,
                   tests=[TestCase(args=[a], expected=e) for a, e in tests], **kw)


def stdin_problem(pid="s", tests=(("1 2\n", "3\n"), ("5 5\n", "10\n")), **kw):
    kw.setdefault("time_limit_s", 1.0)
    return Problem(id=pid, kind="stdin", tests=[TestCase(stdin=i, expected=o) for i, o in tests], **kw)


def verdict_of(ex, problem, code, **kw):
    return ex.verify([(problem, Sample(problem.id, 0, code))], **kw)[0]


DOUBLE = "def f(x):\n    return 2 * x\n"

CALL_CASES = [
    # code, verdict
    (DOUBLE, Verdict.passed),
    ("def f(x):\n    return 2 * x + (x == 3)\n", Verdict.wrong_answer),
    ("def f(x):\n    return 1 / 0\n", Verdict.runtime_error),
    ("def f(x)\n    return x\n", Verdict.compile_error),
    ("def f(x):\n    while True:\n        pass\n", Verdict.timeout),
    ("def f(x):\n    return [0] * (10 ** 10)\n", Verdict.memory_limit),
    ("raise ValueError('at import')\n", Verdict.runtime_error),
    ("def g(x):\n    return 2 * x\n", Verdict.runtime_error),          # missing entry point
    ("def f(x):\n    return str(2 * x)\n", Verdict.wrong_answer),      # type-checked
    ("import sys\nsys.exit(0)\n", Verdict.runtime_error),
    ("def f(x):\n    while True:\n        print('y' * (1 << 20))\n", Verdict.output_limit),
]


@pytest.mark.parametrize("code,verdict", CALL_CASES, ids=[v.value + str(i) for i, (_, v) in enumerate(CALL_CASES)])
def test_call_verdicts(ex, code, verdict):
    v = verdict_of(ex, call_problem(memory_limit_mb=256), code)
    assert v.verdict is verdict, v.to_json()


def test_solution_method_entry_point(ex):
    p = call_problem(entry="Solution.twice")
    code = "class Solution:\n    def twice(self, x: int) -> int:\n        return x * 2\n"
    assert verdict_of(ex, p, code).passed


def test_typing_and_stdlib_imports_work(ex):
    code = ("from typing import List\nimport math, collections, heapq, itertools, functools, re\n"
            "def f(x: int) -> int:\n    return int(math.sqrt(4 * x * x))\n")
    assert verdict_of(ex, call_problem(), code).passed


STDIN_CASES = [
    ("a, b = map(int, input().split())\nprint(a + b)\n", Verdict.passed),
    ("import sys\nprint(sum(map(int, sys.stdin.read().split())))\n", Verdict.passed),
    ("a, b = map(int, input().split())\nprint(a + b)\nraise SystemExit(0)\n", Verdict.passed),
    ("print(3)\n", Verdict.wrong_answer),
    ("a, b = map(int, input().split())\nprint(a + b)\nraise SystemExit(2)\n", Verdict.runtime_error),
    ("print(1/0)\n", Verdict.runtime_error),
    ("print(\n", Verdict.compile_error),
    ("while True:\n    pass\n", Verdict.timeout),
    ("while True:\n    print('x' * 100000)\n", Verdict.output_limit),
]


@pytest.mark.parametrize("code,verdict", STDIN_CASES, ids=[v.value + str(i) for i, (_, v) in enumerate(STDIN_CASES)])
def test_stdin_verdicts(ex, code, verdict):
    v = verdict_of(ex, stdin_problem(), code)
    assert v.verdict is verdict, v.to_json()


def test_stdin_tests_do_not_share_state(ex):
    # Each stdin test is a fresh process with a fresh scratch dir: a file written by the first
    # run must not exist in the second.
    code = ("import os\nseen = os.path.exists('state')\nopen('state', 'w').write('1')\n"
            "a, b = map(int, input().split())\nprint(a + b + (100 if seen else 0))\n")
    assert verdict_of(ex, stdin_problem(), code).passed


def test_stdout_float_tolerance(ex):
    p = stdin_problem(tests=(("", "0.333333333\n"),))
    assert verdict_of(ex, p, "print(1/3)\n").passed
    assert not verdict_of(ex, p, "print(0.34)\n").passed


def test_early_exit_stops_at_first_failure_and_all_tests_reports_every_test(ex):
    p = call_problem(tests=[(i, 2 * i) for i in range(10)])
    code = "def f(x):\n    return 2 * x if x % 3 else -1\n"
    early = verdict_of(ex, p, code)
    assert early.verdict is Verdict.wrong_answer and len(early.tests) == 1
    full = verdict_of(ex, p, code, early_exit=False)
    assert [t.verdict is Verdict.passed for t in full.tests] == [i % 3 != 0 for i in range(10)]


def test_timings_are_reported(ex):
    p = call_problem(tests=[(1, 2)])
    v = verdict_of(ex, p, "import time\ndef f(x):\n    time.sleep(0.2)\n    return 2 * x\n")
    assert v.passed
    # A lower bound only: the child sleeps 0.2 s, so a timer that misses the test's own run
    # (or measures CPU instead of wall time) reads below it; an upper bound would assert load.
    assert v.tests[0].time_s >= 0.19
    assert v.time_s >= v.tests[0].time_s


def test_per_test_time_limit_even_when_the_child_blocks_alarms(ex):
    code = ("import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
            "def f(x):\n    while True:\n        pass\n")
    v = verdict_of(ex, call_problem(time_limit_s=0.5), code)
    assert v.verdict is Verdict.timeout and v.tests[0].verdict is Verdict.timeout


def test_whole_sample_deadline_caps_many_slow_tests():
    cfg = SandboxConfig(workers=1, max_sample_time_s=1.5)
    p = call_problem(tests=[(i, 2 * i) for i in range(20)], time_limit_s=1.0)
    code = "import time\ndef f(x):\n    time.sleep(0.3)\n    return 2 * x\n"
    with Executor(cfg) as ex:
        v = verdict_of(ex, p, code)
    # 20 tests of 0.3 s each need 6 s: the 1.5 s cap ends the sample with most of them unrun,
    # the test it interrupted a timeout (each test alone is well inside its own 1 s limit).
    assert v.verdict is Verdict.timeout
    assert len(v.tests) < 20 and v.tests[-1].verdict is Verdict.timeout
    assert all(t.verdict is Verdict.passed for t in v.tests[:-1])


def test_run_returns_raw_outputs(ex):
    p = Problem(id="r", kind="call", entry_point="f",
                tests=[TestCase(args=[x], has_expected=False) for x in (1, 2, 3)])
    r = ex.run([(p, "def f(x):\n    return (x, {x: [x]})\n")])[0]
    assert r.ok and r.outputs == [(1, {1: [1]}), (2, {2: [2]}), (3, {3: [3]})]
    bad = ex.run([(p, "def f(x):\n    return 1 // (x - 2)\n")])[0]
    assert not bad.ok and bad.errors[0] is None and bad.errors[1].startswith("runtime_error")


def test_verdicts_come_back_in_input_order_under_parallelism(ex):
    p = call_problem()
    codes = [DOUBLE if i % 2 else "def f(x):\n    return x\n" for i in range(40)]
    vs = ex.verify([(p, Sample("p", i, c)) for i, c in enumerate(codes)])
    assert [v.sample_id for v in vs] == list(range(40))
    assert [v.passed for v in vs] == [bool(i % 2) for i in range(40)]


def _kill_worker_soon(ex, delay=0.5):
    import threading
    victim = ex.pool._slots[0].proc.popen.pid

    def killer():
        time.sleep(delay)
        os.killpg(victim, signal.SIGKILL)

    threading.Thread(target=killer, daemon=True).start()


SLOW = "import time\ndef f(x):\n    time.sleep(3)\n    return 2 * x\n"


def test_worker_killed_from_outside_is_a_harness_error_and_the_pool_recovers():
    # A real fault: the sandbox worker process dies mid-job. Without retries it must be
    # reported as the harness's failure (never as the model's), and the next job must run on
    # a fresh worker.
    with Executor(SandboxConfig(workers=1, harness_retries=0)) as ex:
        ex.pool.start()
        _kill_worker_soon(ex)
        v = verdict_of(ex, call_problem(time_limit_s=5.0), SLOW)
        assert v.verdict is Verdict.harness_error
        assert ex.stats == {"jobs": 1, "harness_errors": 1, "harness_retries": 0}
        assert verdict_of(ex, call_problem(), DOUBLE).passed


def test_a_harness_error_is_retried_and_counted():
    with Executor(SandboxConfig(workers=1, harness_retries=1)) as ex:
        ex.pool.start()
        _kill_worker_soon(ex)
        v = verdict_of(ex, call_problem(time_limit_s=5.0), SLOW)
        assert v.passed  # the retry ran on a fresh worker
        assert ex.stats == {"jobs": 1, "harness_errors": 0, "harness_retries": 1}


def _freeze_tree(root):
    """SIGSTOP `root` and every process below it (bubblewrap, the worker, its child)."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:
            pass
        todo += children.get(pid, [])


def test_a_worker_that_falls_silent_is_a_harness_error(monkeypatch):
    # A real fault: the worker is frozen (SIGSTOP) mid-job. The parent hears nothing, not even
    # its keepalives, and gives up on it after the silence allowed.
    from selfplay_core.sandbox import pool
    monkeypatch.setattr(pool, "_SILENCE_S", 5.0)
    with Executor(SandboxConfig(workers=1, harness_retries=0)) as ex:
        ex.pool.start()
        victim = ex.pool._slots[0].proc.popen.pid
        import threading
        threading.Timer(0.5, _freeze_tree, (victim,)).start()
        v = verdict_of(ex, call_problem(time_limit_s=5.0), SLOW)
        assert v.verdict is Verdict.harness_error and "stopped answering" in (v.detail or ""), v.to_json()
        assert verdict_of(ex, call_problem(), DOUBLE).passed


def test_a_long_healthy_job_is_not_taken_for_a_silent_worker(monkeypatch):
    # The worker stretches its deadlines by time its child waited for a CPU (a loaded machine),
    # which the parent cannot see; the parent must not give up on a job that runs longer than
    # it expected while the worker keeps saying it is alive. Here: silence allowed 5 s, a job
    # that sleeps 8 s within its limits.
    from selfplay_core.sandbox import pool
    monkeypatch.setattr(pool, "_SILENCE_S", 5.0)
    with Executor(SandboxConfig(workers=1, harness_retries=0)) as ex:
        sleepy = "import time\ndef f(x):\n    time.sleep(8)\n    return 2 * x\n"
        v = verdict_of(ex, call_problem(tests=((1, 2),), time_limit_s=5.0), sleepy)
        assert v.passed, v.to_json()


def test_require_isolation_refuses_to_run_without_it(monkeypatch):
    with pytest.raises(SandboxUnavailable, match="cannot isolate"):
        Executor(SandboxConfig(isolation="none", require_isolation=True))
    monkeypatch.setenv("PATH", "/nonexistent")
    backends.bwrap_problem.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable, match="bubblewrap is not installed"):
            Executor(SandboxConfig(require_isolation=True))
    finally:
        backends.bwrap_problem.cache_clear()


def test_running_without_isolation_warns_loudly(capfd):
    with Executor(SandboxConfig(isolation="none", workers=1)) as ex:
        assert ex.isolation == "none"
        assert verdict_of(ex, call_problem(), DOUBLE).passed
    assert "WITHOUT isolation" in capfd.readouterr().err


def test_isolation_is_on_by_default_here(ex):
    # CI installs bubblewrap; if this fails the machine silently lost its sandbox.
    assert ex.isolation == "bwrap", backends.bwrap_problem()


def test_rotated_runs_use_different_hash_seeds(ex):
    # Set iteration order of strings depends on the interpreter's hash seed: a program that
    # leaks it is non-deterministic, and two rotated runs must be able to see that.
    p = Problem(id="h", kind="call", entry_point="f",
                tests=[TestCase(args=[i], has_expected=False) for i in range(4)])
    code = "def f(x):\n    return list({'alpha', 'beta', 'gamma', 'delta', 'eps', 'zeta'})\n"
    differs = False
    for _ in range(5):
        a = ex.run([(p, code)] * 4, rotate=0)
        b = ex.run([(p, code)] * 4, rotate=1)
        differs |= any(x.outputs != y.outputs for x, y in zip(a, b))
        if differs:
            break
    assert differs
    same = ex.run([(p, code)] * 4, rotate=0)
    assert [r.outputs for r in same] == [r.outputs for r in ex.run([(p, code)] * 4, rotate=0)]


def test_huge_outputs_travel_as_digests_and_still_compare_exactly(ex):
    # 300k elements: shipped as a hash of a canonical byte form, compared exactly.
    p = Problem(id="big", kind="call", entry_point="f", time_limit_s=10.0,
                tests=[TestCase(args=[300000], has_expected=False)])
    ref = ex.run([(p, "def f(n):\n    return [(i, str(i)) for i in range(n)]\n")])[0]
    assert ref.ok and type(ref.outputs[0]).__name__ == "Digest"
    exp = Problem(id="big", kind="call", entry_point="f", time_limit_s=10.0,
                  tests=[TestCase(args=[300000], expected=ref.outputs[0])])
    same = "def f(n):\n    out = []\n    for i in range(n):\n        out.append((i, '%d' % i))\n    return out\n"
    off = "def f(n):\n    return [(i, str(i)) for i in range(n)][:-1] + [(n - 1, 'x')]\n"
    small = "def f(n):\n    return [1, 2, 3]\n"
    vs = ex.verify([(exp, Sample("big", k, c)) for k, c in enumerate((same, off, small))])
    assert [v.verdict for v in vs] == [Verdict.passed, Verdict.wrong_answer, Verdict.wrong_answer]


def test_big_inputs_and_big_outputs_do_not_deadlock_the_pipes():
    # Jobs are sent ahead to a busy worker only when their line fits the pipe unread: a 2 MB
    # input line sent while the worker writes a 1.3 MB result (just under the size that
    # travels as a digest) would block both ends.
    p = Problem(id="big", kind="call", entry_point="f", time_limit_s=5.0, memory_limit_mb=1024,
                tests=[TestCase(args=["x" * (2 << 20)], expected=list(range(190000)))])
    code = "def f(s):\n    return list(range(190000))\n"
    with Executor(SandboxConfig(workers=1, harness_retries=0)) as ex:
        vs = ex.verify([(p, Sample("big", k, code)) for k in range(4)])
        assert [v.verdict for v in vs] == [Verdict.passed] * 4
        assert ex.stats["harness_errors"] == 0
