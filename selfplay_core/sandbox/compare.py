"""Output comparison: the one place that decides whether an output equals the expected one.

Runs in the trusted parent on plain values decoded from JSON (never on objects produced by
untrusted code), so no user-defined `__eq__` can take part.

* call results: by value, type-checked (a bool is not an int, a tuple is not a list), with
  evalplus's float rule: when a float is involved, |out - exp| <= atol + 1e-7 * |exp|, where
  atol is the task's tolerance or 1e-6 if the task gives 0; NaN equals NaN.
* stdout: token-wise (any whitespace), a token matching when the strings are equal or both parse
  as floats within `abs_tol`/`rel_tol` (LCB's exact compare gives false fails on floats).
* special oracles from HumanEval+/MBPP+ where plain equality is the wrong question.
"""

from __future__ import annotations

import math
from typing import Any

from selfplay_core.sandbox.worker import Digest

_NUM = (int, float)


def _is_num(x: Any) -> bool:
    return type(x) in _NUM  # bool excluded on purpose


def values_match(out: Any, exp: Any, atol: float = 0.0, rtol: float = 1e-7) -> bool:
    if type(exp) is Digest or type(out) is Digest:
        return type(exp) is Digest and out == exp  # huge outputs: exact, by hash
    if _is_num(exp) and _is_num(out) and (type(exp) is float or type(out) is float):
        if math.isnan(exp) or math.isnan(out):
            return math.isnan(exp) and math.isnan(out)
        if out == exp:
            return True
        tol = atol if atol > 0 else 1e-6
        return abs(out - exp) <= tol + rtol * abs(exp)
    if type(out) is not type(exp):
        return False
    if type(exp) in (list, tuple):
        return len(out) == len(exp) and all(values_match(o, e, atol, rtol) for o, e in zip(out, exp))
    if type(exp) is dict:
        if out.keys() != exp.keys():
            return False
        return all(values_match(out[k], exp[k], atol, rtol) for k in exp)
    if type(exp) is complex:
        tol = atol if atol > 0 else 1e-6
        return abs(out - exp) <= tol + rtol * abs(exp)
    return out == exp


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


def call_matches(out: Any, exp: Any, *, atol: float = 0.0, oracle: str = "default",
                 args: list | None = None) -> bool:
    try:
        if oracle == "default":
            return values_match(out, exp, atol)
        if oracle == "poly_root":
            return _is_num(out) and abs(_poly(args[0], out)) <= (atol or 1e-6)
        if oracle == "set_eq":
            try:
                return set(out) == set(exp)
            except TypeError:
                return False
        if oracle == "not_none":
            # exp records whether the canonical answer was not None.
            if type(out) is bool:
                return out == exp
            return exp == (out is not None)
        if oracle == "mbpp_surface_area":
            return values_match(out, exp, atol) or (_is_num(out) and
                                                    abs(out - _surface_area(*args)) <= atol)
        if oracle == "mbpp_digit_distance":
            return values_match(out, exp, atol) or out == _digit_distance(*args)
        if oracle == "sum_div_or_zero":
            return values_match(out, exp, atol) or (_is_num(out) and out == 0)
        if oracle == "always":
            return True
    except (ValueError, TypeError, OverflowError, ArithmeticError, RecursionError):
        return False
    raise ValueError(f"unknown oracle {oracle!r}")


def _float_or_none(tok: str) -> float | None:
    try:
        v = float(tok)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def stdout_matches(out: str, exp: str, *, abs_tol: float = 1e-6, rel_tol: float = 1e-6) -> bool:
    a, b = out.split(), exp.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        fx, fy = _float_or_none(x), _float_or_none(y)
        if fx is None or fy is None:
            return False
        if abs(fx - fy) > max(abs_tol, rel_tol * abs(fy)):
            return False
    return True
