"""Code from model completions, and the program that is finally run.

Completions come in three shapes:

* fenced blocks (chat models): we take the block that defines the entry point (the last one
  when several do, since models tend to revise), else the longest python block; an unclosed
  fence (generation cut off) runs to the end of the text;
* bare code, possibly followed by prose or a truncated last line: we keep the longest prefix
  that parses;
* a continuation of the prompt (base models on HumanEval-style prompts): the function body
  only; it parses once the prompt is put in front, which `build_program` does when the code
  does not define the entry point itself.
"""

from __future__ import annotations

import ast
import re
import warnings

from selfplay_core.problems import Problem

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n]*\n", re.M)
_PY_TAGS = {"", "python", "python3", "py", "py3", "python3.11"}

# Imports LiveCodeBench's harness puts before every program (its starter code uses `List`
# etc. without importing them). Written out here rather than `from X import *` for modules
# whose names would shadow builtins (e.g. `from sys import *` shadows nothing useful).
LCB_PREAMBLE = (
    "from typing import *\n"
    "from collections import *\n"
    "from heapq import *\n"
    "from bisect import *\n"
    "from itertools import *\n"
    "from functools import *\n"
    "from math import *\n"
    "from string import *\n"
    "import collections, heapq, bisect, itertools, functools, math, string, re, sys, random, "
    "copy, operator\n"
)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """[(language tag, code)] of the fenced blocks in `text`, in order."""
    blocks = []
    pos = 0
    while True:
        m = _FENCE.search(text, pos)
        if not m:
            break
        fence, tag = m.group(1), m.group(2).lower()
        close = re.compile(r"^[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$", re.M)
        end = close.search(text, m.end())
        body = text[m.end(): end.start() if end else len(text)]
        blocks.append((tag, body))
        if not end:
            break
        pos = end.end()
    return blocks


def _parse(code: str) -> ast.Module:
    with warnings.catch_warnings():  # invalid escapes etc. in model code: not our concern here
        warnings.simplefilter("ignore")
        return ast.parse(code)


def _parses(code: str) -> bool:
    try:
        _parse(code)
        return True
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False


def longest_parsing_prefix(code: str, prefix: str = "") -> str:
    """The longest line-prefix of `code` that parses (after `prefix`); the text itself if none
    does (so the executor reports the compile error honestly)."""
    if _parses(prefix + code):
        return code
    lines = code.splitlines(keepends=True)
    for cut in range(len(lines) - 1, 0, -1):
        cand = "".join(lines[:cut])
        if cand.strip() and _parses(prefix + cand):
            return cand
    return code


def _entry_name(entry_point: str | None) -> str | None:
    if not entry_point:
        return None
    return entry_point.split(".", 1)[0]


def defines(code: str, name: str | None) -> bool:
    """Whether `code` defines `name` at top level (def or class), by regex so that code which
    does not parse still counts."""
    if not name:
        return False
    return re.search(rf"^(?:async\s+def|def|class)\s+{re.escape(name)}\b", code, re.M) is not None


def _strip_prose_head(text: str) -> str:
    """Drop leading prose lines before the first line that looks like code."""
    lines = text.splitlines(keepends=True)
    start = re.compile(r"^(?:def |async def |class |import |from |@|if |for |while |print\(|"
                       r"[A-Za-z_]\w*\s*=|#)")
    for i, line in enumerate(lines):
        if start.match(line):
            return "".join(lines[i:])
    return text


def extract_code(completion: str, *, entry_point: str | None = None, prompt_prefix: str = "") -> str:
    """The program text in a completion (see the module docstring for the rules).

    prompt_prefix: the text the completion continues (for base-model prompts), used only to
    judge where bare code stops parsing; it is not included in the result.
    """
    name = _entry_name(entry_point)
    blocks = [(t, b) for t, b in fenced_blocks(completion) if t in _PY_TAGS]
    if blocks:
        defining = [b for _, b in blocks if defines(b, name)]
        if defining:
            code = defining[-1]
        else:
            code = max((b for _, b in blocks), key=len)
        return longest_parsing_prefix(code)
    # Bare code: a continuation of the prompt, or a whole program with prose around it.
    if prompt_prefix and not defines(completion, name):
        cont = longest_parsing_prefix(completion, prompt_prefix)
        if _parses(prompt_prefix + cont):
            return cont
    code = _strip_prose_head(completion)
    return longest_parsing_prefix(code)


def _import_lines(prompt: str) -> str:
    return "".join(line + "\n" for line in prompt.splitlines()
                   if re.match(r"^(?:import|from)\s+\w", line))


def build_program(problem: Problem, code: str, *, benchmark: str | None = None) -> str:
    """The program the executor runs for a sample of `problem`.

    * LCB: the harness's import preamble + the code.
    * HumanEval-style prompts (the prompt defines the entry point, with a docstring as its
      body): if the code defines the entry point itself, the prompt goes first and the code's
      definition replaces the stub, so helpers and imports the prompt provides (`poly`,
      `is_palindrome`, `List`) stay available; otherwise the code continues the prompt.
    * everything else: the code as it is.
    """
    if benchmark == "lcb":
        return LCB_PREAMBLE + "\n" + code
    prompt = problem.prompt or ""
    name = _entry_name(problem.entry_point)
    if prompt and name and defines(prompt, name):
        if defines(code, name):
            head = prompt if _parses(prompt) else _import_lines(prompt)
            return head.rstrip("\n") + "\n\n\n" + code
        return prompt + code
    return code


_KEEP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
         ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Try, ast.With, ast.Global)


def _is_main_guard(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)


def strip_top_level_statements(code: str) -> str:
    """For call problems: keep definitions, imports and assignments; drop top-level demo code
    (prints, asserts, loops, `if __name__ == "__main__":`) that models append and that would
    run, and possibly crash, when the program is loaded. The kept lines are copied verbatim.
    Code that does not parse is returned unchanged (the executor reports it)."""
    try:
        mod = _parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return code
    lines = code.splitlines(keepends=True)
    keep = []
    for node in mod.body:
        if isinstance(node, _KEEP) or (isinstance(node, ast.If) and not _is_main_guard(node)):
            start = node.lineno - 1
            if getattr(node, "decorator_list", None):
                start = min(d.lineno for d in node.decorator_list) - 1
            keep.append("".join(lines[start:node.end_lineno]))
    return "\n".join(k.rstrip("\n") + "\n" for k in keep) if keep else code


def program_from_completion(completion: str, problem: Problem, *, prompt: str = "",
                            completes_prompt: bool = False, benchmark: str | None = None) -> str:
    """The program the executor runs for one completion: extract the code (`prompt` is the text a
    base-model completion continues, used when `completes_prompt`), put it in the benchmark's
    harness (`build_program`), and for call problems drop top-level demo code that models append
    (prints, asserts, a __main__ block) and that would run, and possibly crash, at load time;
    stdin programs keep their top level."""
    code = extract_code(completion, entry_point=problem.entry_point,
                        prompt_prefix=prompt if completes_prompt else "")
    program = build_program(problem, code, benchmark=benchmark)
    return strip_top_level_statements(program) if problem.kind == "call" else program
