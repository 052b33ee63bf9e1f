"""The frozen Guide that SGS (and GASP's Guide judge, `judges/guide.py`) consult: a copy of the initial policy, loaded once
per run (`Method.setup`), that judges each accepted proposal against the target it was written
for (`roles.guide`: relevance 0-5, redundancy 0/1, complexity 0-4). Its judgments become
R_guide (`rewards.r_guide`); one it does not answer in the expected format scores 0 and is
counted (`guide/<kind>/parsed`).

The Guide stays frozen as in SGS: the learner never updates it, so the Conjecturer cannot
move its judge. On the hf engine it is a second in-process copy of the start weights (cheap for
the toy model); on a vLLM run it is a second server serving the start weights
(`guide.vllm_url`). A world with a Guide oracle (the toy world) gets the Guide's accuracy
against it as a diagnostic (`guide/<kind>/accuracy/...`); the oracle never enters a reward.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from pydantic import Field

from selfplay_core import rewards
from selfplay_core.engines.base import SamplingParams
from selfplay_core.frozen import FrozenConfig
from selfplay_core.records import IterationLog, Proposal
from selfplay_core.roles.common import Rejection
from selfplay_core.roles.guide import RANGES, SGS_KEYS, STOP, GuideScores, load_prompt_template, parse_guide, render_guide_prompt

log = logging.getLogger(__name__)


class GuideConfig(FrozenConfig):
    """The frozen Guide of a method (SGS's `method.guide`, GASP's `method.judge: {name: guide}`)."""

    # "toy": the toy world's layout (### Target / ### Proposal / ### Solution / ### Review);
    # "code": a prompt for real code problems (roles.guide.CODE_GUIDE_PROMPT); or a file with
    # the fields {target}, {question}, {code}.
    prompt: str = "toy"
    temperature: float = Field(0.0, ge=0)     # greedy: one judgment per proposal
    # Longest judgment the Guide writes, in tokens.
    max_new_tokens: int = Field(40, ge=1)
    # vLLM runs: a second server serving the start weights (the Guide must stay frozen while
    # the policy's server receives every update). None: an in-process hf copy.
    vllm_url: str | None = None

    def check(self, run, where: str) -> None:
        try:
            load_prompt_template(self.prompt)
        except ValueError as e:
            raise ValueError(f"{where}.prompt: {e}") from None
        if run.engine.backend == "vllm" and not self.vllm_url:
            raise ValueError(f"{where}.vllm_url: the frozen Guide of a vLLM run is a second server "
                             "serving the start weights (e.g. `selfplay vllm-serve MODEL --port "
                             f"8001`); set {where}.vllm_url to it")


class FrozenGuide:
    """Judgments of (target, question, code) items by a generation engine that never changes."""

    def __init__(self, engine, config: GuideConfig, seed: int = 0):
        self.engine = engine
        self.config = config
        self.template = load_prompt_template(config.prompt)
        self.seed = seed

    def prompts(self, items: Sequence[tuple[str, str, str]]) -> list[str]:
        return [render_guide_prompt(self.template, t, q, c) for t, q, c in items]

    def judge(self, items: Sequence[tuple[str, str, str]]) -> list[GuideScores | Rejection]:
        if not items:
            return []
        c = self.config
        sp = SamplingParams(temperature=c.temperature, max_new_tokens=c.max_new_tokens, stop=STOP,
                            seed=self.seed)
        self.seed += 1
        groups = self.engine.generate(self.prompts(items), 1, sp)
        return [parse_guide(g[0].text, require=SGS_KEYS) for g in groups]


def load_guide(ctx, config: GuideConfig) -> FrozenGuide:
    """The run's frozen Guide: the start weights (ctx.start_model_dir, also on resume)."""
    if config.vllm_url:
        from selfplay_core.engines.vllm import VLLMEngine, VLLMEngineConfig

        engine = VLLMEngine(VLLMEngineConfig(base_url=config.vllm_url))
    else:
        import torch

        from selfplay_core.engines.hf import HFEngine

        start = Path(ctx.start_model_dir or ctx.model_dir)
        log.info("Guide: a frozen copy of %s", start)
        engine = HFEngine(str(start), batch_size=ctx.config.engine.batch_size,
                          dtype=getattr(torch, ctx.config.model.dtype))
    return FrozenGuide(engine, config, seed=ctx.config.seed * 7_919 + 17)


def guide_reward(scores: GuideScores | Rejection) -> float:
    """R_guide of one judgment; 0 for a judgment the parser rejected."""
    if isinstance(scores, Rejection):
        return 0.0
    return rewards.r_guide(scores.relevance, scores.redundancy, scores.complexity)


def guide_weight(judgment: dict, score: str) -> float:
    """The normalised Guide score in [0, 1] of one judgment (`p.extra["guide"]`)."""
    if score == "relevance":
        return judgment["relevance"] / RANGES["relevance"][1] if judgment["parsed"] else 0.0
    return judgment["r_guide"] / rewards.R_GUIDE_MAX


def judge_proposals(guide: FrozenGuide, proposals: Sequence[Proposal], targets: Sequence[str],
                    log: IterationLog, kind: str) -> list[float]:
    """The Guide's judgment of each accepted proposal against its target's text: stored in
    `p.extra["guide"]` (the scores, R_guide, and whether it parsed); returns R_guide per
    proposal. Metrics: parse share and the mean of each scale, under guide/<kind>/."""
    items = [(t, p.parsed.question, p.parsed.code) for p, t in zip(proposals, targets)]
    judged = guide.judge(items)
    out = []
    for p, s in zip(proposals, judged):
        r = guide_reward(s)
        p.extra["guide"] = {"parsed": not isinstance(s, Rejection), "r_guide": r,
                            **({k: getattr(s, k) for k in SGS_KEYS} if not isinstance(s, Rejection)
                               else {"rejection": s.reason})}
        out.append(r)
    ok = [s for s in judged if not isinstance(s, Rejection)]
    if judged:
        m = {f"guide/{kind}/parsed": len(ok) / len(judged),
             f"guide/{kind}/r_guide": sum(out) / len(out)}
        for k in SGS_KEYS:
            if ok:
                m[f"guide/{kind}/{k}"] = sum(getattr(s, k) for s in ok) / len(ok)
        log.add(**m)
    return out


def oracle_accuracy(ctx, proposals: Sequence[Proposal], targets: Sequence[str], log: IterationLog,
                    kind: str) -> None:
    """Diagnostic: exact-match accuracy of the Guide's judgments (and of the R_guide they give)
    against the world's oracle, on the proposals the oracle can judge. Never a reward."""
    oracle = getattr(ctx, "oracle", None)
    if oracle is None:
        return
    hits = {k: 0 for k in (*SGS_KEYS, "r_guide")}
    n = 0
    for p, t in zip(proposals, targets):
        g = p.extra.get("guide")
        if g is None:
            continue
        truth = oracle.guide_judgment(t, p.parsed.question, p.parsed.code, p.faithful)
        if truth is None:
            continue
        n += 1
        want = {k: getattr(truth, k) for k in SGS_KEYS}
        p.extra["guide_oracle"] = want
        for k in SGS_KEYS:
            hits[k] += int(g.get(k) == want[k])
        hits["r_guide"] += int(g["r_guide"] == rewards.r_guide(**want))
    if n:
        log.add(**{f"guide/{kind}/accuracy/{k}": v / n for k, v in hits.items()},
                **{f"guide/{kind}/accuracy/items": n})
