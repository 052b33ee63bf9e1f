"""AZR-style unguided self-play (Absolute Zero): one model proposes and solves its own tasks
of up to three types, with no goalposts and no data.

* deduction — the proposer sees K reference triplets (program, input, output) from the
  deduction buffer and writes a new program and input; the executor runs it for the output;
  the student predicts the output from program and input.
* abduction — the same proposal from the abduction buffer; the student sees program and output
  and gives an input, checked by running the program on it in the sandbox.
* induction — the teacher writes a described task (question, program, inputs) from a buffer
  item, as in GASP's prompt; the student writes the program.

Both deduction/abduction buffers start from the identity triplet (`seed_input`); their rounds
are `azr_triplets.TripletRound`. Proposals are validated in the sandbox (parses, allowed
imports, deterministic across two processes, writable output, not a near-duplicate of their
type's buffer); the proposer earns AZR's learnability `1 - p` (p = the student's pass rate;
`extreme_reward` at p in {0, 1}), invalid proposals the format / invalid penalties; the student
earns 1 / 0. Task-Relative REINFORCE++ normalizes over the (task type, role) groups: with all
three types, six groups.

Which types run is `task_types`. The toy default is induction only (the tiny model was
bootstrapped on described tasks and programs; it never learnt to write values), GPU configs run
all three. Metrics per type: teacher/azr_<type>/{proposals,acceptance,reward,pass_rate},
rejections/azr_<type>/<reason>, student/azr_<type>/reward; teacher/azr/* over all types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from selfplay_core import rewards
from selfplay_core import stages as S
from selfplay_core.methods.azr_triplets import TripletRound, triplet_kind
from selfplay_core.methods.base import Method, MethodConfig, register
from selfplay_core.methods.rounds import DescribedRound
from selfplay_core.records import IterationLog, Proposal
from selfplay_core.roles.azr import parse_literal
from selfplay_core.roles.common import Rejection

INDUCTION_KINDS = ("azr_induction", "azr")  # "azr": buffers of runs from before task types


class AZRConfig(MethodConfig):
    name: Literal["azr"] = "azr"
    # deduction: program + input -> output; abduction: program + output -> an input;
    # induction: description + examples -> program. The toy model was bootstrapped on
    # induction-like tasks only and writes no values, so the toy default is induction alone;
    # configs/azr-full.yaml (GPU) runs all three.
    task_types: tuple[Literal["deduction", "abduction", "induction"], ...] = ("induction",)
    references: int = Field(6, ge=0)         # K reference triplets from the buffer per prompt
    proposals_per_iteration: int = Field(16, ge=1)   # per task type
    extreme_reward: float = -0.5             # learnability at p in {0, 1} (AZR paper: 0)
    # A deduction/abduction proposal whose input or output literal is longer than this is
    # rejected (a student could not write it back).
    max_literal_chars: int = Field(400, ge=8, le=2000)
    # The input of the identity triplet that seeds the deduction/abduction buffers (a Python
    # literal; the AZR paper uses 'Hello World', the toy world's programs take lists of ints).
    seed_input: str = "[1, 2, 3]"

    @model_validator(mode="after")
    def _check(self):
        if not self.task_types:
            raise ValueError("task_types must name at least one of deduction, abduction, induction")
        if len(set(self.task_types)) != len(self.task_types):
            raise ValueError(f"task_types has a repeated type: {list(self.task_types)}")
        if isinstance(parse_literal(self.seed_input, max_chars=self.max_literal_chars), Rejection):
            raise ValueError(f"seed_input must be a Python literal of at most "
                             f"{self.max_literal_chars} characters, got {self.seed_input!r}")
        return self

    def check(self, run) -> None:
        if run.student.replay_tasks_per_iteration:
            raise ValueError("student.replay_tasks_per_iteration: method azr does not replay its "
                             "buffer (gasp does); set it to 0")


@dataclass(frozen=True)
class Learnability:
    """AZR's proposer reward: 1 - p when the solver sometimes succeeds, `extreme` otherwise."""

    extreme: float

    def __call__(self, ctx, accepted: list[Proposal]) -> list[float]:
        return [rewards.azr_propose(p.pass_rate, extreme=self.extreme) for p in accepted]

    def metrics(self, accepted: list[Proposal]) -> dict[str, float]:
        return {"learnable": sum(0 < p.pass_rate < 1 for p in accepted) / len(accepted)}


@register
class AZR(Method):
    Config = AZRConfig

    def rounds(self, ctx, done: list[Proposal]):
        c = self.config
        reward = Learnability(c.extreme_reward)
        for t in c.task_types:
            if t == "induction":
                anchors = ctx.buffer_anchors(c.proposals_per_iteration, kinds=INDUCTION_KINDS)
                yield DescribedRound(triplet_kind(t), anchors, "harder", 1, reward)
            else:
                yield TripletRound(t, c.proposals_per_iteration, c, reward)

    def student_batch(self, ctx, proposals, log, call):
        for t in self.config.task_types:
            _student_metrics(log, triplet_kind(t), [p for p in proposals if p.kind == triplet_kind(t)])
        _totals(log, proposals)
        return super().student_batch(ctx, proposals, log, call)


def _student_metrics(log: IterationLog, kind: str, props: list[Proposal]) -> None:
    solved = [p.solve for p in props if p.solve is not None]
    n = sum(r.n for r in solved)
    if n:
        log.add(**{f"student/{kind}/reward": sum(r.c for r in solved) / n,
                   f"student/{kind}/tasks": len(solved)})


def _totals(log: IterationLog, props: list[Proposal]) -> None:
    """teacher/azr/*: over all task types (what the CLI table and benchmarks read)."""
    n = len(props)
    acc = [p for p in props if p.accepted]
    out = {"teacher/azr/proposals": n, "teacher/azr/accepted": len(acc),
           "teacher/azr/acceptance": len(acc) / n if n else 0.0}
    judged = [p for p in props if p.reward is not None]  # not a harness error
    if judged:
        out["teacher/azr/reward"] = sum(p.reward for p in judged) / len(judged)
    if acc:
        out["teacher/azr/pass_rate"] = sum(p.pass_rate for p in acc) / len(acc)
    if "teacher/azr_induction/fidelity" in log.metrics:
        out["teacher/azr/fidelity"] = log.metrics["teacher/azr_induction/fidelity"]
    log.add(**out)
