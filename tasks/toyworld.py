"""Prefect task wrappers around the toy world's core functions (no logic here)."""

from __future__ import annotations

from prefect import task

from selfplay_core.toyworld import bootstrap as core


@task(name="train-toy-model", retries=0)
def train_toy_model(config: core.BootstrapConfig, force: bool = False, out_dir: str | None = None,
                    extra_meta: dict | None = None) -> str:
    from prefect.logging import get_run_logger

    logger = get_run_logger()
    return str(core.bootstrap_toy_model(config, out_dir=out_dir, force=force, log=logger.info,
                                        extra_meta=extra_meta))
