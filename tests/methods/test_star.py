"""STaR: the hint, the rationalization stage (answers run in the real sandbox, the engine
scripted so the yield is known by hand), what the learner sees (passing completions, the
rationalized ones under the prompt without the hint, rescored there), and the all-ones
advantage."""

import pytest

from selfplay_core.config import ConfigError, load_config
from selfplay_core.engines.base import Completion
from selfplay_core.methods import method_for
from selfplay_core.methods.star import Rationalization, STaR, hint_text, hinted
from selfplay_core.problems import Problem, TestCase
from selfplay_core.records import IterationLog
from selfplay_core.rl.advantages import ESTIMATORS, Scored
from selfplay_core.run_context import RunContext
from selfplay_core.solve import SolveResult, student_prompt_for

ODD = "Given a list of numbers, keep the odd numbers."
REF = "def f(x):\n    return [v for v in x if v % 2 == 1]\n"


def toy_task(pid="t1"):
    return Problem(pid, "call", [TestCase(args=[[1, 2, 3]], expected=[1, 3]), TestCase(args=[[4]], expected=[]),
                                 TestCase(args=[[5, 6, 7]], expected=[5, 7])],
                   entry_point="f", prompt=ODD, time_limit_s=1.0, memory_limit_mb=256,
                   metadata={"reference": REF, "signature": "def f(x):"})


def star_config(*extra):
    return load_config(None, ["method=star", "student.real_tasks_per_iteration=2",
                              "student.samples_per_task=2", *extra])


def test_the_hint_shows_visible_tests_or_the_reference():
    p = toy_task()
    assert hint_text(p, "outputs", 2) == ("Hint: the expected results of some tests are\n"
                                          "f([1, 2, 3]) == [1, 3]\nf([4]) == []")
    assert hint_text(p, "reference", 2) == "Hint: a correct solution is\n" + REF.rstrip()
    assert hint_text(p, "none", 2) == ""
    # LCB: only public tests are visible; stdin tests show input and output
    lcb = Problem("a", "stdin", [TestCase(stdin="1 2\n", expected="3\n"), TestCase(stdin="5 5\n", expected="10\n")],
                  prompt="Add.", metadata={"n_public": 1})
    assert hint_text(lcb, "outputs", 2) == "Hint: the expected results of some tests are\ninput:\n1 2\noutput:\n3"
    assert hint_text(lcb, "reference", 2).endswith("output:\n3")      # no reference: the outputs
    assert hint_text(Problem("b", "stdin", lcb.tests, metadata={"n_public": 0}), "outputs", 2) is None
    leet = Problem("c", "call", [TestCase(args=[[1], 2], expected=True)], entry_point="Solution.check")
    assert hint_text(leet, "outputs", 1).endswith("check([1], 2) == True")
    h = hinted(p, "outputs", 1)
    assert h.prompt == ODD + "\nHint: the expected results of some tests are\nf([1, 2, 3]) == [1, 3]"
    assert h.tests == p.tests and p.prompt == ODD


def test_sft_gives_every_rollout_advantage_one():
    batch = [Scored(1.0, "student", "real", "t1", True), Scored(0.0, "teacher", "x", "p", None)]
    assert ESTIMATORS["sft"](batch) == [1.0, 1.0]


def test_star_needs_real_tasks_and_no_replay():
    assert isinstance(method_for(star_config().method), STaR)
    assert star_config().method.advantage == "sft"
    with pytest.raises(ConfigError, match="real_tasks_per_iteration"):
        load_config(None, ["method=star"])
    with pytest.raises(ConfigError, match="replay"):
        star_config("student.replay_tasks_per_iteration=2")


class HintedOnly:
    """Right only when the prompt carries a hint: the yield is then known by hand."""

    def generate(self, prompts, n, sampling):
        out = []
        for pr in prompts:
            body = "    return [v for v in x if v % 2 == 1]\n" if "Hint:" in pr else "    return x\n"
            out.append([Completion(body, [7, 8], [-0.5, -0.5], "stop", [1, 2, 3, len(pr)]) for _ in range(n)])
        return out


def _failed(problem):
    comps = [Completion("    return x\n", [9], [-1.0], "stop", [1, 2, 3]) for _ in range(2)]
    return SolveResult(problem, comps, [False, False], ["wrong_answer"] * 2)


@pytest.mark.parametrize("hint,solved", [("outputs", 2), ("reference", 2), ("none", 0)])
def test_rationalization_retries_failures_with_the_hint(executor, hint, solved):
    cfg = star_config(f"method.hint={hint}")
    ctx = RunContext(cfg, executor=executor, engine=HintedOnly())
    method, log = method_for(cfg.method), IterationLog()
    no_ids = SolveResult(toy_task("t3"), [Completion("x")], [False])     # no prompt tokens: skipped
    out = method.rationalize(ctx, [_failed(toy_task("t1")), _failed(toy_task("t2")), no_ids], log)
    assert len(out) == solved
    assert log.metrics["student/rationalized/retried"] == 2
    assert log.metrics["student/rationalized/yield"] == solved / 2
    for r in out:   # the task as posed without the hint; the first attempt's prompt tokens
        assert isinstance(r, Rationalization) and r.problem.prompt == ODD and r.train_prompt_ids == [1, 2, 3]
        assert r.passed == [True, True]


class FixedScores:
    def __init__(self):
        self.seen = []

    def completion_logprobs(self, rollouts):
        self.seen += rollouts
        return [[-2.0] * len(r.completion_ids) for r in rollouts]


def test_the_learner_sees_passing_completions_and_rationalizations_without_their_hint():
    cfg = star_config("method.keep_per_task=1")
    learner = FixedScores()
    ctx = RunContext(cfg, learner=learner)
    p = toy_task()
    first = SolveResult(p, [Completion("a", [4], [-0.1], "stop", [1, 2]), Completion("b", [5], [-0.2], "stop", [1, 2])],
                        [False, True])
    miss = SolveResult(toy_task("t2"), [Completion("c", [6], [-0.3], "stop", [1, 2])], [False])
    rat = Rationalization(toy_task("t2"), [Completion("d", [7, 8], [-0.4, -0.4], "stop", [1, 2, 99, 98]),
                                           Completion("e", [9], [-0.5], "stop", [1, 2, 99, 98])],
                          [True, True], train_prompt_ids=[1, 2])
    rolls = method_for(cfg.method).rollouts(ctx, [], [("real", first), ("real", miss), ("rationalized", rat)])
    assert [(r.prompt_ids, r.completion_ids, r.old_logprobs) for r in rolls] == [
        ([1, 2], [5], [-0.2]),              # the passing first-pass sample, as sampled
        ([1, 2], [7, 8], [-2.0, -2.0]),     # one rationalization (keep_per_task), hint gone, rescored
    ]
    assert learner.seen == [rolls[1]]
    assert [r.meta["kind"] for r in rolls] == ["real", "rationalized"]
    assert method_for(cfg.method).advantages(ctx, rolls) == [1.0, 1.0]


def test_rescored_logprobs_are_the_policys_under_the_prompt_without_the_hint(micro_model_dir):
    """A hinted sample, moved to the prompt without the hint and rescored: the learner's first
    step then sees ratio 1 (old = current policy); left with the hinted logprobs it would not."""
    from selfplay_core.loop import engine_setup as E
    from selfplay_core.loop.context import make_learner
    from selfplay_core.rl.rollout import Rollout
    from selfplay_core.engines.base import SamplingParams

    cfg = load_config(None, [f"model.path={micro_model_dir}"])
    engine = E.make_hf_engine(cfg, micro_model_dir)
    learner = make_learner(cfg, micro_model_dir, engine.tokenizer, resume=False)
    p = toy_task()
    sp = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=24, seed=3)
    plain = engine.generate([student_prompt_for(p)], 1, sp)[0][0]
    hint = engine.generate([student_prompt_for(hinted(p, "reference", 2))], 1, sp)[0][0]
    # the engine's own logprobs of an unhinted sample are what the learner computes
    r = Rollout(plain.prompt_token_ids, plain.token_ids, plain.logprobs, 1.0, temperature=1.0)
    assert learner.completion_logprobs([r])[0] == pytest.approx(plain.logprobs, abs=1e-4)
    moved = Rollout(plain.prompt_token_ids, hint.token_ids, hint.logprobs, 1.0, temperature=1.0)
    rescored = learner.completion_logprobs([moved])[0]
    assert rescored != pytest.approx(hint.logprobs, abs=1e-3)      # the hint changed them
    moved.old_logprobs = rescored
    assert learner.step([moved])["learner/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
