"""The self-play run: iterations of the configured method, with evaluation, goalpost tracking,
MLflow logging, checkpoints and an atomically saved RunState after every iteration.

`call(name, fn, *args)` runs one stage; the Prefect flow passes one that makes each stage a
task, the default runs it directly. No Prefect import here.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from selfplay_core.config import RunConfig, dump_config
from selfplay_core.loop import stages as S
from selfplay_core.loop.context import RunContext
from selfplay_core.loop.records import IterationLog
from selfplay_core.methods import get_method
from selfplay_core.state import RunState, load_state, save_state
from selfplay_core.tracking.mlflow_run import RunTracker, resolve_tracking
from selfplay_core.tracking.plots import goalpost_heatmap

log = logging.getLogger(__name__)


def direct(name: str, fn: Callable, *args):
    return fn(*args)


@dataclass
class RunSummary:
    run_id: str
    run_dir: str
    tracking_uri: str
    heatmap: str | None
    checkpoint: str | None
    history: list


def _git_sha() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def _timed(call, timings):
    def wrapped(name, fn, *args):
        t0 = time.perf_counter()
        try:
            return call(name, fn, *args)
        finally:
            key = f"time/{name}_s"
            timings[key] = timings.get(key, 0.0) + time.perf_counter() - t0
    return wrapped


def run_selfplay(cfg: RunConfig, *, call: Callable = direct, run_dir: str | Path | None = None,
                 resume: bool = False, executor=None, model_dir: str | Path | None = None,
                 on_iteration: Callable[[int, dict], None] | None = None) -> RunSummary:
    run_dir = Path(run_dir or Path(cfg.out_dir) / (cfg.tracking.run_name or f"{cfg.method}-s{cfg.seed}"))
    state_path = run_dir / "state.json"
    state = load_state(state_path) if resume else RunState()
    if resume and state.iteration >= cfg.iterations:
        log.info("run already complete (%d iterations)", state.iteration)
    ctx = RunContext(cfg, run_dir, state, executor=executor, model_dir=model_dir)
    uri, local_artifacts = resolve_tracking(cfg.tracking.mlflow_uri, cfg.out_dir)
    tags = {"method": cfg.method, "seed": str(cfg.seed), "git_sha": _git_sha(),
            "executor.backend": cfg.sandbox.backend, "executor.isolation": ctx.executor.isolation,
            "world": cfg.world.name}
    for name, split in ctx.world.splits().items():
        tags[f"data.{name}"] = f"{split.version} {split.content_hash}"
    if cfg.tracking.artifact_store:
        artifacts = cfg.tracking.artifact_store.rstrip("/") + "/mlflow"
    else:
        artifacts = local_artifacts  # None with a tracking server: the server decides
    tracker = RunTracker(uri, cfg.tracking.experiment, run_name=run_dir.name,
                         run_id=state.run_id, tags=tags, artifact_location=artifacts)
    state.run_id = tracker.run_id
    method = get_method(cfg.method)
    heatmap = run_dir / "goalpost_heatmap.png"
    try:
        tracker.log_params(cfg.model_dump(mode="json"))
        _log_pending(ctx, tracker, heatmap)  # a resume first completes what a crash cut short
        if state.iteration == 0 and state.metrics_logged_through < 0:
            (run_dir / "config.yaml").write_text(dump_config(cfg))
            tracker.log_artifact(str(run_dir / "config.yaml"))
            base = IterationLog()
            call("evaluate", S.evaluate, ctx, base)
            call("goalposts", S.track_goalposts, ctx, "base", base)
            base.add(**{"buffer/size": 0})
            _finish_iteration(ctx, tracker, base, heatmap, step=0)
        for it in range(state.iteration, cfg.iterations):
            t0 = time.perf_counter()
            ilog = IterationLog()
            timings: dict = {}
            timed = _timed(call, timings)
            method.run_iteration(ctx, ilog, timed)
            step = it + 1
            if step % cfg.eval.every == 0 or step == cfg.iterations:
                timed("evaluate", S.evaluate, ctx, ilog)
            if step % cfg.eval.goalpost_every == 0 or step == cfg.iterations:
                timed("goalposts", S.track_goalposts, ctx, f"iter {step}", ilog)
            _student_metrics(ilog)
            ilog.add(**timings, **{"time/iteration_s": time.perf_counter() - t0,
                                   "buffer/size": len(ctx.buffers),
                                   "buffer/diversity": ctx.buffers.diversity(),
                                   "teacher/entropy": S.entropy_of(ilog.proposals)})
            _finish_iteration(ctx, tracker, ilog, heatmap, step)
            if on_iteration:
                on_iteration(step, ilog.metrics)
        tracker.finish("FINISHED")
    except BaseException:
        tracker.finish("FAILED")
        raise
    finally:
        ctx.close()
    return RunSummary(tracker.run_id, str(run_dir), uri, str(heatmap) if heatmap.exists() else None,
                      state.last_checkpoint, state.history)


def _student_metrics(ilog: IterationLog) -> None:
    """Student reward on accepted (self-proposed) tasks: the curve that should rise."""
    solved = [p.solve for p in ilog.proposals if p.solve is not None]
    n = sum(r.n for r in solved)
    if n:
        ilog.add(**{"student/accepted/reward": sum(r.c for r in solved) / n,
                    "student/accepted/tasks": len(solved)})


def _finish_iteration(ctx: RunContext, tracker: RunTracker, ilog: IterationLog, heatmap: Path,
                      step: int) -> None:
    """Checkpoint, then the state (atomic), then MLflow: a crash between two of these leaves a
    state that a resume completes without duplicating any metric step."""
    st = ctx.state
    if step > 0:
        ckpt = ctx.save_checkpoint("last")
        st.last_checkpoint = str(ckpt)
        st.iteration = step
    keep = {k: v for k, v in ilog.metrics.items() if isinstance(v, (int, float))}
    st.history.append({"step": step, **{k: keep[k] for k in sorted(keep) if k.split("/")[0] in
                                        ("student", "teacher", "goalposts", "eval")}})
    st.pending_metrics = keep
    save_state(ctx.snapshot_state(), ctx.run_dir / "state.json")
    _log_pending(ctx, tracker, heatmap)
    rows = [_proposal_row(p) for p in ilog.proposals][: ctx.config.tracking.log_samples]
    if rows:
        tracker.log_table(rows, f"samples/proposals_step{step:04d}.json")


def _log_pending(ctx: RunContext, tracker: RunTracker, heatmap: Path) -> None:
    """Log the saved metrics of the last complete iteration unless MLflow already has them
    (a crash can fall between logging and recording that we logged)."""
    st = ctx.state
    step = st.iteration
    if st.metrics_logged_through >= step or not st.pending_metrics:
        return
    probe = next(iter(st.pending_metrics))
    if not any(s == step for s, _ in tracker.metric_history(probe.replace("@", "_at_"))):
        tracker.log_metrics(st.pending_metrics, step=step)
    if st.goalpost_rows:
        goalpost_heatmap(st.goalpost_rows, st.goalpost_labels, st.goalpost_ids, heatmap,
                         title=f"{ctx.config.method} seed {ctx.config.seed}: goalposts solved")
        tracker.log_artifact(str(heatmap), "plots")
        # The matrix itself, so runs can be compared (union over seeds) without their state.
        tracker.log_text(json.dumps({"goalposts": st.goalpost_ids, "checkpoints": st.goalpost_labels,
                                     "pass_rate": st.goalpost_rows}), "goalposts/matrix.json")
    st.metrics_logged_through = step
    st.pending_metrics = {}
    save_state(st, ctx.run_dir / "state.json")


def _proposal_row(p) -> dict:
    parsed = p.parsed if getattr(p.parsed, "question", None) is not None else None
    return {"kind": p.kind, "axis": p.axis, "anchor": p.anchor.id, "goalpost": p.anchor.goalpost_id,
            "question": parsed.question if parsed else None, "code": parsed.code if parsed else None,
            "accepted": p.accepted, "rejection": p.rejection, "pass_rate": p.pass_rate,
            "reward": p.reward, "faithful": p.faithful, "completion": p.completion.text[:1000]}
