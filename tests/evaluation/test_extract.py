"""Code extraction from completions and program assembly."""

from selfplay_core.evaluation.extract import (LCB_PREAMBLE, build_program, extract_code,
                                              fenced_blocks, strip_top_level_statements)
from selfplay_core.problems import Problem
from selfplay_core.problems import TestCase as TC

HE_PROMPT = 'from typing import List\n\n\ndef helper(x):\n    return x\n\n\ndef add(a: int, b: int) -> int:\n    """Add."""\n'


def test_fenced_block_is_taken_and_prose_dropped():
    text = "Sure! Here it is:\n```python\ndef add(a, b):\n    return a + b\n```\nThis adds numbers."
    assert extract_code(text, entry_point="add") == "def add(a, b):\n    return a + b\n"


def test_block_defining_the_entry_point_wins_over_longer_blocks():
    text = ("```python\n# a long unrelated helper\nimport math\nx = 1\ny = 2\nz = 3\nprint(x)\n```\n"
            "Then:\n```py\ndef add(a, b):\n    return a + b\n```\n"
            "Usage:\n```python\nprint(add(1, 2))\n```")
    assert extract_code(text, entry_point="add").startswith("def add")


def test_last_defining_block_is_the_revision():
    text = ("```python\ndef add(a, b):\n    return a - b\n```\nOops, fixed:\n"
            "```python\ndef add(a, b):\n    return a + b\n```")
    assert "a + b" in extract_code(text, entry_point="add")


def test_non_python_blocks_are_ignored_and_tildes_work():
    text = "```text\nsample output\n```\n~~~python\nprint(int(input()) * 2)\n~~~\n"
    assert extract_code(text) == "print(int(input()) * 2)\n"
    assert [t for t, _ in fenced_blocks(text)] == ["text", "python"]


def test_unclosed_fence_from_a_truncated_generation():
    text = "```python\ndef add(a, b):\n    return a + b\n\ndef other(x):\n    return (x +"
    code = extract_code(text, entry_point="add")
    assert code.startswith("def add(a, b):\n    return a + b\n")
    assert "other" not in code  # the cut-off last definition does not parse and is dropped


def test_class_solution_is_found():
    text = ("Approach: greedy.\n```python\nclass Solution:\n    def f(self, nums: List[int]) -> int:\n"
            "        return max(nums)\n```")
    assert extract_code(text, entry_point="Solution.f").startswith("class Solution:")


def test_bare_code_with_leading_and_trailing_prose():
    text = "Here is my solution\ndef add(a, b):\n    return a + b\n\nThis works because addition."
    assert extract_code(text, entry_point="add") == "def add(a, b):\n    return a + b\n\n"


def test_continuation_of_a_humaneval_prompt():
    body = "    return a + b\n\n\nThe function above adds two numbers."
    code = extract_code(body, entry_point="add", prompt_prefix=HE_PROMPT)
    assert code.startswith("    return a + b")
    assert "function above" not in code
    p = Problem("HE/x", "call", [TC(args=[1, 2], expected=3)], entry_point="add", prompt=HE_PROMPT)
    assert build_program(p, code) == HE_PROMPT + code


def test_full_function_gets_the_prompt_helpers_and_imports():
    p = Problem("HE/x", "call", [TC(args=[1, 2], expected=3)], entry_point="add", prompt=HE_PROMPT)
    code = "def add(a: int, b: int) -> int:\n    return helper(a) + b\n"
    prog = build_program(p, code)
    assert prog.startswith(HE_PROMPT.rstrip("\n")) and prog.endswith(code)
    ns = {}
    exec(prog, ns)  # trusted test code: the prompt's stub is replaced by the solution
    assert ns["add"](1, 2) == 3


def test_lcb_programs_get_the_import_preamble():
    p = Problem("1", "call", [TC(args=[[1]], expected=1)], entry_point="Solution.f")
    prog = build_program(p, "class Solution:\n    def f(self, a: List[int]) -> int:\n        return 1\n",
                         benchmark="lcb")
    assert prog.startswith(LCB_PREAMBLE)
    exec(prog, {})  # List resolves


def test_strip_top_level_statements_keeps_definitions_only():
    code = ("import math\nMOD = 10**9 + 7\n\n@staticmethod\ndef g(x):\n    return x\n\n"
            "def f(x):\n    return g(x) % MOD\n\nprint(f(3))\nassert f(1) == 2\n"
            "for i in range(3):\n    print(i)\nif __name__ == '__main__':\n    f(int(input()))\n")
    out = strip_top_level_statements(code)
    assert "import math" in out and "MOD = 10**9 + 7" in out and "@staticmethod" in out
    assert "def f(x)" in out
    assert "print" not in out and "assert" not in out and "__main__" not in out and "for i" not in out
    broken = "def f(:\n"
    assert strip_top_level_statements(broken) == broken


def test_garbage_is_returned_for_the_executor_to_reject():
    assert extract_code("I cannot solve this.") == "I cannot solve this."
