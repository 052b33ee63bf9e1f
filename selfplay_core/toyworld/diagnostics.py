"""Toy-world diagnostics of a model: pass@k by task depth, and how often its teacher role writes
a valid (and faithful) proposal. Read by the bootstrap benchmark and the asset tests; never a
training signal."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from selfplay_core.engines.base import SamplingParams
from selfplay_core.proposals import validate_proposals
from selfplay_core.roles.common import Rejection
from selfplay_core.roles.teacher import STOP as TEACHER_STOP
from selfplay_core.roles.teacher import parse_teacher, teacher_prompt
from selfplay_core.solve import SolveResult
from selfplay_core.toyworld.fidelity import proposal_fidelity
from selfplay_core.toyworld.metrics import mean_pass_at_k


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
