"""The goalpost-mining flow: a world's goalpost pool against a model (pass@k = 0 survivors),
written as a JSON goalpost set and logged to MLflow (selfplay_core.mining)."""

from __future__ import annotations

from prefect import flow, get_run_logger

from selfplay_core.mining import GoalpostMiningConfig, run_mining
from tasks.stages import as_task


@flow(name="mine_goalposts", log_prints=True)
def mine_goalposts(params: GoalpostMiningConfig = GoalpostMiningConfig()) -> dict:
    """Goalposts of a model: pool tasks that k samples all fail; cached for self-play runs."""
    return run_mining(params, call=as_task, log=get_run_logger().info)
