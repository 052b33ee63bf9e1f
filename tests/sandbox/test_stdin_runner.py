"""Class 8: a stdin sample's tests share one runner process (forked from the sample's own
child, which holds only that sample's job); nothing crosses samples, and a program that ends
its process ends only its test."""

from __future__ import annotations

import pytest

from selfplay_core.problems import Problem, Sample, TestCase, Verdict

from sandbox_helpers import NOT_PASSED, contained, sandbox_pids

pytestmark = pytest.mark.security


def double_stdin(n=4):
    return Problem(id="d2", kind="stdin", time_limit_s=2.0,
                   tests=[TestCase(stdin=f"{x}\n", expected=f"{2 * x}\n") for x in range(1, n + 1)])


def test_a_program_that_exits_its_process_after_printing_passes_every_test(ex1):
    code = ("import os, sys\n"
            "print(2 * int(input()))\n"
            "sys.stdout.flush()\n"
            "os._exit(0)\n")
    contained(ex1, double_stdin(), code, {Verdict.passed})


def test_a_nonzero_process_exit_is_that_tests_runtime_error(ex1):
    code = ("import os\n"
            "x = int(input())\n"
            "print(2 * x, flush=True)\n"
            "if x == 2:\n"
            "    os._exit(3)\n")
    res = ex1.run([(double_stdin(), code)], early_exit=False)[0]
    assert res.outputs[0] == "2\n" and res.outputs[2] == "6\n" and res.outputs[3] == "8\n"
    assert res.errors[1] is not None and "exit status 3" in res.errors[1]


def test_each_test_starts_with_fresh_globals_and_streams(ex1):
    code = ("import sys\n"
            "try:\n"
            "    seen\n"
            "    print('stale')\n"
            "except NameError:\n"
            "    seen = 1\n"
            "    print(2 * int(sys.stdin.buffer.readline()))\n")
    contained(ex1, double_stdin(), code, {Verdict.passed})


def test_nothing_a_sample_changes_reaches_the_next_sample(ex1):
    # Monkeypatched builtins and modules, a file, a daemon: all gone for the next sample.
    attack = ("import builtins, os, sys\n"
              "open('planted', 'w').write('x')\n"
              "builtins.print = lambda *a, **k: sys.stdout.write('0\\n')\n"
              "builtins.input = lambda *a: '0'\n"
              "if os.fork() == 0:\n"
              "    os.setsid()\n"
              "    import time\n"
              "    time.sleep(30)\n"
              "print(1)\n")
    good = ("import os\n"
            "assert not os.path.exists('planted')\n"
            "print(2 * int(input()))\n")
    p = double_stdin()
    v = ex1.verify([(p, Sample(p.id, "attack", attack)), (p, Sample(p.id, "good", good))])
    assert v[0].verdict in NOT_PASSED and v[1].passed, (v[0].to_json(), v[1].to_json())
    assert sandbox_pids(ex1) == []


def test_a_memory_error_ends_only_its_test(ex1):
    code = ("x = int(input())\n"
            "if x == 1:\n"
            "    b = bytearray(1 << 40)\n"
            "print(2 * x)\n")
    res = ex1.run([(double_stdin(), code)], early_exit=False)[0]
    assert res.errors[0] is not None and res.errors[0].startswith("memory_limit")
    assert res.outputs[1:] == ["4\n", "6\n", "8\n"]


FRAMING = '''
import os, time
def burn(s):
    t = time.process_time()
    while time.process_time() - t < s:
        pass
def forge(data):
    for fd in range(3, 64):
        try:
            if os.readlink('/proc/self/fd/%d' % fd).startswith('pipe:'):
                os.write(fd, data)
        except OSError:
            pass
x = int(input())
# 0.6 CPU-s, then a forged "runner gone" + "runner started" to open a fresh window, 3 times:
# 2.4 CPU-s on a 1 s test if the framing could be forged.
for _ in range(4):
    burn(0.6)
    forge(b"X 0 0.0\\nP %d\\n" % os.getpid())
print(2 * x)
'''


def test_a_runner_cannot_forge_the_framing_that_opens_time_windows(ex1):
    p = Problem(id="d2", kind="stdin", time_limit_s=1.0,
                tests=[TestCase(stdin=f"{x}\n", expected=f"{2 * x}\n") for x in (1, 2)])
    v = contained(ex1, p, FRAMING, NOT_PASSED)
    assert v.verdict in (Verdict.runtime_error, Verdict.timeout), v.to_json()
