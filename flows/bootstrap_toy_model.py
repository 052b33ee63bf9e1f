"""Flow: bootstrap the toy world's tiny model (cached; see selfplay_core.toyworld.bootstrap)."""

from __future__ import annotations

from prefect import flow

from selfplay_core.toyworld.bootstrap import BootstrapConfig
from tasks.toyworld import train_toy_model


@flow(name="bootstrap_toy_model")
def bootstrap_toy_model(config: BootstrapConfig = BootstrapConfig(), force: bool = False,
                        out_dir: str | None = None, extra_meta: dict | None = None) -> str:
    """Returns the model's Hugging Face folder. `extra_meta`: more keys for its bootstrap.json
    (a recipe's file and sha256)."""
    return train_toy_model(config, force=force, out_dir=out_dir, extra_meta=extra_meta)
