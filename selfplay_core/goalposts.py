"""Goalpost mining: training questions that no reference checkpoint solves (pass@k = 0).

Mining is empirical, never decreed: a candidate is a goalpost only if, for every reference
solver (base model, an RLVR run, ...), k samples all fail. Sampling goes in rounds of `chunk`
samples and a candidate leaves the pool at its first pass, so solvable candidates cost little.
A solver is any callable `(problems, n) -> list[int]` (passes out of n per problem), e.g.
`engine_solver(engine, executor, sampling)`.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Callable, Sequence

from selfplay_core.problems import Problem
from selfplay_core.solve import solve

Solver = Callable[[list[Problem], int], list[int]]


@dataclass
class MiningResult:
    goalposts: list[Problem]
    k: int
    samples: dict[str, int] = field(default_factory=dict)    # problem id -> samples drawn
    passes: dict[str, int] = field(default_factory=dict)     # problem id -> passes seen

    @property
    def candidates(self) -> int:
        return len(self.samples)

    def summary(self) -> dict:
        return {"candidates": self.candidates, "goalposts": len(self.goalposts), "k": self.k,
                "samples": sum(self.samples.values())}


def mine_goalposts(candidates: Sequence[Problem], solvers: Sequence[Solver], k: int = 64,
                   chunk: int = 16, progress: Callable[[str], None] | None = None) -> MiningResult:
    if k < 1 or chunk < 1:
        raise ValueError("k and chunk must be >= 1")
    if not solvers:
        raise ValueError("need at least one reference solver")
    samples = {p.id: 0 for p in candidates}
    passes = {p.id: 0 for p in candidates}
    alive = list(candidates)
    for s_idx, solver in enumerate(solvers):
        drawn = {p.id: 0 for p in alive}
        while alive:
            todo = [p for p in alive if drawn[p.id] < k]
            if not todo:
                break
            n = min(chunk, k - min(drawn[p.id] for p in todo))
            got = solver(todo, n)
            for p, c in zip(todo, got):
                drawn[p.id] += n
                samples[p.id] += n
                passes[p.id] += c
            alive = [p for p in alive if passes[p.id] == 0]
            if progress:
                progress(f"solver {s_idx}: {len(alive)} unsolved of {len(candidates)} "
                         f"after {max(drawn.values(), default=0)} of {k} samples")
    return MiningResult(alive, k, samples, passes)


def engine_solver(engine, executor, sampling) -> Solver:
    """A solver from an engine (student prompt from each problem's text) and the executor."""
    calls = itertools.count()

    def run(problems: list[Problem], n: int) -> list[int]:
        sp = sampling
        if sp.seed is not None:  # a fresh seed per round, or every round would repeat the first
            sp = dataclasses.replace(sp, seed=sp.seed + 1_000_003 * next(calls))
        return [r.c for r in solve(engine, executor, problems, n, sp)]

    return run
