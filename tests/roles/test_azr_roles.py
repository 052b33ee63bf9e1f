"""AZR prompts and parsers: messy model output in, a typed value or a typed rejection out."""

import pytest

from selfplay_core.roles.azr import (AZRProposal, LiteralAnswer, Triplet, answer_completion,
                                     is_literal_value, parse_answer, parse_literal, parse_proposal,
                                     proposer_completion, proposer_prompt, solver_prompt)
from selfplay_core.roles.common import Rejection

PROG = "def f(x):\n    x = [v for v in x if v % 2 == 0]\n    return sum(x)\n"

# (completion, what the answer is for, expected value or rejection reason)
ANSWERS = [
    ("6", "output", 6),
    ("6\n<|endoftext|>junk", "output", 6),
    ("[3, 2, 1]\n### Program\ndef g(): pass", "output", [3, 2, 1]),      # runs on into a section
    ("### Output\n[1, 2]\n", "output", [1, 2]),                         # restated header
    ("```python\n(1, 'a')\n```\nThat is the tuple.", "output", (1, "a")),
    ("output = {'a': [1, (2, 3)], 2: {1, 2}}", "output", {"a": [1, (2, 3)], 2: {1, 2}}),
    ("The output is [1, 2].", "output", [1, 2]),
    ("Answer: -5", "output", -5),
    ("[1, 2] because the evens are kept", "output", [1, 2]),
    ("Let me think.\nf keeps the evens.\n[2, 4]\n", "output", [2, 4]),
    ("assert f([1, 2]) == 2", "output", 2),
    ("f([1, 2]) == 2", "input", [1, 2]),
    ("f(3, 'ab')", "input", (3, "ab")),
    ("x = [4, 4]", "input", [4, 4]),
    ("set()", "output", set()),
    ("True", "output", True),
    ("None", "output", None),
    ("b'ab'", "output", b"ab"),
    ("1+2j", "output", 1 + 2j),
    ("", "output", "no_answer"),
    ("   \n\n", "output", "no_answer"),
    ("<|endoftext|>[1]", "output", "no_answer"),
    ("the output is a list", "output", "not_a_literal"),
    ("(1,", "output", "not_a_literal"),
    ("nan", "output", "not_a_literal"),
    ("float('inf')", "output", "not_a_literal"),
    ("{[1]: 2}", "output", "not_a_literal"),                              # unhashable key
    ("...", "output", "not_a_literal"),
    # Code is never evaluated, and never cut down to a harmless-looking prefix.
    ("__import__('os')", "output", "not_a_literal"),
    ("__import__('os').system('rm -rf /')", "output", "not_a_literal"),
    ("1 if __import__('os').system('ls') else 2", "output", "not_a_literal"),
    ("[1] + [open('/etc/passwd').read()]", "output", "not_a_literal"),
    ("[1, 2].__class__", "output", "not_a_literal"),
    ("[1]*10**9", "output", "not_a_literal"),
    ("(lambda: 1)()", "output", "not_a_literal"),
    ("[x for x in range(10**9)]", "output", "not_a_literal"),
    ("f(1) == __import__('os')", "output", "not_a_literal"),
    ("f(g())", "input", "not_a_literal"),
    ("'" + "a" * 3000 + "'", "output", "too_large"),
    ("[" + ", ".join(["1"] * 2500) + "]", "output", "too_large"),
    ("[" * 500 + "]" * 500, "output", "too_large"),
    ("[" * 30 + "]" * 30, "output", "too_large"),
]


@pytest.mark.parametrize("text,want,expected", ANSWERS)
def test_answers(text, want, expected):
    r = parse_answer(text, want)
    if isinstance(expected, str) and expected in ("no_answer", "not_a_literal", "too_large"):
        assert isinstance(r, Rejection) and r.reason == expected, r
    else:
        assert isinstance(r, LiteralAnswer), r
        assert r.value == expected and type(r.value) is type(expected)


def test_answer_parser_never_raises_on_junk():
    import random
    rng = random.Random(0)
    alphabet = "[](){}'\",:=0123456789 abcfx\n#`.*-+<>|endoftext_j"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        r = parse_answer(text, rng.choice(("output", "input")))
        assert isinstance(r, (LiteralAnswer, Rejection))


def test_parse_literal_limits_and_readback():
    assert parse_literal("[1, 2]", max_chars=4).reason == "too_large"
    assert parse_literal("[[1]]", max_depth=1).reason == "too_large"
    assert parse_literal("[1, 2, 3]", max_nodes=3).reason == "too_large"
    assert is_literal_value((1, [2, "a"], {3: None})) is None
    assert is_literal_value(float("nan")).reason == "not_a_literal"
    assert is_literal_value(object()).reason == "not_a_literal"
    assert is_literal_value(list(range(1000)), max_chars=100).reason == "too_large"


def test_training_targets_round_trip():
    assert parse_answer(answer_completion((1, [2]))).value == (1, [2])
    r = parse_proposal(proposer_completion(PROG, [[1, 2, 3, 4]]))
    assert r == AZRProposal(PROG, [[1, 2, 3, 4]], 1, "")
    two = "def f(a, b):\n    return a * b\n"
    r = parse_proposal(proposer_completion(two, [3, "ab"]))
    assert r and r.args == [3, "ab"] and r.n_params == 2


def test_prompts_show_references_and_the_question():
    refs = [Triplet.identity([1, 2, 3]), Triplet(PROG, [[1, 2, 3, 4]], 6)]
    p = proposer_prompt("abduction", refs)
    assert p.count("### Reference") == 2 and "[1, 2, 3, 4]\n### Output\n6\n" in p
    assert "### Propose: abduction\n" in p
    d = solver_prompt("deduction", PROG, [[1, 2]], 2)
    assert d.endswith("### Input\n[1, 2]\n### Output\n") and "\n2\n" not in d  # no answer leaked
    a = solver_prompt("abduction", PROG, [[1, 2]], 2)
    assert a.endswith("### Output\n2\n### Input\n") and "[1, 2]" not in a      # no input leaked
    with pytest.raises(ValueError):
        proposer_prompt("induction", refs)


PROPOSALS = [
    # (completion, expected args or rejection reason)
    ("### Program\n" + PROG + "### Input\n[1, 2, 3, 4]\n### End\n", [[1, 2, 3, 4]]),
    ("### Solution\n" + PROG + "### Inputs\n[5, 6]\n[7]\n### End", [[5, 6]]),     # teacher's headers
    ("Here is my task.\n```python\n" + PROG + "```\n### Input\nx = [2]\n", [[2]]),  # fenced, no header
    ("### Program\n```python\n" + PROG + "```\n### Input\nf([8])\n", [[8]]),
    ("### Program\n" + PROG + "### Input\nnot a value\n[9]\n", [[9]]),           # first literal line
    ("### Program\ndef f(a, b):\n    return a + b\n### Input\n(1, 2)\n", [1, 2]),
    ("", "empty"),
    ("### Input\n[1]\n", "missing_program"),
    ("### Program\ndef f(x) return x\n### Input\n[1]\n", "syntax_error"),
    ("### Program\ndef g(x):\n    return x\n### Input\n[1]\n", "no_entry_point"),
    ("### Program\ndef f():\n    return 1\n### Input\n[1]\n", "bad_signature"),
    ("### Program\n" + PROG + "### End\n", "missing_input"),
    ("### Program\n" + PROG + "### Input\n__import__('os')\n", "input_not_a_literal"),
    ("### Program\n" + PROG + "### Input\n" + "[" + "1, " * 1500 + "1]\n", "input_too_large"),
    ("### Program\ndef f(a, b):\n    return a\n### Input\n[1, 2]\n", "input_arity"),
]


@pytest.mark.parametrize("text,expected", PROPOSALS)
def test_proposals(text, expected):
    r = parse_proposal(text)
    if isinstance(expected, str):
        assert isinstance(r, Rejection) and r.reason == expected, r
    else:
        assert isinstance(r, AZRProposal), r
        assert r.args == expected and "def f(" in r.code
