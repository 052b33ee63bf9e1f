"""The teacher role: a task in, a variant of it out (GASP's lemma and lift steps).

Prompt (the task shown is the goalpost for a lemma, the lemma for a lift; the prompt never
contains anything the teacher should not see):

    ### Task
    <question>
    ### Solution
    <reference program>
    ### Variant: <easier|harder|same>, axis <f|io>

Output — the proposal: a question, a reference program, and test inputs, one Python literal per
line (for a one-parameter function the line is the argument; for k > 1 parameters, a k-tuple).
The teacher never writes outputs: the executor runs the reference to get them.

    ### Task
    <question>
    ### Solution
    def f(x):
        ...
    ### Inputs
    [1, 2, 3]
    []
    ### End
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from selfplay_core.roles.common import END_OF_TEXT, Rejection, check_function, split_sections, strip_fences

AXES = ("f", "io")
DIRECTIONS = ("easier", "harder", "same")
TASK_HEADER = "### Task"
SOLUTION_HEADER = "### Solution"
INPUTS_HEADER = "### Inputs"
END_HEADER = "### End"
VARIANT_HEADER = "### Variant:"
STOP = (END_OF_TEXT, END_HEADER)
REASONS = ("empty", "missing_task", "missing_solution", "missing_inputs", "empty_question",
           "syntax_error", "no_entry_point", "bad_signature", "too_few_inputs", "parser_error")
MAX_INPUT_CHARS = 2000  # an input line longer than this is not a test, it is a flood


@dataclass(frozen=True)
class TeacherProposal:
    question: str
    code: str
    inputs: list = field(default_factory=list)   # argument lists, one per test
    n_params: int = 1
    bad_input_lines: int = 0

    def __bool__(self) -> bool:
        return True


def teacher_prompt(question: str, code: str, axis: str, direction: str) -> str:
    if axis not in AXES:
        raise ValueError(f"axis must be one of {AXES}, got {axis!r}")
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    return (f"{TASK_HEADER}\n{question.strip()}\n{SOLUTION_HEADER}\n{code.rstrip()}\n"
            f"{VARIANT_HEADER} {direction}, axis {axis}\n")


def teacher_completion(question: str, code: str, inputs: list, solution_first: bool = False) -> str:
    """The training target: a proposal in exactly the format `parse_teacher` accepts (which
    reads the sections in either order). `inputs` are single arguments (one-parameter
    functions). `solution_first`: the program, then the question that describes it."""
    lines = "".join(f"{v!r}\n" for v in inputs)
    task = f"{TASK_HEADER}\n{question.strip()}\n"
    solution = f"{SOLUTION_HEADER}\n{code.rstrip()}\n"
    body = solution + task if solution_first else task + solution
    return f"{body}{INPUTS_HEADER}\n{lines}{END_HEADER}\n{END_OF_TEXT}"


def _header_key(head: str) -> str | None:
    if head in (TASK_HEADER, SOLUTION_HEADER, INPUTS_HEADER, END_HEADER) or head.startswith(VARIANT_HEADER):
        return head
    return None


def teacher_sections(text: str) -> dict[str, str]:
    """Split on known headers; the first occurrence of each wins."""
    return split_sections(text, _header_key, END_HEADER)


def parse_teacher(output: str, entry_point: str = "f", min_inputs: int = 2,
                  max_inputs: int = 32) -> TeacherProposal | Rejection:
    try:
        text = output.split(END_OF_TEXT, 1)[0]
        if not text.strip():
            return Rejection("empty")
        sec = teacher_sections(text)
        for header, reason in ((TASK_HEADER, "missing_task"), (SOLUTION_HEADER, "missing_solution"),
                               (INPUTS_HEADER, "missing_inputs")):
            if header not in sec:
                return Rejection(reason)
        question = sec[TASK_HEADER].strip()
        if not question:
            return Rejection("empty_question")
        code = strip_fences(sec[SOLUTION_HEADER]).rstrip() + "\n"
        checked = check_function(code, entry_point)
        if isinstance(checked, Rejection):
            return checked
        n_params, code = checked
        inputs, seen, bad = [], set(), 0
        for line in sec[INPUTS_HEADER].splitlines():
            line = line.strip()
            if not line:
                continue
            args = parse_input_line(line, n_params)
            if args is None:
                bad += 1
                continue
            key = repr(args)
            if key not in seen and len(inputs) < max_inputs:
                seen.add(key)
                inputs.append(args)
        if len(inputs) < min_inputs:
            return Rejection("too_few_inputs", f"{len(inputs)} usable, {bad} unparseable")
        return TeacherProposal(question, code, inputs, n_params, bad)
    except Exception as e:
        return Rejection("parser_error", f"{type(e).__name__}: {e}"[:200])


def parse_input_line(line: str, n_params: int) -> list | None:
    """One line of the Inputs section as an argument list (None: not a literal of that arity)."""
    if len(line) > MAX_INPUT_CHARS:
        return None
    try:
        value = ast.literal_eval(line)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if n_params == 1:
        return [value]
    if isinstance(value, tuple) and len(value) == n_params:
        return list(value)
    return None
