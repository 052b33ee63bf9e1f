"""GASP: goalposts guide the teacher. Lemma (an easier variant of a goalpost along axis f or io,
rewarded by the band [0.3, 0.7]) then lift (a harder variant of the lemma with the goalpost
hidden, band [0.1, 0.5]); the student trains on both. Ablations: one-step medium / hard
(straight from the goalpost with one band), no io axis (teacher.axes), no rejection sampling
(teacher.rejection_sampling). `gasp+rlvr`: real training tasks join every student batch.

A judge (`method.judge`, one of `judges/`: guide, code, gradient) reads each round's accepted
proposals before the band reward: an in-band reward is multiplied by its weight in [0, 1], and
its gate can keep a proposal from the student. Executor-edited lemmas are their own method,
`gasp-edit` (`edited_lemmas.py`).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from selfplay_core import dynamic_goalposts as dynamic
from selfplay_core import rewards
from selfplay_core import stages as S
from selfplay_core.dynamic_goalposts import DynamicGoalpostsConfig
from selfplay_core.goalpost_view import require_privileged
from selfplay_core.methods.band_rewards import BandReward
from selfplay_core.methods.base import Method, MethodConfig, register
from selfplay_core.methods.judges import JudgedRound, JudgeSection
from selfplay_core.methods.rounds import DescribedRound
from selfplay_core.records import Anchor, Proposal


class GASPConfig(MethodConfig):
    name: Literal["gasp"] = "gasp"
    # Goalposts the teacher writes lemmas for each iteration.
    goalposts_per_iteration: int = Field(8, ge=1)
    # Proposals per goalpost (lemmas) or per lemma (lifts).
    proposals_per_anchor: int = Field(2, ge=1)
    # Student pass rates that earn a lemma (easier variant) its reward.
    lemma_band: tuple[float, float] = (0.3, 0.7)
    # Student pass rates that earn a lift (harder variant of a lemma) its reward.
    lift_band: tuple[float, float] = (0.1, 0.5)
    # Teacher reward for a valid proposal whose pass rate is outside its band.
    out_of_band: float = -0.5
    # Ablations: None = lemma -> lift; "medium"/"hard" = one step straight from the goalpost
    # with the lemma / lift band.
    one_step: Literal["medium", "hard"] | None = None
    # Goalposts solved at consecutive checks are replaced (selfplay_core/dynamic_goalposts.py).
    # None: the goalposts stay fixed.
    dynamic_goalposts: DynamicGoalpostsConfig | None = None
    # A judge of each lemma and lift (guide, code, gradient): its weight scales the in-band
    # reward and its gate can keep a proposal from the student. None: no judge.
    judge: JudgeSection | None = None
    # The privileged (sighted) ablation: the teacher is shown each goalpost's reference program
    # under its solution header, and what reads it (the code and gradient judges, method
    # gasp-edit) may run. A real goalpost has no reference, so off (the default) the teacher
    # gets the goalpost's question only (selfplay_core/goalpost_view.py); on, the run is tagged
    # privileged=true.
    privileged_sighted_teacher: bool = False

    # Keys of older configs and where they went: an unknown-key error names the new spelling.
    moved_keys: ClassVar[dict[str, str]] = {
        "guide": "method.judge: {name: guide, ...}",
        "code_relevance": "method.judge: {name: code, ...}",
        "gradient_relevance": "method.judge: {name: gradient, ...}",
        "lemma_program": "method.name: gasp-edit (statement_deletion lemmas)",
        "edit_screen": "method.edit_screen of method.name: gasp-edit"}

    def check(self, run) -> None:
        if self.judge is not None:
            self.judge.check(run, "method.judge")

    @model_validator(mode="after")
    def _privileged_judge(self):
        if self.judge is not None and self.judge.reads_reference:
            require_privileged(self, f"method.judge.name={self.judge.name}")
        return self

    @model_validator(mode="after")
    def _bands(self):
        for name in ("lemma_band", "lift_band"):
            lo, hi = getattr(self, name)
            if not 0.0 <= lo <= hi <= 1.0:
                raise ValueError(f"{name} must satisfy 0 <= low <= high <= 1, got {(lo, hi)}")
        return self


class GASPRLVRConfig(GASPConfig):
    name: Literal["gasp+rlvr"] = "gasp+rlvr"

    def check(self, run) -> None:
        super().check(run)
        if run.student.real_tasks_per_iteration == 0:
            raise ValueError("method gasp+rlvr mixes real tasks in: set "
                             "student.real_tasks_per_iteration > 0")


# Kinds of GASP proposals an earlier iteration's buffer holds (student.replay_tasks_per_iteration).
REPLAY_KINDS = ("lemma", "lift", "medium", "hard")


@register
class GASP(Method):
    Config = GASPConfig

    def __init__(self, config: GASPConfig):
        super().__init__(config)
        self.judge = config.judge.build() if config.judge is not None else None

    def round(self, kind, anchors, direction, band: BandReward) -> DescribedRound:
        c = self.config
        if self.judge is None:
            return DescribedRound(kind, anchors, direction, c.proposals_per_anchor, band)
        return JudgedRound(kind, anchors, direction, c.proposals_per_anchor, band, self.judge)

    def lemma_round(self, ctx, goalposts: list[Anchor], band: BandReward) -> DescribedRound:
        """The round that writes lemmas (a subclass may change who writes their programs)."""
        return self.round("lemma", goalposts, "easier", band)

    def rounds(self, ctx, done: list[Proposal]):
        c = self.config
        lemma = BandReward(c.lemma_band, c.out_of_band, rewards.r_lemma)
        lift = BandReward(c.lift_band, c.out_of_band, rewards.r_lift)
        goalposts = self.goalpost_anchors(ctx)
        if c.one_step:
            yield self.round(c.one_step, goalposts, "easier", lemma if c.one_step == "medium" else lift)
            return
        yield self.lemma_round(ctx, goalposts, lemma)
        parents = self.lift_parents(ctx, [p for p in done if p.kind == "lemma"])
        if parents:
            yield self.round("lift", parents, "harder", lift)

    def setup(self, ctx) -> None:
        if self.judge is not None:
            self.judge.setup(ctx)
        if self.config.dynamic_goalposts is not None:
            dynamic.start(ctx)

    def goalpost_anchors(self, ctx) -> list[Anchor]:
        """The iteration's goalposts: drawn from the fixed set, or from the dynamic active set
        after applying the latest goalpost check to it."""
        k, dyn = self.config.goalposts_per_iteration, self.config.dynamic_goalposts
        if dyn is None:
            return ctx.goalpost_anchors(k)
        return ctx.goalpost_anchors(k, dynamic.active_goalposts(ctx, dyn))

    def lift_parents(self, ctx, lemmas: list[Proposal]) -> list[Anchor]:
        """The accepted lemmas, shown without their goalpost; earlier lemmas from the buffer when
        none was accepted this iteration."""
        k = self.config.goalposts_per_iteration
        parents = [Anchor(p.id, p.parsed.question, p.parsed.code, p.anchor.goalpost_id, p.axis)
                   for p in lemmas if p.accepted]
        if not parents:
            parents = [a for a in ctx.buffer_anchors(k, kinds=("lemma",)) if a.id != "azr-seed"]
        return parents[:k]

    def student_batch(self, ctx, proposals, log, call):
        dynamic.log_counts(ctx, log)
        proposals = [p for p in proposals if not p.extra.get("gated")]  # a judge's gate
        student = S.student_tasks(ctx, proposals, log)
        if ctx.config.student.replay_tasks_per_iteration:
            student += call("solve_replay", S.solve_replay_tasks, ctx, REPLAY_KINDS, log)
        student += [("real", r) for r in call("solve_real", S.solve_real_tasks, ctx, log)]
        return student


@register
class GASPPlusRLVR(GASP):
    """GASP with `student.real_tasks_per_iteration` real training tasks in every student batch."""

    Config = GASPRLVRConfig
