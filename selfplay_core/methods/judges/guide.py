"""The Guide judge (`method.judge: {name: guide}`, no anchor paper has it): SGS's frozen Guide
(`guide_judge.py`) judges every accepted lemma and lift against its goalpost; an in-band reward
is multiplied by the normalised Guide score (`score`: R_guide / 8, or relevance / 5)
(`rewards.guided_band`), and with `gate` a proposal scored below the gate does not reach the
student. It reads the goalpost's question only, so it runs in the blind default."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from selfplay_core.methods.guide_judge import (GuideConfig, guide_weight, judge_proposals, load_guide,
                                               oracle_accuracy)
from selfplay_core.methods.judges.base import Judge, JudgeConfig
from selfplay_core.records import IterationLog, Proposal
from selfplay_core.registry import titled_by_name


class GuideJudgeConfig(GuideConfig, JudgeConfig):
    """The Guide's normalised score (R_guide / 8, or its relevance / 5) scales the lemma/lift
    band reward and can gate the student batch."""

    # the run form titles it by its name (GuideConfig, first among its bases, has no such rule)
    model_config = ConfigDict(json_schema_extra=titled_by_name)

    # The judge: a frozen copy of the start weights reviews each proposal against its goalpost.
    name: Literal["guide"] = "guide"
    # r_guide: SGS's R_guide / 8. It is 0 at complexity >= 3 (a depth-4 toy task), which is the
    # depth of a lift one step above a depth-3 lemma, i.e. the on-path lift of most goalposts:
    # SGS asks for easier problems, GASP's lifts are harder by design. relevance: the Guide's
    # relevance to the goalpost alone / 5 (unreadable judgment: 0), blind to the direction.
    score: Literal["r_guide", "relevance"] = "r_guide"
    # multiply: an in-band reward times the normalised Guide score; none: the Guide only gates.
    reward: Literal["multiply", "none"] = "multiply"
    # Proposals whose normalised Guide score is below `gate` do not reach the student (their
    # teacher reward is unchanged by the gate). None: no gate.
    gate: float | None = Field(None, ge=0, le=1)

    def build(self) -> "GuideJudge":
        return GuideJudge(self)


class GuideJudge(Judge):
    weight_key = "guide_weight"

    def __init__(self, config: GuideJudgeConfig, guide=None):
        super().__init__(config)
        self.guide = guide   # the FrozenGuide; loaded by setup unless given

    def setup(self, ctx) -> None:
        self.guide = load_guide(ctx, self.config)

    @staticmethod
    def targets(ctx, proposals: list[Proposal]) -> list[str]:
        """The goalpost each proposal descends from (a lift's is hidden from its prompt, not
        from the Guide)."""
        pool = ctx.goalposts_by_id()
        return [(pool[p.anchor.goalpost_id].prompt or "") if p.anchor.goalpost_id in pool
                else p.anchor.question for p in proposals]

    def judge(self, ctx, kind: str, accepted: list[Proposal], log: IterationLog) -> None:
        gate = self.config.gate
        judge_proposals(self.guide, accepted, self.targets(ctx, accepted), log, kind)
        for p in accepted:
            p.extra["guide_weight"] = guide_weight(p.extra["guide"], self.config.score)
            p.extra["gated"] = gate is not None and p.extra["guide_weight"] < gate
        if accepted and gate is not None:
            log.add(**{f"guide/{kind}/gated": sum(p.extra["gated"] for p in accepted) / len(accepted)})

    def diagnose(self, ctx, kind: str, accepted: list[Proposal], log: IterationLog) -> None:
        oracle_accuracy(ctx, accepted, self.targets(ctx, accepted), log, kind)
