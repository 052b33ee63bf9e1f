"""MLflow artifacts land in the same S3 bucket as the checkpoints (real RGW, real mlflow server)."""

from __future__ import annotations

import hashlib

import pytest
from s3servers import MlflowServer
from test_storage_local import make_checkpoint, tree

from selfplay_core.storage import StorageConfig, open_store


@pytest.fixture
def mlflow_server(rgw, bucket, tmp_path):
    env = {"MLFLOW_S3_ENDPOINT_URL": rgw.endpoint, **{k: rgw.env[k] for k in (
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}}
    server = MlflowServer(tmp_path, f"s3://{bucket}/mlflow", env).start()
    yield server
    server.stop()


@pytest.mark.slow  # an mlflow server takes ~20-40 s to start on a busy 2-core machine
def test_mlflow_artifacts_and_checkpoints_land_in_the_bucket(rgw, bucket, mlflow_server, tmp_path):
    import mlflow
    from mlflow.tracking import MlflowClient

    # The checkpoint goes through the store; MLflow records its URI (DESIGN §6).
    store = open_store(StorageConfig(uri=f"s3://{bucket}/runs", endpoint_url=rgw.endpoint,
                                     spool_dir=str(tmp_path / "spool")))
    ckpt = make_checkpoint(tmp_path / "ckpt-1")
    store.put_dir(ckpt, "run-x/ckpt-1")
    ckpt_uri = store.uri_for("run-x/ckpt-1")

    heatmap = tmp_path / "goalpost_heatmap.png"
    heatmap.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40)
    client = MlflowClient(tracking_uri=mlflow_server.url)
    exp_id = client.create_experiment("storage-test")
    run = client.create_run(exp_id, tags={"method": "gasp"})
    rid = run.info.run_id
    client.log_param(rid, "checkpoint_uri", ckpt_uri)
    client.log_metric(rid, "pass_at_1", 0.5, step=1)
    client.log_artifact(rid, str(heatmap), artifact_path="plots")
    client.log_dict(rid, {"iteration": 1}, "state/summary.json")
    client.set_terminated(rid)

    # Read back from the bucket with plain boto3: the proxied artifacts are real objects there.
    s3 = rgw.client()
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="mlflow/")["Contents"]]
    png_key = next(k for k in keys if k.endswith("plots/goalpost_heatmap.png"))
    assert rid in png_key
    body = s3.get_object(Bucket=bucket, Key=png_key)["Body"].read()
    assert hashlib.sha256(body).hexdigest() == hashlib.sha256(heatmap.read_bytes()).hexdigest()
    assert any(k.endswith("state/summary.json") for k in keys)

    # And the other way: the MLflow client downloads it through the server.
    got = mlflow.artifacts.download_artifacts(run_id=rid, artifact_path="plots/goalpost_heatmap.png",
                                              dst_path=str(tmp_path / "dl"), tracking_uri=mlflow_server.url)
    assert open(got, "rb").read() == heatmap.read_bytes()

    # The checkpoint named by the run's param round-trips with matching checksums.
    logged = client.get_run(rid).data.params["checkpoint_uri"]
    assert logged == f"s3://{bucket}/runs/run-x/ckpt-1"
    assert tree(store.get_dir("run-x/ckpt-1", tmp_path / "back")) == tree(ckpt)
