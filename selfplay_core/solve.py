"""Solve and verify: the student's samples of a problem, the program extracted from each, the
executor's verdicts, the pass rate. The one path the loop (pass-rate estimates, student
rollouts, real tasks, held-out evaluation, goalpost tracking), goalpost mining and the
checkpoint suite use.

Works for any engine and for two kinds of problem:

* a described task (a self-play proposal, a toy-world task): a call-kind `Problem` whose
  `prompt` is the question; the student sees the function header, which is
  `metadata["signature"]` or else the header of `metadata["reference"]` (so a proposal whose
  program takes two arguments is posed with both), and writes the body;
* a benchmark problem (`metadata["benchmark"]`: LCB stdin/LeetCode, HumanEval+, MBPP+), posed
  and read as `selfplay evaluate` does (see `roles.student`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from selfplay_core.engines.base import Completion, SamplingParams
from selfplay_core.evaluation.verify import verify_programs
from selfplay_core.problems import Problem, Verdict
from selfplay_core.roles.common import Rejection, signature_of
from selfplay_core.roles.student import (REAL_STOP, STOP, is_real_problem, parse_student,
                                         real_student_program, real_student_prompt, student_prompt)


@dataclass
class SolveResult:
    """`excluded[j]`: sample j hit a harness error (the sandbox's fault, after its retries):
    it counts in neither n nor c and yields no rollout."""

    problem: Problem
    completions: list[Completion]
    passed: list[bool]
    rejections: list[str | None] = field(default_factory=list)
    excluded: list[bool] = field(default_factory=list)

    def _excluded(self, j: int) -> bool:
        return j < len(self.excluded) and self.excluded[j]

    @property
    def n(self) -> int:
        return len(self.passed) - sum(self.excluded)

    @property
    def c(self) -> int:
        return sum(ok for j, ok in enumerate(self.passed) if not self._excluded(j))

    @property
    def harness_errors(self) -> int:
        return sum(self.excluded)

    def scored(self):
        """(completion, passed) for every sample that has a verdict of the model's own."""
        return [(c, ok) for j, (c, ok) in enumerate(zip(self.completions, self.passed))
                if not self._excluded(j)]


def signature_for(problem: Problem) -> str:
    """The function header a described task is posed with: its own, else its reference's."""
    meta = problem.metadata or {}
    entry = problem.entry_point or "f"
    sig = meta.get("signature") or signature_of(meta.get("reference") or "", entry)
    if sig is None:
        raise ValueError(f"problem {problem.id}: no metadata['signature'] and no reference program "
                         f"defining {entry}(...) to take the student's function header from")
    return sig


def student_prompt_for(problem: Problem) -> str:
    if is_real_problem(problem):
        return real_student_prompt(problem)
    return student_prompt(problem.prompt or "", signature_for(problem))


def with_student_stops(sampling: SamplingParams, stops=STOP) -> SamplingParams:
    return SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p,
                          max_new_tokens=sampling.max_new_tokens,
                          stop=tuple(dict.fromkeys(sampling.stop + stops)), seed=sampling.seed)


def solve(engine, executor, problems: list[Problem], n: int, sampling: SamplingParams) -> list[SolveResult]:
    """n student samples per problem, each verified (unparseable output counts as a fail).
    `def f(x)` tasks and benchmark problems differ in prompt and stop strings, so a mixed list
    takes one generate call per kind."""
    real = [is_real_problem(p) for p in problems]
    if not any(real):
        comps = engine.generate([student_prompt_for(p) for p in problems], n, with_student_stops(sampling))
        return score(executor, problems, comps)
    comps: list = [None] * len(problems)
    for kind, stops in ((False, STOP), (True, REAL_STOP)):
        idx = [i for i, r in enumerate(real) if r == kind]
        if idx:
            out = engine.generate([student_prompt_for(problems[i]) for i in idx], n,
                                  with_student_stops(sampling, stops))
            for i, cs in zip(idx, out):
                comps[i] = cs
    return score(executor, problems, comps)


def score(executor, problems: list[Problem], completions: list[list[Completion]]) -> list[SolveResult]:
    """Parse and verify student completions (one list per problem) in one executor batch."""
    results, jobs = [], []
    for p, cs in zip(problems, completions):
        real = is_real_problem(p)
        sig = None if real else signature_for(p)
        res = SolveResult(p, cs, [False] * len(cs), [None] * len(cs), [False] * len(cs))
        for j, c in enumerate(cs):
            if real:
                program = real_student_program(p, c.text)
            else:
                parsed = parse_student(c.text, sig, p.entry_point or "f")
                program = parsed if isinstance(parsed, Rejection) else parsed.code
            if isinstance(program, Rejection):
                res.rejections[j] = program.reason
            else:
                jobs.append((res, j, p, program))
        results.append(res)
    verdicts = verify_programs(executor, [(p, j, code) for _, j, p, code in jobs])
    for (res, j, _, _), v in zip(jobs, verdicts):
        res.passed[j] = v.passed
        if not v.passed:
            res.rejections[j] = v.verdict.value
        if v.verdict is Verdict.harness_error:  # already retried by the executor
            res.excluded[j] = True
    return results
