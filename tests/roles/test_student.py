import pytest

from selfplay_core.roles.common import Rejection
from selfplay_core.roles.student import StudentAnswer, parse_student, student_completion, student_prompt

SIG = "def f(x):"


def test_prompt_layout():
    p = student_prompt("  Given a list of numbers, take the sum. ", SIG)
    assert p == "### Task\nGiven a list of numbers, take the sum.\n### Solution\ndef f(x):\n"


def test_body_completion_is_joined_to_the_signature():
    r = parse_student("    x = sum(x)\n    return x\n<|endoftext|>garbage", SIG, "f")
    assert isinstance(r, StudentAnswer)
    assert r.code == "def f(x):\n    x = sum(x)\n    return x\n"


def test_round_trip_of_the_training_target():
    body = "    x = sorted(x)\n    return x\n"
    r = parse_student(student_completion(body), SIG, "f")
    assert r and r.code == SIG + "\n" + body


@pytest.mark.parametrize("text", [
    "def f(x):\n    return x[::-1]\n",                                # restated function
    "```python\ndef f(x):\n    return x[::-1]\n```\nExplanation...",  # fenced, with prose after
    "    return x[::-1]\n### Task\nnext prompt leaked",                # runs on into a new section
])
def test_messy_but_usable_outputs(text):
    r = parse_student(text, SIG, "f")
    assert isinstance(r, StudentAnswer)
    ns = {}
    exec(r.code, ns)
    assert ns["f"]([1, 2]) == [2, 1]


@pytest.mark.parametrize("text,reason", [
    ("", "empty"),
    ("<|endoftext|>", "empty"),
    ("    x = [v for v in x\n    return x", "syntax_error"),
    ("def g(x):\n    return x\n", "no_entry_point"),
    ("def f(*x):\n    return x\n", "bad_signature"),
    ("    return x\x00", "syntax_error"),
])
def test_broken_outputs_are_typed_rejections(text, reason):
    r = parse_student(text, SIG, "f")
    assert isinstance(r, Rejection) and r.reason == reason
    assert not r


def test_parser_never_raises_on_junk():
    for junk in [None, 42, b"bytes", "\ud800", "###", "```", "def f(x):" * 1000]:
        r = parse_student(junk, SIG, "f")  # type: ignore[arg-type]
        assert isinstance(r, (Rejection, StudentAnswer))
