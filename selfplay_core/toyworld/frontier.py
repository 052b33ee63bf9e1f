"""Frontier goalposts: candidates the starting model never solves (pass@k = 0) but whose true
one-step easier variants it solves *in the lemma band* — goalposts a curriculum can reach.

Why: goalposts mined by pass@k = 0 alone were mostly two steps beyond the student (issue 17:
true one-step lemmas of the v1 goalposts had mean p 0.017; 1 of 142 in [0.3, 0.7]), so even a
perfect teacher had no stepping stone to offer. Choosing the goalpost set is part of defining
the world, like the paper's choice of pre-window LCB problems: every arm of a study faces the
same set, and the oracle used here never enters a reward.

Mining, per block of candidates (in a seeded order, so the first N frontier goalposts do not
depend on how many are wanted):

1. screen: `screen_k` samples (rounds of `chunk`, a candidate leaves at its first pass);
2. lemmas: every true one-step easier variant of each survivor (`oracle.easier_variants`),
   `lemma_samples` samples each; a survivor with a lemma whose pass rate is in `band` stays;
3. confirm: more samples up to `k` in all; a candidate still never solved is a goalpost.

It stops once `max_goalposts` are found (None: the whole pool). The result records, per
goalpost, its lemmas and their pass rates, which the curriculum lineage view shows.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

from selfplay_core.goalposts import Solver, mine_goalposts
from selfplay_core.problems import Problem
from selfplay_core.toyworld.oracle import easier_variants, task_of
from selfplay_core.toyworld.tasks import make_problem


@dataclass(frozen=True)
class FrontierSettings:
    k: int = 128                       # a goalpost has pass@k = 0 for the starting model
    screen_k: int = 32                 # samples before the (costlier) lemma check
    lemma_samples: int = 16
    band: tuple[float, float] = (0.3, 0.7)
    chunk: int = 16
    block: int = 48                    # candidates per mining block
    max_goalposts: int | None = None

    def __post_init__(self):
        if not 1 <= self.screen_k <= self.k:
            raise ValueError(f"need 1 <= screen_k <= k, got screen_k={self.screen_k}, k={self.k}")
        lo, hi = self.band
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError(f"band must satisfy 0 <= low <= high <= 1, got {self.band}")
        if self.lemma_samples < 1 or self.chunk < 1 or self.block < 1:
            raise ValueError("lemma_samples, chunk and block must be >= 1")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class FrontierResult:
    goalposts: list[Problem]
    settings: FrontierSettings
    examined: int = 0
    samples: dict[str, int] = field(default_factory=dict)      # candidate id -> samples drawn
    passes: dict[str, int] = field(default_factory=dict)       # candidate id -> passes seen
    lemmas: dict[str, list[dict]] = field(default_factory=dict)  # goalpost id -> lemmas + p
    dropped: dict[str, int] = field(default_factory=dict)      # reason -> candidates
    # Candidates never solved in the screen whose lemmas were all out of band: the next goalposts
    # once the student improves (dynamic goalposts), easiest (best lemma pass rate) first.
    reserve: list[str] = field(default_factory=list)
    best_lemma: dict[str, float] = field(default_factory=dict)  # candidate id -> best lemma p

    def summary(self) -> dict:
        return {"rule": "frontier", "candidates": self.examined, "goalposts": len(self.goalposts),
                "k": self.settings.k, "samples": sum(self.samples.values()),
                "dropped": dict(self.dropped)}


def lemma_problems(goalpost: Problem, n_tests: int = 8) -> list[tuple[str, Problem]]:
    """(axis, problem) for every true one-step easier variant of a toy goalpost."""
    task = task_of(goalpost)
    if task is None:
        return []
    out = []
    for j, (axis, v) in enumerate(easier_variants(task)):
        rng = random.Random(f"frontier-lemma:{v.key}")
        out.append((axis, make_problem(v, f"{goalpost.id}/lemma/{j}", rng, n_tests,
                                       {"goalpost_id": goalpost.id, "axis": axis})))
    return out


def mine_frontier(candidates: Sequence[Problem], solver: Solver, settings: FrontierSettings,
                  seed: int = 0, progress: Callable[[str], None] | None = None) -> FrontierResult:
    s = settings
    order = list(candidates)
    random.Random(f"frontier-order:{seed}").shuffle(order)
    res = FrontierResult([], s)
    drop = res.dropped
    for start in range(0, len(order), s.block):
        if s.max_goalposts is not None and len(res.goalposts) >= s.max_goalposts:
            break
        block = order[start:start + s.block]
        res.examined += len(block)
        screened = mine_goalposts(block, [solver], k=s.screen_k, chunk=s.chunk)
        _add(res, screened)
        alive = screened.goalposts
        drop["solved_in_screen"] = drop.get("solved_in_screen", 0) + len(block) - len(alive)
        plans = [(g, lemma_problems(g)) for g in alive]
        flat = [p for _, ls in plans for _, p in ls]
        passes = solver(flat, s.lemma_samples) if flat else []
        it = iter(passes)
        reachable = []
        for g, ls in plans:
            rows = [{"id": p.id, "axis": axis, "question": p.prompt, "key": p.metadata["key"],
                     "pass_rate": next(it) / s.lemma_samples} for axis, p in ls]
            res.best_lemma[g.id] = max((r["pass_rate"] for r in rows), default=0.0)
            if any(s.band[0] <= r["pass_rate"] <= s.band[1] for r in rows):
                reachable.append(g)
                res.lemmas[g.id] = rows
            else:
                drop["no_lemma_in_band"] = drop.get("no_lemma_in_band", 0) + 1
                res.reserve.append(g.id)
        if reachable and s.k > s.screen_k:
            confirmed = mine_goalposts(reachable, [solver], k=s.k - s.screen_k, chunk=s.chunk)
            _add(res, confirmed)
            kept = confirmed.goalposts
        else:
            kept = reachable
        drop["solved_in_confirm"] = drop.get("solved_in_confirm", 0) + len(reachable) - len(kept)
        for g in reachable:
            if g not in kept:
                res.lemmas.pop(g.id, None)
        room = None if s.max_goalposts is None else s.max_goalposts - len(res.goalposts)
        res.goalposts += kept[:room] if room is not None else kept
        if progress:
            progress(f"frontier mining: {len(res.goalposts)} goalposts from {res.examined} of "
                     f"{len(order)} candidates")
    for g in list(res.lemmas):
        if g not in {p.id for p in res.goalposts}:
            res.lemmas.pop(g)
    res.reserve.sort(key=lambda g: (-res.best_lemma[g], g))
    return res


def _add(res: FrontierResult, mined) -> None:
    for pid, n in mined.samples.items():
        res.samples[pid] = res.samples.get(pid, 0) + n
        res.passes[pid] = res.passes.get(pid, 0) + mined.passes[pid]
