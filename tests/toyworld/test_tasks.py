import random

import pytest

from selfplay_core.problems import Sample
from selfplay_core.toyworld.splits import build_world
from selfplay_core.toyworld.tasks import (Task, TaskError, degenerate, make_problem, sample_task,
                                          task_from_key)


def test_sampling_is_deterministic_for_a_seed():
    a = [sample_task(random.Random(7), d).key for d in (1, 2, 3, 4)]
    b = [sample_task(random.Random(7), d).key for d in (1, 2, 3, 4)]
    assert a == b
    assert [sample_task(random.Random(8), d).key for d in (1, 2, 3, 4)] != a


def test_world_is_deterministic_and_versioned(world):
    again = build_world(0)
    for name, split in world.splits().items():
        other = again.splits()[name]
        assert split.content_hash == other.content_hash
        assert [p.dumps() for p in split.problems] == [p.dumps() for p in other.problems]
        assert split.version == "toyworld-v2-s0"
    assert build_world(1).eval.content_hash != world.eval.content_hash


def test_split_sizes_and_depths(world):
    assert {d: len(v) for d, v in world.train.by_depth().items()} == {1: 200, 2: 400}
    assert set(world.eval.by_depth()) == {1, 2, 3, 4}
    assert set(world.goalpost_pool.by_depth()) == {3, 4}
    for split in world.splits().values():
        for t, p in zip(split.tasks, split.problems):
            assert p.metadata["depth"] == t.depth
            assert p.prompt == t.description()


def test_held_out_tasks_never_in_train(world):
    held = world.exclusion()
    assert not any(held.blocks(t) for t in world.train.tasks)
    keys = [t.key for s in world.splits().values() for t in s.tasks]
    assert len(keys) == len(set(keys))


def test_every_reference_passes_its_own_tests_in_the_executor(world, executor):
    items = [(p, Sample(p.id, 0, p.metadata["reference"]))
             for s in world.splits().values() for p in s.problems]
    verdicts = executor.verify(items)
    failed = [(v.problem_id, v.verdict.value, v.detail) for v in verdicts if not v.passed]
    assert not failed, failed[:5]


def test_a_wrong_program_fails(world, executor):
    p = world.eval.by_depth()[2][0]
    wrong = "def f(x):\n    return x\n"
    assert not executor.verify([(p, Sample(p.id, 0, wrong))])[0].passed


def test_tests_are_discriminating(world):
    for p in world.eval.problems[:50]:
        outs = {repr(t.expected) for t in p.tests}
        assert len(outs) >= 3, p.id


def test_task_key_round_trip():
    rng = random.Random(0)
    for d in (1, 2, 3, 4):
        for _ in range(30):
            t = sample_task(rng, d)
            assert task_from_key(t.key) == t


@pytest.mark.parametrize("bad", [
    dict(in_rep="ints", steps=(("sum", None), ("sum", None)), out_rep="int"),   # int into a list op
    dict(in_rep="ints", steps=(("add", 42),), out_rep="ints"),                 # constant out of range
    dict(in_rep="ints", steps=(("add", None),), out_rep="ints"),               # missing constant
    dict(in_rep="ints", steps=(("sum", None),), out_rep="ints_csv"),           # output rep of a list
    dict(in_rep="nope", steps=(("sum", None),), out_rep="int"),
    dict(in_rep="ints", steps=(), out_rep="ints"),
])
def test_bad_tasks_are_one_clear_error(bad):
    with pytest.raises(TaskError):
        Task(**bad)


def test_degenerate_tasks_are_detected():
    assert degenerate(Task("ints", (("sort", None), ("sum", None)), "int"))       # sort is a no-op
    assert degenerate(Task("ints", (("keep_gt", 9), ("keep_lt", 1)), "ints"))     # always []
    assert not degenerate(Task("ints", (("keep_gt", 3), ("sum", None)), "int"))


def test_problem_inputs_use_the_representation():
    rng = random.Random(0)
    t = Task("ints_csv", (("sum", None),), "int_str")
    p = make_problem(t, "x", rng)
    assert all(isinstance(tc.args[0], str) and isinstance(tc.expected, str) for tc in p.tests)
    assert "comma-separated" in p.prompt and "as a string" in p.prompt
