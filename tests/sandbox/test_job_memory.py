"""Class 1: a child's memory holds only its own job.

The attack scans every readable page of its own process for the source of another sample
(queued behind it, or verified before it on the same worker). The pattern is a regular
expression, so the needle itself never sits in the attacker's memory as plain bytes.
"""

from __future__ import annotations

import pytest

from selfplay_core.problems import Problem, Sample, TestCase

from sandbox_helpers import GOOD, NOT_PASSED, double_problem, sandbox_pids

pytestmark = pytest.mark.security

# Found in another sample's code only; spelled by the attacker as a regex class.
MARKER = "QUEUED_SOLUTION_41c7"
NEIGHBOUR = f"def f(x):\n    return 1  # {MARKER}\n"

SCAN = r'''
import ctypes, re
def f(x):
    pat = re.compile(rb"QUEUED_SOLUTIO[N]_41c7")
    found = 0
    with open("/proc/self/maps") as m:
        spans = []
        for line in m:
            parts = line.split()
            if "r" not in parts[1] or (len(parts) > 5 and parts[5].startswith("[v")):
                continue
            a, b = (int(v, 16) for v in parts[0].split("-"))
            spans.append((a, b))
    for a, b in spans:
        try:
            data = ctypes.string_at(a, b - a)
        except (OSError, ValueError, MemoryError):
            continue
        if pat.search(data):
            found = 1
            break
    return found
'''


def problem():
    return Problem(id="one", kind="call", entry_point="f", time_limit_s=10.0,
                   tests=[TestCase(args=[0], expected=1)])


def _verify(ex, pairs):
    return ex.verify([(p, Sample(p.id, f"s{k}", code)) for k, (p, code) in enumerate(pairs)])


def test_a_child_cannot_read_the_job_queued_behind_it(ex1):
    for _ in range(3):
        v = _verify(ex1, [(problem(), SCAN), (problem(), NEIGHBOUR)])
        assert v[0].verdict in NOT_PASSED, v[0].to_json()
        assert v[1].passed, v[1].to_json()
    good = _verify(ex1, [(double_problem(), GOOD)])[0]
    assert good.passed, good.to_json()
    assert sandbox_pids(ex1) == []


def test_a_child_cannot_read_jobs_verified_before_it(ex1):
    v = _verify(ex1, [(problem(), NEIGHBOUR)])
    assert v[0].passed
    v = _verify(ex1, [(problem(), SCAN)])
    assert v[0].verdict in NOT_PASSED, v[0].to_json()
    good = _verify(ex1, [(double_problem(), GOOD)])[0]
    assert good.passed, good.to_json()


def test_a_stdin_child_cannot_read_other_jobs(ex1):
    scan_stdin = SCAN + "\nprint(f(0))\n"
    sp = Problem(id="s", kind="stdin", time_limit_s=10.0,
                 tests=[TestCase(stdin="", expected="1\n")])
    neighbour = f"print(1)  # {MARKER}\n"
    v = _verify(ex1, [(sp, neighbour), (sp, scan_stdin), (sp, neighbour)])
    assert v[0].passed and v[2].passed
    assert v[1].verdict in NOT_PASSED, v[1].to_json()
