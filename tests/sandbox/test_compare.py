"""Comparison rules: table-driven."""

import math

import pytest

from selfplay_core.sandbox.compare import call_matches, stdout_matches, values_match

VALUES = [
    # out, expected, atol, match?
    (3, 3, 0, True),
    (3, 4, 0, False),
    (True, 1, 0, False),            # type-checked: bool is not int
    (1, True, 0, False),
    (3.0, 3, 0, True),              # numeric int/float mix compares by value
    (0.1 + 0.2, 0.3, 0, True),      # float rule: 1e-6 when atol is 0
    (0.3001, 0.3, 0, False),
    (0.3001, 0.3, 1e-3, True),
    (float("nan"), float("nan"), 0, True),
    (float("nan"), 1.0, 0, False),
    ([1, 2], (1, 2), 0, False),     # list is not tuple
    ((1, 2.0000000001), (1, 2.0), 0, True),
    ([1, [2, 3]], [1, [2, 3]], 0, True),
    ([1, 2], [1, 2, 3], 0, False),
    ({"a": 1.0}, {"a": 1.0000000001}, 0, True),
    ({"a": 1}, {"b": 1}, 0, False),
    ({1, 2}, {2, 1}, 0, True),
    ("abc", "abc", 0, True),
    ("abc", "abd", 0, False),
    (None, None, 0, True),
    (None, 0, 0, False),
    (1 + 1j, 1 + 1j, 0, True),
    (10**400, 10**400, 0, True),
    # --- issue 11, class 1: integers exact, tolerance only where the expected value is a float
    (1000000100.0, 1000000007, 0, False),   # a float output does not buy an int answer slack
    (1000000007.0, 1000000007, 0, True),    # ... but an exactly equal float is that integer
    (10.0 ** 20, 10**20 + 1, 0, False),     # compared exactly, not through float()
    (10**400 + 1, 10**400, 0, False),
    # --- issue 48, class 7: a task's explicit atol applies to an int expectation too (evalplus)
    (1.25, 1, 0.5, True),                   # |1.25 - 1| = 0.25 <= 0.5
    (2.5, 2, 0.5, True),                    # 0.5 <= 0.5 + 2e-7
    (2.6, 2, 0.5, False),                   # 0.6 > 0.5 + 2e-7
    (3, 2, 0.5, False),                     # an int output: |3 - 2| = 1 > 0.5
    (2, 2, 0.5, True),
    (True, 1, 0.5, False),                  # bool is still no number
    (float("inf"), 1, 0.5, False),
    (float("nan"), 1, 0.5, False),
    ([1.25, 3], [1, 3], 0.5, True),         # inside containers too
    ((1, 2.7), (1, 2), 0.5, False),
    (10**20 + 5, 10**20, 0.5, True),        # rtol 1e-7 of 1e20 is 1e13
    (10**400 + 10**392, 10**400, 0.5, True),   # beyond floats: 1e392 <= 1e393, exactly
    (10**400 + 10**394, 10**400, 0.5, False),  # 1e394 > 1e393
    (2.0000001, 2, 0, False),               # without a task atol an int stays exact
    (3, 3.0000001, 0, True),                # an int output against a float expectation: tolerance
    (True, 1.0, 0, False),                  # bool is no number
    # inf / nan only equal themselves, sign included; never "within tolerance"
    (float("inf"), float("inf"), 0, True),
    (float("-inf"), float("-inf"), 0, True),
    (float("inf"), float("-inf"), 0, False),
    (float("-inf"), float("inf"), 1e9, False),
    (float("inf"), 1e308, 0, False),
    (1e308, float("inf"), 0, False),
    (float("nan"), float("inf"), 0, False),
    (float("inf"), float("nan"), 0, False),
    (10**400, 1e300, 0, False),             # an int too large for a float is not close to one
    (complex(float("inf"), 0), complex(float("-inf"), 0), 0, False),
    (complex(0, float("inf")), complex(0, float("-inf")), 1.0, False),
    (complex(float("nan"), 1), complex(float("nan"), 1), 0, True),
    (complex(1, 2.0000001), complex(1, 2), 0, True),
    # bool is not int inside containers: sets, dict keys, tuples, lists
    ({True, 2.0}, {1, 2}, 0, False),
    ({1, 2}, {True, 2}, 0, False),
    ({True: "a"}, {1: "a"}, 0, False),
    ({1.0: "a"}, {1: "a"}, 0, False),
    ({(1, True): 0}, {(1, 1): 0}, 0, False),
    ({(1, True)}, {(1, 1)}, 0, False),
    ([True, 2], [1, 2], 0, False),
    ((1, True), (1, 1), 0, False),
    (frozenset({1}), {1}, 0, False),
    ({frozenset({1, 2}): [1.0000000001]}, {frozenset({2, 1}): [1.0]}, 0, True),
    ({float("nan")}, {float("nan")}, 0, True),
    ({1.0}, {1}, 0, False),                 # set elements and keys compare by type, not value
    ([1.0], [1], 0, True),                  # ... a list element is a value like any other
    (float(2**60), 2**60 + 1, 0, False),    # the nearest float of an int is not that int
    (-0.0, 0, 0, True),
]


@pytest.mark.parametrize("out,exp,atol,ok", VALUES)
def test_values_match(out, exp, atol, ok):
    assert values_match(out, exp, atol) is ok


ORACLES = [
    # oracle, out, exp, args, atol, match?
    ("poly_root", 1.0, 0.5, [[-1, 1]], 1e-4, True),      # 1 is a root of x - 1
    ("poly_root", 0.5, 1.0, [[-1, 1]], 1e-4, False),
    ("poly_root", "x", 1.0, [[-1, 1]], 1e-4, False),
    ("set_eq", [3, 1, 2], [1, 2, 3], None, 0, True),
    ("set_eq", [1, 2], [1, 2, 3], None, 0, False),
    ("not_none", "match", True, None, 0, True),
    ("not_none", None, True, None, 0, False),
    ("not_none", False, False, None, 0, True),
    ("sum_div_or_zero", 0, 7, None, 0, True),
    ("sum_div_or_zero", 6, 7, None, 0, False),
    ("mbpp_digit_distance", 4, 0, [123, 2], 0, True),     # zero-padded: |1-0|+|2-0|+|3-2|
    ("mbpp_surface_area", 35, 0, [3, 4], 0, True),        # round(9 + 2*3*sqrt(2.25+16))
    ("set_eq", [True, 2], [1, 2], None, 0, False),        # typed elements here too
    ("set_eq", [[1], 2], [1, 2], None, 0, False),         # unhashable: no match, no crash
    ("mbpp_digit_distance", True, 0, [1, 0], 0, False),   # True is not the int 1
    ("sum_div_or_zero", False, 7, None, 0, False),
    ("poly_root", float("inf"), 0.5, [[-1, 1]], 1e-4, False),
    ("poly_root", float("nan"), 0.5, [[-1, 1]], 1e-4, False),
]


@pytest.mark.parametrize("oracle,out,exp,args,atol,ok", ORACLES)
def test_oracles(oracle, out, exp, args, atol, ok):
    assert call_matches(out, exp, atol=atol, oracle=oracle, args=args) is ok


def test_unknown_oracle_is_an_error():
    with pytest.raises(ValueError):
        call_matches(1, 1, oracle="nope")


STDOUT = [
    ("1 2\n3\n", "1 2\n3", True),          # whitespace differences do not matter
    ("1 2 3", "1\n2\n3\n", True),
    ("0.3333333", "0.333333333", True),     # float tokens within tolerance
    ("0.34", "0.333333333", False),
    ("Yes", "yes", False),
    ("1 2", "1 2 3", False),
    ("", "", True),
    ("nan", "nan", True),                   # equal strings match even when not finite
    ("inf", "1e308", False),
    # --- issue 11, class 1: integer tokens exact, a plain ASCII number grammar
    ("1000001007", "1000000007", False),    # off by 1,000 at 1e9: the old rel 1e-6 passed it
    ("1000000008", "1000000007", False),
    ("+5 05 -0", "5 5 0", True),            # same integer values
    ("12.0", "12", False),                  # an integer expected: an integer token answers
    ("1_000", "1000", False),               # float() accepts underscores; the grammar does not
    ("\u0661\u0662", "12", False),          # nor non-ASCII digits
    ("1e5", "100000.0", True),              # a float expected: any number token within tol
    ("100000", "100000.0", True),
    ("0.3333334", "0.3333333", True),
    ("inf", "inf", True),
    ("inf", "1e309", False),                # overflowing literals match only their spelling
    ("1e309", "1e309", True),
    ("-inf", "inf", False),
    ("nan", "0.5", False),
    ("0x10", "16", False),
    (" 7 ", "7", True),
    ("1" * 5000, "1" * 5000, True),         # long integers compare as digit strings
    ("1" * 4999 + "2", "1" * 5000, False),
    ("1e3", "1000", False),                 # an integer expected: exponent notation is no integer
    ("1000.", "1000", False),
    ("9" * 30, "1" + "0" * 30, False),      # big integers exact, not through float
    ("1e-7", "0.0", True),                  # a float expected: tolerance
]


@pytest.mark.parametrize("out,exp,ok", STDOUT)
def test_stdout_matches(out, exp, ok):
    assert stdout_matches(out, exp) is ok


def test_a_tasks_own_atol_applies_to_an_int_expectation_end_to_end(ex):
    from selfplay_core.problems import Problem, Sample, TestCase

    p = Problem(id="tol", kind="call", entry_point="f", atol=0.5, time_limit_s=2.0,
                tests=[TestCase(args=[1], expected=1), TestCase(args=[7], expected=7)])
    close = "def f(x):\n    return x + 0.25\n"
    far = "def f(x):\n    return x + 1\n"
    out = ex.verify([(p, Sample(p.id, "close", close)), (p, Sample(p.id, "far", far))])
    assert out[0].passed, out[0].to_json()
    assert out[1].verdict.value == "wrong_answer", out[1].to_json()
