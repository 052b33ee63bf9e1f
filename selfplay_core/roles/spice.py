"""SPICE's Challenger and SCOPE's judge: prompts and tolerant parsers.

Challenger — one document in, a task out (question + test inputs; never outputs, never code:
the reference behaviour is the document's function). Two prompt styles:

* `teacher`: the document shown as the teacher role's task + solution (`roles.teacher`, direction
  `TEACHER_DIRECTION`), the format the toy model was bootstrapped on, so it can answer at all;
* `document`: an instruction prompt for a pretrained model:

      ### Document
      <source, docstring included>
      ### Instructions
      <write a task whose answer is `def name(...)`, then inputs one per line>
      ### Task

Either way the answer is read as `### Task` <question> [`### Solution` <ignored>] `### Inputs`
<one Python literal per line; a tuple of the arguments for k > 1 parameters> [`### End`].

Judge (SCOPE) — a frozen copy of the initial model writes a rubric from the document and grades
an answer against it; the grade is read tolerantly (`parse_grade`): "4/5", "score: 3 out of 5",
"0.8", "PASS", "incorrect" ... -> a score in [0, 1], else a Rejection.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from selfplay_core.roles.common import END_OF_TEXT, Rejection, split_sections
from selfplay_core.roles.teacher import parse_input_line, teacher_prompt

TASK = "### Task"
SOLUTION = "### Solution"
INPUTS = "### Inputs"
END = "### End"
STOP = (END_OF_TEXT, END)
PROMPT_STYLES = ("teacher", "document")
# The toy checkpoint was bootstrapped on the directions "easier" and "harder" only; asked for
# "same" it ends its answer at once (empty completions, 12 of 12 on 2026-12-01). It writes a
# task either way; the document's function stays the reference, whatever the question says
# (fidelity to the document is SPICE's own diagnostic).
TEACHER_DIRECTION = "easier"


@dataclass(frozen=True)
class ChallengerTask:
    """A parsed Challenger answer; `code` is the document's source (the reference)."""

    question: str
    code: str
    inputs: list = field(default_factory=list)   # argument lists, one per test
    n_params: int = 1

    def __bool__(self) -> bool:
        return True


def challenger_prompt(doc, style: str, min_inputs: int = 4) -> str:
    if style == "teacher":
        return teacher_prompt(doc.description, doc.source, "f", TEACHER_DIRECTION)
    if style == "document":
        return (f"### Document\n{doc.source.rstrip()}\n### Instructions\nWrite a programming task "
                f"whose answer is the function `{doc.signature}` above, without showing its code: "
                "state what the function must compute, then under `### Inputs` at least "
                f"{min_inputs} test inputs, one Python literal per line (a tuple of the arguments "
                f"when it takes several), then `### End`.\n{TASK}\n")
    raise ValueError(f"challenger prompt style must be one of {PROMPT_STYLES}, got {style!r}")


def _header(line: str) -> str | None:
    return line if line in (TASK, SOLUTION, INPUTS, END) else None


def parse_challenger(text: str, doc, *, style: str, min_inputs: int = 4,
                     max_inputs: int = 10) -> ChallengerTask | Rejection:
    try:
        text = text.split(END_OF_TEXT, 1)[0]
        if not text.strip():
            return Rejection("empty")
        if style == "document" or not text.lstrip().startswith(TASK):
            # The question may come without its header: the prompt ends where it begins.
            text = f"{TASK}\n{text}"
        sec = split_sections(text, _header, END)
        if TASK not in sec:
            return Rejection("missing_task")
        if INPUTS not in sec:
            return Rejection("missing_inputs")
        question = sec[TASK].strip()
        if not question:
            return Rejection("empty_question")
        inputs, seen = [], set()
        for line in sec[INPUTS].splitlines():
            args = parse_input_line(line.strip(), doc.n_params)
            if args is not None and repr(args) not in seen and len(inputs) < max_inputs:
                seen.add(repr(args))
                inputs.append(args)
        if len(inputs) < min_inputs:
            return Rejection("too_few_inputs", f"{len(inputs)} usable")
        return ChallengerTask(question, doc.source, inputs, doc.n_params)
    except Exception as e:  # noqa: BLE001 - a model's text must never crash the stage
        return Rejection("parser_error", f"{type(e).__name__}: {e}"[:200])


JUDGE_STOP = (END_OF_TEXT, END, "\n### ")


def strip_docstring(source: str, entry_point: str) -> str:
    """The document's code without the documented function's docstring (what an explain task
    shows: the description is the rubric's, not the Reasoner's)."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == entry_point and ast.get_docstring(node):
            node.body = node.body[1:] or [ast.Pass()]
    return ast.unparse(tree) + "\n"


def explain_prompt(code: str) -> str:
    return f"### Code\n{code.rstrip()}\n### Explain what this function does\n"


def rubric_prompt(doc) -> str:
    return f"### Document\n{doc.source.rstrip()}\n### Rubric\n"


def grade_prompt(rubric: str, task: str, answer: str) -> str:
    return (f"### Rubric\n{rubric.strip()}\n### Task\n{task.strip()}\n### Answer\n{answer.strip()}\n"
            "### Grade (0-5)\n")


def clean_answer(text: str) -> str:
    """A completion cut at the end of text or the next section."""
    text = text.split(END_OF_TEXT, 1)[0]
    return text.split("\n### ", 1)[0].strip()


_FRACTION = re.compile(r"(\d+(?:\.\d+)?)\s*(?:/|out of)\s*(\d+(?:\.\d+)?)", re.I)
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w.])")
_WORDS = re.compile(r"\b(pass(?:ed|es)?|correct|yes|right|fail(?:ed|s)?|incorrect|wrong|no)\b", re.I)
_POSITIVE = ("pass", "passed", "passes", "correct", "yes", "right")


def parse_grade(text: str, scale: float = 5.0) -> float | Rejection:
    """The first grade the judge states, as a score in [0, 1]: a fraction ("4/5", "3 out of 5"),
    a verdict word (pass / correct / yes -> 1; fail / incorrect / wrong / no -> 0) or a bare
    number on the 0..scale grade (a number in (0, 1] with a decimal point reads as a share).
    Out-of-range numbers are skipped; nothing usable is Rejection("unparsed_grade")."""
    text = clean_answer(text)
    found: list[tuple[int, float]] = []
    for m in _FRACTION.finditer(text):
        num, den = float(m.group(1)), float(m.group(2))
        if den > 0 and 0 <= num <= den:
            found.append((m.start(), num / den))
            break
    for m in _WORDS.finditer(text):
        found.append((m.start(), 1.0 if m.group(1).lower() in _POSITIVE else 0.0))
        break
    spans = [m.span() for m in _FRACTION.finditer(text)]
    for m in _NUMBER.finditer(text):
        if any(a <= m.start() < b for a, b in spans):
            continue
        v = float(m.group(1))
        if "." in m.group(1) and 0 < v <= 1:
            found.append((m.start(), v))
            break
        if 0 <= v <= scale:
            found.append((m.start(), v / scale))
            break
    if not found:
        return Rejection("unparsed_grade")
    return min(found)[1]
