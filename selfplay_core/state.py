"""RunState: everything needed to continue a run exactly where its last complete iteration
ended. Saved atomically (temp file + rename) at the end of every iteration."""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from selfplay_core.checkpoints import StateError, last_good_hint
from selfplay_core.storage.files import atomic_write_text

__all__ = ["RunState", "StateError", "load_state", "restore_rng", "save_state"]


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
    last_checkpoint: str | None = None      # checkpoint folder of `iteration` (relative to the run dir)
    checkpoint_sha256: str | None = None    # sha256 of that folder's checkpoint_manifest.json
    checkpoint_uri: str | None = None       # its copy in tracking.checkpoint_store, if any
    checkpoint_key: str | None = None       # ... and the key under that store
    run_key: str | None = None              # who started this run (a Prefect flow run): retries resume it
    finished: bool = False                  # all configured iterations done
    metrics_logged_through: int = -1        # last iteration whose metrics reached MLflow
    pending_metrics: dict = field(default_factory=dict)  # metrics of `iteration`, until logged
    history: list = field(default_factory=list)         # per-iteration key metrics (for prints)
    pending_samples: list = field(default_factory=list) # proposal rows of `iteration`, until logged
    # overlap_generation: `iteration`'s rollouts (with advantages), to be learnt while the next
    # iteration generates (overlap.py)
    pending_update: list = field(default_factory=list)
    # What a method carries from one iteration to the next besides the buffers (JSON values,
    # e.g. SGS's targets solved so far); saved and restored with the rest, so a resume continues it.
    method_state: dict = field(default_factory=dict)
    # The starting model's goalpost floor (stages.track_goalposts), logged beside goalposts/solved.
    goalpost_floor: dict = field(default_factory=dict)
    # Per-problem counts of the whole held-out set at step 0 ({id: [n, c]}), for the end-of-run
    # verdict against the starting checkpoint (eval.verdict).
    eval_start: dict = field(default_factory=dict)
    eval_end: dict = field(default_factory=dict)        # ... and at the last iteration
    # The curriculum lineage: one record per proposal (tracking/lineage.py).
    lineage: list = field(default_factory=list)

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
    atomic_write_text(path, json.dumps(state.to_json()))


def load_state(path: str | Path) -> RunState:
    """The saved state; StateError naming the file and the last good iteration when it is missing
    or corrupt (a resume never silently restarts from zero)."""
    path = Path(path)
    if not path.exists():
        raise StateError(f"{path}: run state not found, nothing to resume ({_hint(path.parent)})")
    try:
        with open(path, encoding="utf-8") as f:
            state = RunState.from_json(json.load(f))
        if not isinstance(state.iteration, int) or state.iteration < 0:
            raise ValueError(f"iteration {state.iteration!r}")
        if state.iteration > 0 and not state.last_checkpoint:
            raise ValueError(f"iteration {state.iteration} but no checkpoint recorded")
        return state
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise StateError(f"{path}: run state is corrupt ({type(e).__name__}: {e}); "
                         f"{_hint(path.parent)}; refusing to restart from zero") from None


def _hint(run_dir: Path) -> str:
    return last_good_hint(run_dir)


def restore_rng(rng: random.Random, state: RunState) -> None:
    if state.rng_state is not None:
        rng.setstate(state.rng_state)
