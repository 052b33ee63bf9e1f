"""GASP with executor-edited lemmas, method `gasp-edit`: the executor writes each lemma's program
by deleting one statement of the goalpost's reference (`program_edits.statement_deletions`),
forces that program into the teacher's output in the teacher's solution-first order, and the
teacher writes only the question that describes it and the test inputs. Lifts are GASP's.

Everything after `propose` is the described round's: the sandbox runs the edited program as the
reference (a deletion that breaks on the teacher's inputs is rejected like any reference), the
student's pass rate is scored by the lemma band, and the toy world's fidelity diagnostic reads
the question against the program. The teacher's rollout is its completion alone: the forced
program sits in the prompt (`Proposal.prefix`), so the teacher learns to describe, not to copy.

It reads each goalpost's reference program, so it runs only as the privileged ablation
(`method.privileged_sighted_teacher: true`, configs/gasp-edit-tiny-cpu.yaml). No judge: a
deleted statement is a one-line edit by construction.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from pydantic import model_validator

from selfplay_core import stages as S
from selfplay_core.config_errors import ConfigError
from selfplay_core.goalpost_view import require_privileged
from selfplay_core.methods.base import register
from selfplay_core.methods.gasp import GASP, GASPConfig
from selfplay_core.methods.rounds import DescribedRound
from selfplay_core.program_edits import (EDIT_AXIS as AXIS, budget_after_forced, forced_program,
                                         statement_deletions)
from selfplay_core.records import IterationLog, Proposal
from selfplay_core.roles.teacher import teacher_prompt


class StatementDeletionRound(DescribedRound):
    """`per_anchor` deletions of each anchor's reference (drawn without replacement; all of them
    when it has fewer), one teacher sample each.

    `screen` (method.edit_screen): the executor first runs every deletion on the goalpost's own
    test inputs in the sandbox and keeps those that run and change at least one output (a
    deletion that crashes, or computes the same function, is no lemma and not the teacher's
    doing), and draws deletions not yet in the buffer for that goalpost before repeats (a repeat
    is rejected as a near-duplicate, a penalty on a program the teacher did not choose)."""

    def __init__(self, kind, anchors, direction, per_anchor, reward, screen: bool = False):
        super().__init__(kind, anchors, direction, per_anchor, reward)
        self.screen = screen

    def propose(self, ctx) -> list[Proposal]:
        edits = screened_edits(ctx, self.anchors) if self.screen else \
            {a.id: statement_deletions(a.code) for a in self.anchors}
        plan = []
        for a in self.anchors:
            for code in self.draw(ctx, a, edits[a.id]):
                prefix = forced_program(code)
                plan.append((a, prefix, teacher_prompt(a.question, a.code, AXIS, self.direction) + prefix))
        if not plan:
            return []
        sp = S.teacher_sampling(ctx)
        # the forced program spends the teacher's output budget, in the proposer's tokens
        sp = replace(sp, max_new_tokens=budget_after_forced(
            ctx.proposer_tokenizer, [prefix for _, prefix, _ in plan], sp.max_new_tokens))
        groups = ctx.proposer.generate([prompt for _, _, prompt in plan], 1, sp)
        return [Proposal(self.kind, a, AXIS, self.direction, prompt, comps[0],
                         id=f"it{ctx.state.iteration}/{self.kind}/{ctx.next_id()}",
                         temperature=sp.temperature, prefix=prefix,
                         extra={"usable_edits": len(edits[a.id])})
                for (a, prefix, prompt), comps in zip(plan, groups)]

    def draw(self, ctx, anchor, edits: list[str]) -> list[str]:
        k = min(self.per_anchor, len(edits))
        if not self.screen:
            return ctx.rng.sample(edits, k)
        seen = {b.code.rstrip() for b in ctx.buffers if b.goalpost_id == anchor.goalpost_id}
        fresh = [e for e in edits if e.rstrip() not in seen]
        repeats = [e for e in edits if e.rstrip() in seen]
        picked = ctx.rng.sample(fresh, min(k, len(fresh)))
        return picked + ctx.rng.sample(repeats, k - len(picked))

    def validate(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        S.validate(ctx, proposals, log)
        if self.anchors:   # an anchor without a usable deletion has no proposal
            usable = {p.anchor.id: p.extra.get("usable_edits", 0) for p in proposals}
            log.add(**{f"teacher/{self.kind}/editable_anchors": len(usable) / len(self.anchors),
                       f"teacher/{self.kind}/usable_edits": sum(usable.values()) / len(self.anchors)})


def screened_edits(ctx, anchors) -> dict[str, list[str]]:
    """Per anchor id, its deletions that run on its goalpost's test inputs (the sandbox's
    reference gate: allowed imports, in time, deterministic) and give at least one output other
    than the goalpost's expected one. An anchor whose goalpost has no test with an expected
    output keeps every deletion that runs."""
    pool = ctx.goalposts_by_id()
    out: dict[str, list[str]] = {a.id: [] for a in anchors}
    items, owners = [], []
    for a in anchors:
        goal = pool.get(a.goalpost_id)
        for code in statement_deletions(a.code):
            if goal is None or not goal.tests:
                out[a.id].append(code)      # nothing to run it on: the reference gate decides later
                continue
            items.append((goal, code))
            owners.append((a.id, code, goal))
    for (aid, code, goal), (outputs, bad) in zip(owners, S.check_references(ctx, items)):
        if bad:
            continue
        expected = [tc.expected for tc in goal.tests]
        if all(tc.has_expected for tc in goal.tests) and list(outputs[:len(expected)]) == expected:
            continue                        # the same function on every test: no variant
        out[aid].append(code)
    return out


def check_editable(goalposts) -> None:
    """At least one goalpost needs a reference program with a statement to delete; otherwise the
    run stops before it starts (a lemma round without anchors trains nothing, silently). The
    share that can be edited is logged each iteration (`teacher/lemma/editable_anchors`)."""
    if goalposts and not any(statement_deletions((g.metadata or {}).get("reference", "")) for g in goalposts):
        raise ConfigError(f"method gasp-edit: none of the {len(goalposts)} goalposts (e.g. "
                          f"{goalposts[0].id}) has a reference program with a statement to delete "
                          "(a def f with two or more statements): use goalposts with reference "
                          "solutions or method gasp")


class GASPEditConfig(GASPConfig):
    name: Literal["gasp-edit"] = "gasp-edit"
    # Run each deletion on the goalpost's tests first and keep those that run and change an
    # output; draw deletions not yet in the buffer before repeats.
    edit_screen: bool = False

    @model_validator(mode="after")
    def _edited_lemmas(self):
        require_privileged(self, "method gasp-edit")
        if self.one_step is not None:
            raise ValueError("method gasp-edit edits the lemma round's programs; method.one_step "
                             "has no lemma round: set one of them")
        if self.judge is not None:
            raise ValueError("method gasp-edit with method.judge is not built: a deleted statement "
                             "is a one-line edit by construction; drop the judge")
        return self


@register
class GASPEdit(GASP):
    """GASP whose lemma programs are the executor's statement deletions of the goalpost's
    reference, described by the teacher; lifts are GASP's."""

    Config = GASPEditConfig

    def lemma_round(self, ctx, goalposts, band) -> DescribedRound:
        return StatementDeletionRound("lemma", goalposts, "easier", self.config.proposals_per_anchor,
                                      band, screen=self.config.edit_screen)

    def setup(self, ctx) -> None:
        check_editable(ctx.goalposts)
        super().setup(ctx)
