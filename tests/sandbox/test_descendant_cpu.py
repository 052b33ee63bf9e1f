"""Class 2: every CPU-second of a job's process tree counts toward its limit, read from outside
(a cpuacct cgroup per worker holds the running job's processes), and what a test started dies
with it."""

from __future__ import annotations

import pytest

from selfplay_core.problems import Problem, TestCase, Verdict

from sandbox_helpers import contained

pytestmark = pytest.mark.security

HELPERS = '''
import os, time
def burn(s):
    t = time.process_time()
    while time.process_time() - t < s:
        pass
def helpers(n, each, detach):
    # The daemons hold the pipe's write end: EOF means every one has burnt its share.
    r, w = os.pipe()
    kids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os.close(r)
            if detach:
                os.setsid()
                if os.fork():      # daemonize: the grandchild is orphaned
                    os._exit(0)
            burn(each)
            os._exit(0)
        kids.append(pid)
    os.close(w)
    for k in kids:
        os.waitpid(k, 0)
    while os.read(r, 1):
        pass
'''


@pytest.fixture(autouse=True)
def _needs_cgroup(ex1):
    if not ex1.launcher.cpu_cgroups:
        pytest.skip("no cpuacct cgroup here: descendants are bounded by the wall backstop only")


def call_problem():
    return Problem(id="d", kind="call", entry_point="f", time_limit_s=1.0,
                   tests=[TestCase(args=[x], expected=2 * x) for x in (1, 2)])


def stdin_problem():
    return Problem(id="s", kind="stdin", time_limit_s=1.0,
                   tests=[TestCase(stdin=f"{x}\n", expected=f"{2 * x}\n") for x in (1, 2)])


@pytest.mark.parametrize("detach", [False, True], ids=["children", "setsid-daemons"])
def test_cpu_of_helpers_counts_in_call_mode(ex1, detach):
    # Two helpers of 0.8 CPU-s each: 1.6 CPU-s on a 1 s test, the answer itself correct.
    code = HELPERS + f"def f(x):\n    helpers(2, 0.8, {detach})\n    return 2 * x\n"
    v = contained(ex1, call_problem(), code, {Verdict.timeout})
    assert v.tests[0].verdict is Verdict.timeout


@pytest.mark.parametrize("detach", [False, True], ids=["children", "setsid-daemons"])
def test_cpu_of_helpers_counts_in_stdin_mode(ex1, detach):
    code = HELPERS + f"x = int(input())\nhelpers(2, 0.8, {detach})\nprint(2 * x)\n"
    v = contained(ex1, stdin_problem(), code, {Verdict.timeout})
    assert v.tests[0].verdict is Verdict.timeout


def test_a_helper_left_running_dies_with_its_test(ex1):
    # Test 1 leaves a daemon that would burn CPU for 30 s; it is killed when test 1 reports,
    # so test 2's window is not charged with it and the (correct) program passes.
    code = HELPERS.replace("    while os.read(r, 1):\n        pass\n", "") + (
        "calls = []\n"
        "def f(x):\n"
        "    if not calls:\n"
        "        helpers(1, 30.0, True)\n"
        "    calls.append(x)\n"
        "    if len(calls) == 2:\n"
        "        time.sleep(1.2)\n"
        "    return 2 * x\n")
    contained(ex1, call_problem(), code, {Verdict.passed})
