"""Run checkpoints through an S3 checkpoint store (moto behind the fault proxy): an upload during an
outage is spooled, a resume whose local checkpoint is gone still gets it (from the spool), and
once the endpoint is back the flush delivers it and a resume fetches it from S3, verified."""

from __future__ import annotations

import shutil
import uuid

import boto3
import pytest
from s3servers import Fault

from selfplay_core.config import load_config
from selfplay_core import checkpoints as C
from selfplay_core.loop.driver import check_resumable
from selfplay_core.state import RunState, StateError, save_state
from selfplay_core.storage import StorageConfig, open_store

MIB = 1024 * 1024


def fake_save(d):
    (d / "model.safetensors").write_bytes(b"w" * 4096)
    (d / "trainer_state.pt").write_bytes(b"o" * 1024)


def test_checkpoint_store_outage_delays_but_never_loses_a_checkpoint(fault_proxy, moto_server, tmp_path,
                                                                     monkeypatch):
    bucket = f"c-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{moto_server}", region_name="us-east-1").create_bucket(
        Bucket=bucket)
    monkeypatch.setenv("SELFPLAY_S3_ENDPOINT_URL", fault_proxy.endpoint)
    monkeypatch.setenv("SELFPLAY_SPOOL_DIR", str(tmp_path / "spool"))
    uri = f"s3://{bucket}/runs"
    cfg = load_config(None, [f"out_dir={tmp_path}", f"tracking.checkpoint_store={uri}"])
    # The run's store comes from the config and the environment; quick retries for the test.
    fast = open_store(StorageConfig.from_env(uri=uri, max_attempts=2, connect_timeout_s=2, read_timeout_s=5))
    assert C.open_checkpoint_store(cfg).uri == fast.uri

    run_dir = tmp_path / "r"
    ck = C.write_checkpoint(run_dir, 1, fake_save)
    fault_proxy.faults.append(Fault(503, "SlowDown", match=lambda m, p: m == "PUT"))  # down for writes
    key = C.store_key("run123", 1)
    assert C.upload(fast, ck, key) == f"{uri}/{key}"
    assert fast.pending()  # spooled, not lost
    save_state(RunState(run_id="run123", iteration=1, last_checkpoint="checkpoints/iter-0001",
                        checkpoint_sha256=ck.manifest_sha256, checkpoint_key=key,
                        checkpoint_uri=f"{uri}/{key}"), run_dir / "state.json")

    want = (ck.path / "model.safetensors").read_bytes()
    shutil.rmtree(ck.path)
    check_resumable(run_dir, cfg)  # read-your-writes: the spooled copy
    assert (ck.path / "model.safetensors").read_bytes() == want

    fault_proxy.faults.clear()
    assert fast.flush().pending == 0
    shutil.rmtree(ck.path)
    shutil.rmtree(tmp_path / "spool")
    check_resumable(run_dir, cfg)  # now from S3
    assert (ck.path / "model.safetensors").read_bytes() == want
    gets = [s for s in fault_proxy.seen if s.method == "GET" and "iter-0001" in s.path]
    assert gets and all(s.status == 200 for s in gets)

    # A stored object that changed behind our back is refused, naming it.
    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{moto_server}", region_name="us-east-1").put_object(
        Bucket=bucket, Key=f"runs/{key}/model.safetensors", Body=b"rot")
    shutil.rmtree(ck.path)
    with pytest.raises(StateError, match=f"could not be used .*{key}/model.safetensors.*last good one"):
        check_resumable(run_dir, cfg)
