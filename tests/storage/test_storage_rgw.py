"""The S3 store against a real S3 server: Ceph RGW on loopback (started once per session)."""

from __future__ import annotations

import hashlib
import os

import pytest
from test_storage_local import make_checkpoint, tree

from selfplay_core.storage import (
    MANIFEST_NAME, BucketNotFound, ChecksumError, FlushReport, ObjectNotFound, StorageAuthError, StorageConfig,
    open_store, sha256_file,
)

MIB = 1024 * 1024


def s3_store(rgw, uri, tmp_path, **kw):
    cfg = dict(endpoint_url=rgw.endpoint, spool_dir=str(tmp_path / "spool"),
               multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB, max_attempts=2)
    cfg.update(kw)
    return open_store(StorageConfig(uri=uri, **cfg))


def test_checkpoint_folder_roundtrip_with_multipart(rgw, bucket, tmp_path):
    store = s3_store(rgw, f"s3://{bucket}/runs", tmp_path)
    store.check()
    ckpt = make_checkpoint(tmp_path / "ckpt-3", big_bytes=12 * MIB)  # > 5 MiB threshold
    stored = store.put_dir(ckpt, "run-a/ckpt-3")
    assert not any(s.spooled for s in stored)
    assert {s.uri for s in stored} >= {"s3://%s/runs/run-a/ckpt-3/model.safetensors" % bucket}

    # What landed in the bucket, seen with plain boto3: every file, its sha256 in the metadata,
    # and the big one uploaded in parts (an ETag of a multipart upload ends in -<parts>).
    s3 = rgw.client()
    for rel, sha in tree(ckpt).items():
        head = s3.head_object(Bucket=bucket, Key=f"runs/run-a/ckpt-3/{rel}")
        assert head["Metadata"]["sha256"] == sha, rel
    big = s3.head_object(Bucket=bucket, Key="runs/run-a/ckpt-3/model.safetensors")
    assert big["ETag"].strip('"').endswith("-3") and big["ContentLength"] == 12 * MIB

    back = store.get_dir("run-a/ckpt-3", tmp_path / "back")
    assert tree(back) == tree(ckpt)
    assert store.flush() == FlushReport(0, 0) and store.pending() == []  # nothing went through the spool
    assert not [p for p in os.listdir(store.spool.root) if p.endswith(".entry")]


def test_list_exists_delete_and_missing(rgw, bucket, tmp_path):
    store = s3_store(rgw, f"s3://{bucket}/p", tmp_path)
    for key in ("r1/a.json", "r1/b/c.bin", "r2/a.json"):
        store.put_bytes(key.encode(), key)
    rgw.client().put_object(Bucket=bucket, Key="outside/x", Body=b"1")  # not under the prefix
    assert store.list() == ["r1/a.json", "r1/b/c.bin", "r2/a.json"]
    assert store.list("r1/") == ["r1/a.json", "r1/b/c.bin"]
    assert store.exists("r1/a.json") and not store.exists("r1/zzz")
    assert store.get_bytes("r1/b/c.bin") == b"r1/b/c.bin"
    store.delete("r1/a.json")
    store.delete("r1/a.json")  # idempotent
    assert store.list("r1/") == ["r1/b/c.bin"]
    with pytest.raises(ObjectNotFound, match=rf"s3://{bucket}/p/r1/a.json does not exist"):
        store.get_file("r1/a.json", tmp_path / "a.json")
    with pytest.raises(ObjectNotFound, match="has no _selfplay_manifest.json"):
        store.get_dir("r1", tmp_path / "r1")


def test_overwritten_object_is_detected_on_download(rgw, bucket, tmp_path):
    store = s3_store(rgw, f"s3://{bucket}", tmp_path)
    ckpt = make_checkpoint(tmp_path / "ckpt")
    store.put_dir(ckpt, "run/ckpt-1")
    s3 = rgw.client()
    key = "run/ckpt-1/model.safetensors"
    good_sha = sha256_file(ckpt / "model.safetensors")

    # Bytes changed, metadata kept (bit rot, a buggy copy): the sha256 no longer matches.
    s3.put_object(Bucket=bucket, Key=key, Body=b"garbage", Metadata={"sha256": good_sha})
    with pytest.raises(ChecksumError, match=rf"checksum mismatch for s3://{bucket}/{key}"):
        store.get_file(key, tmp_path / "m.safetensors")
    assert not (tmp_path / "m.safetensors").exists()
    with pytest.raises(ChecksumError, match="checksum mismatch"):
        store.get_bytes(key)
    with pytest.raises(ChecksumError, match="model.safetensors"):
        store.get_dir("run/ckpt-1", tmp_path / "back")

    # Overwritten by another tool (no metadata at all): refused too, unless asked not to verify.
    s3.put_object(Bucket=bucket, Key=key, Body=b"other tool")
    with pytest.raises(ChecksumError, match=rf"no sha256 recorded for s3://{bucket}/{key}"):
        store.get_bytes(key)
    assert store.get_bytes(key, verify=False) == b"other tool"


def test_missing_bucket_and_bad_credentials_are_clear_and_not_spooled(rgw, tmp_path, monkeypatch):
    store = s3_store(rgw, "s3://no-such-bucket-here/x", tmp_path)
    with pytest.raises(BucketNotFound, match="'no-such-bucket-here' does not exist at http://127.0.0.1"):
        store.check()
    with pytest.raises(BucketNotFound, match="no-such-bucket-here"):
        store.put_bytes(b"x", "k")
    with pytest.raises(BucketNotFound, match="no-such-bucket-here"):
        store.get_bytes("k")
    assert store.pending() == []  # a configuration error must surface, not wait in the spool

    name = f"creds-{hashlib.md5(str(tmp_path).encode()).hexdigest()[:8]}"
    rgw.client().create_bucket(Bucket=name)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    bad = s3_store(rgw, f"s3://{name}", tmp_path / "b")
    with pytest.raises(StorageAuthError, match=rf"refused access to s3://{name}/k \(SignatureDoesNotMatch\)") as e1:
        bad.put_bytes(b"x", "k")
    with pytest.raises(StorageAuthError, match="AWS_SECRET_ACCESS_KEY") as e2:
        bad.check()
    assert bad.pending() == []
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    anon = s3_store(rgw, f"s3://{name}", tmp_path / "c")
    with pytest.raises(StorageAuthError, match="no usable S3 credentials"):
        anon.put_bytes(b"x", "k")
    # The messages name the variables, never their values; one line each.
    for e in (e1.value, e2.value):
        assert "wrong-secret" not in str(e) and rgw.env["AWS_ACCESS_KEY_ID"] not in str(e)
        assert "\n" not in str(e)


def test_manifest_lists_every_file(rgw, bucket, tmp_path):
    import json

    store = s3_store(rgw, f"s3://{bucket}", tmp_path)
    ckpt = make_checkpoint(tmp_path / "ckpt")
    store.put_dir(ckpt, "r/ckpt-9")
    manifest = json.loads(store.get_bytes(f"r/ckpt-9/{MANIFEST_NAME}"))
    assert {k: v["sha256"] for k, v in manifest["files"].items()} == tree(ckpt)
    # A file missing in the bucket (deleted, or an upload that died) names the key.
    rgw.client().delete_object(Bucket=bucket, Key="r/ckpt-9/trainer_state/rng.json")
    with pytest.raises(ObjectNotFound, match=rf"s3://{bucket}/r/ckpt-9/trainer_state/rng.json"):
        store.get_dir("r/ckpt-9", tmp_path / "back")
