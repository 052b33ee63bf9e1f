import random

from selfplay_core.toyworld.fidelity import parse_description, proposal_fidelity
from selfplay_core.toyworld.tasks import Task, sample_task


def test_every_description_parses_back_to_its_task():
    rng = random.Random(5)
    for d in (1, 2, 3, 4):
        for _ in range(100):
            t = sample_task(rng, d)
            assert parse_description(t.description()) == t


def test_non_descriptions_do_not_parse():
    for text in ["", "Given a list of numbers", "Given a list of numbers, fly to the moon.",
                 "Given a number, add 42.", "Given a string, take the sum."]:
        assert parse_description(text) is None


def test_fidelity_of_proposals(executor):
    t = Task("ints", (("keep_even", None), ("sum", None)), "int")
    inputs = [[[1, 2, 3, 4]], [[]], [[6, 7]]]
    buggy = t.program().replace("% 2 == 0", "% 2 == 1")
    crash = "def f(x):\n    return 1 // 0\n"
    res = proposal_fidelity(executor, [
        (t.description(), t.program(), inputs),
        (t.description(), buggy, inputs),
        (t.description(), crash, inputs),
        ("Make the numbers nicer.", t.program(), inputs),
        (t.description(), t.program(), [["not a list"]]),
    ])
    assert [(r.parsed, r.faithful, r.reason) for r in res] == [
        (True, True, ""), (True, False, "behaviour_differs"), (True, False, "code_error"),
        (False, False, "unparsed_description"), (True, False, "inputs_do_not_fit_description")]
