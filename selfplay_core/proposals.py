"""Turning a teacher's proposal into a task: run its reference program in the sandbox.

A proposal is valid when its reference program, run by `Executor.check_references`, imports
only ALLOWED_IMPORTS (enforced at run time in the sandbox), runs without error on every
proposed input, and gives the same outputs in sandbox.gate_bits + 1 fresh processes with
different hash seeds and address layouts, one with a broken clock (determinism, also on the other proposals' inputs). Expected outputs always come
from the executor, never from the teacher. Near-duplicate checks belong to the self-play loop's
gate and are not done here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from selfplay_core.problems import Problem, TestCase
from selfplay_core.roles.common import Rejection
from selfplay_core.roles.teacher import TeacherProposal

# Imports a proposal's reference program may use: pure computation only.
ALLOWED_IMPORTS = frozenset({"math", "collections", "itertools", "functools", "heapq", "bisect",
                             "re", "string", "typing", "operator", "fractions", "decimal",
                             "statistics", "copy", "array", "dataclasses", "enum"})

REASONS = ("banned_import", "reference_timeout", "reference_error", "nondeterministic",
           "harness_error")


def probe_inputs(problems: Sequence[Problem], probes: int = 3) -> list[list]:
    """Per problem, up to `probes` batch-mates' inputs of the same arity: more inputs for the
    determinism check than the proposer chose (a program can be deterministic on its own
    inputs only)."""
    out = []
    for k, p in enumerate(problems):
        arity = len(p.tests[0].args or []) if p.tests else 0
        others = [t.args for j, q in enumerate(problems) if j != k for t in q.tests
                  if len(t.args or []) == arity]
        out.append(others[:probes])
    return out


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
                       time_limit_s: float = 1.0, probes: int = 3) -> list[Validation]:
    """Validate parsed proposals in one batch; parse rejections pass through."""
    out = [Validation(p, rejection=p if isinstance(p, Rejection) else None) for p in proposals]
    todo = [(k, proposal_problem(v.proposal, f"{id_prefix}/{k}", entry_point, time_limit_s))
            for k, v in enumerate(out) if v.rejection is None]
    if not todo:
        return out
    extra = probe_inputs([prob for _, prob in todo], probes)
    checks = executor.check_references([(prob, out[k].proposal.code) for k, prob in todo],
                                       allowed_imports=ALLOWED_IMPORTS, extra_inputs=extra)
    for (k, prob), c in zip(todo, checks):
        if not c.ok:
            out[k].rejection = Rejection(c.rejection, (c.detail or "")[:200])
            continue
        prob.tests = [TestCase(args=t.args, expected=o) for t, o in zip(prob.tests, c.outputs)]
        out[k].problem = prob
    return out
