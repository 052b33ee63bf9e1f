"""The student role: a task statement and a signature in, a program out.

Prompt format (plain text, so the same builder serves a tiny model and a base LLM; a chat model
gets it as the user message):

    ### Task
    <question>
    ### Solution
    def f(x):

The completion is the function body (or, from models that restate it, the whole function, with
or without a markdown fence), ended by the end-of-text token or the next "### " section.

Real benchmark problems (a `Problem` whose `metadata["benchmark"]` names its set: LiveCodeBench
stdin or LeetCode `class Solution` problems, HumanEval+ and MBPP+ function completion) are posed
and read exactly as `selfplay evaluate` does: the prompt is the benchmark's template
(`evaluation.prompts`; `metadata["prompt_template"]` picks plain / instruct / a file, default
instruct for LCB and plain for HumanEval+/MBPP+), and the program is extracted and wrapped in the
benchmark's harness by `evaluation.extract.program_from_completion`. Their completions end only at
the end-of-text token: a model answering an instruct prompt often opens its own "### " section.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from selfplay_core.evaluation.extract import program_from_completion
from selfplay_core.evaluation.prompts import get_template
from selfplay_core.roles.common import END_OF_TEXT, Rejection, check_function, cut_at, strip_fences

TASK_HEADER = "### Task"
SOLUTION_HEADER = "### Solution"
STOP = (END_OF_TEXT, "\n### ")
REAL_STOP = (END_OF_TEXT,)
REASONS = ("empty", "syntax_error", "no_entry_point", "bad_signature", "parser_error")


@dataclass(frozen=True)
class StudentAnswer:
    code: str

    def __bool__(self) -> bool:
        return True


def student_prompt(question: str, signature: str) -> str:
    return f"{TASK_HEADER}\n{question.strip()}\n{SOLUTION_HEADER}\n{signature.rstrip()}\n"


def student_completion(body: str) -> str:
    """The training target for a prompt: the body lines, then end-of-text."""
    return body.rstrip("\n") + "\n" + END_OF_TEXT


def parse_student(completion: str, signature: str, entry_point: str) -> StudentAnswer | Rejection:
    try:
        text = cut_at(completion, STOP)
        text = strip_fences(text) if "```" in text else text
        if not text.strip():
            return Rejection("empty")
        # A top-level def means the model wrote the whole function, not just the body.
        restated = any(line.startswith(("def ", "async def ")) for line in text.splitlines())
        code = text if restated else signature.rstrip() + "\n" + text
        code = code.rstrip() + "\n"
        checked = check_function(code, entry_point)
        if isinstance(checked, Rejection):
            return checked
        return StudentAnswer(code)
    except Exception as e:  # a parser must never take the run down
        return Rejection("parser_error", f"{type(e).__name__}: {e}"[:200])


# ---- real benchmark problems -------------------------------------------------------------------

def is_real_problem(problem) -> bool:
    """A benchmark problem (LCB, HumanEval+, MBPP+) rather than a `def f(x)` task."""
    return bool((problem.metadata or {}).get("benchmark"))


@functools.lru_cache(maxsize=32)
def _template(spec: str | None, benchmark: str):
    return get_template(spec, benchmark)


def real_student_prompt(problem) -> str:
    meta = problem.metadata
    return _template(meta.get("prompt_template"), meta["benchmark"]).render(problem, meta["benchmark"])


def real_student_program(problem, completion: str) -> str | Rejection:
    """The program to verify for one completion of a benchmark problem (never raises)."""
    try:
        meta = problem.metadata
        template = _template(meta.get("prompt_template"), meta["benchmark"])
        text = cut_at(completion, REAL_STOP)
        if not text.strip():
            return Rejection("empty")
        prompt = template.render(problem, meta["benchmark"]) if template.completes_prompt else ""
        return program_from_completion(text, problem, prompt=prompt,
                                       completes_prompt=template.completes_prompt,
                                       benchmark=meta["benchmark"])
    except Exception as e:  # a parser must never take the run down
        return Rejection("parser_error", f"{type(e).__name__}: {e}"[:200])
