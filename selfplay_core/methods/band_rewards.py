"""GASP's teacher rewards as ProposerRewards: the learnability band, and the band scaled by a
relevance judge's weight (the Guide, code similarity or gradient alignment)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from selfplay_core import rewards
from selfplay_core.records import Proposal


@dataclass(frozen=True)
class BandReward:
    """GASP's learnability band: `formula(p)` inside `band`, `out_of_band` outside."""

    band: tuple[float, float]
    out_of_band: float
    formula: Callable[..., float]

    def __call__(self, ctx, accepted: list[Proposal]) -> list[float]:
        return [self.formula(p.pass_rate, band=self.band, out_of_band=self.out_of_band) for p in accepted]

    def metrics(self, accepted: list[Proposal]) -> dict[str, float]:
        lo, hi = self.band
        return {"in_band": sum(lo <= p.pass_rate <= hi for p in accepted) / len(accepted)}


@dataclass(frozen=True)
class GuidedBandReward:
    """GASP x Guide / x code relevance: the band reward of each accepted proposal, an in-band
    value times its judge's weight in [0, 1] (stored by the round's `score` in `p.extra[key]`)."""

    band: BandReward
    multiply: bool = True
    key: str = "guide_weight"

    def __call__(self, ctx, accepted: list[Proposal]) -> list[float]:
        base = self.band(ctx, accepted)
        if not self.multiply:
            return base
        return [rewards.guided_band(r, p.extra[self.key]) for r, p in zip(base, accepted)]

    def metrics(self, accepted: list[Proposal]) -> dict[str, float]:
        return self.band.metrics(accepted)
