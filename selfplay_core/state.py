"""RunState: everything needed to continue a run exactly where its last complete iteration
ended. Saved atomically (temp file + rename) at the end of every iteration."""

from __future__ import annotations

import json
import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path


class StateError(RuntimeError):
    """A missing or corrupt state/checkpoint file; the message names the file."""


@dataclass
class RunState:
    run_id: str | None = None               # the MLflow run
    iteration: int = 0                      # iterations completed
    buffer: list = field(default_factory=list)          # BufferItem JSON rows
    goalpost_ids: list = field(default_factory=list)
    goalpost_rows: list = field(default_factory=list)   # checkpoint x goalpost pass rates
    goalpost_labels: list = field(default_factory=list)
    rng_state: object = None                # random.Random.getstate(), JSON-friendly
    seed_counter: int = 0
    id_counter: int = 0
    real_cursor: int = 0
    last_checkpoint: str | None = None
    metrics_logged_through: int = -1        # last iteration whose metrics reached MLflow
    pending_metrics: dict = field(default_factory=dict)  # metrics of `iteration`, until logged
    history: list = field(default_factory=list)         # per-iteration key metrics (for prints)

    def to_json(self) -> dict:
        d = asdict(self)
        if self.rng_state is not None:
            v, internal, gauss = self.rng_state
            d["rng_state"] = [v, list(internal), gauss]
        return d

    @classmethod
    def from_json(cls, d: dict) -> "RunState":
        s = cls(**d)
        if s.rng_state is not None:
            v, internal, gauss = s.rng_state
            s.rng_state = (v, tuple(internal), gauss)
        return s


def save_state(state: RunState, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state.to_json(), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_state(path: str | Path) -> RunState:
    path = Path(path)
    if not path.exists():
        raise StateError(f"{path}: run state not found (nothing to resume)")
    try:
        with open(path, encoding="utf-8") as f:
            return RunState.from_json(json.load(f))
    except (ValueError, TypeError, KeyError) as e:
        raise StateError(f"{path}: run state is corrupt ({type(e).__name__}: {e}); "
                         "refusing to restart from zero") from None


def restore_rng(rng: random.Random, state: RunState) -> None:
    if state.rng_state is not None:
        rng.setstate(state.rng_state)
