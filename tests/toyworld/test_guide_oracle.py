"""The toy Guide oracle against judgments worked out by hand."""

from selfplay_core.roles.guide import GuideScores
from selfplay_core.toyworld.guide_oracle import UNPARSED, judge, parse_program, redundant_steps
from selfplay_core.toyworld.tasks import Task

TARGET = Task("ints", (("keep_even", None), ("square", None), ("dedupe", None)), "ints_csv")


def test_a_true_lemma_is_relevant_simple_and_faithful():
    lemma = Task("ints", (("keep_even", None), ("square", None)), "ints_csv")
    # shares keep_even and square; depth 2 -> complexity 1; nothing removable
    assert judge(TARGET, lemma.description(), lemma.program()) == GuideScores(2, 0, 1, 1)


def test_unfaithful_code_and_unrelated_tasks():
    lemma = Task("ints", (("keep_even", None), ("square", None)), "ints_csv")
    wrong = Task("ints", (("keep_odd", None), ("square", None)), "ints_csv")
    assert judge(TARGET, lemma.description(), wrong.program()).fidelity == 0
    other = Task("str", (("upper", None),), "str")
    assert judge(TARGET, other.description(), other.program()) == GuideScores(0, 0, 0, 1)
    # code that is not a templated program: fidelity unknown unless the executor's verdict is given
    assert judge(TARGET, other.description(), "def f(x):\n    return x.upper()\n").fidelity is None
    assert judge(TARGET, other.description(), "def f(x):\n    return x.upper()\n", faithful=True).fidelity == 1


def test_a_redundant_step_counts_in_complexity_and_redundancy():
    # sorting before a sum changes nothing
    t = Task("ints", (("sort", None), ("sum", None), ("iadd", 3)), "int")
    assert redundant_steps(t) == 1
    assert judge(TARGET, t.description(), t.program()) == GuideScores(0, 1, 3, 1)


def test_not_a_description():
    assert judge(TARGET, "Write a function that sorts.", "def f(x):\n    return x\n") == UNPARSED


def test_parse_program_reads_rendered_programs_back():
    for t in (TARGET, Task("str_chars", (("sreverse", None), ("slen", None)), "int_str"),
              Task("str", (("sreverse", None),), "str")):
        assert parse_program(t.program(), t.in_rep) == t
    assert parse_program("def f(x):\n    x = sorted(x)\n    return x\n") == Task("ints", (("sort", None),), "ints")
    assert parse_program("def f(x):\n    import os\n    return x\n") is None
