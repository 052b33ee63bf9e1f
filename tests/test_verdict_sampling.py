"""The end-of-run verdict's two evaluations draw with one seed per run (common random numbers),
on the real HF engine serving the committed toy checkpoint and the real sandbox: an unchanged
policy then scores exactly the same at the end as at the start, where two independent samplings
of it do not — so the paired difference measures the policy, not the draw."""

from dataclasses import replace
from types import SimpleNamespace

import pytest

from selfplay_core import stages as S
from selfplay_core.config import load_config
from selfplay_core.records import IterationLog
from selfplay_core.run_context import RunContext
from selfplay_core.solve import solve


@pytest.fixture(scope="module")
def toy():
    import torch

    from selfplay_core.engines.hf import HFEngine
    from selfplay_core.toyworld.bootstrap import ASSET_DIR
    from selfplay_core.toyworld.splits import build_world

    torch.set_num_threads(1)
    problems = [p for p in build_world(0).eval.problems if p.metadata.get("depth") in (1, 2)][:24]
    return HFEngine(str(ASSET_DIR), batch_size=64), problems


def _ctx(toy, executor, sets):
    engine, problems = toy
    ctx = RunContext(load_config(None, ["eval.n=4", "eval.ks=[1, 4]", *sets]))
    ctx.engine, ctx.executor = engine, executor
    ctx.world = SimpleNamespace(heldout_problems=problems)   # a world is its problem lists here
    return ctx


def test_verdict_draws_the_same_samples_at_start_and_end(toy, executor):
    ctx = _ctx(toy, executor, ["eval.verdict_n=6"])
    counter = ctx.state.seed_counter
    start = S.evaluate_full(ctx, IterationLog())
    assert all(n == 6 for n, _ in ctx.state.eval_start.values())        # verdict_n, not eval.n
    assert ctx.state.seed_counter == counter + 1   # the run's seed stream advances as before
    end = S.evaluate_full(ctx, IterationLog())
    assert ctx.state.eval_end == ctx.state.eval_start
    assert end["verdict/pass@4_diff"] == 0.0 and end["verdict/pass@4_se"] == 0.0
    assert start["eval_full/all/pass@4"] == end["eval_full/all/pass@4"]

    # What the fixed seed takes away: two fresh seeds give the same policy different counts.
    engine, problems = toy
    def draw(seed):
        sp = replace(S.student_sampling(ctx), seed=seed)
        return {r.problem.id: (r.n, r.c) for r in solve(engine, executor, problems, 6, sp)}

    assert draw(11) != draw(12)


def test_verdict_samples_are_at_least_eval_n():
    assert load_config(None, []).eval.verdict_samples == 16          # the toy default
    assert load_config(None, ["eval.verdict_n=4"]).eval.verdict_samples == 8   # eval.n = 8
    assert load_config(None, ["eval.n=20", "eval.ks=[1, 20]"]).eval.verdict_samples == 20


class UnseededEngine:
    """Stands in for vLLM's CPU build, whose draws a seed cannot repeat (a real one needs a
    server; tests/engines/test_vllm_real.py has those). The verdict must not sample from it."""

    takes_seeds = False

    def generate(self, prompts, n, sampling):
        raise AssertionError("the verdict sampled from an engine that takes no seeds")


def test_an_engine_without_seeds_gets_a_seeded_copy_of_the_learners_weights(toy, executor):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    ctx = _ctx(toy, executor, ["eval.verdict_n=null"])
    policy = AutoModelForCausalLM.from_pretrained(str(ASSET_DIR)).train()
    ctx.engine = UnseededEngine()
    ctx.learner, ctx.tokenizer = SimpleNamespace(unwrapped=policy), AutoTokenizer.from_pretrained(str(ASSET_DIR))
    S.evaluate_full(ctx, IterationLog())
    end = S.evaluate_full(ctx, IterationLog())
    assert ctx.state.eval_end == ctx.state.eval_start and end["verdict/pass@4_diff"] == 0.0
    assert policy.training     # the learner's own module was not switched to eval mode
    # ... and the counts are the HF engine's at the verdict's seed: the same as sampling the
    # start checkpoint directly
    engine, problems = toy
    sp = replace(S.student_sampling(ctx), seed=S.verdict_seed(ctx.config.seed))
    direct = {r.problem.id: [r.n, r.c] for r in solve(engine, executor, problems, 4, sp)}
    assert direct == ctx.state.eval_start


def test_the_printed_verdict_is_on_the_configured_ks():
    from selfplay_core.loop.recorder import verdict_lines
    from selfplay_core.state import RunState

    st = RunState(eval_start={"a": [16, 2], "b": [16, 0]}, eval_end={"a": [16, 4], "b": [16, 1]})
    lines = verdict_lines(st, (1, 8))
    assert [line.split()[1] for line in lines] == ["pass@1", "pass@8"]
    assert [line.split()[1] for line in verdict_lines(st)] == ["pass@1", "pass@16"]
