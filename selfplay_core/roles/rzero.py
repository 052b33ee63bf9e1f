"""R-Zero's Challenger role: a task without a reference program.

The Challenger's prompt is fixed (R-Zero has no anchors): the teacher prompt around one seed
task, direction harder (`methods.rzero`). Its output is read in the teacher's format, but only
the question, the function header and the test inputs are kept:

    ### Task
    <question>
    ### Solution            (optional: only its `def f(...)` line is read, for the arity)
    def f(x):
        ...                 (discarded: nothing the Challenger writes is run or shown)
    ### Inputs
    [1, 2, 3]
    ### End

A model trained on the teacher format (the toy model) writes a body out of habit; dropping it
is what makes the solver's majority vote the only verifier. Without a header the task is posed
as `def f(x):`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from selfplay_core.roles.common import END_OF_TEXT, Rejection
from selfplay_core.roles.teacher import (INPUTS_HEADER, SOLUTION_HEADER, TASK_HEADER, parse_input_line,
                                         teacher_sections)

DEFAULT_SIGNATURE = "def f(x):"
REASONS = ("empty", "missing_task", "missing_inputs", "empty_question", "bad_signature",
           "too_few_inputs", "parser_error")
_HEADER = re.compile(r"^\s*(def\s+f\s*\(.*\)\s*(->\s*[^:]+)?:)\s*$")


@dataclass(frozen=True)
class ChallengerTask:
    question: str
    signature: str
    inputs: list = field(default_factory=list)   # argument lists, one per test
    n_params: int = 1

    code = ""   # no reference program (what the run's sample log shows as the code)

    def __bool__(self) -> bool:
        return True


def _signature(solution: str | None) -> tuple[str, int] | Rejection:
    if solution is None:
        return DEFAULT_SIGNATURE, 1
    head = next((m.group(1) for m in map(_HEADER.match, solution.splitlines()) if m), None)
    if head is None:
        return DEFAULT_SIGNATURE, 1
    try:
        fn = ast.parse(head + "\n    pass\n").body[0]
    except SyntaxError:
        return Rejection("bad_signature", head[:200])
    a = fn.args
    if a.vararg or a.kwarg or a.kwonlyargs:
        return Rejection("bad_signature", "variadic or keyword-only parameters")
    n = len(a.posonlyargs) + len(a.args)
    if n == 0:
        return Rejection("bad_signature", "no parameters")
    return ast.unparse(fn).splitlines()[0], n


def parse_challenger(output: str, min_inputs: int = 2, max_inputs: int = 32) -> ChallengerTask | Rejection:
    try:
        text = output.split(END_OF_TEXT, 1)[0]
        if not text.strip():
            return Rejection("empty")
        sec = teacher_sections(text)
        if TASK_HEADER not in sec:
            return Rejection("missing_task")
        if INPUTS_HEADER not in sec:
            return Rejection("missing_inputs")
        question = sec[TASK_HEADER].strip()
        if not question:
            return Rejection("empty_question")
        sig = _signature(sec.get(SOLUTION_HEADER))
        if isinstance(sig, Rejection):
            return sig
        signature, n_params = sig
        inputs, seen, bad = [], set(), 0
        for line in sec[INPUTS_HEADER].splitlines():
            if not line.strip():
                continue
            args = parse_input_line(line.strip(), n_params)
            if args is None:
                bad += 1
                continue
            if repr(args) not in seen and len(inputs) < max_inputs:
                seen.add(repr(args))
                inputs.append(args)
        if len(inputs) < min_inputs:
            return Rejection("too_few_inputs", f"{len(inputs)} usable, {bad} unparseable")
        return ChallengerTask(question, signature, inputs, n_params)
    except Exception as e:  # a parser must never take the run down
        return Rejection("parser_error", f"{type(e).__name__}: {e}"[:200])
