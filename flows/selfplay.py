"""The self-play flow: one Prefect flow run per self-play run; each stage of each iteration
(propose, validate, estimate, score, solve, update, evaluate, goalposts) is a Prefect task.

The parameter is the whole RunConfig (a pydantic model), so the Prefect UI renders it as a form.

Timeouts: each stage's task fails after its `flow.timeouts` limit (a hung server or learner
step), which fails the flow run.

Retries: a failed flow run is retried (`flow.retries` of the config via `for_config`, 1 by
default); the retry resumes the run from its last complete iteration, into the same MLflow
run. It recognises its own run by the flow run id saved in the run state (`run_key`), so a
retry never resumes some other run that happens to live in the same folder.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.runtime import deployment, flow_run
from prefect.states import Cancelled, Failed

from selfplay_core.config import RunConfig
from selfplay_core.loop.driver import default_run_dir, run_selfplay, started_by
from selfplay_core.loop.interrupt import RunInterrupted
from selfplay_core.preflight import preflight
from tasks.stages import stage_caller

# Callables told each completed iteration's step and metrics (the CLI's progress bar).
iteration_listeners: list = []


@flow(name="selfplay", log_prints=True, retries=1, retry_delay_seconds=10)
def selfplay(config: RunConfig = RunConfig(), resume: bool = False, run_dir: str | None = None) -> dict:
    logger = get_run_logger()

    def report(step: int, metrics: dict) -> None:
        keys = ("student/accepted/reward", "teacher/lemma/acceptance", "teacher/lift/acceptance",
                "goalposts/solved", "eval/all/pass@1")
        logger.info("iteration %d: %s", step, ", ".join(f"{k}={metrics[k]:.3f}" for k in keys if k in metrics))
        for listener in iteration_listeners:
            listener(step, metrics)

    if deployment.id is not None:  # a deployed run (`selfplay run` checked before it started)
        endpoints = preflight(config)
        for line in endpoints.notes:
            logger.warning(line)
        if endpoints.errors:
            for line in endpoints.errors:
                logger.error(line)
            # Failed, not raised: the log keeps the lines, not a traceback (the flow's retry
            # checks again after retry_delay_seconds, in case the endpoint was just starting).
            return Failed(message="; ".join(endpoints.errors))
    run_dir = run_dir or choose_run_dir(config, deployment.id, flow_run.scheduled_start_time,
                                        flow_run.id)
    key = f"prefect-flow-run:{flow_run.id}" if flow_run.id else None
    if not resume and key and flow_run.run_count > 1 and started_by(run_dir, key):
        logger.warning("retry %d of flow run %s: resuming %s from its last complete iteration",
                       flow_run.run_count - 1, flow_run.id, run_dir)
        resume = True
    try:
        summary = run_selfplay(config, call=stage_caller(config.flow.timeouts), run_dir=run_dir,
                               resume=resume, on_iteration=report, run_key=key)
    except RunInterrupted as e:  # Cancelled, not Crashed: the last complete iteration is saved
        return Cancelled(message=f"stopped by {e.signame}; resume with: selfplay run --resume {run_dir}")
    for line in summary.verdict or []:
        logger.info("verdict: %s", line)
    return {"run_id": summary.run_id, "run_dir": summary.run_dir, "tracking_uri": summary.tracking_uri,
            "heatmap": summary.heatmap, "checkpoint": summary.checkpoint}


def choose_run_dir(config: RunConfig, deployment_id, scheduled: datetime | None, flow_run_id) -> str:
    """Where the run lives when no run_dir is given. A deployed run without a tracking.run_name
    (e.g. the nightly schedule) gets a folder of its own, named after its scheduled start, so one
    night never replaces or blocks another; otherwise the config's default folder."""
    base = default_run_dir(config)
    if deployment_id is None or config.tracking.run_name or scheduled is None:
        return str(base)
    return str(Path(base.parent) / f"{base.name}-{scheduled:%Y%m%dT%H%M}-{str(flow_run_id)[:8]}")


def for_config(config: RunConfig):
    """The flow with the retry settings of `config` (flow.retries, flow.retry_delay_s)."""
    return selfplay.with_options(retries=config.flow.retries, retry_delay_seconds=config.flow.retry_delay_s)
