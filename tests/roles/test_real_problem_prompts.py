"""The student on real benchmark problems (the real-data world): LiveCodeBench stdin and LeetCode
(`class Solution`) problems and HumanEval+/MBPP+ function completion are posed with the
benchmark's template and their completions extracted and run as `selfplay evaluate` does."""

import json

import pytest

from selfplay_core.datasets.livecodebench import parse_row
from selfplay_core.engines.base import Completion, SamplingParams
from selfplay_core.worlds.lcb import _tagged
from selfplay_core.roles.common import Rejection
from selfplay_core.roles.student import real_student_program, real_student_prompt
from selfplay_core.solve import solve


def lcb_stdin():
    row = {"question_content": "Given two integers A and B on one line, print A+B.",
           "question_id": "abc000_a", "platform": "atcoder", "difficulty": "easy",
           "contest_date": "2024-09-01T00:00:00", "starter_code": "",
           "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
                                            {"input": "-5 5\n", "output": "0\n", "testtype": "stdin"}]),
           "private_test_cases": None, "metadata": "{}"}
    return _tagged(parse_row(row, "row"), "lcb", None)


def lcb_functional():
    row = {"question_content": "Return the sum of the list nums.", "question_id": "9999",
           "platform": "leetcode", "difficulty": "easy", "contest_date": "2024-09-01T00:00:00",
           "starter_code": "class Solution:\n    def total(self, nums: List[int]) -> int:\n        ",
           "public_test_cases": json.dumps([{"input": "[1, 2, 3]", "output": "6", "testtype": "functional"},
                                            {"input": "[]", "output": "0", "testtype": "functional"}]),
           "private_test_cases": None, "metadata": json.dumps({"func_name": "total"})}
    return _tagged(parse_row(row, "row"), "lcb", None)


class Scripted:
    """A test engine: answers each prompt with the scripted texts (one per sample)."""

    def __init__(self, answer):
        self.answer = answer
        self.calls = []

    def generate(self, prompts, n, sampling):
        self.calls.append((list(prompts), n, sampling))
        return [[Completion(self.answer(p, k), token_ids=[1], logprobs=[-0.1]) for k in range(n)]
                for p in prompts]


def test_lcb_stdin_prompt_and_fenced_answer_with_prose(executor):
    p = lcb_stdin()
    prompt = real_student_prompt(p)
    assert p.prompt in prompt and "standard input" in prompt  # LCB's instruct template
    good = ("Read both numbers and add them.\n```python\na, b = map(int, input().split())\n"
            "print(a + b)\n```\nThat is all.")
    bad = "```python\nprint(input())\n```"
    res = solve(Scripted(lambda pr, k: good if k == 0 else bad), executor, [p], 2, SamplingParams())
    assert res[0].passed == [True, False]
    assert res[0].rejections[1] == "wrong_answer"


def test_lcb_functional_answer_keeps_the_class_and_drops_demo_code(executor):
    p = lcb_functional()
    assert p.kind == "call" and p.entry_point == "Solution.total"
    prompt = real_student_prompt(p)
    assert "class Solution" in prompt and "def total" in prompt  # the starter code is shown
    # `List` without an import (LCB's harness preamble provides it), demo prints appended.
    answer = ("```python\nclass Solution:\n    def total(self, nums: List[int]) -> int:\n"
              "        return sum(nums)\n\nprint(Solution().total([1]))\nraise SystemExit(3)\n```")
    program = real_student_program(p, answer)
    assert "SystemExit" not in program and "from typing import *" in program
    res = solve(Scripted(lambda pr, k: answer), executor, [p], 1, SamplingParams())
    assert res[0].passed == [True]


def test_empty_or_garbage_answers_never_raise(executor):
    p = lcb_functional()
    assert isinstance(real_student_program(p, "   "), Rejection)
    res = solve(Scripted(lambda pr, k: ["", "```python\ndef (:\n```", "\x00\x00"][k]), executor,
                [p], 3, SamplingParams())
    assert res[0].passed == [False, False, False]
    assert res[0].rejections[0] == "empty" and all(res[0].rejections)


@pytest.mark.parametrize("name, pid", [("humanevalplus", "HumanEval/0"), ("mbppplus", "Mbpp/2")])
def test_evalplus_canonical_answers_pass_as_continuation_or_whole_function(executor, name, pid):
    from selfplay_core.datasets.registry import load_evalplus

    bench = load_evalplus(name, executor=executor, ids=[pid])
    p = _tagged(bench.problems[0], name, None)
    prompt = real_student_prompt(p)
    assert prompt == p.prompt  # base models get the benchmark's own prompt (plain)
    whole = bench.references[pid]
    answers = [whole]
    if name == "humanevalplus":  # a base model continues the prompt: the body alone
        answers.append(whole[len(p.prompt):])
    res = solve(Scripted(lambda pr, k: answers[k]), executor, [p], len(answers), SamplingParams())
    assert res[0].passed == [True] * len(answers), res[0].rejections


def test_mixed_batches_use_each_kinds_prompt_and_stop_strings(executor):
    from selfplay_core.problems import Problem, TestCase

    toy = Problem(id="t", kind="call", entry_point="f", prompt="Return x plus one.",
                  tests=[TestCase(args=[1], expected=2)], metadata={"signature": "def f(x):"})
    real = lcb_stdin()

    def answer(prompt, k):
        return "    return x + 1\n" if prompt.startswith("### Task") else \
            "```python\nprint(sum(map(int, input().split())))\n```"

    eng = Scripted(answer)
    res = solve(eng, executor, [toy, real, toy], 1, SamplingParams(max_new_tokens=20))
    assert [r.passed for r in res] == [[True], [True], [True]]
    (toy_prompts, _, toy_sp), (real_prompts, _, real_sp) = eng.calls
    assert len(toy_prompts) == 2 and real_prompts == [real_student_prompt(real)]
    assert "\n### " in toy_sp.stop and "\n### " not in real_sp.stop  # an answer may open "### "
