"""GASP's code judge: the in-band reward scaled by the line similarity of a proposal's program to
its parent's, the gate keeping drifted proposals and copies from the student, the one judge slot
and the old keys' errors. Expected values from the programs' lines counted by hand."""

import pytest

from selfplay_core.config import load_config
from selfplay_core.engines.base import Completion
from selfplay_core.methods.gasp import GASP, BandReward
from selfplay_core.methods.judges import CodeJudge, JudgedRound
from selfplay_core.problems import Problem
from selfplay_core.records import Anchor, IterationLog, Proposal
from selfplay_core.rewards import r_lemma
from selfplay_core.roles.teacher import TeacherProposal
from selfplay_core.run_context import RunContext
from selfplay_core.solve import SolveResult
from selfplay_core.toyworld.tasks import Task

# These judges read the goalposts' reference programs: the privileged ablation only.
SIGHTED = "method.privileged_sighted_teacher=true"

# 6 lines: def, keep_even, square, dedupe, join, return
GOAL = Task("ints", (("keep_even", None), ("square", None), ("dedupe", None)), "ints_csv")
TRUE_LEMMA = Task("ints", (("keep_even", None), ("square", None)), "ints_csv")   # 5 of its lines
SWAPPED = Task("ints", (("square", None), ("keep_even", None)), "ints_csv")     # 4 in order


def prop(task, p, name, n=8):
    q = Proposal("lemma", Anchor("g1", GOAL.description(), GOAL.program(), goalpost_id="g1"), "f",
                 "easier", "", Completion("x"), id=name,
                 parsed=TeacherProposal(task.description(), task.program(), [[1, 2]]))
    q.problem = Problem(name, "call", [], entry_point="f")
    q.pass_rate = p
    c = round(p * n)
    q.solve = SolveResult(q.problem, [Completion("s")] * n, [True] * c + [False] * (n - c))
    return q


def test_the_band_reward_is_scaled_by_line_similarity_and_the_gate_keeps_drift_and_copies_out():
    cfg = load_config(None, [SIGHTED, "method.judge={name: code, power: 2, gate: 0.85}", "student.fill=none"])
    ctx = RunContext(cfg)
    rnd = JudgedRound("lemma", [], "easier", 2, BandReward((0.3, 0.7), -0.5, r_lemma),
                      CodeJudge(cfg.method.judge))
    props = [prop(TRUE_LEMMA, 0.5, "true"), prop(SWAPPED, 0.5, "swapped"),
             prop(GOAL, 0.5, "copy"), prop(TRUE_LEMMA, 0.125, "too-hard")]
    log = IterationLog()
    rnd.score(ctx, props, log)
    # similarities: 2*5/11, 2*4/11, 1, 2*5/11; in band r_lemma(0.5) = 1; out of band -0.5 kept
    assert [p.extra["code_similarity"] for p in props] == pytest.approx([10 / 11, 8 / 11, 1.0, 10 / 11])
    assert [p.reward for p in props] == pytest.approx([(10 / 11) ** 2, (8 / 11) ** 2, 0.0, -0.5])
    assert [p.extra["gated"] for p in props] == [False, True, True, False]
    assert log.metrics["teacher/lemma/code_similarity"] == pytest.approx((10 + 8 + 11 + 10) / 44)
    assert log.metrics["teacher/lemma/code_gated"] == 0.5
    student = GASP(cfg.method).student_batch(ctx, props, log, lambda name, fn, *a: fn(*a))
    assert sorted(r.problem.id for _, r in student) == ["too-hard", "true"]


def test_without_the_multiplier_code_relevance_only_gates():
    cfg = load_config(None, [SIGHTED, "method.judge={name: code, reward: none, gate: 0.85}"])
    rnd = JudgedRound("lemma", [], "easier", 2, BandReward((0.3, 0.7), -0.5, r_lemma),
                      CodeJudge(cfg.method.judge))
    props = [prop(SWAPPED, 0.5, "swapped")]
    rnd.score(RunContext(cfg), props, IterationLog())
    assert props[0].reward == 1.0 and props[0].extra["gated"]


def test_gasp_rounds_apply_the_one_judge_set():
    cfg = load_config(None, [SIGHTED, "method.judge={name: code, power: 4}"])
    rounds = list(GASP(cfg.method).rounds(RunContext(cfg), []))
    assert [type(r).__name__ for r in rounds] == ["JudgedRound"]
    assert isinstance(rounds[0].judge, CodeJudge) and rounds[0].judge.config.power == 4
    assert rounds[0].reward.key == "code_weight" and rounds[0].reward.multiply
    # no judge: GASP's plain round
    cfg = load_config(None)
    assert [type(r).__name__ for r in GASP(cfg.method).rounds(RunContext(cfg), [])] == ["DescribedRound"]
    # one slot: a judge's keys belong to the judge it names
    with pytest.raises(Exception, match=r"method\.judge\.power: unknown key; the keys of method\.judge are "
                                        r"prompt, temperature, max_new_tokens, vllm_url, name, score, reward, gate"):
        load_config(None, [SIGHTED, "method.judge={name: code, power: 4}", "method.judge.name=guide"])
    with pytest.raises(Exception, match=r"method\.judge\.power: Input should be greater than 0"):
        load_config(None, [SIGHTED, "method.judge={name: code, power: 0}"])
    with pytest.raises(Exception, match=r"method\.judge: unknown name 'lines'; one of guide, code, gradient"):
        load_config(None, [SIGHTED, "method.judge={name: lines}"])


@pytest.mark.parametrize("old, new", [
    ("method.guide={gate: 0.5}", "method.judge: {name: guide, ...}"),
    ("method.code_relevance={power: 4}", "method.judge: {name: code, ...}"),
    ("method.gradient_relevance={gate: 0.0}", "method.judge: {name: gradient, ...}"),
    ("method.lemma_program=statement_deletion", "method.name: gasp-edit"),
])
def test_an_old_judge_key_is_one_error_that_names_the_new_spelling(old, new):
    from selfplay_core.config import ConfigError

    with pytest.raises(ConfigError) as e:
        load_config(None, [SIGHTED, old])
    key = old.split("=", 1)[0]
    assert str(e.value) == f"config: {key}: no longer a key; write {new}" + \
        (" (statement_deletion lemmas)" if "gasp-edit" in new else "") + " instead"


def test_goalposts_without_a_reference_program_stop_the_run_before_it_starts():
    from selfplay_core.config import ConfigError

    cfg = load_config(None, [SIGHTED, "method.judge={name: code, power: 4}"])
    ctx = RunContext(cfg)
    ctx.goalposts = [Problem("lcb/1", "call", [], entry_point="f", metadata={"reference": GOAL.program()}),
                     Problem("lcb/2", "call", [], entry_point="f")]
    with pytest.raises(ConfigError, match=r"1 of 2 goalposts have no reference program \(e.g. lcb/2\)"):
        GASP(cfg.method).setup(ctx)
    ctx.goalposts = ctx.goalposts[:1]
    GASP(cfg.method).setup(ctx)    # every goalpost has one: no error
