"""The primitives that toy-world programs are composed of.

Every primitive is one line of straight-line code that rewrites the variable `x`, plus one English
phrase. A program is a chain of primitives whose types line up; its description is the chain of
phrases. Keeping both templated is what lets `fidelity.py` parse a description back into a program.

Types: "ints" (a list of ints), "int", "str". A `{c}` in code/text is a constant drawn from
`consts`; string constants are single letters and appear quoted in the code.
"""

from __future__ import annotations

from dataclasses import dataclass

LETTERS = "abcdef"  # small alphabet so that count/remove primitives actually hit


@dataclass(frozen=True)
class Prim:
    name: str
    in_type: str
    out_type: str
    code: str
    text: str
    consts: tuple = ()

    @property
    def has_const(self) -> bool:
        return bool(self.consts)

    def line(self, c=None) -> str:
        return self.code.format(c=c) if self.has_const else self.code

    def phrase(self, c=None) -> str:
        return self.text.format(c=c) if self.has_const else self.text


def _p(name, tin, tout, code, text, consts=()):
    return Prim(name, tin, tout, code, text, tuple(consts))


PRIMITIVES: dict[str, Prim] = {p.name: p for p in [
    # ints -> ints
    _p("add", "ints", "ints", "x = [v + {c} for v in x]", "add {c} to each number", range(1, 10)),
    _p("sub", "ints", "ints", "x = [v - {c} for v in x]", "subtract {c} from each number", range(1, 10)),
    _p("mul", "ints", "ints", "x = [v * {c} for v in x]", "multiply each number by {c}", range(2, 6)),
    _p("mod", "ints", "ints", "x = [v % {c} for v in x]", "replace each number by its remainder mod {c}",
       range(2, 10)),
    _p("square", "ints", "ints", "x = [v * v for v in x]", "square each number"),
    _p("neg", "ints", "ints", "x = [-v for v in x]", "negate each number"),
    _p("keep_gt", "ints", "ints", "x = [v for v in x if v > {c}]", "keep the numbers greater than {c}",
       range(0, 10)),
    _p("keep_lt", "ints", "ints", "x = [v for v in x if v < {c}]", "keep the numbers less than {c}",
       range(1, 10)),
    _p("keep_even", "ints", "ints", "x = [v for v in x if v % 2 == 0]", "keep the even numbers"),
    _p("keep_odd", "ints", "ints", "x = [v for v in x if v % 2 == 1]", "keep the odd numbers"),
    _p("drop_eq", "ints", "ints", "x = [v for v in x if v != {c}]", "remove every {c}", range(0, 10)),
    _p("sort", "ints", "ints", "x = sorted(x)", "sort the numbers in increasing order"),
    _p("sort_desc", "ints", "ints", "x = sorted(x, reverse=True)", "sort the numbers in decreasing order"),
    _p("reverse", "ints", "ints", "x = x[::-1]", "reverse the list"),
    _p("take", "ints", "ints", "x = x[:{c}]", "keep the first {c} numbers", range(1, 6)),
    _p("drop", "ints", "ints", "x = x[{c}:]", "drop the first {c} numbers", range(1, 5)),
    _p("dedupe", "ints", "ints", "x = list(dict.fromkeys(x))", "remove repeated numbers"),
    _p("running_sum", "ints", "ints", "x = [sum(x[:i + 1]) for i in range(len(x))]",
       "replace each number by the running total"),
    # ints -> int
    _p("sum", "ints", "int", "x = sum(x)", "take the sum"),
    _p("max", "ints", "int", "x = max(x, default=0)", "take the largest number or 0"),
    _p("min", "ints", "int", "x = min(x, default=0)", "take the smallest number or 0"),
    _p("len", "ints", "int", "x = len(x)", "count the numbers"),
    _p("count_eq", "ints", "int", "x = x.count({c})", "count how many numbers equal {c}", range(0, 10)),
    # int -> int
    _p("iadd", "int", "int", "x = x + {c}", "add {c}", range(1, 10)),
    _p("isub", "int", "int", "x = x - {c}", "subtract {c}", range(1, 10)),
    _p("imul", "int", "int", "x = x * {c}", "multiply by {c}", range(2, 6)),
    _p("imod", "int", "int", "x = x % {c}", "take the remainder mod {c}", range(2, 10)),
    _p("iabs", "int", "int", "x = abs(x)", "take the absolute value"),
    # int -> ints
    _p("digits", "int", "ints", "x = [int(d) for d in str(abs(x))]", "split it into its digits"),
    # str -> str
    _p("upper", "str", "str", "x = x.upper()", "convert it to upper case"),
    _p("sreverse", "str", "str", "x = x[::-1]", "reverse the string"),
    _p("sremove", "str", "str", "x = x.replace('{c}', '')", "remove every letter {c}", LETTERS),
    _p("stake", "str", "str", "x = x[:{c}]", "keep the first {c} letters", range(1, 6)),
    _p("sdrop", "str", "str", "x = x[{c}:]", "drop the first {c} letters", range(1, 5)),
    _p("ssort", "str", "str", "x = ''.join(sorted(x))", "sort the letters"),
    _p("sdedupe", "str", "str", "x = ''.join(dict.fromkeys(x))", "remove repeated letters"),
    _p("sdouble", "str", "str", "x = ''.join(ch + ch for ch in x)", "double each letter"),
    # str -> int / ints
    _p("slen", "str", "int", "x = len(x)", "count the letters"),
    _p("scount", "str", "int", "x = x.count('{c}')", "count the letters {c}", LETTERS),
    _p("alpha_pos", "str", "ints", "x = [ord(ch) - 96 for ch in x]",
       "replace each letter by its position in the alphabet"),
]}

TYPES = ("ints", "int", "str")


def prims_from(t: str) -> list[Prim]:
    return [p for p in PRIMITIVES.values() if p.in_type == t]


# Pairs of consecutive primitives whose first step is redundant or whose combination is a
# no-op; generating them would produce tasks whose description overstates their difficulty.
_ORDERINGS = {"sort", "sort_desc", "reverse"}


def redundant(prev: str, nxt: str) -> bool:
    if prev == nxt and prev not in ("add", "sub", "mul", "take", "drop", "keep_gt", "keep_lt",
                                     "iadd", "isub", "imul", "stake", "sdrop"):
        return True
    if prev in _ORDERINGS and nxt in ("sort", "sort_desc"):
        return True
    if prev in _ORDERINGS and nxt in ("sum", "max", "min", "len", "count_eq"):
        return True  # an aggregate ignores the order
    if prev in ("sreverse", "ssort") and nxt in ("ssort", "slen", "scount"):
        return True
    if prev == "upper" and nxt in ("sremove", "scount", "alpha_pos", "upper"):
        return True  # constants are lower case: the step after would do nothing
    if prev in ("keep_even", "keep_odd") and nxt in ("keep_even", "keep_odd"):
        return True
    return False
