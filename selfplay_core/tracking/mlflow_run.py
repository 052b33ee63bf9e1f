"""One MLflow run per self-play run, through `MlflowClient` with an explicit run id (no global
"active run"), so logging works from Prefect task threads and a resumed run continues the same
MLflow run."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

_PARAM_MAX = 6000  # MLflow's limit on a param value
# An experiment of model training, not of GenAI apps: the kind MLflow's UI reads from this tag
# where its workflow-type switch is off. MLflow 3.17's own UI has the switch on and ignores the
# tag (the view comes from the link's `?workflowType=machine_learning`, else the browser's last
# choice, else GenAI), so every link this project prints carries that parameter too.
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists and tuples become JSON strings."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        elif isinstance(v, (list, tuple)):
            out[key] = json.dumps(v)
        else:
            out[key] = v
    return out


class RunTracker:
    def __init__(self, tracking_uri: str, experiment: str, *, run_name: str | None = None,
                 run_id: str | None = None, tags: dict[str, str] | None = None,
                 artifact_location: str | None = None):
        os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.tracking_uri = tracking_uri
        exp = self.client.get_experiment_by_name(experiment)
        exp_id = exp.experiment_id if exp else self.client.create_experiment(
            experiment, artifact_location=artifact_location or artifacts_beside(tracking_uri),
            tags=EXPERIMENT_TAGS)
        if run_id is None:
            run = self.client.create_run(exp_id, run_name=run_name, tags=tags or {})
            self.run_id = run.info.run_id
        else:
            self.run_id = self.client.get_run(run_id).info.run_id  # fails clearly if unknown
            self.client.update_run(self.run_id, status="RUNNING")
            for k, v in (tags or {}).items():
                self.client.set_tag(self.run_id, k, v)
        self.experiment_id = exp_id

    def log_params(self, params: dict) -> None:
        from mlflow.entities import Param

        flat = [Param(k, str(v)[:_PARAM_MAX]) for k, v in flatten(params).items()]
        existing = self.client.get_run(self.run_id).data.params
        flat = [p for p in flat if p.key not in existing]  # params are immutable: resume re-logs none
        for i in range(0, len(flat), 100):
            self.client.log_batch(self.run_id, params=flat[i:i + 100])

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        import math
        import time

        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        ms = [Metric(k.replace("@", "_at_"), float(v), ts, step) for k, v in metrics.items()
              if v is not None and math.isfinite(float(v))]
        for i in range(0, len(ms), 500):
            self.client.log_batch(self.run_id, metrics=ms[i:i + 500])

    def log_artifact(self, path: str, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, path, artifact_path)

    def log_text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self.run_id, text, artifact_file)

    def log_table(self, rows: Iterable[dict], artifact_file: str) -> None:
        """Rows of dicts as an MLflow table artifact (shown in the UI's artifact viewer)."""
        rows = list(rows)
        if not rows:
            return
        cols = sorted({k for r in rows for k in r})
        data = {c: [_cell(r.get(c)) for r in rows] for c in cols}
        self.client.log_table(self.run_id, data=data, artifact_file=artifact_file)

    def set_tags(self, tags: dict[str, str]) -> None:
        for k, v in tags.items():
            self.client.set_tag(self.run_id, k, str(v))

    def finish(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.run_id, status=status)

    def metric_history(self, key: str) -> list[tuple[int, float]]:
        return [(m.step, m.value) for m in self.client.get_metric_history(self.run_id, key)]


def _cell(v):
    if v is None or isinstance(v, (int, float, str, bool)):
        return v if not isinstance(v, str) else v[:2000]
    return json.dumps(v, default=str)[:2000]


def local_tracking_uri(root: str | None = None) -> str:
    """The embedded default: a SQLite store under ./mlruns (what `mlflow ui` opens)."""
    root = os.path.abspath(root or "mlruns")
    os.makedirs(root, exist_ok=True)
    return f"sqlite:///{os.path.join(root, 'mlflow.db')}"


def artifacts_beside(tracking_uri: str) -> str | None:
    """Where a new experiment of a SQLite store keeps its artifacts when nobody said: the folder
    `artifacts` beside the database file. MLflow's own default is `./mlruns` of whatever folder
    the process happens to run in (a Prefect worker's, a test's), which parts a run's artifacts
    from its store. None for any other store (a server decides; a file store holds its own)."""
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix):
        return None
    db = tracking_uri[len(prefix):].split("?", 1)[0]
    if not db or db == ":memory:":
        return None
    return (Path(db).resolve().parent / "artifacts").as_uri()


def resolve_tracking(explicit: str | None, out_dir: str) -> tuple[str, str | None]:
    """(tracking URI, artifact location for a new experiment) for a run writing under out_dir.

    An explicit URI wins; else MLflow's own MLFLOW_TRACKING_URI (what `selfplay serve` and the
    compose file give workers, so runs triggered from the Prefect UI land in the served MLflow;
    the server then decides where artifacts go); else the local SQLite store under
    out_dir/mlruns. A SQLite store keeps its artifacts beside it (`artifacts_beside`)."""
    uri = explicit or os.environ.get("MLFLOW_TRACKING_URI") or local_tracking_uri(
        os.path.join(out_dir, "mlruns"))
    return uri, artifacts_beside(uri)


def temp_artifact_dir() -> str:
    return tempfile.mkdtemp(prefix="selfplay-artifacts-")
