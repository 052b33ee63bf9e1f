"""Output comparison: the one place that decides whether an output equals the expected one.

Runs in the trusted parent on plain values decoded from JSON (never on objects produced by
untrusted code), so no user-defined `__eq__` can take part. The same rules judge benchmark
samples, self-play students and AZR deduction answers.

Rules (exact; `tests/sandbox/test_compare.py` holds a table for each):

* Types are checked at every depth: a bool is not an int, a tuple is not a list, also inside
  lists, tuples, sets and dict keys. Set elements and dict keys compare by typed value,
  exactly: `{True, 2.0}` is not `{1, 2}`.
* Integers compare exactly unless the task gives its own tolerance. An int expected value is
  matched only by an equal int (or a float that is exactly that integer, as Python's `==` and
  evalplus allow: `3.0` for `3`, never `1000000100.0` for `1000000007`).
* Tolerance (evalplus's rule): a task's explicit `atol` (> 0) applies whatever the expected
  number's type, int included: |out - exp| <= atol + 1e-7 * |exp|, computed exactly for int
  outputs. Without one, a float expected value gets atol 1e-6 and an int none. The output
  must be a finite int or float (never a bool). Complex values: the same, per component.
* `inf` equals only `inf` of the same sign; `nan` equals only `nan`; never within a tolerance.
* stdout: token-wise (any whitespace). A token of the expected output that is a plain ASCII
  integer (`[+-]?[0-9]+`) is matched only by an integer token of the same value; one that is a
  plain ASCII decimal/exponent float is matched by any number token within
  max(abs_tol, rel_tol * |exp|); any other token (`inf`, `1_000`, non-ASCII digits, words) only
  by the identical string.
* special oracles from HumanEval+/MBPP+ where plain equality is the wrong question.
"""

from __future__ import annotations

import math
import re
from typing import Any

from selfplay_core.values import Digest, Opaque


def _is_num(x: Any) -> bool:
    t = type(x)
    return t is int or t is float  # bool excluded on purpose


def _float_close(out: Any, exp: float, tol: float, rtol: float) -> bool:
    """`out` (int or float) against a float expectation."""
    if math.isnan(exp):
        return type(out) is float and math.isnan(out)
    if math.isinf(exp):
        return type(out) is float and out == exp
    if type(out) is int:
        try:
            o = float(out)
        except OverflowError:
            return False
    else:
        o = out
    if not math.isfinite(o):
        return False
    return o == exp or abs(o - exp) <= tol + rtol * abs(exp)


def _int_close(out: Any, exp: int, atol: float, rtol: float) -> bool:
    """`out` (int or float) against an int expectation under a task's own tolerance, computed
    without rounding the expected integer (|out - exp| is exact for an int output)."""
    if type(out) is float:
        if not math.isfinite(out):
            return False
        try:
            diff = abs(out - exp)
        except OverflowError:
            return False
    else:
        diff = abs(out - exp)
    try:
        return diff <= atol + rtol * abs(exp)
    except OverflowError:  # |exp| beyond floats: rtol 1e-7 as an exact integer bound
        return diff <= atol or diff <= abs(exp) // 10**7


def _key(x: Any) -> Any:
    """A hashable, typed stand-in for a set element or dict key: equal exactly when the values
    are equal *and* of the same types all the way down."""
    t = type(x)
    if t is float:
        return ("f", "nan") if math.isnan(x) else ("f", x)
    if t is tuple:
        return ("t", tuple(_key(v) for v in x))
    if t is frozenset or t is set:
        return ("F" if t is frozenset else "S", frozenset(_key(v) for v in x))
    if t is complex:
        return ("c", _key(x.real), _key(x.imag))
    if t is Opaque:
        return ("o", id(x))  # equal to nothing but itself
    if t is Digest:
        return ("h", x.hexdigest)
    if t in (bool, int, str, bytes) or x is None:
        return (t.__name__, x)
    return ("?", id(x))


def values_match(out: Any, exp: Any, atol: float = 0.0, rtol: float = 1e-7) -> bool:
    te, to = type(exp), type(out)
    if te is Digest or to is Digest:
        return te is Digest and out == exp  # huge outputs: exact, by hash
    if te is float:
        return _is_num(out) and _float_close(out, exp, atol if atol > 0 else 1e-6, rtol)
    if te is int:
        if atol > 0 and _is_num(out):
            return _int_close(out, exp, atol, rtol)
        if to is int:
            return out == exp
        return to is float and math.isfinite(out) and out == exp
    if to is not te:
        return False
    if te is list or te is tuple:
        return len(out) == len(exp) and all(values_match(o, e, atol, rtol) for o, e in zip(out, exp))
    if te is dict:
        if len(out) != len(exp):
            return False
        typed = {_key(k): v for k, v in out.items()}
        if len(typed) != len(out):
            return False
        for k, v in exp.items():
            kk = _key(k)
            if kk not in typed or not values_match(typed[kk], v, atol, rtol):
                return False
        return True
    if te is set or te is frozenset:
        return len(out) == len(exp) and {_key(v) for v in out} == {_key(v) for v in exp}
    if te is complex:
        tol = atol if atol > 0 else 1e-6
        return (_float_close(out.real, exp.real, tol, rtol)
                and _float_close(out.imag, exp.imag, tol, rtol))
    if te in (str, bytes, bool) or exp is None:
        return out == exp
    return False  # Opaque or anything unexpected equals nothing


def _poly(xs: list, x: float) -> float:
    return sum(c * math.pow(x, i) for i, c in enumerate(xs))


def _surface_area(base_edge, height):
    # evalplus's corrected reference for Mbpp/581 (height = perpendicular height).
    slant = math.sqrt((base_edge / 2) ** 2 + height ** 2)
    return round(base_edge ** 2 + 2 * base_edge * slant)


def _digit_distance(a, b):
    # evalplus's corrected reference for Mbpp/558 (numbers of different lengths zero-padded).
    sa, sb = str(a), str(b)
    n = max(len(sa), len(sb))
    return sum(abs(int(x) - int(y)) for x, y in zip(sa.zfill(n), sb.zfill(n)))


def _set_eq(out: Any, exp: Any) -> bool:
    if type(out) not in (list, tuple, set, frozenset) or type(exp) not in (list, tuple, set, frozenset):
        return False
    return {_key(v) for v in out} == {_key(v) for v in exp}


def call_matches(out: Any, exp: Any, *, atol: float = 0.0, oracle: str = "default",
                 args: list | None = None) -> bool:
    try:
        if oracle == "default":
            return values_match(out, exp, atol)
        if oracle == "poly_root":
            if not _is_num(out) or not math.isfinite(out):
                return False
            return abs(_poly(args[0], out)) <= (atol or 1e-6)
        if oracle == "set_eq":
            return _set_eq(out, exp)
        if oracle == "not_none":
            # exp records whether the canonical answer was not None.
            if type(out) is bool:
                return out == exp
            return exp == (out is not None)
        if oracle == "mbpp_surface_area":
            return values_match(out, exp, atol) or values_match(out, _surface_area(*args), atol)
        if oracle == "mbpp_digit_distance":
            return values_match(out, exp, atol) or values_match(out, _digit_distance(*args))
        if oracle == "sum_div_or_zero":
            return values_match(out, exp, atol) or values_match(out, 0)
        if oracle == "always":
            return True
    except (ValueError, TypeError, OverflowError, ArithmeticError, RecursionError):
        return False
    raise ValueError(f"unknown oracle {oracle!r}")


# Plain ASCII number tokens. `re.ASCII` alone would still let `str.isdigit`-style digits
# through `\d` in other places; spelling the digit class out keeps the grammar obvious.
_INT_TOKEN = re.compile(r"[+-]?[0-9]+")
_FLOAT_TOKEN = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _int_canon(tok: str) -> str:
    """Canonical decimal form of an integer token, without converting it (linear time for any
    length, unlike int() on a 10^6-digit token)."""
    sign = tok[0] == "-"
    digits = tok.lstrip("+-").lstrip("0") or "0"
    return ("-" if sign and digits != "0" else "") + digits


def stdout_matches(out: str, exp: str, *, abs_tol: float = 1e-6, rel_tol: float = 1e-6) -> bool:
    a, b = out.split(), exp.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        if _INT_TOKEN.fullmatch(y):
            if not _INT_TOKEN.fullmatch(x) or _int_canon(x) != _int_canon(y):
                return False
            continue
        if not (_FLOAT_TOKEN.fullmatch(y) and _FLOAT_TOKEN.fullmatch(x)):
            return False
        fx, fy = float(x), float(y)
        if not (math.isfinite(fx) and math.isfinite(fy)):
            return False  # an overflowing token (1e999) matches only its own spelling
        if abs(fx - fy) > max(abs_tol, rel_tol * abs(fy)):
            return False
    return True
