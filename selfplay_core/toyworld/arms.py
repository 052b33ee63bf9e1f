"""The oracle arms of the learning study: what the loop does with a perfect teacher, or with the
real teacher's unfaithful proposals taken out of the student's batch. Methods of the toy world
(they need its oracle), registered when the toy world plug-in loads; a run selects one as
`method: oracle-curriculum` / `method: oracle-filter` (or by the older spelling
`diagnostics.oracle_curriculum` / `diagnostics.oracle_filter: true` on a GASP run, which the
config maps to them). Their config is GASP's, under their own name.

The oracle decides what is proposed (oracle curriculum) or what the student trains on (oracle
filter) — never a reward: the oracle curriculum has no teacher rollouts at all, and the oracle
filter leaves every teacher reward as GASP computes it.

* `OracleTeacher.propose` stands in for the teacher's generation: true one-step easier
  variants of a goalpost (lemmas) or true harder variants of a lemma (lifts), written in the
  teacher's output format, so validation, the eval-contamination gate, pass-rate estimation
  and band scoring are exactly the real teacher's. Exact goalposts and evaluation tasks (and
  held-out algorithms) are never proposed.
* `faithful_only(student_tasks, proposals)`: the oracle filter on the student batch.
"""

from __future__ import annotations

import random
from typing import Literal, Sequence

from selfplay_core import rewards
from selfplay_core.engines.base import Completion
from selfplay_core.methods.base import register
from selfplay_core.methods.gasp import GASP, BandReward, GASPConfig
from selfplay_core.methods.rounds import DescribedRound
from selfplay_core.records import Anchor, Proposal
from selfplay_core.roles.teacher import teacher_completion, teacher_prompt
from selfplay_core.toyworld.corpus import Exclusion
from selfplay_core.toyworld.fidelity import parse_description
from selfplay_core.toyworld.oracle import easier_variants, harder_variants, task_of
from selfplay_core.toyworld.tasks import Task


class OracleTeacher:
    """True variants in the teacher's format. `blocked`: tasks never to propose (goalposts and
    the evaluation split); `inputs`: test inputs per proposal."""

    def __init__(self, blocked: Sequence[Task], seed: int, inputs: int = 8):
        self.exclusion = Exclusion()
        for t in blocked:
            self.exclusion.add(t)
        self.rng = random.Random(f"oracle-teacher:{seed}")
        self.inputs = inputs

    def variants(self, task: Task, direction: str, n: int, axes) -> list[tuple[str, Task]]:
        if direction == "easier":
            pool = [(a, v) for a, v in easier_variants(task, axes) if not self.exclusion.blocks(v)]
            self.rng.shuffle(pool)
            return pool[:n]
        out = harder_variants(task, n * 3, self.rng, axes)
        return [(a, v) for a, v in out if not self.exclusion.blocks(v)][:n]

    def completion(self, task: Task) -> Completion:
        inputs = task.sample_inputs(self.rng, self.inputs)
        self.rng.shuffle(inputs)
        text = teacher_completion(task.description(), task.program(), inputs)
        # No token ids: the learner gets no teacher rollout from an oracle proposal.
        return Completion(text=text, token_ids=[], logprobs=None, finish_reason="stop")

    def propose(self, anchors, direction: str, n: int, axes) -> list[tuple[object, str, str, Completion]]:
        """(anchor, axis, prompt, completion) for up to n true variants per anchor. An anchor
        whose question is not a toy description (never the case for goalposts and accepted
        lemmas, whose text the gate checked) gets none."""
        out = []
        for a in anchors:
            task = parse_description(a.question)
            if task is None:
                continue
            for axis, v in self.variants(task, direction, n, axes):
                out.append((a, axis, teacher_prompt(a.question, a.code, axis, direction),
                            self.completion(v)))
        return out


def faithful_only(student: list, proposals: Sequence) -> list:
    """The oracle filter: drop the student tasks made from unfaithful proposals (real tasks and
    replayed buffer items, which carry no verdict, stay)."""
    unfaithful = {p.problem.id for p in proposals if p.problem is not None and p.faithful is False}
    return [(kind, r) for kind, r in student if r.problem.id not in unfaithful]


# ---- the arms as methods -----------------------------------------------------------------------

ALL_LEMMAS = 99   # "every true one-step easier variant" (a task has at most depth + 2)


def _toy_world_only(run, name: str) -> None:
    if run.world.name != "toy":
        raise ValueError(f"method {name} needs the toy world's oracle (world.name=toy); world "
                         f"{run.world.name!r} has none")


class OracleCurriculumConfig(GASPConfig):
    name: Literal["oracle-curriculum"] = "oracle-curriculum"

    def check(self, run) -> None:
        super().check(run)
        _toy_world_only(run, self.name)
        if run.teacher.model:
            raise ValueError("teacher.model: the oracle curriculum (method oracle-curriculum, "
                             "diagnostics.oracle_curriculum) has no model teacher; drop one of them")


class OracleFilterConfig(GASPConfig):
    name: Literal["oracle-filter"] = "oracle-filter"

    def check(self, run) -> None:
        super().check(run)
        _toy_world_only(run, self.name)


class OracleRound(DescribedRound):
    """A described round whose proposals are true variants (no model generation).
    `fresh_only`: leave out variants whose question the buffer already holds."""

    def __init__(self, *args, fresh_only: bool = False):
        super().__init__(*args)
        self.fresh_only = fresh_only

    def propose(self, ctx) -> list:
        oracle = _oracle(ctx)
        axes = ctx.config.teacher.axes
        seen = {b.question for b in ctx.buffers} if self.fresh_only else set()
        out = []
        for a in self.anchors:
            ax = (a.axis,) if self.direction == "harder" and a.axis in axes else axes
            for anchor, axis, prompt, comp in oracle.propose([a], self.direction, self.per_anchor, ax):
                if comp.text.split("### Task\n", 1)[-1].split("\n", 1)[0] in seen:
                    continue
                out.append(Proposal(self.kind, anchor, axis, self.direction, prompt, comp,
                                    id=f"it{ctx.state.iteration}/{self.kind}/{ctx.next_id()}",
                                    temperature=1.0))
        return out


def _oracle(ctx):
    if not hasattr(ctx, "_oracle_teacher"):
        blocked = [task_of(p) for p in ctx.goalposts] + [task_of(p) for p in ctx.world.heldout_problems]
        ctx._oracle_teacher = OracleTeacher([t for t in blocked if t is not None], ctx.config.seed)
    return ctx._oracle_teacher


def _in_band(p, band) -> bool:
    return p.accepted and p.pass_rate is not None and band[0] <= p.pass_rate <= band[1]


@register
class OracleCurriculum(GASP):
    """No model teacher: lemmas are every true one-step easier variant of the iteration's
    goalposts not proposed before (a goalpost has 2-5, so they run out; the buffer keeps them
    and the replay fill brings them back); lifts are true harder variants (same axis) of the
    lemmas in the lemma band — this iteration's, else earlier ones from the buffer; the
    student trains on the proposals in their band. No teacher rollouts (oracle completions
    have no tokens)."""

    Config = OracleCurriculumConfig

    def rounds(self, ctx, done):
        c = self.config
        lemma = BandReward(c.lemma_band, c.out_of_band, rewards.r_lemma)
        lift = BandReward(c.lift_band, c.out_of_band, rewards.r_lift)
        yield OracleRound("lemma", ctx.goalpost_anchors(c.goalposts_per_iteration), "easier",
                          ALL_LEMMAS, lemma, fresh_only=True)
        parents = [Anchor(p.id, p.parsed.question, p.parsed.code, p.anchor.goalpost_id, p.axis)
                   for p in done if p.kind == "lemma" and _in_band(p, c.lemma_band)]
        if len(parents) < c.goalposts_per_iteration:
            lo, hi = c.lemma_band
            old = [b for b in ctx.buffers if b.kind == "lemma" and b.pass_rate is not None
                   and lo <= b.pass_rate <= hi and b.iteration < ctx.state.iteration]
            for b in ctx.rng.sample(old, min(len(old), c.goalposts_per_iteration - len(parents))):
                parents.append(Anchor(b.id, b.question, b.code, b.goalpost_id, b.axis))
        if parents:
            yield OracleRound("lift", parents, "harder", c.proposals_per_anchor, lift)

    def student_batch(self, ctx, proposals, log, call):
        c = self.config
        band = {"lemma": c.lemma_band, "lift": c.lift_band}
        kept = [p for p in proposals if p.solve is not None and _in_band(p, band[p.kind])]
        log.add(**{"student/trained/tasks": len(kept)})
        return [(p.kind, p.solve) for p in kept]


@register
class OracleFilter(GASP):
    """GASP whose student never trains on a proposal the oracle finds unfaithful."""

    Config = OracleFilterConfig

    def student_batch(self, ctx, proposals, log, call):
        student = super().student_batch(ctx, proposals, log, call)
        kept = faithful_only(student, proposals)
        log.add(**{"student/oracle_filter/dropped": len(student) - len(kept)})
        return kept
