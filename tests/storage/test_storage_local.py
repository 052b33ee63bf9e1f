"""Local store, URI parsing and configuration: no server needed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from selfplay_core.storage import (
    MANIFEST_NAME, ChecksumError, LocalStore, ObjectNotFound, S3Store, StorageConfig,
    StorageConfigError, atomic_write_bytes, open_store, parse_uri, sha256_file,
)


def make_checkpoint(root: Path, big_bytes: int = 0) -> Path:
    """A folder shaped like a Hugging Face checkpoint plus trainer state."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text('{"model_type": "qwen2", "hidden_size": 128}')
    (root / "tokenizer.json").write_text('{"version": "1.0"}' * 50)
    (root / "model.safetensors").write_bytes(os.urandom(big_bytes or 4096))
    (root / "trainer_state").mkdir(exist_ok=True)
    (root / "trainer_state" / "optimizer.pt").write_bytes(os.urandom(2048))
    (root / "trainer_state" / "rng.json").write_text('{"seed": 7}')
    return root


def tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): sha256_file(p) for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("uri,scheme,bucket,path", [
    ("s3://bkt/a/b/", "s3", "bkt", "a/b"),
    ("s3://my.bucket-1", "s3", "my.bucket-1", ""),
    ("file:///tmp/x", "file", "", "/tmp/x"),
    ("/tmp/y/", "file", "", "/tmp/y"),
])
def test_parse_uri_accepts(uri, scheme, bucket, path):
    p = parse_uri(uri)
    assert (p.scheme, p.bucket, p.path) == (scheme, bucket, path)


@pytest.mark.parametrize("uri,why", [
    ("", "empty"),
    ("s3://", "no bucket"),
    ("s3:/bkt/x", "malformed scheme"),
    ("gs://bkt/x", "unsupported scheme 'gs'"),
    ("s3://Bad_Bucket/x", "not a valid S3 bucket name"),
    ("s3://ab", "not a valid S3 bucket name"),
    ("s3://bkt/a/../b", "must be a relative path"),
    ("file://host/x", "absolute path"),
])
def test_parse_uri_rejects_with_one_line_reason(uri, why):
    with pytest.raises(StorageConfigError) as e:
        open_store(uri)
    msg = str(e.value)
    assert why in msg and "\n" not in msg and repr(uri) in msg


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "./a", "a\\b", ".selfplay-checksums/x"])
def test_bad_keys_are_refused(tmp_path, key):
    store = LocalStore(tmp_path)
    with pytest.raises(StorageConfigError, match="bad storage key"):
        store.put_bytes(b"x", key)


def test_config_validation_and_env(monkeypatch, tmp_path):
    with pytest.raises(ValidationError, match="endpoint_url"):
        StorageConfig(uri="s3://bkt", endpoint_url="localhost:9000")
    with pytest.raises(ValidationError, match="multipart_chunksize"):
        StorageConfig(multipart_chunksize=1024)
    with pytest.raises(ValidationError, match="extra"):
        StorageConfig(bucket="x")
    monkeypatch.setenv("SELFPLAY_STORAGE_URI", "s3://envbucket/runs")
    monkeypatch.delenv("SELFPLAY_S3_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", "http://127.0.0.1:7480/")
    monkeypatch.setenv("SELFPLAY_SPOOL_DIR", str(tmp_path / "spool"))
    cfg = StorageConfig.from_env(max_attempts=2)
    assert (cfg.uri, cfg.endpoint_url, cfg.spool_dir, cfg.max_attempts) == (
        "s3://envbucket/runs", "http://127.0.0.1:7480", str(tmp_path / "spool"), 2)
    store = open_store(cfg)
    assert isinstance(store, S3Store)
    assert store.uri_for("r1/state.json") == "s3://envbucket/runs/r1/state.json"
    # A custom endpoint means path-style addressing (no per-bucket DNS on such servers).
    assert store.client.meta.config.s3["addressing_style"] == "path"


def test_local_roundtrip_list_delete(tmp_path):
    store = open_store(str(tmp_path / "store"))
    ckpt = make_checkpoint(tmp_path / "ckpt")
    stored = store.put_dir(ckpt, "run1/ckpt-1")
    assert {s.key for s in stored} == {f"run1/ckpt-1/{k}" for k in tree(ckpt)} | {
        f"run1/ckpt-1/{MANIFEST_NAME}"}
    store.put_bytes(b"{}", "run1/state.json")
    store.put_bytes(b"x", "run1/notes.part")  # a user's name, not a temp file: listed
    (tmp_path / "store" / "run1" / ".state.json.x1y2.part").write_bytes(b"")  # a write in progress
    assert store.list("run1/n") == ["run1/notes.part"] and store.list("run1/.") == []
    assert store.list("run1/ckpt-1/trainer_state/") == [
        "run1/ckpt-1/trainer_state/optimizer.pt", "run1/ckpt-1/trainer_state/rng.json"]
    assert "run1/state.json" in store.list() and not any(".selfplay" in k for k in store.list())
    back = store.get_dir("run1/ckpt-1", tmp_path / "back")
    assert tree(back) == tree(ckpt)  # exactly the folder that was uploaded
    assert store.uri_for("run1/state.json") == str(tmp_path / "store" / "run1" / "state.json")
    assert store.exists("run1/state.json")
    store.delete("run1/state.json")
    store.delete("run1/state.json")  # idempotent
    assert not store.exists("run1/state.json")
    with pytest.raises(ObjectNotFound, match="state.json"):
        store.get_bytes("run1/state.json")
    assert store.flush().pending == 0


def test_local_corruption_is_detected(tmp_path):
    store = LocalStore(tmp_path / "s")
    store.put_bytes(b"weights v1", "run/model.bin")
    (tmp_path / "s" / "run" / "model.bin").write_bytes(b"weights v2")  # behind the store's back
    with pytest.raises(ChecksumError, match=r"checksum mismatch for .*run/model.bin"):
        store.get_file("run/model.bin", tmp_path / "out.bin")
    assert not (tmp_path / "out.bin").exists()  # nothing half-verified left at the destination
    assert store.get_bytes("run/model.bin", verify=False) == b"weights v2"
    (tmp_path / "s" / "foreign.txt").write_text("not ours")
    with pytest.raises(ChecksumError, match="no checksum recorded"):
        store.get_bytes("foreign.txt")


def test_get_dir_without_manifest_names_the_folder(tmp_path):
    store = LocalStore(tmp_path / "s")
    store.put_bytes(b"x", "run/ckpt-2/config.json")  # an upload that never finished
    with pytest.raises(ObjectNotFound, match=r"ckpt-2 has no _selfplay_manifest.json"):
        store.get_dir("run/ckpt-2", tmp_path / "out")


def test_atomic_write_leaves_old_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "state.json"
    atomic_write_bytes(target, b"old")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(target, b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temp file left behind
