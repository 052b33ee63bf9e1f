"""Rounds that several methods share.

`DescribedRound`: the proposer writes a described task — a question, a reference program and
test inputs (`roles.teacher`) — from an anchor (a goalpost, a lemma, a buffer item); the
sandbox verifies it by running the reference twice for the expected outputs (`stages.validate`);
the student writes the program from the question (`stages.estimate_pass_rates`); the reward is
the method's. GASP's lemma and lift rounds, its one-step ablations and AZR's induction are this
round with different anchors, direction and reward.
"""

from __future__ import annotations

from typing import Sequence

from selfplay_core import stages as S
from selfplay_core.methods.base import Round
from selfplay_core.records import Anchor, IterationLog, Proposal


class DescribedRound(Round):
    diagnoses = True  # the toy world's fidelity oracle reads question + code + inputs

    def __init__(self, kind: str, anchors: Sequence[Anchor], direction: str, per_anchor: int,
                 reward: S.ProposerReward):
        self.kind = kind
        self.anchors = list(anchors)
        self.direction = direction
        self.per_anchor = per_anchor
        self.reward = reward

    def propose(self, ctx) -> list[Proposal]:
        return S.propose(ctx, self.anchors, self.kind, self.direction, self.per_anchor)

    def validate(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        S.validate(ctx, proposals, log)

    def estimate(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        S.estimate_pass_rates(ctx, proposals)

    def score(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        S.score(ctx, proposals, self.reward, log)

    def diagnose(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        S.fidelity(ctx, proposals, log)
