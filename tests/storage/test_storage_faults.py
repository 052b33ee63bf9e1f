"""Faults a healthy server will not produce on demand: throttling, 500s, a dead endpoint.

moto's S3 server is the upstream here, behind a small fault-injecting proxy
(s3servers.FaultProxy): moto is used only because these faults cannot be caused on the real
RGW; the real-server behaviour is covered in test_storage_rgw.py.
"""

from __future__ import annotations

import logging
import uuid

import boto3
import pytest
from s3servers import Fault, FaultProxy, free_port
from test_storage_local import make_checkpoint, tree

from selfplay_core.storage import (
    FlushReport, S3Store, StorageAuthError, StorageConfig, StorageUnavailable, open_store,
)

MIB = 1024 * 1024


def make_bucket(port: int) -> str:
    name = f"f-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1").create_bucket(
        Bucket=name)
    return name


def store_at(endpoint: str, bucket: str, tmp_path, **kw) -> S3Store:
    cfg = dict(endpoint_url=endpoint, spool_dir=str(tmp_path / "spool"), max_attempts=2, connect_timeout_s=2,
               read_timeout_s=10, multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB)
    cfg.update(kw)
    return open_store(StorageConfig(uri=f"s3://{bucket}/runs", **cfg))


def is_put(method: str, path: str) -> bool:
    return method == "PUT" and "/runs/" in path


def test_throttling_is_retried_until_it_clears(fault_proxy, moto_server, tmp_path, caplog):
    bucket = make_bucket(moto_server)
    store = store_at(fault_proxy.endpoint, bucket, tmp_path, max_attempts=4)
    # Three throttled PUTs: botocore's four attempts absorb them, each retry counted and logged.
    fault_proxy.faults.append(Fault(503, "SlowDown", times=3, match=is_put))
    with caplog.at_level(logging.WARNING, logger="selfplay.storage"):
        stored = store.put_bytes(b"state v1", "r/state.json")
    assert not stored.spooled
    puts = [s for s in fault_proxy.seen if s.method == "PUT"]
    assert [s.status for s in puts] == [503, 503, 503, 200]
    assert store.stats["retries"] == 3
    assert all(f"retry {n}/3" in caplog.text for n in (1, 2, 3)) and "SlowDown" in caplog.text
    assert store.get_bytes("r/state.json") == b"state v1"


def test_500s_on_multipart_parts_are_retried(fault_proxy, moto_server, tmp_path):
    bucket = make_bucket(moto_server)
    store = store_at(fault_proxy.endpoint, bucket, tmp_path, max_concurrency=1, max_attempts=3)
    ckpt = make_checkpoint(tmp_path / "ckpt", big_bytes=11 * MIB)
    part = lambda m, p: m == "PUT" and "partNumber=2" in p  # noqa: E731
    fault_proxy.faults.append(Fault(500, "InternalError", times=2, match=part))
    stored = store.put_dir(ckpt, "r/ckpt-1")
    assert not any(s.spooled for s in stored)
    injected = [s for s in fault_proxy.seen if s.injected]
    assert len(injected) == 2 and all("partNumber=2" in s.path for s in injected)
    assert any(s.status == 200 and "partNumber=2" in s.path for s in fault_proxy.seen)
    assert tree(store.get_dir("r/ckpt-1", tmp_path / "back")) == tree(ckpt)


def test_persistent_throttling_spools_then_flush_delivers(fault_proxy, moto_server, tmp_path):
    bucket = make_bucket(moto_server)
    store = store_at(fault_proxy.endpoint, bucket, tmp_path)
    fault_proxy.faults.append(Fault(503, "SlowDown", match=is_put))  # never clears by itself
    stored = store.put_bytes(b"iteration 4", "r/state.json")
    assert stored.spooled and store.pending() == ["r/state.json"]
    assert len([s for s in fault_proxy.seen if s.method == "PUT"]) == 2  # botocore's attempts, no more
    with pytest.raises(StorageUnavailable, match="unavailable .*r/state.json"):
        store.flush()
    assert store.pending() == ["r/state.json"]  # a failed flush keeps it
    fault_proxy.faults.clear()
    assert store.flush().delivered == 1 and store.pending() == []
    assert store.get_bytes("r/state.json") == b"iteration 4"


def test_dead_endpoint_spools_checkpoints_and_flush_delivers_them(moto_server, tmp_path):
    """An outage during a run delays the checkpoint upload; nothing is lost, order is kept."""
    bucket = make_bucket(moto_server)
    port = free_port()  # nothing listens here: connection refused, as when the server is down
    store = store_at(f"http://127.0.0.1:{port}", bucket, tmp_path, outage_probe_interval_s=600)
    ckpt = make_checkpoint(tmp_path / "ckpt-5", big_bytes=6 * MIB)

    stored = store.put_dir(ckpt, "r/ckpt-5")
    store.put_bytes(b'{"iteration": 5}', "r/state.json")
    store.put_bytes(b'{"iteration": 6}', "r/state.json")  # a newer copy of the same key
    assert all(s.spooled for s in stored)
    # Only the first put waits out the retries (one request's: botocore's second attempt, then
    # the spool); the rest queue behind it without trying the endpoint again.
    assert store.stats["retries"] == 1
    assert store.pending()[-2:] == ["r/state.json", "r/state.json"] and len(store.pending()) == 8
    # Read-your-writes while spooled: a resume during the outage finds the newest state.
    assert store.exists("r/state.json") and store.get_bytes("r/state.json") == b'{"iteration": 6}'
    # A listing cannot be complete while the server is down: an error, not a partial answer.
    with pytest.raises(StorageUnavailable, match="unavailable"):
        store.list("r/")
    # The checkpoint folder is safe even if the caller deletes its copy right away.
    for p in sorted(ckpt.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()

    # The endpoint comes back (a proxy to the S3 server on the same address).
    proxy = FaultProxy(upstream_port=moto_server, port=port).start()
    try:
        assert store.flush() == FlushReport(delivered=8, pending=0)
        assert store.pending() == [] and "r/ckpt-5/model.safetensors" in store.list("r/")
        fresh = store_at(f"http://127.0.0.1:{port}", bucket, tmp_path / "other", spool=False)
        assert fresh.get_bytes("r/state.json") == b'{"iteration": 6}'  # the newer copy won
        back = fresh.get_dir("r/ckpt-5", tmp_path / "back")
        assert {p.name for p in back.rglob("*") if p.is_file()} == {
            "config.json", "tokenizer.json", "model.safetensors", "optimizer.pt", "rng.json"}
        assert (back / "model.safetensors").stat().st_size == 6 * MIB
    finally:
        proxy.stop()


def test_next_put_delivers_the_spool_first(moto_server, tmp_path):
    bucket = make_bucket(moto_server)
    port = free_port()
    store = store_at(f"http://127.0.0.1:{port}", bucket, tmp_path, outage_probe_interval_s=0)
    assert store.put_bytes(b"v1", "r/state.json").spooled
    proxy = FaultProxy(upstream_port=moto_server, port=port).start()
    try:
        assert not store.put_bytes(b"v2", "r/state.json").spooled  # flushed v1, then wrote v2
        assert store.pending() == []
        puts = [s.path for s in proxy.seen if s.method == "PUT"]
        assert len(puts) == 2 and store.get_bytes("r/state.json") == b"v2"
    finally:
        proxy.stop()


def test_spool_survives_a_new_process(moto_server, tmp_path):
    """A crash after spooling: a new store on the same spool dir delivers the upload."""
    bucket = make_bucket(moto_server)
    port = free_port()
    first = store_at(f"http://127.0.0.1:{port}", bucket, tmp_path)
    assert first.put_bytes(b"weights", "r/model.bin").spooled
    del first
    proxy = FaultProxy(upstream_port=moto_server, port=port).start()
    try:
        again = store_at(f"http://127.0.0.1:{port}", bucket, tmp_path)
        assert again.pending() == ["r/model.bin"]
        assert again.flush().delivered == 1
        assert again.get_bytes("r/model.bin") == b"weights"
    finally:
        proxy.stop()


def test_access_denied_is_raised_not_spooled(fault_proxy, moto_server, tmp_path):
    bucket = make_bucket(moto_server)
    store = store_at(fault_proxy.endpoint, bucket, tmp_path)
    fault_proxy.faults.append(Fault(403, "AccessDenied", match=is_put))
    with pytest.raises(StorageAuthError, match=rf"refused access to s3://{bucket}/runs/k \(AccessDenied\)"):
        store.put_bytes(b"x", "k")
    assert store.pending() == [] and store.stats["retries"] == 0
    assert len([s for s in fault_proxy.seen if s.method == "PUT"]) == 1  # no pointless retries


def test_reads_during_an_outage_fail_with_a_clear_error(moto_server, tmp_path):
    store = store_at(f"http://127.0.0.1:{free_port()}", "some-bucket", tmp_path)
    with pytest.raises(StorageUnavailable, match=r"endpoint http://127.0.0.1:\d+ unavailable for "
                                                  r"s3://some-bucket/runs/r/x"):
        store.get_bytes("r/x")
