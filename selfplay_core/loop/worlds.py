"""Goalposts of a run's world: mined for the starting model (cached by its weights), read from a
goalpost-set file, or shipped beside a checkpoint; then the run's seeded subset.

The worlds themselves (`selfplay_core.worlds`: the real-data world and the plug-ins, the toy
world among them) say what their pool is and how they mine it (`World.mine`, the rule
`world.goalpost_rule` names); this module does the rest, the same for every world.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from pathlib import Path
from typing import Callable

from selfplay_core.datasets.benchmark import problems_hash
from selfplay_core.engines.base import SamplingParams
from selfplay_core.goalposts import engine_solver
from selfplay_core.output_paths import cache_root as default_cache_root
from selfplay_core.problems import InputError, Problem
from selfplay_core.worlds import Fits, SplitInfo, World, build_world  # noqa: F401  (the loop's names)

log = logging.getLogger(__name__)

GOALPOST_FORMAT = "selfplay-goalposts/1"


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
            cache_root = default_cache_root()
        rule = w.rule
        tag = world.rule_tag(cfg)
        tag = "-" + tag if tag else ""
        key = f"{weights_key(model_dir)}-{world.goalpost_cache_tag(cfg)}-k{w.goalpost_k}{tag}"
        cache = cache_root / "goalposts" / f"{key}.json"
        data, source = None, f"mined ({rule}) k={w.goalpost_k}"
        if cache.exists():
            data = json.loads(cache.read_text())
        elif tag:   # a rule with settings (the toy world's frontier): a set shipped with the model
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
            res, extra = world.mine(cfg, list(pool.values()), solver, say)
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
