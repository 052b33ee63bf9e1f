import math

import pytest

from selfplay_core.rl import advantages as A


TRR = [
    # rewards, kinds, roles, expected advantages
    ([1, 0, 1, 0], ["ded"] * 4, ["solve"] * 4, [1, -1, 1, -1]),
    ([1, 0, 0.8, 0.2], ["ded", "ded", "ded", "ded"], ["solve", "solve", "propose", "propose"], [1, -1, 1, -1]),
    ([1, 1, 0.5], ["a", "a", "b"], ["s", "s", "s"], [0, 0, 0]),          # constant groups: no signal
    ([3, 1, 2], ["a", "a", "a"], ["s", "s", "s"], [1.2247, -1.2247, 0.0]),
]


@pytest.mark.parametrize("r,k,roles,exp", TRR)
def test_task_relative_reinforce_pp(r, k, roles, exp):
    assert A.task_relative_reinforce_pp(r, k, roles) == pytest.approx(exp, abs=1e-3)


def test_trr_groups_do_not_share_baselines():
    # Teacher rewards around -0.5..1 and student rewards 0/1 are normalized separately.
    adv = A.task_relative_reinforce_pp([1, 0, -0.5, 1.0], ["x"] * 4, ["student", "student", "teacher", "teacher"])
    assert adv == pytest.approx([1, -1, -1, 1], abs=1e-4)


GRPO = [
    ([1, 0, 0, 0], [0, 0, 0, 0], [1.7320, -0.5773, -0.5773, -0.5773]),
    ([1, 0, 1, 1], ["p", "p", "q", "q"], [1, -1, 0, 0]),
]


@pytest.mark.parametrize("r,g,exp", GRPO)
def test_grpo(r, g, exp):
    assert A.grpo(r, g) == pytest.approx(exp, abs=1e-3)


def test_dr_grpo_only_subtracts_the_mean():
    assert A.dr_grpo([1, 0, 0, 0], [0] * 4) == pytest.approx([0.75, -0.25, -0.25, -0.25])
    assert A.dr_grpo([2, 2], ["a", "a"]) == [0, 0]


def test_reinforce_half():
    assert A.reinforce_half([True, True, False, True], [0.2, 0.5, 0.2, 0.75]) == [1, 1, 0, 0]


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError):
        A.grpo([1, 2], [0])
    with pytest.raises(ValueError):
        A.reinforce_half([True], [0.1, 0.2])


# ---- the estimators a method's config names (method.advantage) ------------------------------

def S(reward, role="student", kind="lemma", group="t1", passed=None):
    if role == "student" and passed is None:
        passed = reward == 1
    return A.Scored(reward, role, kind, group, passed)


def test_every_estimator_is_registered():
    assert set(A.ESTIMATORS) == {"trr++", "grpo", "dr_grpo", "reinforce_half", "sft"}


def test_trr_groups_by_kind_and_role_grpo_by_role_and_prompt():
    batch = [S(1, group="a"), S(0, group="a"), S(1, group="b"), S(1, group="b"),
             S(0.5, role="teacher", kind="lemma", group="p1"), S(-0.5, role="teacher", group="p2")]
    # TRR++: one student group (lemma, student) over all four, one teacher group
    assert A.ESTIMATORS["trr++"](batch) == pytest.approx([0.5774, -1.7320, 0.5774, 0.5774, 1, -1], abs=1e-3)
    # GRPO: per (role, prompt): task b is always solved (no signal), each teacher prompt alone
    assert A.ESTIMATORS["grpo"](batch) == pytest.approx([1, -1, 0, 0, 0, 0], abs=1e-3)
    assert A.ESTIMATORS["dr_grpo"](batch) == pytest.approx([0.5, -0.5, 0, 0, 0, 0])


REINFORCE_HALF = [
    # a task solved 1 of 4 (p = 0.25): its correct rollout is kept, advantage 1
    ([S(1, group="a"), S(0, group="a"), S(0, group="a"), S(0, group="a")], [1, 0, 0, 0]),
    # solved 2 of 4 (p = 0.5, the edge): both correct ones kept
    ([S(1, group="a"), S(1, group="a"), S(0, group="a"), S(0, group="a")], [1, 1, 0, 0]),
    # solved 3 of 4 (p = 0.75): too easy, nothing kept; never solved: nothing to keep
    ([S(1, group="a"), S(1, group="a"), S(1, group="a"), S(0, group="a"), S(0, group="b"), S(0, group="b")],
     [0, 0, 0, 0, 0, 0]),
    # the proposer's rollouts keep TRR++ over their own (kind, role) group
    ([S(1, group="a"), S(0, group="a"), S(0.8, role="teacher"), S(0.2, role="teacher")], [1, 0, 1, -1]),
]


@pytest.mark.parametrize("batch,expected", REINFORCE_HALF)
def test_reinforce_half_over_a_batch(batch, expected):
    assert A.ESTIMATORS["reinforce_half"](batch) == pytest.approx(expected, abs=1e-4)


def test_reinforce_half_on_an_sgs_batch_of_targets_and_synthetic_problems():
    """SGS's Solver batch: a target solved 1 of 4 (kept), a synthetic problem solved 3 of 4
    (p = 0.75 > 0.5: dropped), one solved 2 of 4 (kept), and the Conjecturer's two rollouts."""
    batch = ([S(1, kind="target", group="t1")] + [S(0, kind="target", group="t1")] * 3
             + [S(1, kind="conjecture", group="c1")] * 3 + [S(0, kind="conjecture", group="c1")]
             + [S(1, kind="conjecture", group="c2")] * 2 + [S(0, kind="conjecture", group="c2")] * 2
             + [S(1.0, role="teacher", kind="conjecture", group="c1"),
                S(0.0, role="teacher", kind="conjecture", group="c2")])
    assert A.ESTIMATORS["reinforce_half"](batch) == pytest.approx(
        [1, 0, 0, 0] + [0, 0, 0, 0] + [1, 1, 0, 0] + [1, -1], abs=1e-4)
