"""Store settings, URIs and keys: everything that is validated before any I/O."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import Field, field_validator

from selfplay_core.frozen import FrozenConfig
from selfplay_core.storage.errors import StorageConfigError

MiB = 1024 * 1024
# Reserved top-level folder of a local store that holds the sha256 sidecars.
LOCAL_CHECKSUM_DIR = ".selfplay-checksums"

class StorageConfig(FrozenConfig):
    """Where artifacts go and how hard to try. Frozen; unknown keys are an error."""


    # A local path, file:///abs/path, or s3://bucket[/prefix].
    uri: str = "out/artifacts"
    # Any S3-compatible server; None: boto3's own (AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL / AWS).
    endpoint_url: str | None = None
    region: str | None = None
    # None: "path" with a custom endpoint (works on every S3 server, no DNS per bucket), else auto.
    addressing_style: Literal["auto", "path", "virtual"] | None = None
    multipart_threshold: int = Field(default=64 * MiB, ge=5 * MiB)
    multipart_chunksize: int = Field(default=16 * MiB, ge=5 * MiB)  # S3's minimum part size
    max_concurrency: int = Field(default=4, ge=1, le=64)
    # Attempts per request, the first included: botocore's standard retry mode repeats
    # throttling, 5xx and connection failures with exponential backoff and jitter. What still
    # fails is a write's cue to spool (a multipart upload whose part ran out restarts from the
    # spool) and a read's one clear error.
    max_attempts: int = Field(default=5, ge=1, le=20)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    read_timeout_s: float = Field(default=60.0, gt=0)
    spool: bool = True
    # After the endpoint failed, puts go straight to the spool for this long instead of each
    # waiting out the retries again; flush() always tries. 0: probe at every put.
    outage_probe_interval_s: float = Field(default=30.0, ge=0)
    # None: $SELFPLAY_SPOOL_DIR, else ~/.cache/selfplay/spool.
    spool_dir: str | None = None
    verify_checksums: bool = True

    @field_validator("endpoint_url")
    @classmethod
    def _check_endpoint(cls, v: str | None) -> str | None:
        if v in (None, ""):
            return None
        p = urlparse(v)
        if p.scheme not in ("http", "https") or not p.hostname:
            raise ValueError(f"endpoint_url {v!r} must look like http(s)://host[:port]")
        return v.rstrip("/")

    @field_validator("uri")
    @classmethod
    def _check_uri(cls, v: str) -> str:
        parse_uri(v)  # raises StorageConfigError (a ValueError) with the reason
        return v

    @classmethod
    def from_env(cls, **overrides: Any) -> "StorageConfig":
        """Settings from the environment (explicit overrides win).

        SELFPLAY_STORAGE_URI, SELFPLAY_S3_ENDPOINT_URL (falls back to MLFLOW_S3_ENDPOINT_URL so
        one variable points MLflow and checkpoints at the same server), SELFPLAY_SPOOL_DIR,
        AWS_REGION / AWS_DEFAULT_REGION. Credentials are left to boto3's chain.
        """
        env = os.environ
        values: dict[str, Any] = {}
        if env.get("SELFPLAY_STORAGE_URI"):
            values["uri"] = env["SELFPLAY_STORAGE_URI"]
        endpoint = env.get("SELFPLAY_S3_ENDPOINT_URL") or env.get("MLFLOW_S3_ENDPOINT_URL")
        if endpoint:
            values["endpoint_url"] = endpoint
        if env.get("SELFPLAY_SPOOL_DIR"):
            values["spool_dir"] = env["SELFPLAY_SPOOL_DIR"]
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
        if region:
            values["region"] = region
        values.update(overrides)
        return cls(**values)


_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class ParsedURI:
    scheme: Literal["file", "s3"]
    bucket: str  # "" for local
    path: str  # local: absolute directory; s3: key prefix without slashes at either end


def parse_uri(uri: str) -> ParsedURI:
    """Split a store URI; raise StorageConfigError saying what is wrong with it."""
    hint = "expected a local path, file:///abs/path or s3://bucket[/prefix]"
    if not isinstance(uri, str) or not uri.strip():
        raise StorageConfigError(f"bad storage URI {uri!r}: empty ({hint})")
    if "://" not in uri:
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:/", uri):  # "s3:/b", "file:/x": a mistyped URI
            raise StorageConfigError(f"bad storage URI {uri!r}: malformed scheme ({hint})")
        return ParsedURI("file", "", str(Path(uri).expanduser().resolve()))
    p = urlparse(uri)
    if p.scheme == "file":
        if p.netloc not in ("", "localhost"):
            raise StorageConfigError(f"bad storage URI {uri!r}: file URIs need an absolute path "
                                     f"(file:///abs/path) ({hint})")
        return ParsedURI("file", "", str(Path(p.path).resolve()))
    if p.scheme != "s3":
        raise StorageConfigError(f"bad storage URI {uri!r}: unsupported scheme {p.scheme!r} ({hint})")
    bucket = p.netloc
    if not bucket:
        raise StorageConfigError(f"bad storage URI {uri!r}: no bucket ({hint})")
    if not _BUCKET_RE.match(bucket) or ".." in bucket:
        raise StorageConfigError(f"bad storage URI {uri!r}: {bucket!r} is not a valid S3 bucket name "
                                 "(3-63 lowercase letters, digits, dots, hyphens)")
    if p.query or p.fragment:
        raise StorageConfigError(f"bad storage URI {uri!r}: no query or fragment allowed ({hint})")
    prefix = p.path.strip("/")
    if prefix:
        try:
            check_key(prefix, what="prefix")
        except StorageConfigError as e:
            raise StorageConfigError(f"bad storage URI {uri!r}: {str(e).split(': ', 1)[1]}") from None
    return ParsedURI("s3", bucket, prefix)


def check_key(key: str, what: str = "key") -> str:
    """Keys are relative POSIX paths: no leading slash, no '.'/'..' or empty segments."""
    if not isinstance(key, str) or not key:
        raise StorageConfigError(f"bad storage {what} {key!r}: empty")
    parts = key.split("/")
    if key.startswith("/") or any(s in ("", ".", "..") for s in parts) or "\\" in key or "\0" in key:
        raise StorageConfigError(f"bad storage {what} {key!r}: must be a relative path like "
                                 "'run/ckpt-3/model.safetensors' (no leading '/', '.', '..', '//')")
    if what == "key" and parts[0] == LOCAL_CHECKSUM_DIR:
        raise StorageConfigError(f"bad storage key {key!r}: {LOCAL_CHECKSUM_DIR}/ is reserved")
    return key


def join(prefix: str, key: str) -> str:
    return f"{prefix}/{key}" if prefix else key
