"""The real-data world (DESIGN.md §1): goalposts are LiveCodeBench problems from before the
evaluation window (2024-08-01) that the base model cannot solve; the same pre-window problems
are the RLVR training split; evaluation is the LCB window (2024-08-01..2025-02-01) plus
HumanEval+ / MBPP+ as configured; the training split is decontaminated against every evaluation
set (word 8-gram overlap, `datasets.decontam`), and problems whose prompt plus generation budget
exceeds the model's context are left out and counted (a server would reject them mid-run).
It has no oracle: every diagnostic that needs one is skipped.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from typing import Literal

from pydantic import Field, model_validator

from selfplay_core.datasets.benchmark import problems_hash
from selfplay_core.datasets.decontam import Decontaminator
from selfplay_core.datasets.evalplus import file_sha256, load_humanevalplus, load_mbppplus
from selfplay_core.datasets.livecodebench import load_lcb
from selfplay_core.datasets.registry import _EVALPLUS_RELEASES, load_evalplus
from selfplay_core.problems import InputError, Problem
from selfplay_core.worlds.base import Fits, SplitInfo, World, WorldConfig, register

log = logging.getLogger(__name__)

EVAL_SET_ALIASES = {"lcb": "lcb", "humanevalplus": "humanevalplus", "humaneval+": "humanevalplus",
                    "mbppplus": "mbppplus", "mbpp+": "mbppplus"}


class LCBWorldConfig(WorldConfig):
    """`world: lcb`: goalposts mined from LiveCodeBench problems before the evaluation window,
    real training tasks = the same pre-window problems, held-out evaluation = the LCB window
    plus `eval_sets`."""

    name: Literal["lcb"] = "lcb"
    # A LiveCodeBench JSONL file or a folder of official testN.jsonl files (default: the
    # public-tests file of a local mirror, $SELFPLAY_DATA/livecodebench); with `lcb_release`
    # and no `data`, that release from the Hugging Face hub (private tests included).
    data: str | None = None
    # A LiveCodeBench release on the hub (e.g. release_v5), used when `data` is not set.
    lcb_release: str | None = None
    eval_sets: tuple[str, ...] = ("lcb",)    # lcb, humanevalplus (humaneval+), mbppplus (mbpp+)
    prompt_template: str | None = None       # plain | instruct | FILE (default per set)
    # Mine from a subset of the pool (None: all of it).
    max_goalpost_candidates: int | None = Field(None, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data):
        if isinstance(data, dict) and isinstance(data.get("eval_sets"), (list, tuple)):
            out = []
            for name in data["eval_sets"]:
                key = EVAL_SET_ALIASES.get(str(name).lower())
                if key is None:
                    raise ValueError(f"eval_sets: unknown set {name!r}; choose from "
                                     "lcb, humanevalplus (humaneval+), mbppplus (mbpp+)")
                if key not in out:
                    out.append(key)
            data = {**data, "eval_sets": tuple(out)}
        return data

    @model_validator(mode="after")
    def _check(self):
        if not self.eval_sets:
            raise ValueError("world.eval_sets must name at least one set (lcb, humanevalplus, mbppplus)")
        return self


def _tagged(p: Problem, benchmark: str, template: str | None) -> Problem:
    meta = {**p.metadata, "benchmark": benchmark, "eval_set": benchmark}
    if template:
        meta["prompt_template"] = template
    return dataclasses.replace(p, metadata=meta)


def _subset(problems: list[Problem], k: int | None, key: str) -> list[Problem]:
    if not k or k >= len(problems):
        return sorted(problems, key=lambda p: p.id)
    return sorted(random.Random(key).sample(sorted(problems, key=lambda p: p.id), k),
                  key=lambda p: p.id)


@register
class RealWorld(World):
    """LiveCodeBench goalposts and training split, LCB window + HumanEval+/MBPP+ evaluation."""

    Config = LCBWorldConfig
    needs_fits = True

    def __init__(self, cfg, executor=None, fits: Fits | None = None):
        w = cfg.world
        self.fits = fits or (lambda p, role: True)
        self._splits: dict[str, SplitInfo] = {}
        self.dropped: dict[str, dict[str, int]] = {}
        template = w.prompt_template
        lcb_train = load_lcb(w.data, release=w.lcb_release, window="train")
        lcb_test = load_lcb(w.data, release=w.lcb_release, window="test")

        # Evaluation sets: what fits the context, then a seeded subset (eval.max_problems per set).
        full_eval_texts: dict[str, str] = {}
        self.eval_problems = []
        for name in w.eval_sets:
            if name == "lcb":
                full, version = lcb_test.problems, f"{lcb_test.version} window=test"
            else:
                full, version = self._evalplus_statements(name)
            full_eval_texts.update({f"{name}:{p.id}": p.prompt or "" for p in full})
            tagged = [_tagged(p, name, template) for p in full]
            fitting = [p for p in tagged if self.fits(p, "student")]
            chosen = _subset(fitting, cfg.eval.max_problems, f"eval-subset:{w.seed}:{name}")
            if name != "lcb":  # expected outputs: run the canonical solutions of the chosen ones
                chosen = self._evalplus_with_expected(name, chosen, executor, template)
            self._drop(f"eval.{name}", "too_long_for_context", len(tagged) - len(fitting))
            self.eval_problems += chosen
            self._splits[f"eval.{name}"] = SplitInfo(
                f"{version} n={len(chosen)}/{len(full)}", problems_hash(chosen), len(chosen))

        # Training split: LCB before the window, decontaminated against every evaluation set.
        self.decontaminator = Decontaminator(full_eval_texts)
        train = []
        for p in lcb_train.problems:
            p = _tagged(p, "lcb", template)
            p = dataclasses.replace(p, metadata={**p.metadata, "eval_set": None})
            if self.decontaminator.check(p.prompt or "").contaminated:
                self._drop("train", "overlaps_eval_set", 1)
            elif not (self.fits(p, "student") and self.fits(p, "teacher")):
                self._drop("train", "too_long_for_context", 1)
            else:
                train.append(p)
        train.sort(key=lambda p: p.id)
        self.train = train
        self._splits["train"] = SplitInfo(f"{lcb_train.version} window=train n={len(train)}",
                                          problems_hash(train), len(train))
        # A training reward must come from tests the student is not shown: a problem whose
        # every test is a sample block of its statement is passed by copying the samples.
        from selfplay_core.datasets.livecodebench import every_test_shown
        self.real_tasks = [p for p in train if not every_test_shown(p)]
        shown = len(train) - len(self.real_tasks)
        self._drop("real_tasks", "every_test_shown_in_the_statement", shown)
        if shown:
            log.warning("world lcb: %d of %d training problems are not used as RL training tasks: "
                        "every test they have is shown in the statement (public tests only; the "
                        "hub release has hidden tests)", shown, len(train))
        self._splits["real_tasks"] = SplitInfo(
            f"{lcb_train.version} window=train n={len(self.real_tasks)} "
            f"({shown} with every test in the statement left out)",
            problems_hash(self.real_tasks), len(self.real_tasks))
        if cfg.student.real_tasks_per_iteration and not self.real_tasks:
            raise InputError(
                f"world lcb: student.real_tasks_per_iteration={cfg.student.real_tasks_per_iteration} "
                f"but none of the {len(train)} LiveCodeBench training problems has a test the "
                "student is not shown (their tests are the statements' samples); use a release "
                "with private tests (world.lcb_release, from the hub) or set "
                "student.real_tasks_per_iteration=0")
        random.Random(f"real-order:{cfg.seed}").shuffle(self.real_tasks)
        self.goalpost_pool = _subset(train, w.max_goalpost_candidates, f"gp-candidates:{w.seed}")
        self._splits["goalpost_pool"] = SplitInfo(
            f"{lcb_train.version} window=train n={len(self.goalpost_pool)}",
            problems_hash(self.goalpost_pool), len(self.goalpost_pool))
        for split, reasons in self.dropped.items():
            log.info("world lcb: %s left out %s", split, reasons)

    def _drop(self, split: str, reason: str, n: int) -> None:
        if n:
            d = self.dropped.setdefault(split, {})
            d[reason] = d.get(reason, 0) + n

    @staticmethod
    def _evalplus_statements(name: str):
        loader = {"humanevalplus": load_humanevalplus, "mbppplus": load_mbppplus}[name]
        problems, _, src = loader(None, with_path=True)
        return problems, _EVALPLUS_RELEASES.get(file_sha256(src), f"{name} (local file)")

    @staticmethod
    def _evalplus_with_expected(name: str, chosen: list[Problem], executor, template) -> list[Problem]:
        if not chosen:
            return []
        bench = load_evalplus(name, executor=executor, ids=[p.id for p in chosen])
        return sorted((_tagged(p, name, template) for p in bench.problems), key=lambda p: p.id)

    def splits(self) -> dict:
        return self._with_goalposts(dict(self._splits))

    def goalpost_cache_tag(self, cfg) -> str:
        return f"lcb-{self._splits['goalpost_pool'].content_hash[:12]}"

    @classmethod
    def describe(cls, w: LCBWorldConfig) -> str:
        data = w.data or (f"hub release {w.lcb_release}" if w.lcb_release else
                          "$SELFPLAY_DATA/livecodebench (public tests)")
        gps = f"goalposts from {w.goalposts}" if w.goalposts else \
            f"goalposts mined with pass@{w.goalpost_k} = 0"
        return (f"world: lcb from {data}; {gps} among LCB problems before 2024-08-01 (also the "
                f"real training split); eval: {', '.join(w.eval_sets)} (LCB window "
                "2024-08-01..2025-02-01)")
