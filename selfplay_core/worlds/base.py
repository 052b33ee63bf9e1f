"""The world slot: where a run's tasks come from, what the loop may ask of it, and the registry.

A world is a `World` subclass with its own config section (a `WorldConfig` subclass, selected
by `name` under `world:` in a run config, as `method:` selects a method), registered with
`@register`. The loop knows worlds only through this interface: it never imports a world's
package (the import-graph test enforces it for the toy world); worlds that live outside the
generic code are plug-ins, loaded by `selfplay_core.worlds.plugins`.

What a world gives a run:

* `eval_problems` — the held-out evaluation problems (`metadata["eval_set"]` names the set, so
  evaluation reports pass@k per set); `heldout_problems` the whole held-out set;
* `real_tasks` — the real training tasks (RLVR and the GASP + real-data mix), in the order the
  run consumes them;
* `goalpost_pool` — the candidates goalposts are mined from (`loop.worlds.select_goalposts`),
  and `mine` — how (the rule `world.goalpost_rule` names);
* `oracle` (optional) — ONE object that knows the ground truth of the world's tasks, the single
  entry point of every diagnostic that needs one (never a reward; None for real data):
    oracle.fidelity(executor, [(question, code, inputs)]) -> [verdict with .faithful]
        does a proposal's text describe its code?
    oracle.variant(parent_question, question, direction) -> bool | None
        is the question a true one-step variant of its parent's in that direction?
    oracle.truth(executor, [(question, [args])]) -> [outputs | None]
        the outputs a question's text denotes (tasks proposed without a program)
    oracle.guide_judgment(target_question, question, code, faithful) -> GuideScores | None
        what the Guide should have said of a proposal for a target;
* `decontaminator` (optional) — an n-gram index of the evaluation statements;
* `splits()` — {name: SplitInfo} for every split used, logged as MLflow tags;

and, without being built (class methods): `default_model()` (the weights `model.path: <world
name>` means), `documents()` (the corpus a document-grounded method reads by default, SPICE's
`corpus.source: toy`), `evaluate_checkpoint` (the world as a benchmark of the evaluation
deployment) and `describe` (one line of the dry-run plan).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from selfplay_core.frozen import FrozenConfig
from selfplay_core.goalposts import mine_goalposts
from selfplay_core.problems import Problem
from selfplay_core.registry import Registry, titled_by_name

log = logging.getLogger(__name__)

# fits(problem, role) -> whether the prompt of that role plus its generation budget fits the
# model's context ("student": the student prompt; "teacher": the lemma prompt of a goalpost).
Fits = Callable[[Problem, str], bool]


class WorldConfig(FrozenConfig):
    """A world's config section, `world:` in a run config; `name` selects the subclass. The keys
    here are every world's: how goalposts are chosen and how the real tasks use them."""

    model_config = ConfigDict(json_schema_extra=titled_by_name)

    # The goalpost rules this world can mine by, its default first.
    rules: ClassVar[tuple[str, ...]] = ("unsolved",)

    # The world; picking another shows that world's options.
    name: str
    # Seeds the world's problem generation and goalpost mining order.
    seed: int = 0
    goalpost_k: int = Field(128, ge=1)       # mined goalposts have pass@k = 0 for the base model
    # Most goalposts kept (None: every one mining finds).
    max_goalposts: int | None = Field(40, ge=1)
    # A goalpost-set JSON written by mining (run_dir/goalposts.json): use it instead of mining.
    goalposts: str | None = None
    # How goalposts are mined. unsolved: pass@k = 0 for the starting model. frontier (a world
    # with an oracle of true easier variants, the toy world): also a true one-step easier
    # variant the starting model solves with a pass rate in the world's frontier band. None:
    # the world's own rule (its first in `rules`).
    goalpost_rule: Literal["unsolved", "frontier"] | None = None
    # The real training tasks (RLVR, GASP + RLVR) include the goalposts, as the paper's RLVR
    # trains on the split its goalposts come from (a goalpost no sample solves carries no signal).
    goalposts_in_real_tasks: bool = True

    @model_validator(mode="after")
    def _rule(self):
        if self.goalpost_rule is not None and self.goalpost_rule not in self.rules:
            raise ValueError(f"world.goalpost_rule {self.goalpost_rule} needs a world oracle of true "
                             f"easier variants (the toy world's); world {self.name!r} mines by "
                             f"{' or '.join(repr(r) for r in self.rules)}")
        return self

    @property
    def rule(self) -> str:
        return self.goalpost_rule or self.rules[0]


@dataclass(frozen=True)
class SplitInfo:
    """What an MLflow tag says about one split: a version and a content hash."""

    version: str
    content_hash: str
    size: int = 0


class World:
    """A built world (see the module docstring). Subclasses set `name` and `Config`."""

    name: ClassVar[str] = "world"
    Config: ClassVar[type[WorldConfig]] = WorldConfig
    # Whether the world leaves out problems whose prompts do not fit the model's context (it
    # then gets `fits`; working it out needs the model's context length).
    needs_fits: ClassVar[bool] = False

    eval_problems: list[Problem]
    real_tasks: list[Problem]
    goalpost_pool: list[Problem]
    oracle: Any = None
    decontaminator = None
    goalpost_set: SplitInfo | None = None     # set by select_goalposts
    goalpost_reserve: tuple = ()              # set by select_goalposts (dynamic goalposts)

    @property
    def heldout_problems(self) -> list[Problem]:
        """The whole held-out set (eval_problems may be a subset): the end-of-run verdict."""
        return self.eval_problems

    def splits(self) -> dict:
        raise NotImplementedError

    def goalpost_cache_tag(self, cfg) -> str:
        """The part of the mining cache key that identifies the pool."""
        raise NotImplementedError

    def rule_tag(self, cfg) -> str:
        """The part of the mining cache key that identifies the rule's settings ('' for
        unsolved, which has none)."""
        return ""

    def mine(self, cfg, pool: list[Problem], solver, progress) -> tuple[Any, dict]:
        """Mine goalposts from `pool` by the configured rule: (a result with `goalposts`,
        `summary()` and optionally `reserve`, extra fields for the goalpost-set file)."""
        return mine_goalposts(pool, [solver], k=cfg.world.goalpost_k, chunk=16, progress=progress), {}

    def _with_goalposts(self, d: dict) -> dict:
        if self.goalpost_set is not None:
            d = {**d, "goalposts": self.goalpost_set}
        return d

    # ---- what a world offers without being built ----------------------------------------------
    @classmethod
    def default_model(cls, build: bool = False) -> Path:
        """The weights `model.path: <this world's name>` means. FileNotFoundError when there
        are none (with `build`, a world that can make them does)."""
        raise FileNotFoundError(f"world {cls.name!r} has no default model: set model.path to a "
                                "model folder or hub id")

    @classmethod
    def documents(cls) -> list:
        """The world's documents (datasets.documents.Document): the default corpus of a
        document-grounded method. None: the world has none."""
        return None

    @classmethod
    def evaluate_checkpoint(cls, engine, executor, cfg, out_dir: Path) -> dict | None:
        """The world as a benchmark of the checkpoint evaluation (checkpoint_eval): metrics,
        reports written into out_dir. None: the world is no such benchmark."""
        return None

    @classmethod
    def describe(cls, w: WorldConfig) -> str:
        """One line of the dry-run plan: what this world section means."""
        return f"world: {w.name}"


# ---- the registry -----------------------------------------------------------------------------

_WORLDS: Registry[type[World]] = Registry("world", WorldConfig)
register = _WORLDS.register       # class decorator: a World under its config's `name`
registered = _WORLDS.all          # {name: World class}, in registration order
world_class = _WORLDS.get


def build_world(cfg, executor=None, fits: Fits | None = None) -> World:
    """The world a run config's `world:` section selects, built."""
    return world_class(cfg.world.name)(cfg, executor=executor, fits=fits)
