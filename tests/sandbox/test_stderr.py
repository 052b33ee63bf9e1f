"""Class 3: stdout alone is judged. stderr goes to a pipe of its own that the worker drains
(keeping its head), so what a program writes there can neither fail nor pass it."""

from __future__ import annotations

import pytest

from selfplay_core.problems import Problem, TestCase, Verdict

from sandbox_helpers import NOT_PASSED, contained, run

pytestmark = pytest.mark.security


def stdin_problem():
    return Problem(id="sum", kind="stdin", time_limit_s=5.0,
                   tests=[TestCase(stdin=f"{a} {b}\n", expected=f"{a + b}\n")
                          for a, b in ((1, 2), (40, 2), (7, 8))])


def call_problem():
    return Problem(id="add", kind="call", entry_point="f", time_limit_s=5.0,
                   tests=[TestCase(args=[a, b], expected=a + b) for a, b in ((1, 2), (40, 2))])


def test_a_correct_stdin_program_that_writes_much_to_stderr_passes(ex1):
    code = ("import sys\n"
            "a, b = map(int, input().split())\n"
            "for i in range(1000):\n"
            "    print('debug line %04d ' % i + 'x' * 40, file=sys.stderr)\n"  # ~55 KB
            "print(a + b)\n")
    contained(ex1, stdin_problem(), code, {Verdict.passed})


def test_unflushed_and_flushed_stderr_both_stay_out_of_stdout(ex1):
    code = ("import sys\n"
            "a, b = map(int, input().split())\n"
            "sys.stderr.write('E' * 12000)\n"
            "print(a + b)\n"
            "sys.stderr.write('tail')\n"
            "sys.stderr.flush()\n")
    contained(ex1, stdin_problem(), code, {Verdict.passed})


def test_an_answer_printed_only_to_stderr_fails(ex1):
    code = ("import sys\n"
            "a, b = map(int, input().split())\n"
            "print(a + b, file=sys.stderr)\n"
            "sys.stderr.flush()\n")
    v = contained(ex1, stdin_problem(), code, NOT_PASSED)
    assert v.verdict is Verdict.wrong_answer


def test_a_stderr_flood_neither_blocks_nor_hits_the_output_cap(ex1):
    # 24 MB to stderr: more than the 16 MB output cap and than any pipe holds.
    code = ("import sys, os\n"
            "a, b = map(int, input().split())\n"
            "chunk = b'z' * (1 << 20)\n"
            "for _ in range(24):\n"
            "    os.write(2, chunk)\n"
            "print(a + b)\n")
    contained(ex1, stdin_problem(), code, {Verdict.passed})


def test_a_call_program_writing_to_stderr_passes(ex1):
    code = ("import sys\n"
            "def f(a, b):\n"
            "    sys.stderr.write('noise ' * 5000)\n"
            "    sys.stderr.flush()\n"
            "    return a + b\n")
    contained(ex1, call_problem(), code, {Verdict.passed})


def test_the_head_of_stderr_is_kept_for_the_caller(ex1):
    code = ("import sys\n"
            "a, b = map(int, input().split())\n"
            "print('trace: start', file=sys.stderr)\n"
            "print(a + b)\n")
    res = ex1.run([(stdin_problem(), code)])[0]
    assert res.ok and res.outputs[0] == "3\n"
    assert res.stderr.startswith("trace: start\n")
