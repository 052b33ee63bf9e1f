"""Artifact store: one small interface over a local directory or ``s3://bucket/prefix``.

Checkpoints, run state and reports go through :func:`open_store`, so the rest of the code never
knows whether it writes to disk or to an S3-compatible server (AWS, Ceph RGW, MinIO, ...).

Guarantees, and why:

* **Checksums.** Every object is stored with its sha256 (S3: object metadata ``sha256``; local:
  a sidecar under ``.selfplay-checksums/``) and verified on download. A checkpoint that rotted or
  was overwritten behind our back must fail loudly, naming the key, not train on garbage.
  Objects without a recorded checksum are refused unless the caller passes ``verify=False``
  (e.g. to read an MLflow artifact), because an overwrite by another tool drops the metadata.
* **Retries.** botocore retries each request (``standard`` mode: throttling, 5xx, connection
  errors, exponential backoff with jitter), and only botocore: an upload that still fails goes
  to the spool (a multipart upload whose part ran out of retries restarts whole from there), a
  read raises. Each retry is counted and logged from botocore's own ``needs-retry`` event.
* **Spool.** When the endpoint stays unavailable after the retries, an upload is copied into a
  local spool directory (atomically, fsynced) and :meth:`ArtifactStore.flush` delivers it later;
  every ``put`` first tries to flush, and queues behind older spooled uploads so that a stale
  copy can never overwrite a newer one. Reads see spooled objects (read-your-writes), so a resume
  during an outage finds the state it just saved. An outage delays uploads; it never loses one.
  Configuration errors (bad credentials, missing bucket) are never spooled: they raise.
* **Atomic local writes.** Files appear under their final name only when complete (temp file in
  the same directory, fsync, rename), so a crash leaves the old file or the new one.
* **Folders.** :meth:`put_dir` uploads a folder and then a manifest (paths, sizes, sha256) as
  its last object; :meth:`get_dir` refuses a folder without one, so a half-uploaded checkpoint
  is an error naming the folder rather than a silently partial model.

Errors are :class:`StorageError` subclasses with one-line messages that name the URI or key.
Credentials come from boto3's standard chain (env, profile, instance role); this module never
reads or logs them. No Prefect import here: tasks wrap these calls.
"""

from __future__ import annotations

from typing import Any

from selfplay_core.storage.base import MANIFEST_NAME, ArtifactStore, FlushReport, Stored
from selfplay_core.storage.config import StorageConfig, parse_uri
from selfplay_core.storage.errors import (
    BucketNotFound, ChecksumError, ObjectNotFound, StorageAuthError, StorageConfigError,
    StorageError, StorageUnavailable,
)
from selfplay_core.storage.files import atomic_path, atomic_write_bytes, sha256_file
from selfplay_core.storage.local import LocalStore
from selfplay_core.storage.s3 import CHECKSUM_META, S3Store, is_transient


def open_store(config: StorageConfig | str, **overrides: Any) -> ArtifactStore:
    """A store for ``config`` (or a URI string plus StorageConfig fields as keywords)."""
    if isinstance(config, str):
        parse_uri(config)  # a bad URI: our one-line error, not pydantic's report
        config = StorageConfig(uri=config, **overrides)
    elif overrides:
        config = StorageConfig(**{**config.model_dump(), **overrides})  # re-validated
    parsed = parse_uri(config.uri)
    if parsed.scheme == "file":
        return LocalStore(parsed.path, verify_checksums=config.verify_checksums)
    return S3Store(config)


__all__ = [
    "CHECKSUM_META", "MANIFEST_NAME", "ArtifactStore", "BucketNotFound", "ChecksumError", "FlushReport", "LocalStore",
    "ObjectNotFound", "S3Store", "Stored", "StorageAuthError", "StorageConfig",
    "StorageConfigError", "StorageError", "StorageUnavailable", "atomic_path",
    "atomic_write_bytes", "is_transient", "open_store", "parse_uri", "sha256_file",
]
