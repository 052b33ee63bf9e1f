"""The evaluation flow: one checkpoint (a path, `toy`, or an s3:// URI) on a list of benchmarks
(toy held-out split, HumanEval+, MBPP+, LiveCodeBench, ...), one Prefect task per benchmark,
one MLflow run with every metric and the reports (selfplay_core.checkpoint_eval)."""

from __future__ import annotations

from prefect import flow, get_run_logger

from selfplay_core.checkpoint_eval import CheckpointEvalConfig, run_checkpoint_eval
from tasks.stages import as_task


@flow(name="evaluate", log_prints=True)
def evaluate(params: CheckpointEvalConfig = CheckpointEvalConfig()) -> dict:
    """Benchmark report for a checkpoint: pass@k per benchmark, logged to MLflow."""
    return run_checkpoint_eval(params, call=as_task, log=get_run_logger().info)
