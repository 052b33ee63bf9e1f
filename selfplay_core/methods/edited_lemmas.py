"""GASP's lemma round when the executor writes the lemma's program (`method.lemma_program:
statement_deletion`): it deletes one statement of the goalpost's reference
(`program_edits.statement_deletions`), forces that program into the teacher's output in the
teacher's solution-first order, and the teacher writes only the question that describes it and
the test inputs.

Everything after `propose` is the described round's: the sandbox runs the edited program as the
reference (a deletion that breaks on the teacher's inputs is rejected like any reference), the
student's pass rate is scored by the lemma band, and the toy world's fidelity diagnostic reads
the question against the program. The teacher's rollout is its completion alone: the forced
program sits in the prompt (`Proposal.prefix`), so the teacher learns to describe, not to copy.
"""

from __future__ import annotations

from dataclasses import replace

from selfplay_core import stages as S
from selfplay_core.config_errors import ConfigError
from selfplay_core.methods.rounds import DescribedRound
from selfplay_core.program_edits import statement_deletions
from selfplay_core.records import IterationLog, Proposal
from selfplay_core.roles.teacher import SOLUTION_HEADER, TASK_HEADER, teacher_prompt

AXIS = "f"   # a deleted statement changes the algorithm, not the input/output format


def forced_program(code: str) -> str:
    """What the teacher is made to write first: the program section, then the question's header."""
    return f"{SOLUTION_HEADER}\n{code.rstrip()}\n{TASK_HEADER}\n"


def prefix_tokens(ctx, text: str) -> int:
    """Tokens of `text` by the run's tokenizer (the engine's when the context has none)."""
    tok = ctx.tokenizer or getattr(ctx.engine, "tokenizer", None)
    return len(tok(text, add_special_tokens=False)["input_ids"]) if tok is not None else 0


class StatementDeletionRound(DescribedRound):
    """`per_anchor` deletions of each anchor's reference (drawn without replacement; all of them
    when it has fewer), one teacher sample each."""

    def propose(self, ctx) -> list[Proposal]:
        plan = []
        for a in self.anchors:
            edits = statement_deletions(a.code)
            for code in ctx.rng.sample(edits, min(self.per_anchor, len(edits))):
                prefix = forced_program(code)
                plan.append((a, prefix, teacher_prompt(a.question, a.code, AXIS, self.direction) + prefix))
        if not plan:
            return []
        sp = S.teacher_sampling(ctx)
        # The forced program is part of the proposal: it spends the teacher's output budget, so
        # prompt + proposal stay within what a free lemma gets (and within the model's context).
        forced = max(prefix_tokens(ctx, prefix) for _, prefix, _ in plan)
        sp = replace(sp, max_new_tokens=max(1, sp.max_new_tokens - forced))
        groups = ctx.engine.generate([prompt for _, _, prompt in plan], 1, sp)
        return [Proposal(self.kind, a, AXIS, self.direction, prompt, comps[0],
                         id=f"it{ctx.state.iteration}/{self.kind}/{ctx.next_id()}",
                         temperature=sp.temperature, prefix=prefix)
                for (a, prefix, prompt), comps in zip(plan, groups)]

    def validate(self, ctx, proposals: list[Proposal], log: IterationLog) -> None:
        S.validate(ctx, proposals, log)
        if self.anchors:
            editable = sum(bool(statement_deletions(a.code)) for a in self.anchors)
            log.add(**{f"teacher/{self.kind}/editable_anchors": editable / len(self.anchors)})


def check_editable(goalposts) -> None:
    """At least one goalpost needs a reference program with a statement to delete; otherwise the
    run stops before it starts (a lemma round without anchors trains nothing, silently). The
    share that can be edited is logged each iteration (`teacher/lemma/editable_anchors`)."""
    if goalposts and not any(statement_deletions((g.metadata or {}).get("reference", "")) for g in goalposts):
        raise ConfigError(f"method.lemma_program=statement_deletion: none of the {len(goalposts)} "
                          f"goalposts (e.g. {goalposts[0].id}) has a reference program with a "
                          "statement to delete (a def f with two or more statements): use goalposts "
                          "with reference solutions or method.lemma_program=teacher")
