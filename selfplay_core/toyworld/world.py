"""The toy world as a world plug-in (`selfplay_core.worlds`): its config section, the world a
run builds from it, its oracle, its default model (the bootstrapped tiny model), its documents
(the primitives library) and its frontier goalpost mining. Importing this module registers the
world and the oracle arms (`toyworld.arms`); `selfplay_core.worlds.plugins` imports it, so no
generic module imports the toy package.
"""

from __future__ import annotations

import json
import logging
import random
import time
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from selfplay_core.engines.base import SamplingParams
from selfplay_core.problems import Problem
from selfplay_core.solve import solve
from selfplay_core.toyworld import arms  # noqa: F401  (registers the oracle arms as methods)
from selfplay_core.toyworld.fidelity import proposal_fidelity, true_outputs
from selfplay_core.toyworld.frontier import FrontierSettings, mine_frontier
from selfplay_core.toyworld.guide_oracle import oracle_judgment
from selfplay_core.toyworld.metrics import mean_pass_at_k
from selfplay_core.toyworld.relevance import question_variant
from selfplay_core.toyworld.splits import SplitSizes
from selfplay_core.toyworld.splits import build_world as build_toy_world
from selfplay_core.worlds.base import Fits, World, WorldConfig, register

log = logging.getLogger(__name__)


class ToyWorldConfig(WorldConfig):
    """`world: toy`: the synthetic world (generated from `seed`; nothing to download)."""

    rules: ClassVar[tuple[str, ...]] = ("frontier", "unsolved")

    name: Literal["toy"] = "toy"
    # frontier rule: a goalpost's true one-step easier variant is solved by the starting model
    # with a pass rate in frontier_band (toyworld/frontier.py), i.e. a curriculum can reach it.
    frontier_band: tuple[float, float] = (0.3, 0.7)
    # frontier rule: samples per true one-step lemma when its pass rate is measured.
    frontier_lemma_samples: int = Field(16, ge=1)
    # frontier rule: samples per candidate before the costlier lemma check.
    frontier_screen_k: int = Field(32, ge=1)
    # Depth-5 goalpost candidates added to the pool (toyworld.splits; 0: the v2 pool).
    # For a start checkpoint that solves nearly all of the depth-3/4 pool, e.g. one with the
    # bootstrap's teacher phase; its lifts of depth-4 lemmas need engine.max_new_tokens_teacher 256.
    deep_pool: int = Field(0, ge=0)
    # Their depth: 6 for a checkpoint whose teacher phase wrote lemmas of depth-6 sources
    # (lab/learning-studies.md, "A teacher that is not also the student"); depth-6 programs
    # need max_new_tokens_student 128.
    deep_depth: Literal[5, 6] = 5

    @model_validator(mode="after")
    def _check(self):
        if self.deep_depth != 5 and not self.deep_pool:
            raise ValueError("world.deep_depth sets the depth of the deep pool's candidates; "
                             "it needs world.deep_pool > 0")
        lo, hi = self.frontier_band
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError(f"world.frontier_band must satisfy 0 <= low <= high <= 1, got {(lo, hi)}")
        return self


class ToyOracle:
    """The toy world's ground truth, the single entry point of the diagnostics (never a
    reward): every toy task's text, program and variants are known exactly."""

    def fidelity(self, executor, items):
        """[(question, code, inputs)] -> [Fidelity]: does each question describe its code?"""
        return proposal_fidelity(executor, items)

    def variant(self, parent_question: str, question: str, direction: str) -> bool | None:
        """Is `question` a true one-step variant of its parent's in `direction`? None where the
        parent is no toy task."""
        return question_variant(parent_question, question, direction)

    def truth(self, executor, items):
        """[(question, [args])] -> the outputs each question's text denotes (None: not a toy
        description)."""
        return true_outputs(executor, items)

    def guide_judgment(self, target_question: str, question: str, code, faithful):
        """The Guide's judgments of a proposal for a target, as the oracle makes them (None
        where it cannot judge)."""
        return oracle_judgment(target_question, question, code, faithful)


def frontier_settings(w: ToyWorldConfig) -> FrontierSettings:
    return FrontierSettings(k=w.goalpost_k, screen_k=min(w.frontier_screen_k, w.goalpost_k),
                            lemma_samples=w.frontier_lemma_samples, band=tuple(w.frontier_band))


def frontier_tag(w: ToyWorldConfig) -> str:
    s = frontier_settings(w)
    return f"frontier-b{s.band[0]:g}-{s.band[1]:g}-n{s.lemma_samples}-s{s.screen_k}"


@register
class ToyWorld(World):
    """The synthetic world. Subsets and orders use the same seeded RNG streams as before worlds
    were factored out, so runs reproduce their numbers exactly."""

    Config = ToyWorldConfig

    def __init__(self, cfg, executor=None, fits: Fits | None = None):
        self.toy = build_toy_world(cfg.world.seed, SplitSizes(deep_pool=cfg.world.deep_pool,
                                                              deep_depth=cfg.world.deep_depth))
        self.oracle = ToyOracle()
        ev = self.toy.eval.problems
        if cfg.eval.max_problems:
            r = random.Random(f"eval-subset:{cfg.world.seed}")
            ev = sorted(r.sample(ev, min(cfg.eval.max_problems, len(ev))), key=lambda p: p.id)
        self.eval_problems = ev
        self.real_tasks = list(self.toy.train.problems)
        random.Random(f"real-order:{cfg.seed}").shuffle(self.real_tasks)
        self.goalpost_pool = list(self.toy.goalpost_pool.problems)

    @property
    def heldout_problems(self) -> list[Problem]:
        return list(self.toy.eval.problems)

    def splits(self) -> dict:
        return self._with_goalposts(self.toy.splits())

    def goalpost_cache_tag(self, cfg) -> str:
        # No dash inside the tag: goalpost-set keys are split on dashes (loop.worlds._key_parts).
        deep = f"d{cfg.world.deep_depth}x{cfg.world.deep_pool}" if cfg.world.deep_pool else ""
        return f"w{cfg.world.seed}{deep}"

    def rule_tag(self, cfg) -> str:
        return "" if cfg.world.rule == "unsolved" else frontier_tag(cfg.world)

    def mine(self, cfg, pool, solver, progress):
        w = cfg.world
        if w.rule != "frontier":
            return super().mine(cfg, pool, solver, progress)
        res = mine_frontier(pool, solver, frontier_settings(w), seed=w.seed, progress=progress)
        return res, {"lemmas": res.lemmas, "reserve": res.reserve,
                     "frontier": frontier_settings(w).to_dict()}

    # ---- what the toy world offers without being built -----------------------------------------
    @classmethod
    def default_model(cls, build: bool = False) -> Path:
        """The bootstrapped tiny model (cached, else the committed checkpoint); with `build`, one
        is bootstrapped when neither exists (a few minutes, cached afterwards)."""
        from selfplay_core.toyworld.bootstrap import bootstrap_toy_model, default_model_dir

        try:
            return default_model_dir()
        except FileNotFoundError:
            if not build:
                raise
        log.warning("no toy model yet: bootstrapping one (a few minutes, cached afterwards)")
        return Path(bootstrap_toy_model())

    @classmethod
    def documents(cls) -> list:
        from selfplay_core.toyworld.library import toy_documents

        return toy_documents()

    @classmethod
    def evaluate_checkpoint(cls, engine, executor, cfg, out_dir: Path) -> dict:
        return evaluate_toy(engine, executor, cfg, out_dir)

    @classmethod
    def describe(cls, w: ToyWorldConfig) -> str:
        return "world: toy (synthetic tasks; goalposts mined from the depth-3/4 pool)"


# ---- the toy world as a benchmark of the checkpoint evaluation ---------------------------------

def toy_eval_problems(world_seed: int, max_problems: int | None):
    """The toy world's held-out problems; the subset matches a run's for the same seed."""
    probs = build_toy_world(world_seed).eval.problems
    if max_problems:
        r = random.Random(f"eval-subset:{world_seed}")
        probs = sorted(r.sample(probs, min(max_problems, len(probs))), key=lambda p: p.id)
    return probs


def evaluate_toy(engine, executor, cfg, out_dir: Path) -> dict:
    """Held-out toy-world pass@k overall and by depth (cfg: a checkpoint_eval
    CheckpointEvalConfig); writes report.json and results.jsonl."""
    t0 = time.perf_counter()
    probs = toy_eval_problems(cfg.world_seed, cfg.max_problems)
    sp = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p,
                        max_new_tokens=cfg.max_new_tokens or 96, seed=cfg.seed)
    res = solve(engine, executor, probs, cfg.n, sp)
    metrics, by_depth = {}, {}
    for r in res:
        by_depth.setdefault(r.problem.metadata.get("depth", 0), []).append((r.n, r.c))
    for k in cfg.ks:
        metrics[f"pass@{k}"] = mean_pass_at_k([(r.n, r.c) for r in res], k)
        for d, counts in sorted(by_depth.items()):
            metrics[f"d{d}/pass@{k}"] = mean_pass_at_k(counts, k)
    results = [{"problem_id": r.problem.id, "depth": r.problem.metadata.get("depth"), "n": r.n,
                "c": r.c} for r in res]
    report = {"format": "selfplay-eval-toy/1", "dataset": {"name": "toy", "world_seed": cfg.world_seed,
                                                          "problems": len(probs)},
              "sampling": {"n": cfg.n, "ks": list(cfg.ks), "temperature": sp.temperature,
                           "top_p": sp.top_p, "max_new_tokens": sp.max_new_tokens, "seed": sp.seed},
              "metrics": metrics, "timings": {"total_s": time.perf_counter() - t0}}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in results))
    return report
