"""The code judge (`method.judge: {name: code}`): the line similarity of a proposal's program to
its parent's (the goalpost's reference for a lemma, the lemma's program for a lift)
(`selfplay_core/code_relevance.py`): no model, no world oracle. An in-band reward is multiplied
by similarity ** power (0 for a program that only copies its parent's lines); a proposal whose
similarity is below `gate`, or a copy, does not reach the student (its teacher reward is
unchanged by the gate). It reads the goalposts' reference programs: privileged ablation only."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from selfplay_core.code_relevance import line_similarity, relevance_weight
from selfplay_core.config_errors import ConfigError
from selfplay_core.methods.judges.base import Judge, JudgeConfig
from selfplay_core.records import IterationLog, Proposal


class CodeJudgeConfig(JudgeConfig):
    """A proposal's program judged by its line similarity to its parent's."""

    reads_reference = True

    # The judge: the parent's program, read line by line, not a model.
    name: Literal["code"] = "code"
    # The in-band reward is multiplied by line similarity to the parent to this power.
    power: float = Field(1.0, gt=0)
    # multiply: scale the teacher's reward by the similarity; none: gate only.
    reward: Literal["multiply", "none"] = "multiply"
    # Proposals less similar than this to their parent do not reach the student (None: no gate).
    gate: float | None = Field(None, ge=0, le=1)

    def build(self) -> "CodeJudge":
        return CodeJudge(self)


class CodeJudge(Judge):
    weight_key = "code_weight"

    def setup(self, ctx) -> None:
        # a goalpost without a reference program would zero every lemma's reward: stop first
        goalposts = ctx.goalposts
        missing = [g.id for g in goalposts if not (g.metadata or {}).get("reference")]
        if missing:
            raise ConfigError(f"method.judge (code): {len(missing)} of {len(goalposts)} goalposts "
                              f"have no reference program (e.g. {missing[0]}); it compares each "
                              "lemma's program with its goalpost's: use goalposts with reference "
                              "solutions or drop method.judge")

    def judge(self, ctx, kind: str, accepted: list[Proposal], log: IterationLog) -> None:
        c = self.config
        for p in accepted:
            sim = line_similarity(p.anchor.code, p.parsed.code)
            p.extra["code_similarity"] = sim
            p.extra["code_weight"] = relevance_weight(sim, c.power)
            # a copy of its parent (weight 0) is no variant either: it does not reach the student
            p.extra["gated"] = c.gate is not None and (sim < c.gate or p.extra["code_weight"] == 0.0)
        if accepted:
            log.add(**{f"teacher/{kind}/code_similarity":
                       sum(p.extra["code_similarity"] for p in accepted) / len(accepted)})
            if c.gate is not None:
                log.add(**{f"teacher/{kind}/code_gated": sum(p.extra["gated"] for p in accepted) / len(accepted)})
