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
]


@pytest.mark.parametrize("out,exp,ok", STDOUT)
def test_stdout_matches(out, exp, ok):
    assert stdout_matches(out, exp) is ok
