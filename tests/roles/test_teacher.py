import pytest

from selfplay_core.roles.common import Rejection
from selfplay_core.roles.teacher import (TeacherProposal, parse_teacher, teacher_completion,
                                         teacher_prompt)

GOOD = """### Task
Given a list of numbers, keep the even numbers, then take the sum.
### Solution
def f(x):
    x = [v for v in x if v % 2 == 0]
    x = sum(x)
    return x
### Inputs
[1, 2, 3, 4]
[]
[6, 6]
### End
<|endoftext|>"""


def test_prompt_layout_and_bad_axis():
    p = teacher_prompt("Q.", "def f(x):\n    return x\n", "io", "harder")
    assert p.endswith("### Variant: harder, axis io\n") and p.startswith("### Task\nQ.\n### Solution\n")
    with pytest.raises(ValueError):
        teacher_prompt("Q.", "def f(x): pass", "z", "harder")
    with pytest.raises(ValueError):
        teacher_prompt("Q.", "def f(x): pass", "f", "sideways")


def test_good_output_parses():
    r = parse_teacher(GOOD)
    assert isinstance(r, TeacherProposal)
    assert r.question.startswith("Given a list") and "def f(x):" in r.code
    assert r.inputs == [[[1, 2, 3, 4]], [[]], [[6, 6]]]


def test_training_target_round_trips():
    text = teacher_completion("Given a string, reverse the string.", "def f(x):\n    return x[::-1]\n",
                              ["ab", "", "abc"])
    r = parse_teacher(text)
    assert r and r.inputs == [["ab"], [""], ["abc"]]


def test_multi_parameter_inputs_are_tuples():
    text = GOOD.replace("def f(x):", "def f(x, y):").replace("[1, 2, 3, 4]\n[]\n[6, 6]",
                                                               "([1], 2)\n([], 0)\n[1]\n(1, 2, 3)")
    r = parse_teacher(text)
    assert r and r.n_params == 2 and r.inputs == [[[1], 2], [[], 0]] and r.bad_input_lines == 2


def test_messy_inputs_are_skipped_and_duplicates_dropped():
    text = GOOD.replace("[6, 6]", "[6, 6]\nnot python\n[1, 2, 3, 4]\n__import__('os')\n[9]")
    r = parse_teacher(text)
    assert r and r.inputs == [[[1, 2, 3, 4]], [[]], [[6, 6]], [[9]]] and r.bad_input_lines == 2


@pytest.mark.parametrize("mutate,reason", [
    (lambda t: "", "empty"),
    (lambda t: t.replace("### Task\n", ""), "missing_task"),
    (lambda t: t.replace("### Solution\n", ""), "missing_solution"),
    (lambda t: t.split("### Inputs")[0], "missing_inputs"),
    (lambda t: t.replace("Given a list of numbers, keep the even numbers, then take the sum.", ""),
     "empty_question"),
    (lambda t: t.replace("x = sum(x)", "x = sum(x"), "syntax_error"),
    (lambda t: t.replace("def f(x):", "def g(x):"), "no_entry_point"),
    (lambda t: t.replace("[1, 2, 3, 4]\n[]\n", ""), "too_few_inputs"),
])
def test_broken_outputs_are_typed_rejections(mutate, reason):
    r = parse_teacher(mutate(GOOD))
    assert isinstance(r, Rejection) and r.reason == reason, r


def test_truncated_generation_is_rejected_not_raised():
    for cut in range(0, len(GOOD), 7):
        r = parse_teacher(GOOD[:cut])
        assert isinstance(r, (Rejection, TeacherProposal))


def test_parser_never_raises_on_junk():
    for junk in [None, 3.5, "### Inputs\n" + "[" * 5000, "### Task\n### Solution\n### Inputs\n"]:
        r = parse_teacher(junk)  # type: ignore[arg-type]
        assert isinstance(r, Rejection)
