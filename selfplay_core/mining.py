"""Mine a world's goalposts for a model and record them: the work of the goalpost-mining
deployment (`flows/mine_goalposts.py`), kept here so it needs no Prefect.

Candidates are the world's goalpost pool; a candidate is a goalpost when k student samples of
the model all fail (`selfplay_core.goalposts.mine_goalposts`). The result is a JSON goalpost set
(ids, prompts, samples drawn and passes seen per candidate) written to out_dir and logged to
MLflow. With the loop's own sampling settings the set also goes into the cache a self-play run
reads (SELFPLAY_CACHE/goalposts), so the next run from this model starts without mining.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Literal

from pydantic import Field

from selfplay_core.engines.base import SamplingParams
from selfplay_core.engines.hf import HFEngine
from selfplay_core.frozen import FrozenConfig
from selfplay_core.goalposts import engine_solver, mine_goalposts
from selfplay_core.loop.worlds import weights_key
from selfplay_core.output_paths import cache_root
from selfplay_core.output_paths import ensure_output_dir
from selfplay_core.problems import InputError
from selfplay_core.sandbox import Executor
from selfplay_core.sandbox.config import SandboxConfig
from selfplay_core.tracking.mlflow_run import RunTracker, resolve_tracking
from selfplay_core.worlds import build_world
from selfplay_core.worlds import registered as registered_worlds

# The sampling a self-play run mines with (RunContext._goalposts: engine defaults, chunk 16,
# seed = world seed); only a set mined this way may stand in for the run's own mining.
LOOP_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 96, "chunk": 16}


class GoalpostMiningConfig(FrozenConfig):
    """Parameters of one mining run (rendered as a form in the Prefect UI)."""

    model_path: str = Field("toy", description="'toy' (the toy world's starting model) or a "
                            "local model folder")
    world: Literal["toy"] = Field("toy", description="the task world whose goalpost pool is mined "
                                  "(LCB mining runs on GPU deployments)")
    world_seed: int = 0
    k: int = Field(64, ge=1, description="a goalpost has pass@k = 0")
    chunk: int = Field(16, ge=1, description="samples per round; a candidate leaves at its first pass")
    max_candidates: int | None = Field(None, ge=1, description="mine only this many candidates "
                                       "(a quick look; None: the whole pool)")
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_new_tokens: int = Field(96, ge=1)
    batch_size: int = Field(64, ge=1)
    sandbox: SandboxConfig = Field(default_factory=lambda: SandboxConfig(workers=2))
    out_dir: str = "runs/goalposts"
    update_cache: bool = Field(True, description="also store the set where self-play runs look "
                               "(only when mined with the loop's sampling over the whole pool)")
    mlflow_uri: str | None = Field(None, description="None: $MLFLOW_TRACKING_URI, else a local "
                                   "SQLite store under out_dir/mlruns")
    experiment: str = "selfplay-goalposts"
    run_name: str | None = None


def model_weights_hash(model_dir: str | Path) -> str:
    return weights_key(model_dir)


def _run_config(world: str, world_seed: int):
    """The run config whose world this mining serves: the world's defaults at this seed."""
    from selfplay_core.config import RunConfig

    return RunConfig(world={"name": world, "seed": world_seed})


def goalpost_cache_path(model_dir: str | Path, world_seed: int, k: int, world: str = "toy") -> Path:
    """Where a self-play run on the world looks for its mined goalposts (unsolved rule): the
    key `loop.worlds.select_goalposts` builds (weights hash, the world's pool tag, k)."""
    cfg = _run_config(world, world_seed)
    tag = build_world(cfg).goalpost_cache_tag(cfg)
    return cache_root() / "goalposts" / f"{model_weights_hash(model_dir)}-{tag}-k{k}.json"


def resolve_model(model_path: str) -> Path:
    world = registered_worlds().get(model_path)
    if world is not None:   # a world's name: its default model (`toy`: the toy world's)
        try:
            return world.default_model()
        except FileNotFoundError as e:
            raise InputError(f"model_path {model_path!r}: {e}") from None
    path = Path(model_path).expanduser()
    if not (path / "config.json").is_file():
        raise InputError(f"model_path {model_path!r}: not a model folder (no config.json)")
    return path


def candidates_for(cfg: GoalpostMiningConfig):
    pool = list(build_world(_run_config(cfg.world, cfg.world_seed)).goalpost_pool)
    if cfg.max_candidates and cfg.max_candidates < len(pool):
        pool = sorted(random.Random(f"mine-subset:{cfg.world_seed}").sample(pool, cfg.max_candidates),
                      key=lambda p: p.id)
    return pool


def mine(cfg: GoalpostMiningConfig, model_dir: Path, executor, log=lambda m: None) -> dict:
    """Mine and return the goalpost set (JSON-ready)."""
    t0 = time.perf_counter()
    engine = HFEngine(str(model_dir), batch_size=cfg.batch_size)
    sp = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p,
                        max_new_tokens=cfg.max_new_tokens, seed=cfg.world_seed)
    pool = candidates_for(cfg)
    res = mine_goalposts(pool, [engine_solver(engine, executor, sp)], k=cfg.k, chunk=cfg.chunk,
                         progress=log)
    return {
        "format": "selfplay-goalposts/1",
        "model": cfg.model_path, "model_dir": str(model_dir),
        "model_sha256_16": model_weights_hash(model_dir),
        "world": cfg.world, "world_seed": cfg.world_seed, "k": cfg.k, "chunk": cfg.chunk,
        "sampling": {"temperature": sp.temperature, "top_p": sp.top_p,
                     "max_new_tokens": sp.max_new_tokens, "seed": sp.seed},
        "summary": res.summary(),
        "ids": [g.id for g in res.goalposts],
        "goalposts": [{"id": g.id, "prompt": g.prompt, "depth": g.metadata.get("depth"),
                       "samples": res.samples[g.id]} for g in res.goalposts],
        "candidates": {pid: {"samples": res.samples[pid], "passes": res.passes[pid]}
                       for pid in res.samples},
        "seconds": round(time.perf_counter() - t0, 2),
    }


def loop_compatible(cfg: GoalpostMiningConfig) -> bool:
    """Mined as a self-play run would mine (same sampling, whole pool)?"""
    return (cfg.max_candidates is None and cfg.temperature == LOOP_SAMPLING["temperature"]
            and cfg.top_p == LOOP_SAMPLING["top_p"]
            and cfg.max_new_tokens == LOOP_SAMPLING["max_new_tokens"]
            and cfg.chunk == LOOP_SAMPLING["chunk"])


def run_mining(cfg: GoalpostMiningConfig, *, call=lambda name, fn, *a: fn(*a),
               log=lambda m: None) -> dict:
    """Mine (through `call`, a Prefect task in the flow), write the set, log it to MLflow."""
    run_name = cfg.run_name or f"goalposts-{cfg.world}-w{cfg.world_seed}-k{cfg.k}-" \
                               f"{time.strftime('%Y%m%d-%H%M%S')}"
    out = ensure_output_dir(Path(cfg.out_dir) / run_name, "the mining folder (out_dir/run name)")  # before mining
    model_dir = resolve_model(cfg.model_path)
    uri, artifacts = resolve_tracking(cfg.mlflow_uri, cfg.out_dir)
    tracker = RunTracker(uri, cfg.experiment, run_name=run_name, artifact_location=artifacts,
                         tags={"kind": "goalpost-mining", "world": cfg.world,
                               "model": cfg.model_path})
    status = "FAILED"
    try:
        tracker.log_params(cfg.model_dump(mode="json"))
        with Executor(cfg.sandbox) as ex:
            result = call("mine-goalposts", mine, cfg, model_dir, ex, log)
        path = out / "goalposts.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
        s = result["summary"]
        tracker.log_metrics({"goalposts/count": s["goalposts"], "goalposts/candidates": s["candidates"],
                             "goalposts/samples": s["samples"], "goalposts/seconds": result["seconds"]},
                            step=0)
        tracker.log_artifact(str(path))
        cache = None
        if cfg.update_cache and loop_compatible(cfg):
            cache = goalpost_cache_path(model_dir, cfg.world_seed, cfg.k, cfg.world)
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(".tmp")
            tmp.write_text(json.dumps({**s, "ids": result["ids"]}))
            tmp.replace(cache)
            log(f"cached for self-play runs: {cache}")
        status = "FINISHED"
    finally:
        tracker.finish(status)
    return {"run_id": tracker.run_id, "tracking_uri": tracker.tracking_uri, "path": str(path),
            "summary": s, "ids": result["ids"], "cache": str(cache) if cache else None}
