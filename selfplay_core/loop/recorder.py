"""Everything a run keeps of itself, apart from the loop that produces it: the MLflow run and its
tags, per-iteration bookkeeping (timings, student metrics, harness-error accounting, lineage), the
commit of an iteration (checkpoint, upload, state, then MLflow, in an order a crash can resume
from), the goalpost heatmap, the lineage page and the end-of-run verdict.

The driver (loop/driver.py) calls it at four points: open, begin_iteration, end_iteration,
finish; `running()` ends the MLflow run as FINISHED, KILLED (an interrupt) or FAILED.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from selfplay_core import stages as S
from selfplay_core.checkpoints import checkpoint_name, store_key, upload
from selfplay_core.checkpoints import prune as prune_checkpoints
from selfplay_core.config import RunConfig, dump_config
from selfplay_core.goalpost_view import privileged_tags
from selfplay_core.loop import interrupt, timing
from selfplay_core.loop.context import save_checkpoint
from selfplay_core.records import IterationLog
from selfplay_core.run_context import RunContext
from selfplay_core.state import RunState, save_state
from selfplay_core.storage import StorageUnavailable
from selfplay_core.tracking import lineage
from selfplay_core.tracking.mlflow_run import RunTracker, resolve_tracking
from selfplay_core.tracking.plots import goalpost_groups, goalpost_heatmap

log = logging.getLogger(__name__)


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


class HarnessFailure(RuntimeError):
    """Too many verdicts of an iteration were the sandbox's own failures to trust the run."""


class Recorder:
    def __init__(self, ctx: RunContext, tracker: RunTracker, tracking_uri: str, store, clock):
        self.ctx, self.tracker, self.tracking_uri, self.store = ctx, tracker, tracking_uri, store
        self.clock = clock
        self.heatmap = ctx.run_dir / "goalpost_heatmap.png"
        self._t0, self._before, self._timings = 0.0, {}, {}

    @classmethod
    def open(cls, ctx: RunContext, store) -> "Recorder":
        """The run's MLflow run (continued when the state names one) with its tags; the run's
        context is closed if MLflow cannot be reached. `store`: the checkpoint store, or None."""
        cfg, state = ctx.config, ctx.state
        try:
            clock = timing.attach(ctx)  # time/split/*: generation, verification, update, ...
            uri, local_artifacts = resolve_tracking(cfg.tracking.mlflow_uri, cfg.out_dir)
            # None with a tracking server and no artifact store: the server decides.
            artifacts = (cfg.tracking.artifact_store.rstrip("/") + "/mlflow"
                         if cfg.tracking.artifact_store else local_artifacts)
            tracker = RunTracker(uri, cfg.tracking.experiment, run_name=ctx.run_dir.name,
                                 run_id=state.run_id, tags=run_tags(ctx, store),
                                 artifact_location=artifacts)
        except BaseException:
            ctx.close()
            raise
        state.run_id = tracker.run_id
        return cls(ctx, tracker, uri, store, clock)

    @contextmanager
    def running(self):
        """The MLflow run ends as the run does; the context is closed whatever happens."""
        try:
            yield self
            self.tracker.finish("FINISHED")
        except interrupt.RunInterrupted:
            self.tracker.finish("KILLED")
            raise
        except BaseException:
            self.tracker.finish("FAILED")
            raise
        finally:
            self.ctx.close()

    # ---- start ---------------------------------------------------------------------------------
    def start(self) -> bool:
        """Save the state (from here on a resume, or a retry of the flow, continues this MLflow
        run), log the params, complete what a crash cut short. True for a fresh run, which also
        keeps its config beside the state."""
        ctx, state = self.ctx, self.ctx.state
        save_state(ctx.snapshot_state(), ctx.run_dir / "state.json")
        self.tracker.log_params(ctx.config.model_dump(mode="json"))
        self._log_pending(resuming=True)
        fresh = state.iteration == 0 and state.metrics_logged_through < 0
        if fresh:
            path = ctx.run_dir / "config.yaml"
            path.write_text(dump_config(ctx.config))
            self.tracker.log_artifact(str(path))
        return fresh

    # ---- one iteration -------------------------------------------------------------------------
    def begin_iteration(self, call):
        """A fresh IterationLog, and `call` (the stage runner) timing each stage into it."""
        self._t0 = time.perf_counter()
        self._timings = {}
        self.clock.reset()
        self._before = dict(getattr(self.ctx.executor, "stats", {}))
        return IterationLog(), timed(call, self._timings, self.clock)

    def end_iteration(self, step: int, ilog: IterationLog, done, student, method) -> None:
        """The iteration's own metrics, then its commit (checkpoint, state, MLflow) as a whole."""
        ctx = self.ctx
        student_metrics(ilog)
        harness_errors(ctx.config, getattr(ctx.executor, "stats", {}), self._before, ilog, step)
        trained = {r.problem.id for _, r in student}
        ctx.state.lineage += [lineage.record(p, step, trained) for p in done]
        iteration_s = time.perf_counter() - self._t0
        ilog.add(**self._timings, **self.clock.split(iteration_s),
                 **{"time/iteration_s": iteration_s, "buffer/size": len(ctx.buffers),
                    "buffer/diversity": ctx.buffers.diversity(),
                    "teacher/entropy": S.entropy_of(ilog.proposals)})
        with interrupt.deferred():  # an iteration is committed whole, once it got here
            self.commit(ilog, step)
            for path, folder in method.artifacts(ctx):
                self.tracker.log_artifact(path, folder)

    def commit(self, ilog: IterationLog, step: int) -> None:
        """Checkpoint (atomic, new folder), upload it (spooled in an outage), then the state
        (atomic, pointing at it), then drop the previous checkpoint, then MLflow. A crash between
        two of these leaves a state that a resume continues, or completes, without duplicating a
        metric step."""
        ctx, st = self.ctx, self.ctx.state
        if step > 0:
            ckpt = save_checkpoint(ctx, step)
            st.last_checkpoint = ckpt.path.relative_to(ctx.run_dir).as_posix()
            st.checkpoint_sha256 = ckpt.manifest_sha256
            st.iteration = step
            if self.store is not None:
                st.checkpoint_key = store_key(st.run_id, step)
                st.checkpoint_uri = upload(self.store, ckpt, st.checkpoint_key)
        keep = {k: v for k, v in ilog.metrics.items() if isinstance(v, (int, float))}
        st.history.append({"step": step, **{k: keep[k] for k in sorted(keep) if k.split("/")[0] in
                                            ("student", "teacher", "goalposts", "eval", "targets")}})
        st.pending_metrics = keep
        st.pending_samples = [_proposal_row(p) for p in ilog.proposals][: ctx.config.tracking.log_samples]
        save_state(ctx.snapshot_state(), ctx.run_dir / "state.json")
        if step > 0:
            prune_checkpoints(ctx.run_dir, keep=ckpt.path)
        self._log_pending()

    # ---- the end -------------------------------------------------------------------------------
    def finish(self) -> None:
        """Deliver spooled uploads, mark the state finished, tag the MLflow run with the verdict
        (the run's one-sentence answer, beside its metrics: a deployed run has no terminal)."""
        ctx, state = self.ctx, self.ctx.state
        if self.store is not None:
            _flush(self.store)
        if state.iteration >= ctx.config.iterations and not state.finished:
            state.finished = True
            save_state(state, ctx.run_dir / "state.json")
        verdict = verdict_lines(state, ctx.config.eval.ks)
        if verdict:
            self.tracker.set_tags({"verdict": "; ".join(verdict)})

    def summary(self) -> "RunSummary":
        ctx, state = self.ctx, self.ctx.state
        page = ctx.run_dir / "lineage.html"
        return RunSummary(self.tracker.run_id, str(ctx.run_dir), self.tracking_uri,
                          str(self.heatmap) if self.heatmap.exists() else None,
                          _abs_checkpoint(ctx.run_dir, state.last_checkpoint), state.history,
                          verdict=verdict_lines(state, ctx.config.eval.ks),
                          lineage=str(page) if page.exists() else None)

    # ---- MLflow --------------------------------------------------------------------------------
    def _log_pending(self, resuming: bool = False) -> None:
        """Log the saved metrics (and artifacts) of the last complete iteration unless MLflow
        already has them: a crash can fall between logging and recording that we logged, so a
        resume logs only the keys that have no value at this step yet."""
        ctx, tracker, st = self.ctx, self.tracker, self.ctx.state
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
            cfg = ctx.config
            goalpost_heatmap(st.goalpost_rows, st.goalpost_labels, st.goalpost_ids, self.heatmap,
                             title=f"{cfg.method.name} seed {cfg.seed}: goalposts solved",
                             groups=goalpost_groups(ctx.goalposts), k=cfg.eval.goalpost_k,
                             iterations=cfg.iterations, floor=st.goalpost_floor.get("floor"),
                             floor_union=st.goalpost_floor.get("floor_union"))
            tracker.log_artifact(str(self.heatmap), "plots")
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


def run_tags(ctx: RunContext, store) -> dict[str, str]:
    """What a run is, as MLflow tags: method, seed, code, sandbox, world, engine, data versions."""
    cfg = ctx.config
    tags = {"method": cfg.method.name, "seed": str(cfg.seed), "git_sha": _git_sha(),
            "executor.backend": cfg.sandbox.backend, "executor.isolation": ctx.executor.isolation,
            "world": cfg.world.name, "engine": cfg.engine.backend}
    if store is not None:
        tags["checkpoint.store"] = store.uri
    tags.update(privileged_tags(cfg.method))   # the teacher read the goalposts' solutions
    for name, split in ctx.world.splits().items():
        tags[f"data.{name}"] = f"{split.version} {split.content_hash}"
    return tags


def timed(call, timings, clock=None):
    """`call`, adding each stage's wall time to `timings` (time/<stage>_s) and to the clock."""
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


def harness_errors(cfg: RunConfig, stats: dict, before: dict, ilog: IterationLog, step: int) -> None:
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


def student_metrics(ilog: IterationLog) -> None:
    """Student reward on accepted (self-proposed) tasks: the curve that should rise."""
    solved = [p.solve for p in ilog.proposals if p.solve is not None]
    n = sum(r.n for r in solved)
    if n:
        ilog.add(**{"student/accepted/reward": sum(r.c for r in solved) / n,
                    "student/accepted/tasks": len(solved)})


def verdict_lines(state: RunState, ks=None) -> list[str]:
    """The paired verdicts of the end against the start, from the saved counts."""
    if not (state.eval_start and state.eval_end):
        return []
    return [v.line() for v in S.verdicts(state.eval_start, state.eval_end, ks)]


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


def _git_sha() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


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
