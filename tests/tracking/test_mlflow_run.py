import json

from selfplay_core.tracking.mlflow_run import RunTracker, flatten, local_tracking_uri


def test_flatten():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": "x"}) == {"a.b": 1, "a.c": "[1, 2]", "d": "x"}


def test_params_metrics_tables_artifacts_and_resume(tmp_path):
    uri = local_tracking_uri(str(tmp_path / "mlruns"))
    t = RunTracker(uri, "exp", run_name="r", tags={"method": "gasp"})
    t.log_params({"learner": {"lr": 1e-6}, "seed": 0})
    t.log_metrics({"student/reward": 0.5, "pass@1": 0.25, "bad": float("nan")}, step=0)
    t.log_table([{"q": "x", "p": 0.5}, {"q": "y", "p": 1.0, "extra": [1]}], "samples/proposals.json")
    (tmp_path / "h.png").write_bytes(b"\x89PNG fake")
    t.log_artifact(str(tmp_path / "h.png"), "plots")
    # A resumed run logs into the same MLflow run; params are not re-logged (immutable).
    t2 = RunTracker(uri, "exp", run_id=t.run_id)
    t2.log_params({"learner": {"lr": 1e-6}, "seed": 0})
    t2.log_metrics({"student/reward": 0.75}, step=1)
    t2.finish()
    run = t2.client.get_run(t.run_id)
    assert run.data.params == {"learner.lr": "1e-06", "seed": "0"}
    assert run.data.tags["method"] == "gasp" and run.info.status == "FINISHED"
    assert t2.metric_history("student/reward") == [(0, 0.5), (1, 0.75)]
    assert t2.metric_history("pass_at_1") == [(0, 0.25)]
    arts = {a.path for a in t2.client.list_artifacts(t.run_id)}
    assert {"plots", "samples"} <= arts
    local = t2.client.download_artifacts(t.run_id, "samples/proposals.json", str(tmp_path))
    table = json.load(open(local))
    assert table["columns"] == ["extra", "p", "q"] and len(table["data"]) == 2


def test_artifacts_beside_a_sqlite_store_by_hand(tmp_path, monkeypatch):
    from selfplay_core.tracking.mlflow_run import artifacts_beside

    monkeypatch.chdir(tmp_path)
    assert artifacts_beside("sqlite:////srv/exp/mlflow.db") == "file:///srv/exp/artifacts"
    assert artifacts_beside("sqlite:///rel/mlflow.db") == f"file://{tmp_path}/rel/artifacts"
    assert artifacts_beside("sqlite:////srv/exp/mlflow.db?timeout=30") == "file:///srv/exp/artifacts"
    for other in ("http://127.0.0.1:5000", "file:///srv/mlruns", "sqlite:///:memory:", "sqlite:///"):
        assert artifacts_beside(other) is None


def test_a_sqlite_store_keeps_its_artifacts_beside_it_not_in_the_working_folder(tmp_path, monkeypatch):
    """MLflow's default artifact root is ./mlruns of the process's working folder: a Prefect worker
    or a test running in the checkout wrote runs' artifacts there, away from their store."""
    store, cwd = tmp_path / "store", tmp_path / "cwd"
    store.mkdir()
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    t = RunTracker(f"sqlite:///{store / 'mlflow.db'}", "exp", run_name="r")
    (tmp_path / "note.txt").write_text("hello")
    t.log_artifact(str(tmp_path / "note.txt"), "notes")
    t.finish()
    exp = t.client.get_experiment(t.experiment_id)
    assert exp.artifact_location == (store / "artifacts").as_uri()
    assert (store / "artifacts" / t.run_id / "artifacts" / "notes" / "note.txt").read_text() == "hello"
    assert list(cwd.iterdir()) == []
    # an explicit location still wins
    t2 = RunTracker(f"sqlite:///{store / 'mlflow.db'}", "exp2", artifact_location=(tmp_path / "a").as_uri())
    assert t2.client.get_experiment(t2.experiment_id).artifact_location == (tmp_path / "a").as_uri()
