"""Worlds: where a run's tasks come from.

A world gives the loop four things and says exactly what they were:

* `eval_problems` — the held-out evaluation problems (`metadata["eval_set"]` names the set, so
  evaluation reports pass@k per set);
* `real_tasks` — the real training tasks (RLVR and the GASP + real-data mix), in the order the
  run consumes them;
* `goalpost_pool` — the candidates goalposts are mined from (`select_goalposts`: pass@k = 0 for
  the starting model, or a goalpost set written by an earlier mining);
* `fidelity_fn` (optional) — an oracle saying whether a proposal's text describes its code
  (the toy world has one; real data does not);
* `guide_oracle_fn` (optional) — an oracle of the Guide's judgments of a proposal for a target
  (the toy world's `guide_oracle.oracle_judgment`), for the Guide-accuracy diagnostic;
* `variant_fn` (optional) — an oracle saying whether a question is a true one-step variant of
  its parent's question in a direction (`toyworld.relevance.question_variant`), for the
  `teacher/<kind>/true_variant` diagnostic;
* `truth_fn` (optional) — an oracle giving the outputs a question's text denotes, for tasks
  proposed without a program (R-Zero's pseudo-label accuracy; the toy world has one);
* `decontaminator` (optional) — an n-gram index of the evaluation statements; a proposal that
  overlaps one is rejected;
* `splits()` — {name: (version, content_hash)} for every split used, logged as MLflow tags.

`ToyWorld` is the synthetic world of `selfplay_core.toyworld` (the embedded default).
`RealWorld` is the real-data world of DESIGN.md §1: goalposts are LiveCodeBench problems from
before the evaluation window (2024-08-01) that the base model cannot solve; the same pre-window
problems are the RLVR training split; evaluation is the LCB window (2024-08-01..2025-02-01) plus
HumanEval+ / MBPP+ as configured; the training split is decontaminated against every evaluation
set (word 8-gram overlap, `datasets.decontam`), and problems whose prompt plus generation budget
exceeds the model's context are left out and counted (a server would reject them mid-run).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from selfplay_core.datasets.benchmark import problems_hash
from selfplay_core.datasets.decontam import Decontaminator
from selfplay_core.datasets.evalplus import file_sha256, load_humanevalplus, load_mbppplus
from selfplay_core.datasets.livecodebench import load_lcb
from selfplay_core.datasets.registry import _EVALPLUS_RELEASES, load_evalplus
from selfplay_core.engines.base import SamplingParams
from selfplay_core.goalposts import engine_solver, mine_goalposts
from selfplay_core.toyworld.frontier import FrontierSettings, mine_frontier
from selfplay_core.problems import InputError, Problem
from selfplay_core.toyworld.bootstrap import cache_root as toy_cache_root
from selfplay_core.toyworld.fidelity import proposal_fidelity, true_outputs
from selfplay_core.toyworld.relevance import question_variant
from selfplay_core.toyworld.guide_oracle import oracle_judgment
from selfplay_core.toyworld.splits import SplitSizes
from selfplay_core.toyworld.splits import build_world as build_toy_world

log = logging.getLogger(__name__)

GOALPOST_FORMAT = "selfplay-goalposts/1"

# fits(problem, role) -> whether the prompt of that role plus its generation budget fits the
# model's context ("student": the student prompt; "teacher": the lemma prompt of a goalpost).
Fits = Callable[[Problem, str], bool]


@dataclass(frozen=True)
class SplitInfo:
    """What an MLflow tag says about one split: a version and a content hash."""

    version: str
    content_hash: str
    size: int = 0


class World:
    name: str = "world"
    eval_problems: list[Problem]
    real_tasks: list[Problem]
    goalpost_pool: list[Problem]
    fidelity_fn: Callable | None = None
    guide_oracle_fn: Callable | None = None
    truth_fn: Callable | None = None
    variant_fn: Callable | None = None
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

    def _with_goalposts(self, d: dict) -> dict:
        if self.goalpost_set is not None:
            d = {**d, "goalposts": self.goalpost_set}
        return d


# ---- the toy world ---------------------------------------------------------------------------

class ToyWorld(World):
    """The synthetic world. Subsets and orders use the same seeded RNG streams as before worlds
    were factored out, so runs reproduce their numbers exactly."""

    name = "toy"

    def __init__(self, cfg):
        self.toy = build_toy_world(cfg.world.seed, SplitSizes(deep_pool=cfg.world.deep_pool,
                                                                   deep_depth=cfg.world.deep_depth))
        self.fidelity_fn = proposal_fidelity
        self.guide_oracle_fn = oracle_judgment
        self.truth_fn = true_outputs
        self.variant_fn = question_variant
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
        # No dash inside the tag: goalpost-set keys are split on dashes (_key_parts).
        deep = f"d{cfg.world.deep_depth}x{cfg.world.deep_pool}" if cfg.world.deep_pool else ""
        return f"w{cfg.world.seed}{deep}"


# ---- the real-data world ---------------------------------------------------------------------

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


class RealWorld(World):
    """LiveCodeBench goalposts and training split, LCB window + HumanEval+/MBPP+ evaluation."""

    name = "lcb"

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


def build_world(cfg, executor=None, fits: Fits | None = None) -> World:
    if cfg.world.name == "toy":
        return ToyWorld(cfg)
    if cfg.world.name == "lcb":
        return RealWorld(cfg, executor=executor, fits=fits)
    raise ValueError(f"unknown world {cfg.world.name!r}")  # the config type forbids it


# ---- goalposts -------------------------------------------------------------------------------

def weights_key(model_dir: str | Path) -> str:
    """sha256 of the model's weight files (streamed), first 16 hex digits. A hub id is resolved
    to its local snapshot when the HF cache has it; otherwise the id itself is hashed."""
    model_dir = Path(model_dir)
    weights = sorted(model_dir.glob("*.safetensors")) if model_dir.is_dir() else []
    if not weights and not model_dir.is_dir():
        try:
            from huggingface_hub import snapshot_download

            snap = Path(snapshot_download(str(model_dir), local_files_only=True,
                                          allow_patterns=["*.safetensors", "*.json"]))
            weights = sorted(snap.glob("*.safetensors"))
        except Exception:  # noqa: BLE001 - not in the cache: fall back to the name
            weights = []
    h = hashlib.sha256()
    if not weights:
        log.warning("no local weight files for %s: the goalpost cache is keyed by its name", model_dir)
        h.update(f"unresolved:{model_dir}".encode())
    for w in weights:
        with open(w, "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                h.update(block)
    return h.hexdigest()[:16]


def load_goalpost_set(path: str | Path, pool: dict[str, Problem]) -> dict:
    """Read a goalpost-set JSON (written by mining) and check its ids against the pool."""
    p = Path(path)
    where = f"world.goalposts {p}"
    if not p.is_file():
        raise InputError(f"{where}: file not found (a goalpost set is the goalposts.json a run "
                         "writes into its run directory after mining)")
    try:
        data = json.loads(p.read_text())
    except ValueError as e:
        raise InputError(f"{where}: not valid JSON ({e})") from None
    ids = data.get("ids") if isinstance(data, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise InputError(f"{where}: field 'ids' must be a list of problem ids")
    unknown = [i for i in ids if i not in pool]
    if unknown:
        raise InputError(f"{where}: field 'ids': {len(unknown)} of {len(ids)} ids are not in this "
                         f"run's goalpost pool (e.g. {unknown[0]!r}); was the set mined from "
                         "another data file or world?")
    return data


def frontier_settings(w) -> FrontierSettings:
    return FrontierSettings(k=w.goalpost_k, screen_k=min(w.frontier_screen_k, w.goalpost_k),
                            lemma_samples=w.frontier_lemma_samples, band=tuple(w.frontier_band))


def frontier_tag(w) -> str:
    s = frontier_settings(w)
    return f"frontier-b{s.band[0]:g}-{s.band[1]:g}-n{s.lemma_samples}-s{s.screen_k}"


SHIPPED_GOALPOSTS = "goalposts.json"


def _key_parts(key: str) -> tuple[str, str, int, str, int]:
    """(model, pool tag, k, frontier tag without its screen, screen_k) of a goalpost-set key
    such as `c5dfec102bfd2162-w0-k128-frontier-b0.3-0.7-n16-s32`."""
    model, pool_tag, k, tag = key.split("-", 3)
    rest, screen = tag.rsplit("-s", 1)
    return model, pool_tag, int(k[1:]), rest, int(screen)


def shipped_goalposts(model_dir: str | Path, key: str) -> dict | None:
    """The goalpost set mined once for a committed checkpoint and shipped beside its weights
    (`<model>/goalposts.json`), when it was mined for this model, pool, band and lemma samples
    with at least this k and this screen (a candidate no sample of k' >= k solved is one no k
    samples solved; its reserve, unsolved in a screen of s' >= s, is unsolved in s); else None
    (the run mines)."""
    path = Path(model_dir) / SHIPPED_GOALPOSTS
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        model, pool_tag, k, tag, screen = _key_parts(data["key"])
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("%s: not a goalpost set this version reads; mining instead", path)
        return None
    want_model, want_pool, want_k, want_tag, want_screen = _key_parts(key)
    if (model, pool_tag, tag) != (want_model, want_pool, want_tag) or k < want_k or screen < want_screen:
        return None
    return data


def select_goalposts(world: World, cfg, *, engine, executor, model_dir: str | Path,
                     known_ids: list[str] | None = None, run_dir: str | Path | None = None,
                     cache_root: Path | None = None) -> list[Problem]:
    """The run's goalposts: those of the saved state on resume; else a goalpost set from
    `world.goalposts`; else mined (pool problems with pass@k = 0 for the starting model, cached
    by weights hash, pool and k); then a seeded subset of `world.max_goalposts`. The set used is
    written to run_dir/goalposts.json (reusable as `world.goalposts`)."""
    pool = {p.id: p for p in world.goalpost_pool}
    if known_ids:
        missing = [i for i in known_ids if i not in pool]
        if missing:
            raise InputError(f"resume: {len(missing)} goalpost(s) of the saved run are not in this "
                             f"world's pool (e.g. {missing[0]!r}): the data changed since the run "
                             "started")
        gps = [pool[i] for i in known_ids]
        world.goalpost_set = SplitInfo("resumed", problems_hash(gps), len(gps))
        world.goalpost_reserve = []   # a resumed run's dynamic state holds its own reserve
        return gps
    w = cfg.world
    if w.goalposts:
        data = load_goalpost_set(w.goalposts, pool)
        ids, source = data["ids"], f"file {Path(w.goalposts).name}"
    else:
        if cache_root is None:
            cache_root = toy_cache_root()
        rule = w.rule
        tag = "" if rule == "unsolved" else "-" + frontier_tag(w)
        key = f"{weights_key(model_dir)}-{world.goalpost_cache_tag(cfg)}-k{w.goalpost_k}{tag}"
        cache = cache_root / "goalposts" / f"{key}.json"
        data, source = None, f"mined ({rule}) k={w.goalpost_k}"
        if cache.exists():
            data = json.loads(cache.read_text())
        elif rule == "frontier":
            data = shipped_goalposts(model_dir, key)
            if data is not None:
                source = f"shipped with the model ({rule}) k={data.get('k', '?')}"
        if data is None:
            sp = SamplingParams(temperature=cfg.engine.temperature, top_p=cfg.engine.top_p,
                                max_new_tokens=cfg.engine.max_new_tokens_student, seed=w.seed)
            solver = engine_solver(engine, executor, sp)
            say = lambda m: log.info("goalpost mining: %s", m)  # noqa: E731
            log.info("goalpost mining (%s): %d candidates, pass@%d = 0 wanted (first run from this "
                     "model; cached in %s)", rule, len(pool), w.goalpost_k, cache.parent)
            if rule == "frontier":
                res = mine_frontier(list(pool.values()), solver, frontier_settings(w), seed=w.seed,
                                    progress=say)
                extra = {"lemmas": res.lemmas, "reserve": res.reserve, "frontier": frontier_settings(w).to_dict()}
            else:
                res = mine_goalposts(list(pool.values()), [solver], k=w.goalpost_k, chunk=16, progress=say)
                extra = {}
            pool_info = world.splits().get("goalpost_pool")
            data = {"format": GOALPOST_FORMAT, "world": world.name, **res.summary(),
                    "model": key.split("-", 1)[0], "key": key,
                    "pool": ({"version": pool_info.version, "content_hash": pool_info.content_hash}
                             if pool_info is not None else None),
                    "ids": [g.id for g in res.goalposts], **extra}
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(data))
        ids = data["ids"]
    gps = [pool[i] for i in ids]
    if w.max_goalposts:
        # Seeded by the world, not the run: every seed of a study faces the same goalposts.
        gps = sorted(random.Random(f"gp-subset:{w.seed}").sample(gps, min(w.max_goalposts, len(gps))),
                     key=lambda p: p.id)
    world.goalpost_set = SplitInfo(f"{source} ({len(ids)} of {len(pool)} candidates) n={len(gps)}",
                                   problems_hash(gps), len(gps))
    chosen = {g.id for g in gps}
    # Dynamic goalposts promote from here: mined goalposts left out of the subset, then the
    # candidates that were unsolved but had no lemma in band (easiest first).
    world.goalpost_reserve = [pool[i] for i in list(ids) + list(data.get("reserve", []))
                              if i in pool and i not in chosen]
    if run_dir is not None:
        out = {**data, "format": GOALPOST_FORMAT, "ids": [g.id for g in gps]}
        Path(run_dir, "goalposts.json").write_text(json.dumps(out, indent=1))
    return gps


def ship_goalposts(model_dir: str | Path, cfg=None, executor=None, engine=None,
                   log: Callable[[str], None] = lambda m: None) -> Path:
    """Mine the goalpost set a run of `cfg` (default: the embedded default) would mine for the
    model in `model_dir`, over the whole pool, and write it there as goalposts.json, so runs
    from that checkpoint start without mining (`shipped_goalposts`)."""
    import tempfile

    from selfplay_core.config import RunConfig
    from selfplay_core.engines.hf import HFEngine
    from selfplay_core.sandbox import Executor

    model_dir = Path(model_dir)
    cfg = cfg or RunConfig()
    cfg = cfg.model_copy(update={"world": cfg.world.model_copy(update={"max_goalposts": None, "goalposts": None})})
    own = executor is None
    executor = executor or Executor(cfg.sandbox)
    try:
        world = build_world(cfg, executor=executor)
        engine = engine or HFEngine(str(model_dir), batch_size=cfg.engine.batch_size)
        with tempfile.TemporaryDirectory() as tmp:
            select_goalposts(world, cfg, engine=engine, executor=executor, model_dir=model_dir,
                             cache_root=Path(tmp))
            data = json.loads(next((Path(tmp) / "goalposts").glob("*.json")).read_text())
    finally:
        if own:
            executor.close()
    out = model_dir / SHIPPED_GOALPOSTS
    out.write_text(json.dumps(data, indent=1) + "\n")
    log(f"goalposts: {len(data['ids'])} ({world_rule(cfg)}) of {data['candidates']} candidates -> {out}")
    return out


def world_rule(cfg) -> str:
    return cfg.world.rule
