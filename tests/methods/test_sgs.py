"""SGS's and GASP's Guide judge's scoring stages: the Guide's judgments become R_guide, R_synth and the
guided band reward as the formulas say (values worked out by hand), a judgment the parser
rejects scores 0, the gate keeps low-scored proposals from the student, and the toy oracle
grades the Guide (a diagnostic that changes no reward).

The Guide's model is a scripted engine here (its completions are given), so the expected
judgments are known; the real frozen Guide runs in tests/integration/test_sgs_flow.py."""

from pathlib import Path

import pytest

from selfplay_core.config import load_config
from selfplay_core.engines.base import Completion
from selfplay_core.methods.gasp import GASP, BandReward
from selfplay_core.methods.guide_judge import FrozenGuide, GuideConfig
from selfplay_core.methods.judges import GuideJudge, GuideJudgeConfig, JudgedRound
from selfplay_core.methods.sgs import ConjectureRound
from selfplay_core.problems import Problem
from selfplay_core.records import Anchor, IterationLog, Proposal
from selfplay_core.rewards import r_lemma
from selfplay_core.roles.common import Rejection
from selfplay_core.roles.teacher import TeacherProposal
from selfplay_core.run_context import RunContext
from selfplay_core.solve import SolveResult
from selfplay_core.toyworld.world import ToyOracle
from selfplay_core.toyworld.tasks import Task

ROOT = Path(__file__).resolve().parents[2]
TARGET = Task("ints", (("keep_even", None), ("square", None), ("dedupe", None)), "ints_csv")
LEMMA = Task("ints", (("keep_even", None), ("square", None)), "ints_csv")


class ScriptedEngine:
    """The Guide model's completions, in order; records the prompts it was given."""

    def __init__(self, texts):
        self.texts, self.prompts = list(texts), []

    def generate(self, prompts, n, sp):
        self.prompts += prompts
        return [[Completion(self.texts.pop(0))] for _ in prompts]


def prop(p, kind="conjecture", task=LEMMA, gid="g1", n=8):
    """An accepted proposal with pass rate p (p None: rejected at validation)."""
    q = Proposal(kind, Anchor(gid, TARGET.description(), TARGET.program(), goalpost_id=gid), "f",
                 "easier", "", Completion("x"), id=f"{kind}/{p}",
                 parsed=TeacherProposal(task.description(), task.program(), [[1, 2]]))
    if p is not None:
        q.problem = Problem(q.id, "call", [], entry_point="f")
        q.pass_rate = p
        c = round(p * n)
        q.solve = SolveResult(q.problem, [Completion("s")] * n, [True] * c + [False] * (n - c))
    return q


def test_sgs_scoring_guide_judgments_to_r_synth():
    texts = ["relevance: 5\nredundancy: 0\ncomplexity: 0\n### End",     # R_guide 8
             "Relevance = 2/5\nredundant: 1\ncomplexity: 2",              # 2 + 0 + 0 = 2
             "relevance: 4\nredundancy: 0\ncomplexity: 3",                # complexity 3: 0
             "no idea",                                                   # unparsed: 0
             "relevance: 3\nredundancy: 0\ncomplexity: 1"]                # 3 + 1 + 1 = 5
    engine = ScriptedEngine(texts)
    ctx = RunContext(load_config(None, ["method=sgs"]))
    rnd = ConjectureRound([], 2, "easier", FrozenGuide(engine, GuideConfig()), share=0.3)
    props = [prop(0.25), prop(0.5), prop(0.125), prop(0.375), prop(0.875), prop(None)]
    log = IterationLog()
    rnd.score(ctx, props, log)
    # the Guide saw each accepted proposal with its target, in the toy layout
    assert len(engine.prompts) == 5 and all(TARGET.description() in p for p in engine.prompts)
    assert [p.extra["guide"]["r_guide"] for p in props[:5]] == [8, 2, 0, 0, 5]
    assert props[3].extra["guide"] == {"parsed": False, "r_guide": 0.0, "rejection": "missing_relevance"}
    # R_solve (5 problems, easiest 30 % = 1.5 -> only 0.875): [.75, .5, .875, .625, 0]
    assert [p.extra["r_solve"] for p in props[:5]] == pytest.approx([0.75, 0.5, 0.875, 0.625, 0.0])
    # raw R_solve x R_guide = [6, 1, 0, 0, 0] -> min-max [1, 1/6, 0, 0, 0]; the reject: -0.5
    assert [p.reward for p in props] == pytest.approx([1.0, 1 / 6, 0.0, 0.0, 0.0, -0.5])
    m = log.metrics
    assert m["guide/conjecture/parsed"] == pytest.approx(0.8)
    assert m["guide/conjecture/relevance"] == pytest.approx((5 + 2 + 4 + 3) / 4)
    assert m["teacher/conjecture/easiest_share"] == pytest.approx(0.2)
    assert m["teacher/conjecture/reward"] == pytest.approx((1 + 1 / 6 - 0.5) / 6)


def test_the_toy_oracle_grades_the_guide_without_touching_rewards(executor):
    # oracle: (2, 0, 1) for LEMMA against TARGET (tests/toyworld/test_guide_oracle.py)
    engine = ScriptedEngine(["relevance: 2\nredundancy: 0\ncomplexity: 1",
                             "relevance: 5\nredundancy: 0\ncomplexity: 1"])
    # The oracle is one object: it also reads the proposals' fidelity, in the sandbox.
    ctx = RunContext(load_config(None, ["method=sgs"]), oracle=ToyOracle(), executor=executor)
    rnd = ConjectureRound([], 2, "easier", FrozenGuide(engine, GuideConfig()), share=0.3)
    props = [prop(0.25), prop(0.5)]
    log = IterationLog()
    rnd.score(ctx, props, log)
    before = [p.reward for p in props]
    rnd.diagnose(ctx, props, log)
    assert [p.reward for p in props] == before
    m = log.metrics
    assert m["guide/conjecture/accuracy/items"] == 2
    assert m["guide/conjecture/accuracy/relevance"] == 0.5
    assert m["guide/conjecture/accuracy/redundancy"] == 1.0 and m["guide/conjecture/accuracy/complexity"] == 1.0
    assert m["guide/conjecture/accuracy/r_guide"] == 0.5   # 4 = 4, 7 != 4
    assert props[0].extra["guide_oracle"] == {"relevance": 2, "redundancy": 0, "complexity": 1}


def test_gasp_x_guide_scales_the_band_reward_and_gates_the_student():
    # R_guide 8 -> weight 1; 2 -> 0.25; unparsed -> 0
    engine = ScriptedEngine(["relevance: 5\nredundancy: 0\ncomplexity: 0",
                             "relevance: 2\nredundancy: 1\ncomplexity: 2", "?", "?"])
    cfg = load_config(None, ["method.judge={name: guide, gate: 0.5}", "student.fill=none"])
    ctx = RunContext(cfg)
    band = BandReward((0.3, 0.7), -0.5, r_lemma)
    gcfg = cfg.method.judge
    rnd = JudgedRound("lemma", [], "easier", 2, band, GuideJudge(gcfg, FrozenGuide(engine, gcfg)))
    props = [prop(0.5, "lemma"), prop(0.375, "lemma"), prop(0.125, "lemma"), prop(0.625, "lemma")]
    log = IterationLog()
    rnd.score(ctx, props, log)
    # band rewards: (4p(1-p))^5 = 1, 0.9375^5, out of band -0.5 (kept), 0.9375^5 x 0
    assert [p.reward for p in props] == pytest.approx([1.0, 0.25 * 0.9375 ** 5, -0.5, 0.0])
    assert [p.extra["gated"] for p in props] == [False, True, True, True]
    assert log.metrics["guide/lemma/gated"] == 0.75
    method = GASP(cfg.method)
    student = method.student_batch(ctx, props, log, lambda name, fn, *a: fn(*a))
    assert [r.problem.id for _, r in student] == ["lemma/0.5"]


def test_gasp_x_guide_on_relevance_alone_keeps_a_deep_relevant_lift():
    # relevance 4 at complexity 3 (a depth-4 lift): R_guide 0, relevance weight 4/5; relevance 1:
    # 1/5, below the gate 0.4; an unreadable judgment: 0
    engine = ScriptedEngine(["relevance: 4\nredundancy: 0\ncomplexity: 3",
                             "relevance: 1\nredundancy: 0\ncomplexity: 0", "?"])
    gcfg = GuideJudgeConfig(score="relevance", gate=0.4)
    rnd = JudgedRound("lift", [], "harder", 2, BandReward((0.1, 0.5), -0.5, r_lemma),
                      GuideJudge(gcfg, FrozenGuide(engine, gcfg)))
    props = [prop(0.25, "lift"), prop(0.25, "lift"), prop(0.25, "lift")]
    rnd.score(RunContext(load_config(None)), props, IterationLog())
    band = 0.75 ** 5          # r_lemma's (4p(1-p))^5 at p = 1/4 (band only sets where it applies)
    assert [p.reward for p in props] == pytest.approx([0.8 * band, 0.2 * band, 0.0])
    assert [p.extra["guide"]["r_guide"] for p in props] == [0, 4, 0]
    assert [p.extra["gated"] for p in props] == [False, True, True]


def test_without_the_multiplier_the_guide_only_gates():
    engine = ScriptedEngine(["relevance: 0\nredundancy: 1\ncomplexity: 4"])
    gcfg = GuideJudgeConfig(reward="none", gate=0.1)
    rnd = JudgedRound("lemma", [], "easier", 2, BandReward((0.3, 0.7), -0.5, r_lemma),
                      GuideJudge(gcfg, FrozenGuide(engine, gcfg)))
    props = [prop(0.5, "lemma")]
    rnd.score(RunContext(load_config(None)), props, IterationLog())
    assert props[0].reward == 1.0 and props[0].extra["gated"]


def test_a_vllm_run_needs_a_guide_server():
    with pytest.raises(Exception, match="method.guide.vllm_url"):
        load_config(ROOT / "configs/qwen2.5-coder-7b-sgs.yaml", ["method.guide.vllm_url=null"])
    with pytest.raises(Exception, match="method.guide.prompt"):
        load_config(None, ["method=sgs", "method.guide.prompt=/no/such/file"])
    # GASP's Guide is its judge: the same checks, named by its key
    with pytest.raises(Exception, match="method.judge.prompt"):
        load_config(None, ["method.judge={name: guide, prompt: /no/such/file}"])


def test_a_resumed_run_continues_its_curve_and_conditions_only_on_unsolved_targets():
    """setup keeps the saved curve (RunState.method_state), the Guide loads the start weights,
    and the Conjecturer is anchored on targets not yet solved."""
    from selfplay_core.evaluation.solve_curve import CumulativeSolve
    from selfplay_core.methods.sgs import SGS
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    cfg = load_config(None, ["method=sgs", "method.targets_per_iteration=5"])
    gps = [Problem(f"g{i}", "call", [], entry_point="f", prompt=f"target {i}") for i in range(4)]
    ctx = RunContext(cfg, goalposts=gps, start_model_dir=ASSET_DIR)
    saved = CumulativeSolve([g.id for g in gps], solved={"g1": 3, "g3": 9}, generations=16,
                            curve=[[8.0, 0.25], [16.0, 0.5]])
    ctx.state.method_state["sgs"] = {"curve": saved.to_json(), "rounds": []}
    method = SGS(cfg.method)
    method.setup(ctx)
    assert CumulativeSolve.from_json(ctx.state.method_state["sgs"]["curve"]) == saved
    assert method.guide.engine.model.training is False   # the frozen copy, in eval mode
    (rnd,) = list(method.rounds(ctx, []))
    assert sorted(a.id for a in rnd.anchors) == ["g0", "g2"]
    assert all(a.goalpost_id == a.id and a.question.startswith("target") for a in rnd.anchors)
