"""Edits of a reference program that the executor makes, not the model: the lemma round of method
`gasp-edit` (methods/edited_lemmas.py) takes a goalpost's reference, deletes one statement,
and asks the teacher only to describe the edited program (question and inputs).

Why: on the toy world's deep pool the teacher writes a true one-step lemma for at most 5 of 37
frontier goalposts in 16 samples (lab/README.md, "Why, measured"); editing
the program is exactly the step one set of weights gets wrong in both roles. A deleted statement
is a syntactic edit: no oracle, no model, and the band on the student's pass rate is what keeps
a meaningless one away from the student.

Pure functions of source text; no sandbox, no Prefect.
"""

from __future__ import annotations

import ast

from selfplay_core.roles.teacher import SOLUTION_HEADER, TASK_HEADER

# The axis GASP's prompt names for an executor-edited lemma: a deleted statement changes the
# algorithm, not the input/output format. One constant for the loop's prompt and the toy
# corpus that teaches the teacher to describe such a program.
EDIT_AXIS = "f"


def statement_deletions(code: str, entry_point: str = "f") -> list[str]:
    """Every program made by deleting one top-level statement of `entry_point`'s body, in body
    order, duplicates dropped: the source text with that statement's lines removed (formatting
    and comments elsewhere kept). Never deleted: the final `return` (the function would return
    None), the docstring, the only statement of a body, and a statement that shares a line with
    another (`a = 1; b = 2`: no clean line edit). [] when `code` does not parse or has no such
    function."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return []
    fn = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and n.name == entry_point), None)
    if fn is None:
        return []
    body = list(fn.body)
    if body and _is_docstring(body[0]):
        body = body[1:]
    if len(body) < 2:
        return []
    lines = code.splitlines(keepends=True)
    out: list[str] = []
    for i, node in enumerate(body):
        if i == len(body) - 1 and isinstance(node, ast.Return):
            continue
        first, last = node.lineno, node.end_lineno or node.lineno
        if _shares_line(node, fn.body):
            continue
        first = min([first] + [d.lineno for d in getattr(node, "decorator_list", [])])
        edited = "".join(lines[:first - 1] + lines[last:])
        if edited not in out and _parses(edited):
            out.append(edited)
    return out


def forced_program(code: str) -> str:
    """What the teacher is made to write first: the program section, then the question's header
    (the teacher's solution-first order)."""
    return f"{SOLUTION_HEADER}\n{code.rstrip()}\n{TASK_HEADER}\n"


def budget_after_forced(tokenizer, prefixes, max_new_tokens: int) -> int:
    """The teacher's output budget less the longest forced program's tokens (at least 1): the
    forced program is part of the proposal, so prompt + proposal stay within what a free lemma
    gets (and within the model's context). Without a tokenizer the budget is left as it is."""
    if tokenizer is None:
        return max_new_tokens
    forced = max((len(tokenizer(x, add_special_tokens=False)["input_ids"]) for x in prefixes), default=0)
    return max(1, max_new_tokens - forced)


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _shares_line(node: ast.stmt, siblings: list[ast.stmt]) -> bool:
    span = range(node.lineno, (node.end_lineno or node.lineno) + 1)
    return any(s is not node and (s.lineno in span or (s.end_lineno or s.lineno) in span) for s in siblings)


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True
