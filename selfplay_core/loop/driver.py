"""The self-play run: iterations of the configured method, with evaluation, goalpost tracking,
MLflow logging, checkpoints and an atomically saved RunState after every iteration.

`call(name, fn, *args)` runs one stage; the Prefect flow passes one that makes each stage a
task, the default runs it directly. No Prefect import here.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from selfplay_core import stages as S
from selfplay_core.checkpoints import DIR as CKPT_DIR
from selfplay_core.checkpoints import (
    checkpoint_name, open_checkpoint_store, resolve_checkpoint, store_key, upload,
)
from selfplay_core.checkpoints import prune as prune_checkpoints
from selfplay_core.config import RunConfig, dump_config
from selfplay_core.goalpost_view import privileged_tags
from selfplay_core.loop import interrupt, timing
from selfplay_core.loop.context import build_context, save_checkpoint
from selfplay_core.methods import method_for
from selfplay_core.output_paths import ensure_output_dir
from selfplay_core.records import IterationLog
from selfplay_core.run_context import RunContext
from selfplay_core.state import RunState, StateError, load_state, save_state
from selfplay_core.storage import StorageUnavailable
from selfplay_core.tracking.mlflow_run import RunTracker, resolve_tracking
from selfplay_core.tracking import lineage
from selfplay_core.tracking.plots import goalpost_groups, goalpost_heatmap

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
    # One line each: held-out pass@k at the end against the start checkpoint (eval.verdict).
    verdict: list = None
    lineage: str | None = None   # the curriculum lineage page (HTML)


def _git_sha() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def _timed(call, timings, clock=None):
    def wrapped(name, fn, *args):
        t0 = time.perf_counter()
        if clock is not None:
            clock.stage = name
        try:
            return call(name, fn, *args)
        finally:
            dt = time.perf_counter() - t0
            key = f"time/{name}_s"
            timings[key] = timings.get(key, 0.0) + dt
            if clock is not None:
                clock.stage = None
                clock.add_stage(name, dt)
    return wrapped


def default_run_dir(cfg: RunConfig) -> Path:
    return Path(cfg.out_dir) / (cfg.tracking.run_name or f"{cfg.method.name}-s{cfg.seed}")


def started_by(run_dir: str | Path, run_key: str) -> bool:
    """Whether `run_dir` holds a run started under `run_key` (so a retry of the same Prefect flow
    run resumes it, while a different run there is never resumed by accident). A corrupt state
    raises StateError rather than answering no."""
    path = Path(run_dir) / "state.json"
    return path.exists() and load_state(path).run_key == run_key


def check_resumable(run_dir: str | Path, cfg: RunConfig) -> RunState:
    """Before anything heavy starts: the state loads and its checkpoint verifies (or is fetched
    from the checkpoint store). StateError naming the file and the last good iteration."""
    run_dir = Path(run_dir)
    state = load_state(run_dir / "state.json")
    if state.last_checkpoint:
        resolve_checkpoint(run_dir, state, cfg)
    return state


def _fresh_run_dir(run_dir: Path) -> None:
    """A new run may replace a finished run's folder, never an unfinished one's."""
    path = run_dir / "state.json"
    if not path.exists():
        return
    old = load_state(path)  # corrupt: StateError, nothing is replaced
    if not (old.finished or old.iteration >= _configured_iterations(run_dir)):
        raise StateError(f"{run_dir} holds an unfinished run ({old.iteration} iterations done): "
                         f"continue it with `selfplay run --resume {run_dir}`, or start a new run "
                         "under another tracking.run_name or out_dir (or delete the folder)")
    log.warning("%s: replacing the finished run there (MLflow run %s keeps its record)", run_dir, old.run_id)
    path.unlink()
    shutil.rmtree(run_dir / CKPT_DIR, ignore_errors=True)


def _configured_iterations(run_dir: Path) -> float:
    """The iterations of the run saved in run_dir (for states saved before `finished` existed)."""
    try:
        return int(yaml.safe_load((run_dir / "config.yaml").read_text())["iterations"])
    except (OSError, ValueError, TypeError, KeyError, yaml.YAMLError):
        return float("inf")


def run_selfplay(cfg: RunConfig, *, call: Callable = direct, run_dir: str | Path | None = None,
                 resume: bool = False, executor=None, model_dir: str | Path | None = None,
                 on_iteration: Callable[[int, dict], None] | None = None,
                 run_key: str | None = None) -> RunSummary:
    """Run (or with `resume`, continue) the self-play loop in `run_dir`. `run_key` names who runs
    it (the flow passes its flow run id) and is saved in the state, see `started_by`. Armed by
    the CLI, SIGINT / SIGTERM end it with RunInterrupted between stages (loop/interrupt.py)."""
    with interrupt.trap():
        return _run_selfplay(cfg, call=_deferring(call), run_dir=run_dir, resume=resume,
                             executor=executor, model_dir=model_dir, on_iteration=on_iteration,
                             run_key=run_key)


def _deferring(call: Callable) -> Callable:
    """`call`, with a signal that arrives during the stage acted on when the stage returns."""
    def wrapped(name, fn, *args):
        with interrupt.deferred():
            return call(name, fn, *args)
    return wrapped


def _run_selfplay(cfg: RunConfig, *, call: Callable, run_dir: str | Path | None, resume: bool,
                  executor, model_dir: str | Path | None,
                  on_iteration: Callable[[int, dict], None] | None, run_key: str | None) -> RunSummary:
    run_dir = Path(run_dir or default_run_dir(cfg))
    state_path = run_dir / "state.json"
    if resume:
        state = load_state(state_path)
    else:
        ensure_output_dir(run_dir, "the run folder (out_dir/run name)")  # before the model loads
        _fresh_run_dir(run_dir)
        state = RunState()
    if resume and state.iteration >= cfg.iterations:
        log.info("run already complete (%d iterations)", state.iteration)
    elif resume:
        state.finished = False  # e.g. extended with --set iterations=N: unfinished until done
    if run_key is not None:
        state.run_key = run_key
    store = open_checkpoint_store(cfg) if cfg.tracking.checkpoint_store else None
    ctx = build_context(cfg, run_dir, state, executor=executor, model_dir=model_dir)
    clock = timing.attach(ctx)  # time/split/*: generation, verification, update, ...
    uri, local_artifacts = resolve_tracking(cfg.tracking.mlflow_uri, cfg.out_dir)
    tags = {"method": cfg.method.name, "seed": str(cfg.seed), "git_sha": _git_sha(),
            "executor.backend": cfg.sandbox.backend, "executor.isolation": ctx.executor.isolation,
            "world": cfg.world.name, "engine": cfg.engine.backend}
    if store is not None:
        tags["checkpoint.store"] = store.uri
    tags.update(privileged_tags(cfg.method))   # the teacher read the goalposts' solutions
    for name, split in ctx.world.splits().items():
        tags[f"data.{name}"] = f"{split.version} {split.content_hash}"
    if cfg.tracking.artifact_store:
        artifacts = cfg.tracking.artifact_store.rstrip("/") + "/mlflow"
    else:
        artifacts = local_artifacts  # None with a tracking server: the server decides
    try:
        tracker = RunTracker(uri, cfg.tracking.experiment, run_name=run_dir.name,
                             run_id=state.run_id, tags=tags, artifact_location=artifacts)
    except BaseException:
        ctx.close()
        raise
    state.run_id = tracker.run_id
    method = method_for(cfg.method)
    heatmap = run_dir / "goalpost_heatmap.png"
    try:
        method.setup(ctx)
        # From here on a resume (or a retry of the flow) continues this MLflow run.
        save_state(ctx.snapshot_state(), state_path)
        tracker.log_params(cfg.model_dump(mode="json"))
        _log_pending(ctx, tracker, heatmap, resuming=True)  # complete what a crash cut short
        if state.iteration == 0 and state.metrics_logged_through < 0:
            (run_dir / "config.yaml").write_text(dump_config(cfg))
            tracker.log_artifact(str(run_dir / "config.yaml"))
            base = IterationLog()
            call("evaluate", S.evaluate, ctx, base)
            if cfg.eval.verdict:
                call("evaluate_full", S.evaluate_full, ctx, base)
            call("goalposts", S.track_goalposts, ctx, "base", base)
            base.add(**{"buffer/size": 0})
            with interrupt.deferred():
                _finish_iteration(ctx, tracker, base, heatmap, step=0, store=store)
        for it in range(state.iteration, cfg.iterations):
            t0 = time.perf_counter()
            ilog = IterationLog()
            timings: dict = {}
            clock.reset()
            timed = _timed(call, timings, clock)
            before = dict(getattr(ctx.executor, "stats", {}))
            if cfg.overlap_generation:  # the previous iteration's update, while this one generates
                ctx.background.start_pending()
            done, student = method.run_iteration(ctx, ilog, timed)
            ilog.add(**ctx.background.join_and_push())  # a method without an update stage
            step = it + 1
            if step % cfg.eval.every == 0 or step == cfg.iterations:
                timed("evaluate", S.evaluate, ctx, ilog)
            if cfg.eval.verdict and step == cfg.iterations:
                timed("evaluate_full", S.evaluate_full, ctx, ilog)
            if step % cfg.eval.goalpost_every == 0 or step == cfg.iterations:
                timed("goalposts", S.track_goalposts, ctx, f"iter {step}", ilog)
            _student_metrics(ilog)
            _harness_errors(cfg, getattr(ctx.executor, "stats", {}), before, ilog, step)
            trained = {r.problem.id for _, r in student}
            state.lineage += [lineage.record(p, step, trained) for p in done]
            iteration_s = time.perf_counter() - t0
            ilog.add(**timings, **clock.split(iteration_s), **{"time/iteration_s": iteration_s,
                                   "buffer/size": len(ctx.buffers),
                                   "buffer/diversity": ctx.buffers.diversity(),
                                   "teacher/entropy": S.entropy_of(ilog.proposals)})
            with interrupt.deferred():  # an iteration is committed whole, once it got here
                _finish_iteration(ctx, tracker, ilog, heatmap, step, store=store)
                for path, folder in method.artifacts(ctx):
                    tracker.log_artifact(path, folder)
            if on_iteration:
                on_iteration(step, ilog.metrics)
        if store is not None:
            _flush(store)
        if state.iteration >= cfg.iterations and not state.finished:
            state.finished = True
            save_state(state, state_path)
        verdict = verdict_lines(state, cfg.eval.ks)
        if verdict:  # the run's one-sentence answer, beside its metrics (a deployed run too)
            tracker.set_tags({"verdict": "; ".join(verdict)})
        tracker.finish("FINISHED")
    except interrupt.RunInterrupted:
        tracker.finish("KILLED")
        raise
    except BaseException:
        tracker.finish("FAILED")
        raise
    finally:
        ctx.close()
    page = run_dir / "lineage.html"
    return RunSummary(tracker.run_id, str(run_dir), uri, str(heatmap) if heatmap.exists() else None,
                      _abs_checkpoint(run_dir, state.last_checkpoint), state.history,
                      verdict=verdict_lines(state, cfg.eval.ks), lineage=str(page) if page.exists() else None)


def verdict_lines(state: RunState, ks=None) -> list[str]:
    """The paired verdicts of the end against the start, from the saved counts."""
    if not (state.eval_start and state.eval_end):
        return []
    return [v.line() for v in S.verdicts(state.eval_start, state.eval_end, ks)]


def _flush(store) -> None:
    """Deliver what an outage spooled, if the endpoint is back; if not, the uploads stay safe in
    the spool (a later upload to the same store, or store.flush(), delivers them)."""
    try:
        store.flush()
    except StorageUnavailable as e:
        log.warning("checkpoint uploads still spooled, not yet in %s: %s", store.uri, e)


def _abs_checkpoint(run_dir: Path, ckpt: str | None) -> str | None:
    if ckpt is None:
        return None
    p = Path(ckpt)
    return str(p if p.is_absolute() else run_dir / p)


class HarnessFailure(RuntimeError):
    """Too many verdicts of an iteration were the sandbox's own failures to trust the run."""


def _harness_errors(cfg: RunConfig, stats: dict, before: dict, ilog: IterationLog, step: int) -> None:
    """harness_errors: jobs the sandbox could not judge even after retrying (excluded from
    pass rates and rollouts by the stages). Past `sandbox.max_harness_error_share` of the
    iteration's jobs (and at least 3) the run stops: its rewards would rest on a broken
    sandbox."""
    jobs = stats.get("jobs", 0) - before.get("jobs", 0)
    errors = stats.get("harness_errors", 0) - before.get("harness_errors", 0)
    ilog.add(**{"harness_errors": errors,
                "harness_retries": stats.get("harness_retries", 0) - before.get("harness_retries", 0)})
    if errors >= 3 and errors > cfg.sandbox.max_harness_error_share * max(1, jobs):
        raise HarnessFailure(
            f"iteration {step}: {errors} of {jobs} sandbox jobs ended in a harness error after "
            f"{cfg.sandbox.harness_retries} retries (more than sandbox.max_harness_error_share="
            f"{cfg.sandbox.max_harness_error_share}); the sandbox is failing, see the warnings "
            "above (a worker that keeps dying, a full disk, a missing bubblewrap)")


def _student_metrics(ilog: IterationLog) -> None:
    """Student reward on accepted (self-proposed) tasks: the curve that should rise."""
    solved = [p.solve for p in ilog.proposals if p.solve is not None]
    n = sum(r.n for r in solved)
    if n:
        ilog.add(**{"student/accepted/reward": sum(r.c for r in solved) / n,
                    "student/accepted/tasks": len(solved)})


def _finish_iteration(ctx: RunContext, tracker: RunTracker, ilog: IterationLog, heatmap: Path,
                      step: int, store=None) -> None:
    """Checkpoint (atomic, new folder), upload it (spooled in an outage), then the state (atomic,
    pointing at it), then drop the previous checkpoint, then MLflow. A crash between two of these
    leaves a state that a resume continues, or completes, without duplicating a metric step."""
    st = ctx.state
    if step > 0:
        ckpt = save_checkpoint(ctx, step)
        st.last_checkpoint = ckpt.path.relative_to(ctx.run_dir).as_posix()
        st.checkpoint_sha256 = ckpt.manifest_sha256
        st.iteration = step
        if store is not None:
            st.checkpoint_key = store_key(st.run_id, step)
            st.checkpoint_uri = upload(store, ckpt, st.checkpoint_key)
    keep = {k: v for k, v in ilog.metrics.items() if isinstance(v, (int, float))}
    st.history.append({"step": step, **{k: keep[k] for k in sorted(keep) if k.split("/")[0] in
                                        ("student", "teacher", "goalposts", "eval", "targets")}})
    st.pending_metrics = keep
    st.pending_samples = [_proposal_row(p) for p in ilog.proposals][: ctx.config.tracking.log_samples]
    save_state(ctx.snapshot_state(), ctx.run_dir / "state.json")
    if step > 0:
        prune_checkpoints(ctx.run_dir, keep=ckpt.path)
    _log_pending(ctx, tracker, heatmap)


def _log_pending(ctx: RunContext, tracker: RunTracker, heatmap: Path, resuming: bool = False) -> None:
    """Log the saved metrics (and artifacts) of the last complete iteration unless MLflow already
    has them: a crash can fall between logging and recording that we logged, so a resume logs
    only the keys that have no value at this step yet."""
    st = ctx.state
    step = st.iteration
    if st.metrics_logged_through >= step or not (st.pending_metrics or st.pending_samples):
        return
    metrics = st.pending_metrics
    if resuming:
        metrics = {k: v for k, v in metrics.items() if not any(
            s == step for s, _ in tracker.metric_history(k.replace("@", "_at_")))}
    if metrics:
        tracker.log_metrics(metrics, step=step)
    if st.goalpost_rows:
        goalpost_heatmap(st.goalpost_rows, st.goalpost_labels, st.goalpost_ids, heatmap,
                         title=f"{ctx.config.method.name} seed {ctx.config.seed}: goalposts solved",
                         groups=goalpost_groups(ctx.goalposts), k=ctx.config.eval.goalpost_k,
                         iterations=ctx.config.iterations, floor=st.goalpost_floor.get("floor"),
                         floor_union=st.goalpost_floor.get("floor_union"))
        tracker.log_artifact(str(heatmap), "plots")
        # The matrix itself, so runs can be compared (union over seeds) without their state.
        tracker.log_text(json.dumps({"goalposts": st.goalpost_ids, "checkpoints": st.goalpost_labels,
                                     "pass_rate": st.goalpost_rows}), "goalposts/matrix.json")
    if st.lineage:
        tracker.log_artifact(str(write_lineage(ctx)), "lineage")
    if step > 0 and st.last_checkpoint:
        where = st.checkpoint_uri or _abs_checkpoint(ctx.run_dir, st.last_checkpoint)
        tracker.set_tags({"checkpoint.last": where, "checkpoint.iteration": str(step)})
        tracker.log_text(json.dumps({"iteration": step, "uri": st.checkpoint_uri,
                                     "local": _abs_checkpoint(ctx.run_dir, st.last_checkpoint),
                                     "manifest_sha256": st.checkpoint_sha256}),
                         f"checkpoints/{checkpoint_name(step)}.json")
    if st.pending_samples:
        tracker.log_table(st.pending_samples, f"samples/proposals_step{step:04d}.json")
    st.metrics_logged_through = step
    st.pending_metrics = {}
    st.pending_samples = []
    save_state(st, ctx.run_dir / "state.json")


def write_lineage(ctx: RunContext) -> Path:
    """run_dir/lineage.html from the state's lineage records and goalpost matrix."""
    st, cfg = ctx.state, ctx.config
    pool = {p.id: p for p in ctx.world.goalpost_pool}
    ids = list(st.goalpost_ids) + [g for g in dict.fromkeys(r["goalpost"] for r in st.lineage)
                                   if g and g not in st.goalpost_ids]
    gps = [{"id": g, "question": (pool[g].prompt if g in pool else "")} for g in ids]
    solved = lineage.first_solved(st.goalpost_labels[1:], st.goalpost_rows[1:], st.goalpost_ids)
    rates = {g: [row[j] for row in st.goalpost_rows] for j, g in enumerate(st.goalpost_ids)}
    bands = {}
    for kind, attr in (("lemma", "lemma_band"), ("lift", "lift_band")):
        if hasattr(cfg.method, attr):
            bands[kind] = tuple(getattr(cfg.method, attr))
    page = lineage.render(st.lineage, gps, title=f"{cfg.method.name} seed {cfg.seed}: curriculum lineage",
                          solved=solved, pass_rates=rates, labels=st.goalpost_labels, bands=bands)
    path = ctx.run_dir / "lineage.html"
    path.write_text(page)
    return path


def _proposal_row(p) -> dict:
    parsed = p.parsed if getattr(p.parsed, "question", None) is not None else None
    return {"kind": p.kind, "axis": p.axis, "anchor": p.anchor.id, "goalpost": p.anchor.goalpost_id,
            "question": parsed.question if parsed else None, "code": parsed.code if parsed else None,
            "accepted": p.accepted, "rejection": p.rejection, "pass_rate": p.pass_rate,
            "reward": p.reward, "faithful": p.faithful, "completion": p.text[:1000],
            **p.extra}
