"""The self-play flow: one Prefect flow run per self-play run; each stage of each iteration
(propose, validate, estimate, score, solve, update, evaluate, goalposts) is a Prefect task.

The parameter is the whole RunConfig (a pydantic model), so the Prefect UI renders it as a form.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from selfplay_core.config import RunConfig
from selfplay_core.loop.driver import run_selfplay
from tasks.stages import as_task


@flow(name="selfplay", log_prints=True)
def selfplay(config: RunConfig = RunConfig(), resume: bool = False, run_dir: str | None = None) -> dict:
    logger = get_run_logger()

    def report(step: int, metrics: dict) -> None:
        keys = ("student/accepted/reward", "teacher/lemma/acceptance", "teacher/lift/acceptance",
                "goalposts/solved", "eval/all/pass@1")
        logger.info("iteration %d: %s", step, ", ".join(f"{k}={metrics[k]:.3f}" for k in keys if k in metrics))

    summary = run_selfplay(config, call=as_task, run_dir=run_dir, resume=resume, on_iteration=report)
    return {"run_id": summary.run_id, "run_dir": summary.run_dir, "tracking_uri": summary.tracking_uri,
            "heatmap": summary.heatmap, "checkpoint": summary.checkpoint}
