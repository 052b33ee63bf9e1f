"""Turning a teacher's proposal into a task: run its reference program in the sandbox.

A proposal is valid when its reference program runs without error on every proposed input and
gives the same outputs on a second, independent run (determinism). Expected outputs always come
from the executor, never from the teacher. Near-duplicate and banned-import checks belong to the
self-play loop's gate and are not done here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from selfplay_core.problems import Problem, TestCase
from selfplay_core.roles.common import Rejection
from selfplay_core.roles.teacher import TeacherProposal

REASONS = ("reference_error", "nondeterministic")


@dataclass
class Validation:
    proposal: TeacherProposal | Rejection
    problem: Problem | None = None          # with expected outputs filled in, when valid
    rejection: Rejection | None = None

    @property
    def valid(self) -> bool:
        return self.problem is not None


def proposal_problem(p: TeacherProposal, problem_id: str, entry_point: str = "f",
                     time_limit_s: float = 1.0, memory_limit_mb: int = 256) -> Problem:
    return Problem(id=problem_id, kind="call", entry_point=entry_point,
                   tests=[TestCase(args=list(a), has_expected=False) for a in p.inputs],
                   time_limit_s=time_limit_s, memory_limit_mb=memory_limit_mb, prompt=p.question,
                   metadata={"reference": p.code})


def validate_proposals(executor, proposals: Sequence[TeacherProposal | Rejection], *,
                       id_prefix: str = "proposal", entry_point: str = "f",
                       time_limit_s: float = 1.0, runs: int = 2) -> list[Validation]:
    """Validate parsed proposals in one batch per run; parse rejections pass through."""
    out = [Validation(p, rejection=p if isinstance(p, Rejection) else None) for p in proposals]
    todo = [(k, proposal_problem(v.proposal, f"{id_prefix}/{k}", entry_point, time_limit_s))
            for k, v in enumerate(out) if v.rejection is None]
    if not todo:
        return out
    # Rotated runs put each program in a different worker process, i.e. under another hash seed.
    results = [executor.run([(prob, out[k].proposal.code) for k, prob in todo], rotate=r)
               for r in range(runs)]
    for j, (k, prob) in enumerate(todo):
        first = results[0][j]
        if not first.ok:
            err = next((e for e in first.errors if e), first.detail or "failed")
            out[k].rejection = Rejection("reference_error", str(err)[:200])
            continue
        if any(not r[j].ok or r[j].outputs != first.outputs for r in results[1:]):
            out[k].rejection = Rejection("nondeterministic")
            continue
        prob.tests = [TestCase(args=t.args, expected=o) for t, o in zip(prob.tests, first.outputs)]
        out[k].problem = prob
    return out
