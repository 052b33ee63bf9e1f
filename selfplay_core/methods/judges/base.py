"""What a GASP judge is: one object that reads a round's accepted proposals before the band
reward is scored, stores a weight in [0, 1] per proposal (`p.extra[weight_key]`, which the band
reward is multiplied by when its config's `reward` is `multiply`) and whether its gate keeps the
proposal from the student (`p.extra["gated"]`), and may add diagnostics after the round.

`JudgedRound` is the one place a judge is applied: GASP builds it for every lemma and lift round
when `method.judge` is set. Nothing outside a judge's own file knows which judge runs.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import ConfigDict

from selfplay_core import stages as S
from selfplay_core.frozen import FrozenConfig
from selfplay_core.methods.band_rewards import BandReward, GuidedBandReward
from selfplay_core.methods.rounds import DescribedRound
from selfplay_core.records import IterationLog, Proposal
from selfplay_core.registry import titled_by_name


class JudgeConfig(FrozenConfig):
    """A judge's config section (`method.judge`); `name` picks the judge."""

    # the run form offers each judge under its name
    model_config = ConfigDict(json_schema_extra=titled_by_name)

    # Whether the judge reads each goalpost's reference program (then the run must be the
    # privileged ablation, method.privileged_sighted_teacher: true).
    reads_reference: ClassVar[bool] = False

    def build(self) -> "Judge":
        raise NotImplementedError

    def check(self, run, where: str) -> None:
        """Checks against the rest of the run config; `where` is this section's key."""


class Judge:
    """One judge of GASP's rounds. Subclasses set `weight_key` and fill `judge`."""

    weight_key: ClassVar[str]

    def __init__(self, config: JudgeConfig):
        self.config = config

    def setup(self, ctx) -> None:
        """Once per run (and after a resume): load a model, check the goalposts."""

    def judge(self, ctx, kind: str, accepted: list[Proposal], log: IterationLog) -> None:
        """Set `p.extra[weight_key]` and `p.extra["gated"]` of each accepted proposal; log its
        metrics under `kind`."""
        raise NotImplementedError

    def diagnose(self, ctx, kind: str, accepted: list[Proposal], log: IterationLog) -> None:
        """Diagnostics against the world's oracle (never a reward)."""


class JudgedRound(DescribedRound):
    """A lemma or lift round whose accepted proposals a judge reads before the band reward."""

    def __init__(self, kind, anchors, direction, per_anchor, band: BandReward, judge: Judge):
        super().__init__(kind, anchors, direction, per_anchor,
                         GuidedBandReward(band, multiply=judge.config.reward == "multiply",
                                          key=judge.weight_key))
        self.judge = judge

    def score(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        self.judge.judge(ctx, self.kind, [p for p in proposals if p.accepted], log)
        S.score(ctx, proposals, self.reward, log)

    def diagnose(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        S.fidelity(ctx, proposals, log)
        self.judge.diagnose(ctx, self.kind, [p for p in proposals if p.accepted], log)
