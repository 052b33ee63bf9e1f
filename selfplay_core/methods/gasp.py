"""GASP: goalposts guide the teacher. Lemma (an easier variant of a goalpost along axis f or io,
rewarded by the band [0.3, 0.7]) then lift (a harder variant of the lemma with the goalpost
hidden, band [0.1, 0.5]); the student trains on both. Ablations: one-step medium / hard
(straight from the goalpost with one band), no io axis (teacher.axes), no rejection sampling
(teacher.rejection_sampling). `gasp+rlvr`: real training tasks join every student batch.

GASP x Guide (`method.guide`, no anchor paper has it): SGS's frozen Guide judges every accepted
lemma and lift against its goalpost; an in-band reward is multiplied by the normalised Guide
score (`guide.score`: R_guide / 8, or relevance / 5) (`rewards.guided_band`), and with
`guide.gate` a proposal scored below the gate does not reach the student.

GASP x code relevance (`method.code_relevance`): the same scaling and gate with a judge that reads
code alone, the line similarity of a proposal's program to its parent's (goalpost for a lemma,
lemma for a lift) (`code_relevance.py`): no model, no world oracle.

GASP x gradient relevance (`method.gradient_relevance`): the same scaling and gate with the cosine
of the student's gradient on a proposal and the gradient toward its goalpost's reference program
(`gradient_relevance.py`): the model judges, no judge model, no world oracle.

GASP with executor-edited lemmas (`method.lemma_program: statement_deletion`): the lemma's
program is the goalpost's reference with one statement deleted, and the teacher only describes
it (`edited_lemmas.py`); the lift round is unchanged.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from selfplay_core import rewards
from selfplay_core import stages as S
from selfplay_core.code_relevance import line_similarity, relevance_weight
from selfplay_core.config_errors import ConfigError
from selfplay_core.dynamic_goalposts import DynamicState, update as dynamic_update
from selfplay_core.frozen import FrozenConfig
from selfplay_core.goalpost_view import require_privileged
from selfplay_core.methods.band_rewards import BandReward, GuidedBandReward
from selfplay_core.methods.base import Method, MethodConfig, register
from selfplay_core.methods.guide_judge import (GASPGuideConfig, guide_weight, judge_proposals, load_guide,
                                               oracle_accuracy)
from selfplay_core.methods.edited_lemmas import StatementDeletionRound, check_editable
from selfplay_core.methods.gradient_relevance import (GradientRelevanceConfig, GradientRelevanceRound,
                                                      check_goalpost_programs)
from selfplay_core.methods.rounds import DescribedRound
from selfplay_core.records import Anchor, IterationLog, Proposal


class DynamicGoalpostsConfig(FrozenConfig):
    """Dynamic goalposts (selfplay_core/dynamic_goalposts.py): a goalpost solved (pass@k > 0 at
    eval.goalpost_k) at `solved_checks` consecutive goalpost checks stops anchoring lemmas and
    the next-hardest unsolved candidate (the mining's reserve) takes its place."""

    # Consecutive goalpost checks a goalpost must be solved at before it is replaced.
    solved_checks: int = Field(2, ge=1)


class CodeRelevanceConfig(FrozenConfig):
    """GASP x code relevance: an in-band reward times line_similarity(parent, proposal) ** power
    (0 for a program that only copies its parent's lines); a proposal whose similarity is below
    `gate`, or a copy, does not reach the student (its teacher reward is unchanged by the gate)."""

    # The in-band reward is multiplied by line similarity to the parent to this power.
    power: float = Field(1.0, gt=0)
    # multiply: scale the teacher's reward by the similarity; none: gate only.
    reward: Literal["multiply", "none"] = "multiply"
    # Proposals less similar than this to their parent do not reach the student (None: no gate).
    gate: float | None = Field(None, ge=0, le=1)


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
    # None: the goalposts stay fixed.
    dynamic_goalposts: DynamicGoalpostsConfig | None = None
    # GASP x Guide: a frozen Guide scales the band reward and can gate the student batch.
    guide: GASPGuideConfig | None = None
    # GASP x code relevance: the parent's program judges, not a model.
    code_relevance: CodeRelevanceConfig | None = None
    # GASP x gradient relevance: the student's gradient on a proposal against its goalpost's.
    gradient_relevance: GradientRelevanceConfig | None = None
    # Who writes a lemma's program: the teacher (GASP), or the executor, deleting one statement
    # of the goalpost's reference, with the teacher writing the question and inputs for it.
    lemma_program: Literal["teacher", "statement_deletion"] = "teacher"
    # With statement_deletion: run each deletion on the goalpost's tests first and keep those that
    # run and change an output; draw deletions not yet in the buffer before repeats.
    edit_screen: bool = False
    # The privileged (sighted) ablation: the teacher is shown each goalpost's reference program
    # under its solution header, and the judges that read it (code_relevance,
    # gradient_relevance, lemma_program=statement_deletion) may run. A real goalpost has no
    # reference, so off (the default) the teacher gets the goalpost's question only
    # (selfplay_core/goalpost_view.py); on, the run is tagged privileged=true.
    privileged_sighted_teacher: bool = False

    def check(self, run) -> None:
        if self.guide is not None:
            self.guide.check(run, "method.guide")

    @model_validator(mode="after")
    def _one_judge(self):
        judges = [n for n in ("guide", "code_relevance", "gradient_relevance") if getattr(self, n) is not None]
        if len(judges) > 1:
            raise ValueError(f"method.{judges[0]} and method.{judges[1]} both scale the band reward: "
                             "set one of them")
        return self

    @model_validator(mode="after")
    def _privileged_judges(self):
        # one error per run, naming the first judge that reads the goalposts' reference programs
        for key, on in (("method.code_relevance", self.code_relevance is not None),
                        ("method.gradient_relevance", self.gradient_relevance is not None),
                        ("method.lemma_program=statement_deletion", self.lemma_program == "statement_deletion")):
            if on:
                require_privileged(self, key)
        return self

    @model_validator(mode="after")
    def _edited_lemmas(self):
        if self.edit_screen and self.lemma_program != "statement_deletion":
            raise ValueError("method.edit_screen screens the executor's deletions: set "
                             "method.lemma_program=statement_deletion with it")
        if self.lemma_program == "statement_deletion":
            if self.one_step is not None:
                raise ValueError("method.lemma_program=statement_deletion edits the lemma round's "
                                 "programs; method.one_step has no lemma round: set one of them")
            if self.guide is not None or self.code_relevance is not None or self.gradient_relevance is not None:
                raise ValueError("method.lemma_program=statement_deletion with method.guide, "
                                 "method.code_relevance or method.gradient_relevance is not built: a "
                                 "deleted statement is a one-line edit by construction; drop the judge")
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


class GuidedRound(DescribedRound):
    """A lemma or lift round whose accepted proposals the frozen Guide judges against their
    goalpost before the band reward is scored."""

    def __init__(self, kind, anchors, direction, per_anchor, band: BandReward, guide, config: GASPGuideConfig):
        super().__init__(kind, anchors, direction, per_anchor,
                         GuidedBandReward(band, multiply=config.reward == "multiply"))
        self.guide, self.gate, self.weight_of = guide, config.gate, config.score

    @staticmethod
    def targets(ctx, proposals: list[Proposal]) -> list[str]:
        """The goalpost each proposal descends from (a lift's is hidden from its prompt, not
        from the Guide)."""
        pool = ctx.goalposts_by_id()
        return [(pool[p.anchor.goalpost_id].prompt or "") if p.anchor.goalpost_id in pool
                else p.anchor.question for p in proposals]

    def score(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        acc = [p for p in proposals if p.accepted]
        judge_proposals(self.guide, acc, self.targets(ctx, acc), log, self.kind)
        for p in acc:
            p.extra["guide_weight"] = guide_weight(p.extra["guide"], self.weight_of)
            p.extra["gated"] = self.gate is not None and p.extra["guide_weight"] < self.gate
        if acc and self.gate is not None:
            log.add(**{f"guide/{self.kind}/gated": sum(p.extra["gated"] for p in acc) / len(acc)})
        S.score(ctx, proposals, self.reward, log)

    def diagnose(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        S.fidelity(ctx, proposals, log)
        acc = [p for p in proposals if p.accepted]
        oracle_accuracy(ctx, acc, self.targets(ctx, acc), log, self.kind)


class CodeRelevanceRound(DescribedRound):
    """A lemma or lift round whose accepted proposals are judged by their program's line
    similarity to their parent's (the anchor's code) before the band reward is scored."""

    def __init__(self, kind, anchors, direction, per_anchor, band: BandReward, config: CodeRelevanceConfig):
        super().__init__(kind, anchors, direction, per_anchor,
                         GuidedBandReward(band, multiply=config.reward == "multiply", key="code_weight"))
        self.config = config

    def score(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        c = self.config
        acc = [p for p in proposals if p.accepted]
        for p in acc:
            sim = line_similarity(p.anchor.code, p.parsed.code)
            p.extra["code_similarity"] = sim
            p.extra["code_weight"] = relevance_weight(sim, c.power)
            # a copy of its parent (weight 0) is no variant either: it does not reach the student
            p.extra["gated"] = c.gate is not None and (sim < c.gate or p.extra["code_weight"] == 0.0)
        if acc:
            log.add(**{f"teacher/{self.kind}/code_similarity":
                       sum(p.extra["code_similarity"] for p in acc) / len(acc)})
            if c.gate is not None:
                log.add(**{f"teacher/{self.kind}/code_gated": sum(p.extra["gated"] for p in acc) / len(acc)})
        S.score(ctx, proposals, self.reward, log)


def _check_references(goalposts) -> None:
    """Code relevance compares a lemma's program with its goalpost's: a goalpost without a
    reference program would zero every lemma's reward, so the run stops before it starts."""
    missing = [g.id for g in goalposts if not (g.metadata or {}).get("reference")]
    if missing:
        raise ConfigError(f"method.code_relevance: {len(missing)} of {len(goalposts)} goalposts have "
                          f"no reference program (e.g. {missing[0]}); it compares each lemma's "
                          "program with its goalpost's: use goalposts with reference solutions or "
                          "drop method.code_relevance")


# Kinds of GASP proposals an earlier iteration's buffer holds (student.replay_tasks_per_iteration).
REPLAY_KINDS = ("lemma", "lift", "medium", "hard")


@register
class GASP(Method):
    Config = GASPConfig

    def round(self, kind, anchors, direction, band: BandReward) -> DescribedRound:
        c = self.config
        if c.code_relevance is not None:
            return CodeRelevanceRound(kind, anchors, direction, c.proposals_per_anchor, band, c.code_relevance)
        if c.gradient_relevance is not None:
            return GradientRelevanceRound(kind, anchors, direction, c.proposals_per_anchor, band,
                                          c.gradient_relevance)
        if c.guide is None:
            return DescribedRound(kind, anchors, direction, c.proposals_per_anchor, band)
        return GuidedRound(kind, anchors, direction, c.proposals_per_anchor, band, self.guide, c.guide)

    def rounds(self, ctx, done: list[Proposal]):
        c = self.config
        lemma = BandReward(c.lemma_band, c.out_of_band, rewards.r_lemma)
        lift = BandReward(c.lift_band, c.out_of_band, rewards.r_lift)
        goalposts = self.goalpost_anchors(ctx)
        if c.one_step:
            yield self.round(c.one_step, goalposts, "easier", lemma if c.one_step == "medium" else lift)
            return
        if c.lemma_program == "statement_deletion":
            yield StatementDeletionRound("lemma", goalposts, "easier", c.proposals_per_anchor, lemma,
                                         screen=c.edit_screen)
        else:
            yield self.round("lemma", goalposts, "easier", lemma)
        parents = self.lift_parents(ctx, [p for p in done if p.kind == "lemma"])
        if parents:
            yield self.round("lift", parents, "harder", lift)

    # ---- dynamic goalposts ---------------------------------------------------------------------
    def setup(self, ctx) -> None:
        if self.config.guide is not None:
            self.guide = load_guide(ctx, self.config.guide)
        if self.config.code_relevance is not None:
            _check_references(ctx.goalposts)
        if self.config.gradient_relevance is not None:
            check_goalpost_programs(ctx.goalposts)
        if self.config.lemma_program == "statement_deletion":
            check_editable(ctx.goalposts)
        if self.config.dynamic_goalposts is not None and "dynamic_goalposts" not in ctx.state.method_state:
            ctx.state.method_state["dynamic_goalposts"] = DynamicState(
                active=[g.id for g in ctx.goalposts],
                reserve=[p.id for p in ctx.world.goalpost_reserve]).to_json()
            ctx.state.method_state["dynamic_checks_seen"] = 1   # the starting model's row

    def goalpost_anchors(self, ctx) -> list[Anchor]:
        """The iteration's goalposts: drawn from the fixed set, or from the dynamic active set
        after applying the latest goalpost check to it."""
        k = self.config.goalposts_per_iteration
        dyn = self.config.dynamic_goalposts
        if dyn is None:
            return ctx.goalpost_anchors(k)
        ms = ctx.state.method_state
        st = DynamicState.from_json(ms["dynamic_goalposts"])
        rows, labels = ctx.state.goalpost_rows, ctx.state.goalpost_labels
        if len(rows) > ms["dynamic_checks_seen"]:
            row, label = rows[-1], labels[-1]
            solved = {g: row[j] > 0 for j, g in enumerate(ctx.state.goalpost_ids) if g in st.active}
            extra = [g for g in st.active if g not in solved]
            if extra:  # promoted goalposts are outside the tracked set: check them here
                pool = {p.id: p for p in ctx.world.goalpost_pool}
                res = S.solve(ctx.engine, ctx.executor, [pool[g] for g in extra],
                              ctx.config.eval.goalpost_k, S.student_sampling(ctx))
                solved.update({g: r.c > 0 for g, r in zip(extra, res)})
            st, _, _ = dynamic_update(st, solved, dyn.solved_checks, label)
            ms["dynamic_goalposts"] = st.to_json()
            ms["dynamic_checks_seen"] = len(rows)
        pool = {p.id: p for p in ctx.world.goalpost_pool}
        return ctx.goalpost_anchors(k, [pool[g] for g in st.active if g in pool])

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
        ms = ctx.state.method_state.get("dynamic_goalposts")
        if ms:
            log.add(**{"goalposts/dynamic/active": len(ms["active"]),
                       "goalposts/dynamic/retired": len(ms["retired"]),
                       "goalposts/dynamic/promoted": len(ms["promoted"])})
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
