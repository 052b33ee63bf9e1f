"""Prompt templates: how a benchmark problem becomes the text given to the engine.

* `plain` - the benchmark's own prompt, for base models: HumanEval(+)'s signature and docstring
  (the model continues the function), MBPP(+)'s docstring with an example assert, LCB's
  question followed by its starter code.
* `instruct` - an instruction asking for one fenced Python block, for chat/instruct models
  (apply the model's chat template in the engine, not here). For LCB it states the I/O contract
  (stdin/stdout, or the given `class Solution` stub), as LiveCodeBench's own prompts do.
* a file - Python `str.format` text with the fields {prompt}, {question}, {starter_code},
  {entry_point}, {function_name} and {id}.

Every template has a name and a sha256 of its text, both recorded in the report.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from selfplay_core.problems import InputError, Problem

_INSTRUCT_FUNCTION = (
    "Complete the following Python function so that it passes its tests. Reply with the whole "
    "function (and any imports or helpers it needs) in a single ```python code block.\n\n"
    "```python\n{prompt}```\n"
)
_INSTRUCT_TASK = (
    "Write a Python function for the task below; the example shows its name and how it is "
    "called. Reply with the code in a single ```python code block.\n\n{prompt}\n"
)
_INSTRUCT_LCB_STDIN = (
    "Solve the following programming problem in Python.\n\n### Question\n{question}\n\n"
    "### Format\nYour program reads the input from standard input and writes the answer to "
    "standard output. Reply with the complete program in a single ```python code block.\n"
)
_INSTRUCT_LCB_CALL = (
    "Solve the following programming problem in Python.\n\n### Question\n{question}\n\n"
    "### Format\nComplete the starter code below (keep the class and method names). Reply with "
    "the complete code in a single ```python code block.\n\n```python\n{starter_code}\n```\n"
)
_PLAIN_LCB = "{question}\n\n{starter_code}"

BUILTIN = ("plain", "instruct")


def _fields(p: Problem) -> dict:
    entry = p.entry_point or ""
    return {
        "prompt": p.prompt or "",
        "question": p.prompt or "",
        "starter_code": (p.metadata or {}).get("starter_code") or "",
        "entry_point": entry,
        "function_name": entry.split(".")[-1],
        "id": p.id,
    }


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    text: str | None = None   # a custom template's format text

    @property
    def completes_prompt(self) -> bool:
        """True when completions continue the prompt text (base-model style)."""
        return self.name == "plain"

    @property
    def sha256(self) -> str:
        body = self.text if self.text is not None else "\x00".join(
            (self.name, _INSTRUCT_FUNCTION, _INSTRUCT_TASK, _INSTRUCT_LCB_STDIN, _INSTRUCT_LCB_CALL,
             _PLAIN_LCB))
        return hashlib.sha256(body.encode()).hexdigest()

    def describe(self) -> dict:
        return {"name": self.name, "sha256": self.sha256}

    def render(self, p: Problem, benchmark: str) -> str:
        f = _fields(p)
        if self.text is not None:
            try:
                return self.text.format(**f)
            except (KeyError, IndexError, ValueError) as e:
                raise InputError(f"prompt template {self.name}: bad field {e} (fields: "
                                 f"{', '.join(sorted(f))}; write literal braces as {{{{ }}}})") from None
        if benchmark == "lcb":
            if self.name == "plain":
                return _PLAIN_LCB.format(**f).rstrip() + "\n"
            return (_INSTRUCT_LCB_CALL if p.kind == "call" else _INSTRUCT_LCB_STDIN).format(**f)
        if self.name == "plain":
            return f["prompt"]
        if benchmark in ("mbpp", "mbppplus"):
            return _INSTRUCT_TASK.format(**f)
        return _INSTRUCT_FUNCTION.format(**f)


def get_template(spec: str | None, benchmark: str) -> PromptTemplate:
    """A builtin by name, a template file by path; default: plain, or instruct for LCB."""
    if not spec:
        spec = "instruct" if benchmark == "lcb" else "plain"
    if spec in BUILTIN:
        return PromptTemplate(spec)
    path = Path(spec)
    if not path.is_file():
        raise InputError(f"prompt template {spec!r}: not a builtin ({', '.join(BUILTIN)}) "
                         "and no such file")
    return PromptTemplate(f"file:{path.name}", path.read_text(encoding="utf-8"))
