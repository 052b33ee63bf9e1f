"""Proposal relevance from a run's lineage: true one-step variants of the parent and lifts on
the path to a goalpost, on hand-built chains (a lemma is its goalpost with one step removed)."""

import pytest

from selfplay_core.toyworld.relevance import lineage_relevance
from selfplay_core.toyworld.splits import build_world
from selfplay_core.toyworld.tasks import Task, TaskError
from selfplay_core.toyworld.oracle import task_of


def _goalpost_and_lemma():
    """A depth-3 goalpost whose first step can be dropped (same in/out representation)."""
    for p in build_world(0).goalpost_pool.problems:
        g = task_of(p)
        if g.depth != 3:
            continue
        try:
            lemma = Task(g.in_rep, g.steps[1:], g.out_rep)
        except TaskError:
            continue
        if lemma.description() != g.description():
            return p.id, g, lemma
    raise AssertionError("no depth-3 goalpost with a droppable first step")


def entry(id, kind, parent, task, faithful=True, trained=True, accepted=True):
    return {"id": id, "kind": kind, "parent": parent, "question": task.description(),
            "accepted": accepted, "faithful": faithful, "trained": trained}


def test_true_variants_and_the_path_to_the_goalpost():
    gid, g, lemma = _goalpost_and_lemma()
    entries = [
        entry("a", "lemma", gid, lemma),                            # one step easier: true
        entry("b", "lemma", gid, g, trained=False),                 # the goalpost again: not easier
        entry("c", "lemma", gid, lemma, faithful=False),            # its code does something else
        entry("r", "lemma", gid, lemma, accepted=False),            # rejected: not counted
        entry("d", "lift", "a", g),                                 # one step harder than a true lemma
        entry("e", "lift", "b", g, trained=False),                  # not harder than its parent
    ]
    got = lineage_relevance(entries, {gid: g})
    assert got["lemma"] == {"accepted": 3, "trained": 2, "faithful": pytest.approx(2 / 3),
                            "true_variant": pytest.approx(1 / 3),
                            "trained_true_variant": pytest.approx(1 / 2),
                            "faithful_depth": pytest.approx((2 + 3) / 2)}
    assert got["lift"]["true_variant"] == 0.5 and got["lift"]["on_path"] == 0.5
    assert got["lift"]["trained_true_variant"] == 1.0 and got["lift"]["faithful_depth"] == 3


def test_a_true_lift_of_a_lemma_off_the_path_is_not_on_the_path():
    gid, g, lemma = _goalpost_and_lemma()
    # "x" reads as the lemma but its code does something else: not a true lemma. Its lift "y" is
    # one step harder than what x's question says (a true variant of its parent), yet not on the
    # path to the goalpost; "z" names a parent the lineage does not hold.
    entries = [entry("x", "lemma", gid, lemma, faithful=False), entry("y", "lift", "x", g),
               entry("z", "lift", "w", g)]
    got = lineage_relevance(entries, {gid: g})
    assert got["lemma"]["true_variant"] == 0.0 and got["lemma"]["faithful_depth"] is None
    assert got["lift"]["true_variant"] == 0.5 and got["lift"]["on_path"] == 0.0
    assert lineage_relevance([], {}) == {}


def test_the_loop_logs_the_share_of_true_variants_among_accepted_proposals(executor):
    """stages.fidelity with the toy world's oracle: of the accepted proposals whose anchor is
    a toy task, the share that are faithful *and* one step from it; an anchor that is no toy
    task (a document) is left out of that share but still counts for fidelity."""
    import random
    from types import SimpleNamespace

    from selfplay_core import stages
    from selfplay_core.engines.base import Completion
    from selfplay_core.records import Anchor, IterationLog, Proposal
    from selfplay_core.roles.teacher import TeacherProposal
    from selfplay_core.toyworld.relevance import question_variant
    from selfplay_core.toyworld.world import ToyOracle

    gid, g, lemma = _goalpost_and_lemma()
    inputs = [[x] for x in lemma.sample_inputs(random.Random(0), 6)]

    def prop(anchor_question, question, code):
        return Proposal(kind="lemma", anchor=Anchor(gid, anchor_question, ""), axis="f",
                        direction="easier", prompt="", completion=Completion(text=""),
                        parsed=TeacherProposal(question, code, inputs), problem=object())

    proposals = [prop(g.description(), lemma.description(), lemma.program()),   # true lemma
                 prop(g.description(), lemma.description(), g.program()),       # unfaithful
                 prop(g.description(), g.description(), g.program()),           # faithful, not easier
                 prop("A page about sorting.", lemma.description(), lemma.program())]  # no toy anchor
    ctx = SimpleNamespace(executor=executor, oracle=ToyOracle())
    log = IterationLog()
    stages.fidelity(ctx, proposals, log)
    assert [p.faithful for p in proposals] == [True, False, True, True]
    assert log.metrics["teacher/lemma/fidelity"] == pytest.approx(3 / 4)
    assert log.metrics["teacher/lemma/true_variant"] == pytest.approx(1 / 3)
    assert question_variant("A page about sorting.", lemma.description(), "easier") is None
