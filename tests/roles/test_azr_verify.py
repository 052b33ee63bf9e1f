"""AZR answer checks through the real executor: abduction runs the (model-written) program on
the student's input in the sandbox; deduction compares literals with the typed rule."""

import pytest

from selfplay_core.roles.azr import check_abductions, check_deduction, parse_answer
from selfplay_core.roles.common import Rejection

EVENS_SUM = "def f(x):\n    return sum(v for v in x if v % 2 == 0)\n"
PAIR = "def f(a, b):\n    return (a * b, a - b)\n"
LIAR = """
class Anything:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
def f(x):
    return Anything()
"""
EXIT_EARLY = "import sys\ndef f(x):\n    print('PASS')\n    sys.exit(0)\n"
PATCH_EQ = """
import builtins
def f(x):
    builtins.__dict__['isinstance'] = lambda *a: True
    return [x]
"""
LOOP = "def f(x):\n    while x:\n        pass\n    return 0\n"


def _ans(text):
    return parse_answer(text, "input")


def test_abduction_accepts_any_input_with_the_right_output(executor):
    items = [
        (EVENS_SUM, _ans("[2, 4]"), 1, 6),          # the proposer's own input, say
        (EVENS_SUM, _ans("[6, 1, 3]"), 1, 6),       # a different input, same output: passes
        (EVENS_SUM, _ans("[1, 3]"), 1, 6),          # wrong output
        (EVENS_SUM, _ans("'abc'"), 1, 6),           # the program raises on it
        (PAIR, _ans("(3, 1)"), 2, (3, 2)),
        (PAIR, _ans("(3, 1)"), 2, [3, 2]),          # typed: a list is not the tuple returned
        (PAIR, _ans("[3, 1]"), 2, (3, 2)),          # not a 2-tuple of arguments
        (EVENS_SUM, Rejection("not_a_literal"), 1, 6),
    ]
    assert check_abductions(executor, items) == [True, True, False, False, True, False, False, False]


@pytest.mark.parametrize("program", [LIAR, EXIT_EARLY, PATCH_EQ, LOOP])
def test_abduction_programs_cannot_cheat(executor, program):
    # Expected outputs stay in the parent: a lying __eq__, an early exit after printing PASS,
    # a patched builtin or a hang all fail (the loop by the per-test time limit).
    assert check_abductions(executor, [(program, _ans("5"), 1, 5)], time_limit_s=0.5) == [False]


DEDUCTIONS = [
    ("6", 6, True),
    ("6.0", 6, True),             # numbers compare by value (the executor's float rule)
    ("6.0000001", 6.0, True),
    ("6.1", 6.0, False),
    ("True", 1, False),           # a bool is not an int
    ("1", True, False),
    ("(1, 2)", [1, 2], False),    # a tuple is not a list
    ("[1, 2]", [1, 2], True),
    ("{1: 'a'}", {1: "a"}, True),
    ("{'1': 'a'}", {1: "a"}, False),
    ("'6'", 6, False),
    ("None", None, True),
    ("__import__('os')", 0, False),
    ("", None, False),            # no answer is not None
]


@pytest.mark.parametrize("text,expected,ok", DEDUCTIONS)
def test_deduction_compare_is_typed(text, expected, ok):
    assert check_deduction(parse_answer(text, "output"), expected) is ok
