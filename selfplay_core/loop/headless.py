"""The loop without tracking or orchestration: for machines that have torch but not MLflow or
Prefect (e.g. a lent accelerator running tools/gpu_check.py)."""

from __future__ import annotations

import tempfile
import time

from selfplay_core import stages as S
from selfplay_core.config import load_config
from selfplay_core.loop.context import build_context
from selfplay_core.loop.driver import direct
from selfplay_core.methods import method_for
from selfplay_core.records import IterationLog


def run_default_loop(iterations: int = 2, device: str | None = None, overrides: tuple[str, ...] = ()) -> dict:
    """A few iterations of the embedded default (GASP on the toy world); returns key metrics.
    The device follows torch (CUDA when available); `device` is recorded for the report."""
    cfg = load_config(None, [f"iterations={iterations}", "eval.max_problems=40", *overrides])
    method = method_for(cfg.method)
    history = []
    with tempfile.TemporaryDirectory(prefix="selfplay-headless-") as tmp:
        ctx = build_context(cfg, tmp)
        try:
            method.setup(ctx)
            for it in range(iterations):
                t0 = time.perf_counter()
                log = IterationLog()
                method.run_iteration(ctx, log, direct)
                S.evaluate(ctx, log)
                ctx.state.iteration = it + 1
                keep = ("student/accepted/reward", "teacher/lemma/acceptance", "teacher/lift/acceptance",
                        "eval/all/pass@1", "learner/tokens")
                history.append({"iteration": it + 1, "seconds": round(time.perf_counter() - t0, 2),
                                **{k: log.metrics[k] for k in keep if k in log.metrics}})
        finally:
            ctx.close()
    return {"device": device or str(ctx.engine.device), "history": history}
