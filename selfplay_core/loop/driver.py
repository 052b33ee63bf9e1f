"""The self-play run: iterations of the configured method, each in three named phases —
the method's stages (propose, verify, score, solve, update), evaluation, and the record
(loop/recorder.py: metrics, checkpoint, state and MLflow, committed whole) — after a start
that evaluates the starting checkpoint (step 0). `_run_selfplay` is the whole loop on one screen.

`call(name, fn, *args)` runs one stage; the Prefect flow passes one that makes each stage a
task, the default runs it directly. No Prefect import here.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Callable

import yaml

from selfplay_core import stages as S
from selfplay_core.checkpoints import DIR as CKPT_DIR
from selfplay_core.checkpoints import open_checkpoint_store, resolve_checkpoint
from selfplay_core.config import RunConfig
from selfplay_core.loop import interrupt
from selfplay_core.loop.context import build_context
from selfplay_core.loop.recorder import Recorder, RunSummary
from selfplay_core.methods import method_for
from selfplay_core.output_paths import ensure_output_dir
from selfplay_core.records import IterationLog
from selfplay_core.run_context import RunContext
from selfplay_core.state import RunState, StateError, load_state

log = logging.getLogger(__name__)


def direct(name: str, fn: Callable, *args):
    return fn(*args)


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
    state = _open_state(cfg, run_dir, resume, run_key)
    store = open_checkpoint_store(cfg) if cfg.tracking.checkpoint_store else None
    ctx = build_context(cfg, run_dir, state, executor=executor, model_dir=model_dir)
    rec = Recorder.open(ctx, store)
    method = method_for(cfg.method)
    with rec.running():
        method.setup(ctx)
        if rec.start():  # a fresh run: the start checkpoint's row first (step 0)
            _evaluate_start(ctx, rec, call)
        for step in range(state.iteration + 1, cfg.iterations + 1):
            ilog, timed = rec.begin_iteration(call)
            # 1. propose, verify, score, solve, update: the method's stages
            if cfg.overlap_generation:  # the previous iteration's update, while this one generates
                ctx.background.start_pending()
            done, student = method.run_iteration(ctx, ilog, timed)
            ilog.add(**ctx.background.join_and_push())  # a method without an update stage
            # 2. evaluate: held-out pass@k, the verdict's set at the end, the goalposts
            _evaluate(ctx, step, timed, ilog)
            # 3. record: metrics, checkpoint, state, MLflow
            rec.end_iteration(step, ilog, done, student, method)
            if on_iteration:
                on_iteration(step, ilog.metrics)
        rec.finish()
    return rec.summary()


def _open_state(cfg: RunConfig, run_dir: Path, resume: bool, run_key: str | None) -> RunState:
    if resume:
        state = load_state(run_dir / "state.json")
        if state.iteration >= cfg.iterations:
            log.info("run already complete (%d iterations)", state.iteration)
        else:
            state.finished = False  # e.g. extended with --set iterations=N: unfinished until done
    else:
        ensure_output_dir(run_dir, "the run folder (out_dir/run name)")  # before the model loads
        _fresh_run_dir(run_dir)
        state = RunState()
    if run_key is not None:
        state.run_key = run_key
    return state


def _evaluate_start(ctx: RunContext, rec: Recorder, call: Callable) -> None:
    base = IterationLog()
    call("evaluate", S.evaluate, ctx, base)
    if ctx.config.eval.verdict:
        call("evaluate_full", S.evaluate_full, ctx, base)
    call("goalposts", S.track_goalposts, ctx, "base", base)
    base.add(**{"buffer/size": 0})
    with interrupt.deferred():
        rec.commit(base, step=0)


def _evaluate(ctx: RunContext, step: int, timed: Callable, ilog: IterationLog) -> None:
    cfg = ctx.config
    last = step == cfg.iterations
    if step % cfg.eval.every == 0 or last:
        timed("evaluate", S.evaluate, ctx, ilog)
    if cfg.eval.verdict and last:
        timed("evaluate_full", S.evaluate_full, ctx, ilog)
    if step % cfg.eval.goalpost_every == 0 or last:
        timed("goalposts", S.track_goalposts, ctx, f"iter {step}", ilog)
