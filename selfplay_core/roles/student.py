"""The student role: a task statement and a signature in, a program out.

Prompt format (plain text, so the same builder serves a tiny model and a base LLM; a chat model
gets it as the user message):

    ### Task
    <question>
    ### Solution
    def f(x):

The completion is the function body (or, from models that restate it, the whole function, with
or without a markdown fence), ended by the end-of-text token or the next "### " section.
"""

from __future__ import annotations

from dataclasses import dataclass

from selfplay_core.roles.common import END_OF_TEXT, Rejection, check_function, cut_at, strip_fences

TASK_HEADER = "### Task"
SOLUTION_HEADER = "### Solution"
STOP = (END_OF_TEXT, "\n### ")
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
