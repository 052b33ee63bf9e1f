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
    assert set(A.ESTIMATORS) == {"trr++", "trr++_prompt", "grpo", "dr_grpo", "reinforce_half", "sft"}


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


# trr++_prompt: student rewards centred on their own task's mean, then scaled by the (kind, role)
# spread. Task a is solved by all 4 samples, task b by 1 of 4 (all kind "lemma"):
#   centred a: 0 0 0 0; b: .75 -.25 -.25 -.25; spread over the 8: sqrt(.75 / 8) = 0.306186
#   -> b: 2.449490, -0.816497 x3; a: 0 (plain TRR++ gives a's samples +0.774597 each:
#   mean 0.625, std sqrt(.625 * .375) = 0.484123, (1 - .625) / 0.484123).
PROMPT_TRR = [
    ([1, 1, 1, 1, 1, 0, 0, 0], ["lemma"] * 8, ["student"] * 8, list("aaaabbbb"), [True] * 8,
     [0, 0, 0, 0, 2.449490, -0.816497, -0.816497, -0.816497]),
    # every task constant: no signal at all (TRR++ would see 1 vs 0 across tasks)
    ([1, 1, 0, 0], ["lemma"] * 4, ["student"] * 4, list("aabb"), [True] * 4, [0, 0, 0, 0]),
    # proposer rollouts (not centred) keep plain TRR++ within their own (kind, role) group
    ([1, 0, 0.5, 1, 0], ["lemma"] * 5, ["teacher", "teacher", "teacher", "student", "student"],
     ["g", "g", "h", "a", "a"], [False, False, False, True, True],
     [1.224745, -1.224745, 0.0, 1.0, -1.0]),
]


@pytest.mark.parametrize("r,k,roles,groups,centre,exp", PROMPT_TRR)
def test_prompt_baseline_trr(r, k, roles, groups, centre, exp):
    assert A.prompt_baseline_trr(r, k, roles, groups, centre) == pytest.approx(exp, abs=1e-5)


def test_prompt_baseline_estimator_centres_only_the_solver():
    batch = [A.Scored(1.0, "student", "lemma", "a", True)] * 4 + \
            [A.Scored(1.0, "student", "lemma", "b", True), A.Scored(0.0, "student", "lemma", "b", False)] + \
            [A.Scored(0.9, "teacher", "lemma", "g"), A.Scored(0.1, "teacher", "lemma", "g")]
    adv = A.ESTIMATORS["trr++_prompt"](batch)
    assert adv[:4] == [0.0] * 4                       # a solved task teaches nothing
    assert adv[4] > 0 > adv[5]
    assert adv[6:] == pytest.approx([1.0, -1.0], abs=1e-4)    # the proposer as in TRR++
    plain = A.ESTIMATORS["trr++"](batch)
    assert all(a > 0 for a in plain[:4])              # what plain TRR++ does with task a


def test_prompt_baseline_lengths_must_agree():
    with pytest.raises(ValueError, match="differ in length"):
        A.prompt_baseline_trr([1, 0], ["k"] * 2, ["s"] * 2, ["a"], [True, True])
