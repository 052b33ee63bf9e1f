"""Which self-proposed tasks join the student batch: those whose pass rate lies in
student.train_band; the teacher is scored on all of them either way."""

from selfplay_core.config import load_config
from selfplay_core.engines.base import Completion
from selfplay_core import stages as S
from selfplay_core.problems import Problem
from selfplay_core.records import Anchor, IterationLog, Proposal
from selfplay_core.run_context import RunContext
from selfplay_core.solve import SolveResult


def solved(i, c, n=8, kind="lemma"):
    p = Proposal(kind, Anchor("g", "q", "c"), "f", "easier", "", Completion("x"), id=f"p{i}")
    if c is None:  # rejected before the student saw it
        return p
    p.problem = Problem(id=p.id, kind="call", entry_point="f", tests=[])
    p.solve = SolveResult(p.problem, [Completion("y")] * n, [j < c for j in range(n)])
    p.pass_rate = c / n
    return p


def ctx(band):
    return RunContext(load_config(None, [f"student.train_band={list(band)}"]))


def test_band_keeps_tasks_solved_sometimes_and_logs_the_share():
    props = [solved(0, 0), solved(1, 1), solved(2, 3), solved(3, 7, kind="lift"), solved(4, 8),
             solved(5, None)]
    log = IterationLog()
    got = S.student_tasks(ctx((0.3, 0.9)), props, log)
    assert [(k, r.problem.id) for k, r in got] == [("lemma", "p2"), ("lift", "p3")]
    assert log.metrics["student/trained/tasks"] == 2
    assert log.metrics["student/trained/share"] == 2 / 5


def test_default_band_keeps_every_solved_task():
    props = [solved(0, 0), solved(1, 8), solved(2, None)]
    assert load_config(None, []).student.train_band == (0.0, 1.0)
    got = S.student_tasks(ctx((0.0, 1.0)), props, IterationLog())
    assert [r.problem.id for _, r in got] == ["p0", "p1"]
    log = IterationLog()
    assert S.student_tasks(ctx((0.0, 1.0)), [solved(3, None)], log) == [] and not log.metrics


def test_the_student_cap_keeps_whole_groups_of_any_size():
    """A task's samples stay together when the batch is capped, also when a method's groups
    are not student.samples_per_task long (R-Zero's 10 answers against n = 8)."""
    def task(i, n):
        comps = [Completion("y", [1], [-0.5], "stop", [7]) for _ in range(n)]
        return ("rzero", SolveResult(Problem(f"t{i}", "call", [], entry_point="f"), comps, [j % 2 == 0 for j in range(n)]))
    c = RunContext(load_config(None, ["student.batch_size=24", "student.samples_per_task=8"]))
    rolls = S.rollouts(c, [], [task(0, 10), task(1, 10), task(2, 10)])
    by_task: dict = {}
    for r in rolls:
        by_task[r.meta["group"]] = by_task.get(r.meta["group"], 0) + 1
    assert sorted(by_task.values()) == [10, 10]      # two whole groups fit in 24, never a part
    # under the cap, everything stays, in order
    assert len(S.rollouts(c, [], [task(0, 10), task(1, 10)])) == 20


def test_teacher_train_false_leaves_only_the_students_rollouts():
    """teacher.train=false: the proposals still pose the student's tasks and keep their rewards,
    but make no rollout — the update is the one the student's samples alone would give."""
    def proposal(i, reward):
        p = Proposal("lemma", Anchor("g", "q", "c"), "f", "easier", "",
                     Completion("x", [3, 4], [-0.1, -0.2], "stop", [1, 2]), id=f"p{i}")
        p.reward = reward
        return p

    comps = [Completion("y", [5], [-0.3], "stop", [6]) for _ in range(8)]
    task = ("lemma", SolveResult(Problem("t0", "call", [], entry_point="f"), comps,
                                 [j < 3 for j in range(8)]))
    teacher = [proposal(0, 0.5), proposal(1, -0.5), proposal(2, None)]
    trained = S.rollouts(RunContext(load_config(None, [])), teacher, [task])
    assert [r.meta["group"] for r in trained if r.role == "teacher"] == ["p0", "p1"]
    off = S.rollouts(RunContext(load_config(None, ["teacher.train=false"])), teacher, [task])
    assert all(r.role == "student" for r in off) and len(off) == 8
    assert [r.meta["reward"] for r in off] == [1.0] * 3 + [0.0] * 5
    assert [p.reward for p in teacher] == [0.5, -0.5, None]   # scored all the same
