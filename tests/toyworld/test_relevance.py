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

