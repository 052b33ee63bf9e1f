"""Turn assert-based benchmark tests (HumanEval `check`, MBPP `test_list`) into call tests.

The original harnesses run the asserts next to the model's code, so the expected values sit
inside the untrusted process, where an overridden `__eq__` or a patched builtin can fake a pass.
Our executor keeps expected values in the trusted parent, so we read each assert *statically*
(`ast` + `ast.literal_eval`, no code runs) into (arguments, expected value, tolerance):

    f(a, b) == E   /   E == f(a, b)          exact (evalplus's float rule)
    f(a) is True | False | None               exact
    f(a)   /   not f(a)                       truthiness -> expected True / False
    abs(f(a) - E) < tol  (also <=, math.fabs, abs(E - f(a)))   tolerance tol
    math.isclose(f(a), E, rel_tol=r, abs_tol=t)                tolerance max(t, r*|E|)
    set(f(a)) == set(E)                       set equality (the set_eq oracle)
    assert True                               no-op, ignored

Anything else (loops, random inputs, helper calls) raises `Unsupported`, and the caller decides
what to do (HumanEval records the calls by running its check in the sandbox; MBPP skips the task
with a counted reason).
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from typing import Any


class Unsupported(Exception):
    """An assert this module cannot read statically."""


@dataclass
class AssertCase:
    args: list
    expected: Any
    kind: str = "eq"        # eq | truthy | set_eq
    atol: float = 0.0


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_MAX_FOLDED = 100_000   # longest str/tuple/list a folded expression may build


def _fold(node: ast.expr):
    """A literal, or arithmetic on literals (`2.0 / 3.0`, `3 * 19`, `'ab' + 'cd'`, `1 ** 0`),
    evaluated here without running any code but the operators themselves, within size bounds."""
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _fold(node.left), _fold(node.right)
        if isinstance(node.op, ast.Pow) and not (isinstance(b, (int, float)) and abs(b) <= 64):
            raise ValueError("exponent too large to fold")
        if isinstance(node.op, ast.Mult) and any(isinstance(x, (str, list, tuple)) for x in (a, b)):
            n = b if isinstance(a, (str, list, tuple)) else a
            if not isinstance(n, int) or n > _MAX_FOLDED:
                raise ValueError("repetition too large to fold")
        out = _BINOPS[type(node.op)](a, b)
        if isinstance(out, (str, list, tuple)) and len(out) > _MAX_FOLDED:
            raise ValueError("folded value too large")
        return out
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _fold(node.operand)
        return -v if isinstance(node.op, ast.USub) else +v
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_fold(e) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    return ast.literal_eval(node)


def _literal(node: ast.expr, what: str):
    try:
        return _fold(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, ArithmeticError):
        raise Unsupported(f"{what} is not a literal: {ast.unparse(node)[:80]}") from None


def _call_args(node: ast.expr, is_target) -> list | None:
    """Literal positional arguments if `node` is a call of the function under test."""
    if not (isinstance(node, ast.Call) and is_target(node.func)):
        return None
    if node.keywords:
        raise Unsupported("keyword arguments in the call under test")
    if any(isinstance(a, ast.Starred) for a in node.args):
        raise Unsupported("starred arguments in the call under test")
    return [_literal(a, "argument") for a in node.args]


def _named_call(node, names: tuple[str, ...]) -> ast.Call | None:
    if not isinstance(node, ast.Call) or node.keywords or len(node.args) != 1:
        return None
    f = node.func
    name = f.id if isinstance(f, ast.Name) else (
        f"{f.value.id}.{f.attr}" if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else None)
    return node if name in names else None


def _tolerance_case(e: ast.Compare, is_target) -> AssertCase | None:
    # abs(f(x) - E) < tol, abs(E - f(x)) <= tol, math.fabs(...) < tol
    if len(e.ops) != 1 or not isinstance(e.ops[0], (ast.Lt, ast.LtE)):
        return None
    inner = _named_call(e.left, ("abs", "math.fabs"))
    if inner is None or not isinstance(inner.args[0], ast.BinOp) or not isinstance(inner.args[0].op, ast.Sub):
        return None
    diff = inner.args[0]
    for call, other in ((diff.left, diff.right), (diff.right, diff.left)):
        args = _call_args(call, is_target)
        if args is not None:
            tol = _literal(e.comparators[0], "tolerance")
            return AssertCase(args, _literal(other, "expected value"), "eq", float(tol))
    return None


def _isclose_case(e: ast.Call, is_target) -> AssertCase | None:
    f = e.func
    if not (isinstance(f, ast.Attribute) and f.attr == "isclose" and isinstance(f.value, ast.Name)
            and f.value.id == "math" and len(e.args) == 2):
        return None
    kw = {k.arg: _literal(k.value, k.arg or "keyword") for k in e.keywords}
    if set(kw) - {"rel_tol", "abs_tol"}:
        raise Unsupported(f"math.isclose keywords {sorted(kw)}")
    for call, other in ((e.args[0], e.args[1]), (e.args[1], e.args[0])):
        args = _call_args(call, is_target)
        if args is not None:
            exp = _literal(other, "expected value")
            rel, abs_ = float(kw.get("rel_tol", 1e-9)), float(kw.get("abs_tol", 0.0))
            return AssertCase(args, exp, "eq", max(abs_, rel * abs(exp)))
    return None


def case_from_assert(stmt: ast.Assert, is_target) -> AssertCase | None:
    """One AssertCase, None for a no-op `assert True`, or Unsupported."""
    e = stmt.test
    if isinstance(e, ast.Constant) and e.value is True:
        return None
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        args = _call_args(e.operand, is_target)
        if args is not None:
            return AssertCase(args, False, "truthy")
    args = _call_args(e, is_target)
    if args is not None:
        return AssertCase(args, True, "truthy")
    if isinstance(e, ast.Call):
        case = _isclose_case(e, is_target)
        if case:
            return case
    if isinstance(e, ast.Compare) and len(e.ops) == 1:
        op, left, right = e.ops[0], e.left, e.comparators[0]
        if isinstance(op, (ast.Eq, ast.Is)):
            for call, other in ((left, right), (right, left)):
                args = _call_args(call, is_target)
                if args is not None:
                    if isinstance(op, ast.Is) and not (isinstance(other, ast.Constant)
                                                       and other.value in (True, False, None)):
                        raise Unsupported("'is' against something other than True/False/None")
                    return AssertCase(args, _literal(other, "expected value"), "eq")
            # set(f(x)) == set(E)
            sl, sr = _named_call(left, ("set",)), _named_call(right, ("set",))
            if isinstance(op, ast.Eq) and sl is not None and sr is not None:
                for call, other in ((sl.args[0], sr.args[0]), (sr.args[0], sl.args[0])):
                    args = _call_args(call, is_target)
                    if args is not None:
                        return AssertCase(args, _literal(other, "expected value"), "set_eq")
        case = _tolerance_case(e, is_target)
        if case:
            return case
    raise Unsupported(f"unsupported assert: {ast.unparse(stmt)[:100]}")


def name_is(name: str):
    return lambda f: isinstance(f, ast.Name) and f.id == name


def cases_from_statements(stmts: list[ast.stmt], is_target, *, allow=()) -> list[AssertCase]:
    """Cases of a block made of asserts (and imports, docstrings and `allow`ed statement types)."""
    out = []
    for st in stmts:
        if isinstance(st, ast.Assert):
            case = case_from_assert(st, is_target)
            if case is not None:
                out.append(case)
        elif isinstance(st, (ast.Import, ast.ImportFrom, ast.Pass)) or isinstance(st, tuple(allow)):
            continue
        elif isinstance(st, ast.Expr) and (isinstance(st.value, (ast.Constant, ast.Name)) or (
                isinstance(st.value, ast.Call) and name_is("print")(st.value.func))):
            continue  # docstring, a bare name, or a debugging print: no effect on the verdict
        else:
            raise Unsupported(f"statement {type(st).__name__} in the test: {ast.unparse(st)[:80]}")
    return out
