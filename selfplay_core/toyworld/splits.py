"""Fixed, versioned, hashed splits of the toy world.

* train — the "real data" of the RLVR baseline (depth 1-2);
* eval — held out, by depth (1-4);
* goalpost_pool — depth 3-4 candidates; goalposts are *mined* from it (pass@k = 0 for the base
  model, see `selfplay_core.goalposts`; the toy default keeps the *frontier* ones, whose true
  one-step lemmas the base model solves in band, see `toyworld.frontier`), not decreed.

v2 (issue 17): the pool holds 480 depth-3 candidates (v1: 40) because only ~1 in 10 depth-3
candidates is a frontier goalpost; the eval split is drawn first and is the same as v1's.

Deep pool (opt-in, `world.deep_pool` = N): N depth-5 candidates appended to the goalpost pool,
drawn after every v2 split from a stream of their own, so train, eval and the v2 pool stay
exactly what they were (same tasks, ids and hashes) and only the pool's version and hash say
`+d5xN`. Why: a checkpoint strong enough to be a faithful teacher (the bootstrap's teacher
phase) solves nearly every depth-3/4 candidate, leaving a handful of goalposts. `deep_depth` = 6
draws them at depth 6 instead (`+d6xN`, a stream of its own): the pool for a teacher phase that
writes lemmas of depth-6 sources, trained on its completions only: it writes a depth-6 program
only as an io-axis copy of one its prompt shows.

Everything is a function of (seed, sizes). Eval and pool tasks never appear in train or in the
pretraining corpus (`exclusion()`); each split carries a version string and a content hash over
its problems, like the real benchmarks.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from selfplay_core.problems import Problem
from selfplay_core.toyworld.corpus import Exclusion
from selfplay_core.toyworld.tasks import Task, make_problem, sample_task

VERSION = "toyworld-v2"


@dataclass(frozen=True)
class SplitSizes:
    train: tuple = ((1, 200), (2, 400))
    eval: tuple = ((1, 80), (2, 100), (3, 60), (4, 60))
    goalpost_pool: tuple = ((3, 480), (4, 60))
    n_tests: int = 8
    deep_pool: int = 0          # depth-5 pool candidates drawn after the v2 splits (0: v2 as is)
    deep_depth: int = 5         # their depth (6: a pool for a teacher phase with depth-6 lemma sources)

    def __post_init__(self):
        if self.deep_depth not in (5, 6):
            raise ValueError(f"deep_depth must be 5 or 6, got {self.deep_depth}")


@dataclass
class Split:
    name: str
    version: str
    tasks: list[Task]
    problems: list[Problem]
    content_hash: str = ""

    def __post_init__(self):
        if not self.content_hash:
            self.content_hash = content_hash(self.problems)

    def by_depth(self) -> dict[int, list[Problem]]:
        out: dict[int, list[Problem]] = {}
        for p in self.problems:
            out.setdefault(p.metadata["depth"], []).append(p)
        return dict(sorted(out.items()))

    def __len__(self) -> int:
        return len(self.problems)


def content_hash(problems: list[Problem]) -> str:
    h = hashlib.sha256()
    for p in problems:
        h.update(p.dumps().encode())
        h.update(b"\n")
    return "sha256:" + h.hexdigest()[:16]


@dataclass
class ToyWorld:
    seed: int
    train: Split
    eval: Split
    goalpost_pool: Split
    sizes: SplitSizes = field(default_factory=SplitSizes)

    def exclusion(self) -> Exclusion:
        """What the pretraining corpus must not contain: every held-out task."""
        ex = Exclusion()
        for t in self.eval.tasks + self.goalpost_pool.tasks:
            ex.add(t)
        return ex

    def splits(self) -> dict[str, Split]:
        return {"train": self.train, "eval": self.eval, "goalpost_pool": self.goalpost_pool}


def build_world(seed: int = 0, sizes: SplitSizes | None = None) -> ToyWorld:
    sizes = sizes or SplitSizes()
    rng = random.Random(f"toyworld-splits:{seed}")
    held = Exclusion()

    def draw(name: str, plan, blocked: Exclusion, record: Exclusion | None,
             rng: random.Random = rng, version: str = f"{VERSION}-s{seed}") -> Split:
        tasks, problems, seen = [], [], set()
        for depth, count in plan:
            got = 0
            while got < count:
                t = sample_task(rng, depth)
                if t.key in seen or blocked.blocks(t):
                    continue
                seen.add(t.key)
                if record is not None:
                    record.add(t)
                tasks.append(t)
                problems.append(make_problem(t, f"toy/{name}/d{depth}/{got:04d}", rng, sizes.n_tests,
                                             {"split": name, "version": version}))
                got += 1
        return Split(name, version, tasks, problems)

    # Held-out splits first, so that train is drawn around them.
    eval_split = draw("eval", sizes.eval, held, held)
    pool = draw("goalpost_pool", sizes.goalpost_pool, held, held)
    train = draw("train", sizes.train, held, None)
    if sizes.deep_pool:
        d = sizes.deep_depth
        version = f"{VERSION}+d{d}x{sizes.deep_pool}-s{seed}"
        # Depth 5 keeps its original stream name, so its pools stay exactly what they were.
        stream = f"toyworld-deep-pool:{seed}" if d == 5 else f"toyworld-deep-pool-d{d}:{seed}"
        deep = draw("goalpost_pool", ((d, sizes.deep_pool),), held, held,
                    rng=random.Random(stream), version=version)
        pool = Split("goalpost_pool", version, pool.tasks + deep.tasks, pool.problems + deep.problems)
    return ToyWorld(seed, train, eval_split, pool, sizes)
