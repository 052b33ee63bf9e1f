"""Sampling the student on problems and verifying in the executor: pass counts per problem.

Works for any engine and any call-kind `Problem` whose `prompt` is the question and whose
`metadata["signature"]` is the function header shown to the student, and for benchmark problems
(`metadata["benchmark"]`: LCB stdin/LeetCode, HumanEval+, MBPP+), which are posed and read as
`selfplay evaluate` does (see `roles.student`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from selfplay_core.engines.base import Completion, SamplingParams
from selfplay_core.problems import Problem, Sample, Verdict
from selfplay_core.roles.common import Rejection
from selfplay_core.roles.student import (REAL_STOP, STOP, is_real_problem, parse_student,
                                         real_student_program, real_student_prompt, student_prompt)
from selfplay_core.toyworld.metrics import mean_pass_at_k


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


def student_prompt_for(problem: Problem) -> str:
    if is_real_problem(problem):
        return real_student_prompt(problem)
    return student_prompt(problem.prompt or "", problem.metadata.get("signature", f"def {problem.entry_point}(x):"))


def _with_student_stops(sampling: SamplingParams, stops=STOP) -> SamplingParams:
    return SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p,
                          max_new_tokens=sampling.max_new_tokens,
                          stop=tuple(dict.fromkeys(sampling.stop + stops)), seed=sampling.seed)


def solve(engine, executor, problems: list[Problem], n: int, sampling: SamplingParams) -> list[SolveResult]:
    """n student samples per problem, each verified (unparseable output counts as a fail).
    `def f(x)` tasks and benchmark problems differ in prompt and stop strings, so a mixed list
    takes one generate call per kind."""
    real = [is_real_problem(p) for p in problems]
    if not any(real):
        comps = engine.generate([student_prompt_for(p) for p in problems], n, _with_student_stops(sampling))
        return score(executor, problems, comps)
    comps: list = [None] * len(problems)
    for kind, stops in ((False, STOP), (True, REAL_STOP)):
        idx = [i for i, r in enumerate(real) if r == kind]
        if idx:
            out = engine.generate([student_prompt_for(problems[i]) for i in idx], n,
                                  _with_student_stops(sampling, stops))
            for i, cs in zip(idx, out):
                comps[i] = cs
    return score(executor, problems, comps)


def score(executor, problems: list[Problem], completions: list[list[Completion]]) -> list[SolveResult]:
    """Parse and verify student completions (one list per problem) in one executor batch."""
    results, jobs = [], []
    for p, cs in zip(problems, completions):
        sig = p.metadata.get("signature", f"def {p.entry_point}(x):")
        real = is_real_problem(p)
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
    verdicts = executor.verify([(p, Sample(p.id, j, code)) for _, j, p, code in jobs])
    for (res, j, _, _), v in zip(jobs, verdicts):
        res.passed[j] = v.passed
        if not v.passed:
            res.rejections[j] = v.verdict.value
        if v.verdict is Verdict.harness_error:  # already retried by the executor
            res.excluded[j] = True
    return results


def pass_by_depth(results: list[SolveResult], ks=(1, 8)) -> dict[int, dict]:
    """{depth: {"tasks": .., "samples": .., "pass@k": ..}} for k <= n."""
    groups: dict[int, list[SolveResult]] = {}
    for r in results:
        groups.setdefault(r.problem.metadata.get("depth", 0), []).append(r)
    table = {}
    for d, rs in sorted(groups.items()):
        rs = [r for r in rs if r.n]  # every sample a harness error: nothing to count
        counts = [(r.n, r.c) for r in rs]
        row = {"tasks": len(rs), "samples": sum(r.n for r in rs)}
        for k in ks:
            if all(r.n >= k for r in rs):
                row[f"pass@{k}"] = mean_pass_at_k(counts, k)
        table[d] = row
    return table


@dataclass
class TeacherStats:
    prompts: int = 0
    parsed: int = 0
    valid: int = 0            # parsed, reference runs on every input, same outputs twice
    faithful: int = 0         # valid and the question describes the code (toy-world oracle)
    rejections: dict = field(default_factory=dict)

    @property
    def validity(self) -> float:
        return self.valid / self.prompts if self.prompts else float("nan")


def teacher_validity(engine, executor, tasks, sampling: SamplingParams, seed: int = 0,
                     directions=("easier", "harder")) -> TeacherStats:
    """Prompt the teacher once per task with a random axis/direction and validate the proposal."""
    import random

    from selfplay_core.proposals import validate_proposals
    from selfplay_core.roles.teacher import STOP as TEACHER_STOP
    from selfplay_core.roles.teacher import parse_teacher, teacher_prompt
    from selfplay_core.toyworld.fidelity import proposal_fidelity

    rng = random.Random(f"teacher-validity:{seed}")
    prompts = [teacher_prompt(t.description(), t.program(), rng.choice(("f", "io")), rng.choice(directions))
               for t in tasks]
    sp = SamplingParams(temperature=sampling.temperature, top_p=sampling.top_p,
                        max_new_tokens=sampling.max_new_tokens, seed=sampling.seed,
                        stop=tuple(dict.fromkeys(sampling.stop + TEACHER_STOP)))
    comps = [g[0] for g in engine.generate(prompts, 1, sp)]
    parsed = [parse_teacher(c.text) for c in comps]
    checks = validate_proposals(executor, parsed)
    stats = TeacherStats(prompts=len(prompts))
    valid = []
    for v in checks:
        if not isinstance(v.proposal, Rejection):
            stats.parsed += 1
        if v.valid:
            stats.valid += 1
            valid.append(v.proposal)
        else:
            stats.rejections[v.rejection.reason] = stats.rejections.get(v.rejection.reason, 0) + 1
    if valid:
        fid = proposal_fidelity(executor, [(p.question, p.code, p.inputs) for p in valid])
        stats.faithful = sum(f.faithful for f in fid)
    return stats
