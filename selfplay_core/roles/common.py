"""Pieces shared by the role parsers."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

# Markers that end a completion: the end-of-text token, the start of a new prompt section, the
# end of a markdown code block. Engines may also be asked to stop on them.
END_OF_TEXT = "<|endoftext|>"
SECTION = "### "


@dataclass(frozen=True)
class Rejection:
    """Why a model output could not be used. `reason` is one of a fixed set per role (see
    the role module), so rejections can be counted by reason; `detail` is free text."""

    reason: str
    detail: str = ""

    def __bool__(self) -> bool:  # `if parsed:` reads as "if it parsed"
        return False


_FENCE = re.compile(r"```[a-zA-Z0-9_+-]*\n(.*?)(?:```|\Z)", re.S)


def strip_fences(text: str) -> str:
    """The first fenced code block's content when the text has one, else the text."""
    m = _FENCE.search(text)
    return m.group(1) if m else text


def check_function(code: str, entry_point: str) -> tuple[int, str] | Rejection:
    """(number of parameters, code) when `code` parses and defines `entry_point` at top level."""
    if not code.strip():
        return Rejection("empty")
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError) as e:  # ValueError: null bytes
        return Rejection("syntax_error", str(e)[:200])
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point:
            a = node.args
            if a.vararg or a.kwarg or a.kwonlyargs:
                return Rejection("bad_signature", "variadic or keyword-only parameters")
            return len(a.posonlyargs) + len(a.args), code
    return Rejection("no_entry_point", f"no top-level def {entry_point}(...)")


def signature_of(code: str, entry_point: str = "f") -> str | None:
    """The header of the top-level function `entry_point` in `code` as one normalised line
    (`def f(xs, k):`, annotations kept, decorators and body dropped); None when `code` does not
    parse or does not define it. A task's student prompt shows its reference's header, so the
    student writes a body for the parameters the reference takes."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point:
            head = type(node)(name=node.name, args=node.args, body=[ast.Pass()], decorator_list=[],
                              returns=node.returns, type_params=getattr(node, "type_params", []))
            return ast.unparse(ast.fix_missing_locations(head)).splitlines()[0]
    return None


def cut_at(text: str, markers: tuple[str, ...]) -> str:
    """Text up to the earliest of the markers."""
    end = len(text)
    for m in markers:
        k = text.find(m)
        if k != -1:
            end = min(end, k)
    return text[:end]


def split_sections(text: str, key_of, end: str) -> dict[str, str]:
    """Section bodies by key. `key_of(stripped_line)` names the section a header line opens (None
    for a body line); the section keyed `end` stops the split. The first occurrence of a key wins,
    so a model that repeats a header cannot overwrite what it wrote first."""
    out: dict[str, str] = {}
    cur, buf = None, []
    for line in text.splitlines():
        key = key_of(line.strip())
        if key is not None:
            if cur is not None and cur not in out:
                out[cur] = "\n".join(buf)
            if key == end:
                cur = None
                break
            cur, buf = key, []
        elif cur is not None:
            buf.append(line)
    if cur is not None and cur not in out:
        out[cur] = "\n".join(buf)
    return out
