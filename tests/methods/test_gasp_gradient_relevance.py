"""GASP's gradient judge: the weights from one round's cosines (a table), and on the real toy
model and learner the cosine of the student's gradient on a proposal with the gradient toward its
goalpost's reference program, checked against a plain full backward written here; the reward
scaled by it, the gate keeping misaligned proposals from the student, and the config errors."""

import pytest
import torch

from selfplay_core.config import ConfigError, load_config
from selfplay_core.methods.judges.gradient import alignment_weights, top_aligned

# These judges read the goalposts' reference programs: the privileged ablation only.
SIGHTED = "method.privileged_sighted_teacher=true"


@pytest.mark.parametrize("cosines, want", [
    ([0.2, 0.1, -0.3], [1.0, 0.5, 0.0]),
    ([None, 0.05, 0.02], [0.0, 1.0, 0.4]),
    ([-0.1, None], [0.0, 0.0]),              # nothing aligned: no in-band reward survives
    ([0.0, 0.0], [0.0, 0.0]),
    ([], []),
])
def test_alignment_weights(cosines, want):
    assert alignment_weights(cosines) == pytest.approx(want)


@pytest.mark.parametrize("cosines, k, want", [
    ([0.2, 0.1, -0.3], 2, [True, True, False]),
    ([0.2, 0.1, -0.3], None, [True, True, True]),   # no cap: the gate alone decides
    ([None, 0.05, 0.02, 0.07], 1, [False, False, False, True]),
    ([-0.1, -0.2, None], 1, [True, False, False]),  # the cap ranks; the gate, not the cap, drops cos <= 0
    ([0.1, 0.1, 0.1], 2, [True, True, False]),      # ties: the earlier proposal
    ([None, None], 3, [False, False]),
    ([], 2, []),
])
def test_top_aligned(cosines, k, want):
    assert top_aligned(cosines, k) == want


def test_not_with_executor_edited_lemmas_and_its_gate_in_range():
    with pytest.raises(Exception, match="drop the judge"):
        load_config("configs/gasp-edit-tiny-cpu.yaml", ["method.judge={name: gradient}"])
    with pytest.raises(Exception, match=r"method\.judge\.gate: Input should be less than or equal to 1"):
        load_config(None, [SIGHTED, "method.judge={name: gradient, gate: 2}"])


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory, executor):
    """A GASP run context on the committed toy checkpoint with gradient relevance, gate 0."""
    from selfplay_core.loop.context import build_context
    from selfplay_core.methods import method_for
    from selfplay_core.toyworld.bootstrap import ASSET_DIR
    from tests.support.toy_models import depth3_goalposts_file

    tmp = tmp_path_factory.mktemp("grad-relevance")
    gp, goalposts = depth3_goalposts_file(tmp, 2)
    cfg = load_config("configs/tiny-cpu.yaml", [
        f"model.path={ASSET_DIR}", f"out_dir={tmp / 'runs'}", f"world.goalposts={gp}",
        "world.max_goalposts=null", SIGHTED, "method.judge={name: gradient, gate: 0.0}", "student.fill=none",
        "engine.max_new_tokens_student=64", "eval.verdict=false"])
    ctx = build_context(cfg, tmp / "run", executor=executor)
    method = method_for(cfg.method)
    method.setup(ctx)
    yield cfg, ctx, method, goalposts
    ctx.close()


def _proposal(ctx, goalpost, task, name, passed):
    """A proposal anchored on `goalpost` whose task is `task` (a toy Problem), with the student's
    real samples on it and the pass pattern `passed` (the cosine reads samples and flags only)."""
    from selfplay_core.engines.base import Completion, SamplingParams
    from selfplay_core.records import Anchor, Proposal
    from selfplay_core.roles.teacher import TeacherProposal
    from selfplay_core.solve import SolveResult, solve

    ref = task.metadata["reference"]
    p = Proposal("lemma", Anchor(goalpost.id, goalpost.prompt, goalpost.metadata["reference"],
                                 goalpost_id=goalpost.id), "f", "easier", "", Completion("x"), id=name,
                 parsed=TeacherProposal(task.prompt, ref, [[1]]))
    p.problem = task
    res = solve(ctx.engine, ctx.executor, [task], len(passed),
                SamplingParams(temperature=ctx.config.engine.temperature, max_new_tokens=64, seed=7))[0]
    p.solve = SolveResult(task, res.completions, list(passed))
    p.pass_rate = sum(passed) / len(passed)
    return p


def _plain_cosine(ctx, p, goalpost, layers=1):
    """The same cosine by a full backward through plain logits, written without the learner."""
    from selfplay_core.methods.compassplay import last_layer_params, reference_body
    from selfplay_core.roles.student import student_completion
    from selfplay_core.solve import student_prompt_for

    m = ctx.learner.unwrapped
    params = last_layer_params(m, layers)

    def grad(seqs):   # [(prompt ids, completion ids, weight, temperature)]
        m.zero_grad(set_to_none=True)
        loss = 0.0
        for prompt, comp, w, t in seqs:
            ids = torch.tensor([list(prompt) + list(comp)])
            logp = torch.log_softmax(m(input_ids=ids).logits[0, :-1].float() / t, -1)
            n = len(prompt)
            loss = loss - w * logp[n - 1:].gather(1, torch.tensor(comp).view(-1, 1)).sum()
        loss.backward()
        g = torch.cat([q.grad.reshape(-1) for q in params])
        m.zero_grad(set_to_none=True)
        return g

    comps = p.solve.completions
    total = sum(len(c.token_ids) for c in comps)
    rate = sum(p.solve.passed) / len(comps)
    g_task = grad([(c.prompt_token_ids, c.token_ids, (float(ok) - rate) / total, ctx.config.engine.temperature)
                   for c, ok in zip(comps, p.solve.passed)])
    tok = ctx.tokenizer
    prompt = tok(student_prompt_for(goalpost), add_special_tokens=False)["input_ids"]
    body = tok(student_completion(reference_body(goalpost)), add_special_tokens=False)["input_ids"]
    g_goal = grad([(prompt, body, 1.0 / len(body), 1.0)])
    return float(g_task @ g_goal / (g_task.norm() * g_goal.norm()))


def test_the_cosine_reward_and_gate_on_the_real_model(toy_run):
    from selfplay_core.methods.gasp import BandReward
    from selfplay_core.methods.judges import GradientJudge, GradientJudgeConfig, JudgedRound
    from selfplay_core.records import IterationLog
    from selfplay_core.rewards import r_lemma
    from selfplay_core.toyworld.splits import build_world

    cfg, ctx, method, goalposts = toy_run
    g = goalposts[0]
    others = [t for t in build_world(0).train.problems if t.metadata["depth"] <= 2][:3]
    props = [_proposal(ctx, g, others[0], "a", [True, False, True, False]),
             _proposal(ctx, g, others[1], "b", [True, False, False, False]),
             _proposal(ctx, g, others[2], "c", [True, True, True, True])]     # p = 1: no gradient
    want = [_plain_cosine(ctx, props[0], g), _plain_cosine(ctx, props[1], g)]
    assert want[0] != pytest.approx(want[1], abs=1e-3), "two different tasks, two directions"
    gate = (want[0] + want[1]) / 2      # between the two: exactly one is kept from the student
    rnd = JudgedRound("lemma", [], "easier", 2, BandReward((0.3, 0.7), -0.5, r_lemma),
                      GradientJudge(GradientJudgeConfig(gate=gate)))
    log = IterationLog()
    rnd.score(ctx, props, log)
    got = [p.extra["grad_cosine"] for p in props]
    assert got[:2] == pytest.approx(want, abs=1e-4) and got[2] is None
    # Rewards: a in band (p = 0.5, r_lemma 1) times its weight; b (p = 0.25) and c out of band.
    top = max([w for w in want if w > 0], default=0.0)
    weight_a = max(0.0, want[0]) / top if top > 0 else 0.0
    assert [p.reward for p in props] == pytest.approx([weight_a, -0.5, -0.5], abs=1e-4)
    assert [p.extra["gated"] for p in props] == [want[0] < want[1], want[1] < want[0], False]
    assert log.metrics["teacher/lemma/grad_judged"] == pytest.approx(2 / 3)
    assert log.metrics["teacher/lemma/grad_cosine"] == pytest.approx(sum(want) / 2, abs=1e-4)
    student = method.student_batch(ctx, props, log, lambda name, fn, *a: fn(*a))
    kept = {r.problem.id for _, r in student}
    assert kept == {p.problem.id for p in props if not p.extra["gated"]}
    # No gate, the cap at one: only the more aligned of a and b reaches the student; c (no
    # gradient) is left alone; rewards are unchanged by the cap.
    capped = JudgedRound("lemma", [], "easier", 2, BandReward((0.3, 0.7), -0.5, r_lemma),
                         GradientJudge(GradientJudgeConfig(gate=None, student_top=1)))
    log = IterationLog()
    capped.score(ctx, props, log)
    assert [p.extra["gated"] for p in props] == [want[0] < want[1], want[1] < want[0], False]
    assert [p.reward for p in props] == pytest.approx([weight_a, -0.5, -0.5], abs=1e-4)
    assert log.metrics["teacher/lemma/grad_gated"] == pytest.approx(1 / 3)


def test_goalposts_without_a_reference_program_stop_the_run_before_it_starts():
    from selfplay_core.methods.gasp import GASP
    from selfplay_core.problems import Problem
    from selfplay_core.run_context import RunContext

    cfg = load_config(None, [SIGHTED, "method.judge={name: gradient}"])
    ctx = RunContext(cfg)
    ctx.goalposts = [Problem("lcb/2", "call", [], entry_point="f")]
    with pytest.raises(ConfigError, match=r"1 of 1 goalposts have no reference program .*\(e.g. lcb/2\)"):
        GASP(cfg.method).setup(ctx)
