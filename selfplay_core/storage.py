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
  errors, exponential backoff with jitter); on top, every store operation is retried a bounded
  number of times, because a multipart upload whose part exhausted botocore's retries fails as a
  whole and is cheap to restart compared with losing a checkpoint.
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

import contextlib
import fcntl
import hashlib
import io
import json
import logging
import os
import random
import re
import shutil
import tempfile
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, TypeVar
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, field_validator

log = logging.getLogger("selfplay.storage")

MiB = 1024 * 1024
CHECKSUM_META = "sha256"  # S3 user metadata key (sent as x-amz-meta-sha256)
MANIFEST_NAME = "_selfplay_manifest.json"
_LOCAL_CHECKSUM_DIR = ".selfplay-checksums"
_T = TypeVar("_T")


# --------------------------------------------------------------------------------------------
# Errors


class StorageError(RuntimeError):
    """Base of every storage failure; the message is one line and names the URI or key."""


class StorageConfigError(StorageError, ValueError):
    """A bad URI, endpoint or setting: fix the configuration."""


class StorageAuthError(StorageError):
    """Missing or rejected credentials, or access denied."""


class BucketNotFound(StorageError):
    pass


class ObjectNotFound(StorageError, FileNotFoundError):
    pass


class ChecksumError(StorageError):
    """Downloaded bytes do not match the recorded sha256, or no checksum was recorded."""


class StorageUnavailable(StorageError):
    """The endpoint stayed unreachable or failing after all retries (reads only: writes spool)."""


# --------------------------------------------------------------------------------------------
# Configuration


class StorageConfig(BaseModel):
    """Where artifacts go and how hard to try. Frozen; unknown keys are an error."""

    model_config = ConfigDict(frozen=True, extra="forbid")

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
    max_attempts: int = Field(default=5, ge=1, le=20, description="botocore attempts per request")
    op_attempts: int = Field(default=3, ge=1, le=20, description="store-level attempts per operation")
    backoff_base_s: float = Field(default=1.0, ge=0)
    backoff_max_s: float = Field(default=30.0, ge=0)
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


# --------------------------------------------------------------------------------------------
# URIs and keys

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
            _check_key(prefix, what="prefix")
        except StorageConfigError as e:
            raise StorageConfigError(f"bad storage URI {uri!r}: {str(e).split(': ', 1)[1]}") from None
    return ParsedURI("s3", bucket, prefix)


def _check_key(key: str, what: str = "key") -> str:
    """Keys are relative POSIX paths: no leading slash, no '.'/'..' or empty segments."""
    if not isinstance(key, str) or not key:
        raise StorageConfigError(f"bad storage {what} {key!r}: empty")
    parts = key.split("/")
    if key.startswith("/") or any(s in ("", ".", "..") for s in parts) or "\\" in key or "\0" in key:
        raise StorageConfigError(f"bad storage {what} {key!r}: must be a relative path like "
                                 "'run/ckpt-3/model.safetensors' (no leading '/', '.', '..', '//')")
    if what == "key" and parts[0] == _LOCAL_CHECKSUM_DIR:
        raise StorageConfigError(f"bad storage key {key!r}: {_LOCAL_CHECKSUM_DIR}/ is reserved")
    return key


def _join(prefix: str, key: str) -> str:
    return f"{prefix}/{key}" if prefix else key


# --------------------------------------------------------------------------------------------
# Small file helpers


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(MiB), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a directory be fsynced
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside ``dest``; on success fsync it and rename it over ``dest``."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, dest)
        _fsync_dir(dest.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()


def atomic_write_bytes(dest: str | os.PathLike, data: bytes) -> None:
    with atomic_path(dest) as tmp:
        tmp.write_bytes(data)


def _copy_hashing(src: Path, dst: Path) -> tuple[str, int]:
    h, n = hashlib.sha256(), 0
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        for block in iter(lambda: fi.read(MiB), b""):
            h.update(block)
            fo.write(block)
            n += len(block)
    return h.hexdigest(), n


# --------------------------------------------------------------------------------------------
# The interface


@dataclass(frozen=True)
class Stored:
    """What a put did: ``spooled`` means it is safe locally and will be delivered by flush()."""

    key: str
    uri: str
    sha256: str
    size: int
    spooled: bool = False


@dataclass(frozen=True)
class FlushReport:
    delivered: int
    pending: int


class ArtifactStore(ABC):
    """put/get/exists/list/delete by key (a relative path under the store's root URI)."""

    uri: str

    @abstractmethod
    def put_file(self, path: str | os.PathLike, key: str) -> Stored: ...

    @abstractmethod
    def put_bytes(self, data: bytes, key: str) -> Stored: ...

    @abstractmethod
    def get_file(self, key: str, dest: str | os.PathLike, *, verify: bool | None = None) -> Path: ...

    @abstractmethod
    def get_bytes(self, key: str, *, verify: bool | None = None) -> bytes: ...

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Keys under ``prefix`` (a plain string prefix of the key), sorted."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key``; a missing key is not an error (deletes are idempotent)."""

    @abstractmethod
    def uri_for(self, key: str) -> str: ...

    def flush(self) -> FlushReport:
        """Deliver spooled uploads; a no-op for stores that cannot spool."""
        return FlushReport(0, 0)

    # Folders (checkpoints) ---------------------------------------------------------------

    def put_dir(self, local_dir: str | os.PathLike, prefix: str) -> list[Stored]:
        """Upload every file under ``local_dir`` to ``prefix/…``, then the manifest, last."""
        root = Path(local_dir)
        if not root.is_dir():
            raise StorageError(f"cannot upload folder {root}: not a directory")
        _check_key(prefix, what="prefix")
        files = sorted(p for p in root.rglob("*") if p.is_file())
        stored = [self.put_file(p, f"{prefix}/{p.relative_to(root).as_posix()}") for p in files]
        manifest = {
            "files": {s.key[len(prefix) + 1:]: {"sha256": s.sha256, "size": s.size} for s in stored},
            "created": time.time(),
        }
        stored.append(self.put_bytes(json.dumps(manifest, indent=1, sort_keys=True).encode(),
                                     f"{prefix}/{MANIFEST_NAME}"))
        return stored

    def get_dir(self, prefix: str, dest: str | os.PathLike) -> Path:
        """Download a folder written by put_dir; every file is checked against the manifest."""
        _check_key(prefix, what="prefix")
        mkey = f"{prefix}/{MANIFEST_NAME}"
        try:
            manifest = json.loads(self.get_bytes(mkey))
            files = manifest["files"]
        except ObjectNotFound:
            raise ObjectNotFound(f"folder {self.uri_for(prefix)} has no {MANIFEST_NAME}: not "
                                 "written by put_dir, or its upload did not finish") from None
        except (ValueError, KeyError, TypeError) as e:
            raise ChecksumError(f"manifest {self.uri_for(mkey)} is unreadable: {e}") from None
        dest = Path(dest)
        for rel, info in sorted(files.items()):
            _check_key(rel)
            key = f"{prefix}/{rel}"
            got = self.get_file(key, dest / rel)
            if sha256_file(got) != info["sha256"]:
                raise ChecksumError(f"{self.uri_for(key)} does not match the sha256 in {MANIFEST_NAME}")
        return dest


# --------------------------------------------------------------------------------------------
# Local directory


class LocalStore(ArtifactStore):
    def __init__(self, root: str | os.PathLike, verify_checksums: bool = True):
        self.root = Path(root).resolve()
        self.uri = str(self.root)
        self.verify_checksums = verify_checksums

    def _path(self, key: str) -> Path:
        return self.root / _check_key(key)

    def _sum_path(self, key: str) -> Path:
        return self.root / _LOCAL_CHECKSUM_DIR / f"{key}.sha256"

    def uri_for(self, key: str) -> str:
        return str(self._path(key))

    def put_file(self, path: str | os.PathLike, key: str) -> Stored:
        src = Path(path)
        if not src.is_file():
            raise StorageError(f"cannot store {src}: not a file")
        dest = self._path(key)
        with atomic_path(dest) as tmp:
            sha, size = _copy_hashing(src, tmp)
        atomic_write_bytes(self._sum_path(key), sha.encode())
        return Stored(key, str(dest), sha, size)

    def put_bytes(self, data: bytes, key: str) -> Stored:
        dest = self._path(key)
        atomic_write_bytes(dest, data)
        sha = hashlib.sha256(data).hexdigest()
        atomic_write_bytes(self._sum_path(key), sha.encode())
        return Stored(key, str(dest), sha, len(data))

    def _verify(self, key: str, path: Path, verify: bool | None) -> None:
        if not (self.verify_checksums if verify is None else verify):
            return
        try:
            want = self._sum_path(key).read_text().strip()
        except FileNotFoundError:
            raise ChecksumError(f"no checksum recorded for {self.uri_for(key)} (not written by "
                                "the store?); pass verify=False to read it anyway") from None
        if sha256_file(path) != want:
            raise ChecksumError(f"checksum mismatch for {self.uri_for(key)}: the file changed or "
                                "is corrupt")

    def get_file(self, key: str, dest: str | os.PathLike, *, verify: bool | None = None) -> Path:
        src = self._path(key)
        if not src.is_file():
            raise ObjectNotFound(f"{src} does not exist")
        dest = Path(dest)
        with atomic_path(dest) as tmp:
            shutil.copyfile(src, tmp)
            self._verify(key, tmp, verify)
        return dest

    def get_bytes(self, key: str, *, verify: bool | None = None) -> bytes:
        src = self._path(key)
        try:
            data = src.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            raise ObjectNotFound(f"{src} does not exist") from None
        if self.verify_checksums if verify is None else verify:
            with tempfile.TemporaryDirectory() as d:
                tmp = Path(d, "x")
                tmp.write_bytes(data)
                self._verify(key, tmp, True)
        return data

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "") -> list[str]:
        if not self.root.is_dir():
            return []
        keys = []
        for p in self.root.rglob("*"):
            rel = p.relative_to(self.root).as_posix()
            if (p.is_file() and not rel.startswith(_LOCAL_CHECKSUM_DIR + "/")
                    and not p.name.endswith(".part") and rel.startswith(prefix)):
                keys.append(rel)
        return sorted(keys)

    def delete(self, key: str) -> None:
        for p in (self._path(key), self._sum_path(key)):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()


# --------------------------------------------------------------------------------------------
# Spool: uploads waiting for the endpoint to come back


@dataclass(frozen=True)
class SpoolEntry:
    dir: Path
    key: str
    sha256: str
    size: int

    @property
    def data(self) -> Path:
        return self.dir / "data"


class Spool:
    """A directory of pending uploads, one sub-directory per upload, delivered in order.

    Entries are built in a temp dir and renamed into place, so a crash mid-spool leaves either
    a complete entry or a temp dir that is ignored. Names sort by creation time, so flush
    replays uploads in the order they were made (the newest copy of a key lands last).
    """

    def __init__(self, root: Path, target: str):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        info = root / "target.txt"  # for a human looking at the spool
        if not info.exists():
            atomic_write_bytes(info, (target + "\n").encode())

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Serialize flushes and enqueues across threads and processes sharing this spool."""
        with open(self.root / ".lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def add(self, key: str, write: Callable[[Path], tuple[str, int]]) -> SpoolEntry:
        tmp = self.root / f".tmp-{uuid.uuid4().hex}"
        tmp.mkdir()
        try:
            sha, size = write(tmp / "data")
            meta = {"key": key, "sha256": sha, "size": size, "spooled_at": time.time()}
            (tmp / "meta.json").write_text(json.dumps(meta))
            for name in ("data", "meta.json"):
                with open(tmp / name, "rb+") as f:
                    os.fsync(f.fileno())
            final = self.root / f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.entry"
            os.rename(tmp, final)
            _fsync_dir(self.root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return SpoolEntry(final, key, sha, size)

    def entries(self) -> list[SpoolEntry]:
        out = []
        for d in sorted(self.root.glob("*.entry")):
            try:
                meta = json.loads((d / "meta.json").read_text())
            except (OSError, ValueError) as e:
                raise StorageError(f"spool entry {d} is unreadable ({e}); move it aside") from None
            out.append(SpoolEntry(d, meta["key"], meta["sha256"], meta["size"]))
        return out

    def latest(self, key: str) -> SpoolEntry | None:
        found = [e for e in self.entries() if e.key == key]
        return found[-1] if found else None

    def remove(self, entry: SpoolEntry) -> None:
        shutil.rmtree(entry.dir, ignore_errors=True)


def default_spool_root() -> Path:
    if os.environ.get("SELFPLAY_SPOOL_DIR"):
        return Path(os.environ["SELFPLAY_SPOOL_DIR"])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "selfplay" / "spool"


# --------------------------------------------------------------------------------------------
# S3 (any S3-compatible endpoint)

_THROTTLE_CODES = {
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
    "TooManyRequestsException", "RequestLimitExceeded", "BandwidthLimitExceeded", "SlowDown",
    "RequestThrottled", "PriorRequestNotComplete",
}
_TRANSIENT_CODES = {"RequestTimeout", "RequestTimeoutException", "InternalError",
                    "ServiceUnavailable", "ServerError"}
_AUTH_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken",
               "ExpiredToken", "TokenRefreshRequired", "AllAccessDisabled", "403"}


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _client_error(exc: BaseException):
    from botocore.exceptions import ClientError

    return next((e for e in _causes(exc) if isinstance(e, ClientError)), None)


def is_transient(exc: BaseException) -> bool:
    """Throttling, 5xx, timeouts and connection failures: worth retrying, then spooling."""
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from botocore.exceptions import IncompleteReadError, ResponseStreamingError

    for e in _causes(exc):
        if isinstance(e, (BotoConnectionError, ResponseStreamingError, IncompleteReadError,
                          ConnectionError, TimeoutError)):
            return True
    ce = _client_error(exc)
    if ce is None:
        return False
    code = str(ce.response.get("Error", {}).get("Code", ""))
    status = ce.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
    return code in _THROTTLE_CODES or code in _TRANSIENT_CODES or status >= 500 or status == 429


class S3Store(ArtifactStore):
    def __init__(self, config: StorageConfig, client: Any = None):
        parsed = parse_uri(config.uri)
        if parsed.scheme != "s3":
            raise StorageConfigError(f"S3Store needs an s3:// URI, got {config.uri!r}")
        self.config = config
        self.bucket, self.prefix = parsed.bucket, parsed.path
        self.uri = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        self.endpoint_url = (config.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3")
                             or os.environ.get("AWS_ENDPOINT_URL"))
        self.where = f"{self.uri} at {self.endpoint_url or 'AWS'}"
        self.client = client or self._make_client()
        self.stats = {"retries": 0, "spooled": 0, "delivered": 0}
        self._down_until = 0.0  # monotonic time before which puts skip the flush attempt
        self.spool: Spool | None = None
        if config.spool:
            ident = hashlib.sha256(f"{self.endpoint_url}|{self.uri}".encode()).hexdigest()[:16]
            root = Path(config.spool_dir) if config.spool_dir else default_spool_root()
            self.spool = Spool(root / ident, f"{self.uri} via {self.endpoint_url or 'AWS'}")

    def _make_client(self):
        import boto3
        from botocore.config import Config

        style = self.config.addressing_style or ("path" if self.endpoint_url else "auto")
        bconf = Config(
            region_name=self.config.region,
            # total_max_attempts counts the first try too ("max_attempts" would mean retries).
            retries={"mode": "standard", "total_max_attempts": self.config.max_attempts},
            connect_timeout=self.config.connect_timeout_s,
            read_timeout=self.config.read_timeout_s,
            s3={"addressing_style": style},
        )
        return boto3.session.Session().client("s3", endpoint_url=self.endpoint_url, config=bconf)

    def _transfer_config(self):
        from boto3.s3.transfer import TransferConfig

        c = self.config
        return TransferConfig(multipart_threshold=c.multipart_threshold,
                              multipart_chunksize=c.multipart_chunksize,
                              max_concurrency=c.max_concurrency,
                              use_threads=c.max_concurrency > 1)

    def _s3key(self, key: str) -> str:
        return _join(self.prefix, _check_key(key))

    def uri_for(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._s3key(key)}"

    # Error handling ----------------------------------------------------------------------

    def _retrying(self, what: str, fn: Callable[[], _T]) -> _T:
        """Run fn, retrying transient failures with capped exponential backoff and jitter."""
        c = self.config
        for attempt in range(1, c.op_attempts + 1):
            try:
                return fn()
            except Exception as e:  # noqa: BLE001 - classified below
                if not is_transient(e) or attempt == c.op_attempts:
                    raise
                delay = min(c.backoff_max_s, c.backoff_base_s * 2 ** (attempt - 1))
                delay *= random.uniform(0.5, 1.0)
                self.stats["retries"] += 1
                log.warning("storage: %s failed (%s); retry %d/%d in %.1fs", what,
                            _one_line(e), attempt, c.op_attempts - 1, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _translate(self, exc: BaseException, key: str | None) -> StorageError:
        """Turn a boto error into a one-line StorageError naming what failed."""
        from botocore.exceptions import NoCredentialsError, PartialCredentialsError

        target = self.uri_for(key) if key else self.uri
        endpoint = self.endpoint_url or "AWS"
        if any(isinstance(e, (NoCredentialsError, PartialCredentialsError)) for e in _causes(exc)):
            return StorageAuthError(f"no usable S3 credentials for {target}: set AWS_ACCESS_KEY_ID "
                                    "and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)")
        if is_transient(exc):
            return StorageUnavailable(f"S3 endpoint {endpoint} unavailable for {target} after "
                                      f"retries: {_one_line(exc)}")
        ce = _client_error(exc)
        if ce is None:
            return StorageError(f"S3 operation on {target} failed: {_one_line(exc)}")
        code = str(ce.response.get("Error", {}).get("Code", ""))
        status = ce.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        if code == "NoSuchBucket" or (code in ("404", "NotFound") and not key):
            return BucketNotFound(f"S3 bucket {self.bucket!r} does not exist at {endpoint} "
                                  f"(create it first, e.g. `aws s3 mb s3://{self.bucket}`)")
        if code in ("NoSuchKey", "404", "NotFound") or status == 404:
            if key and not self._bucket_exists():
                return BucketNotFound(f"S3 bucket {self.bucket!r} does not exist at {endpoint} "
                                      f"(create it first, e.g. `aws s3 mb s3://{self.bucket}`)")
            return ObjectNotFound(f"{target} does not exist")
        if code in _AUTH_CODES or status == 403:
            return StorageAuthError(f"S3 at {endpoint} refused access to {target} ({code or status}): "
                                    "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and the "
                                    "bucket policy")
        return StorageError(f"S3 operation on {target} failed: {code or status}: {_one_line(exc)}")

    def _bucket_exists(self) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
            return True
        except ClientError as e:
            return str(e.response.get("Error", {}).get("Code")) not in ("404", "NoSuchBucket", "NotFound")
        except Exception:  # noqa: BLE001 - unknown: do not claim the bucket is missing
            return True

    def check(self) -> None:
        """Fail fast at start-up: the bucket exists and the credentials may use it."""
        try:
            self._retrying(f"check {self.uri}", lambda: self.client.head_bucket(Bucket=self.bucket))
        except Exception as e:  # noqa: BLE001
            raise self._translate(e, None) from e

    # Writes ------------------------------------------------------------------------------

    def _upload_file(self, path: Path, key: str, sha: str) -> None:
        s3key = self._s3key(key)
        self._retrying(f"upload {self.uri_for(key)}", lambda: self.client.upload_file(
            str(path), self.bucket, s3key, ExtraArgs={"Metadata": {CHECKSUM_META: sha}},
            Config=self._transfer_config()))

    def _put(self, key: str, size: int, sha: str, upload: Callable[[], None],
             to_spool: Callable[[Path], tuple[str, int]]) -> Stored:
        _check_key(key)
        if self.spool is not None and self.spool.entries():
            if time.monotonic() >= self._down_until:
                self.flush(quiet=True)
            if self.spool.entries():  # still down: queue behind older uploads to keep order
                return self._enqueue(key, to_spool, "earlier uploads are still spooled")
        try:
            upload()
        except Exception as e:  # noqa: BLE001
            if self.spool is not None and is_transient(e):
                self._mark_down()
                return self._enqueue(key, to_spool, _one_line(e))
            raise self._translate(e, key) from e
        return Stored(key, self.uri_for(key), sha, size)

    def _mark_down(self) -> None:
        self._down_until = time.monotonic() + self.config.outage_probe_interval_s

    def _enqueue(self, key: str, to_spool: Callable[[Path], tuple[str, int]], why: str) -> Stored:
        assert self.spool is not None
        with self.spool.locked():
            entry = self.spool.add(key, to_spool)
        self.stats["spooled"] += 1
        log.warning("storage: %s spooled to %s (%s); flush() will deliver it",
                    self.uri_for(key), entry.dir, why)
        return Stored(key, self.uri_for(key), entry.sha256, entry.size, spooled=True)

    def put_file(self, path: str | os.PathLike, key: str) -> Stored:
        src = Path(path)
        if not src.is_file():
            raise StorageError(f"cannot upload {src}: not a file")
        sha, size = sha256_file(src), src.stat().st_size
        return self._put(key, size, sha, lambda: self._upload_file(src, key, sha),
                         lambda dst: _copy_hashing(src, dst))

    def put_bytes(self, data: bytes, key: str) -> Stored:
        sha = hashlib.sha256(data).hexdigest()
        s3key = self._s3key(key)

        def upload() -> None:
            self._retrying(f"upload {self.uri_for(key)}", lambda: self.client.upload_fileobj(
                io.BytesIO(data), self.bucket, s3key, ExtraArgs={"Metadata": {CHECKSUM_META: sha}},
                Config=self._transfer_config()))

        def to_spool(dst: Path) -> tuple[str, int]:
            dst.write_bytes(data)
            return sha, len(data)

        return self._put(key, len(data), sha, upload, to_spool)

    def flush(self, quiet: bool = False) -> FlushReport:
        """Deliver spooled uploads in order; stop at the first that still cannot be delivered.

        With quiet=False an endpoint that is still down raises StorageUnavailable (the
        uploads stay spooled); with quiet=True the report says how many are pending.
        """
        if self.spool is None:
            return FlushReport(0, 0)
        delivered = 0
        with self.spool.locked():
            entries = self.spool.entries()
            for i, entry in enumerate(entries):
                if sha256_file(entry.data) != entry.sha256:
                    raise ChecksumError(f"spooled upload {entry.dir} for {self.uri_for(entry.key)} "
                                        "is corrupt on local disk; move it aside")
                try:
                    self._upload_file(entry.data, entry.key, entry.sha256)
                except Exception as e:  # noqa: BLE001
                    pending = len(entries) - i
                    if is_transient(e):
                        self._mark_down()
                        log.warning("storage: flush stopped, %d upload(s) still spooled: %s",
                                    pending, _one_line(e))
                        if quiet:
                            return FlushReport(delivered, pending)
                    raise self._translate(e, entry.key) from e
                self.spool.remove(entry)
                delivered += 1
                self.stats["delivered"] += 1
                log.info("storage: delivered spooled %s", self.uri_for(entry.key))
        self._down_until = 0.0
        return FlushReport(delivered, 0)

    def pending(self) -> list[str]:
        """Keys waiting in the spool, oldest first."""
        return [e.key for e in self.spool.entries()] if self.spool else []

    # Reads -------------------------------------------------------------------------------

    def _spooled(self, key: str) -> SpoolEntry | None:
        return self.spool.latest(key) if self.spool is not None else None

    def _check_sum(self, key: str, got: str, meta: dict[str, str], verify: bool | None) -> None:
        if not (self.config.verify_checksums if verify is None else verify):
            return
        want = meta.get(CHECKSUM_META)
        if not want:
            raise ChecksumError(f"no sha256 recorded for {self.uri_for(key)} (overwritten by "
                                "another tool?); pass verify=False to read it anyway")
        if got != want:
            raise ChecksumError(f"checksum mismatch for {self.uri_for(key)}: stored sha256 "
                                f"{want[:12]}…, downloaded {got[:12]}… (corrupt or overwritten)")

    def get_file(self, key: str, dest: str | os.PathLike, *, verify: bool | None = None) -> Path:
        dest = Path(dest)
        entry = self._spooled(key)
        if entry is not None:  # read-your-writes while the upload waits in the spool
            with atomic_path(dest) as tmp:
                shutil.copyfile(entry.data, tmp)
                self._check_sum(key, sha256_file(tmp), {CHECKSUM_META: entry.sha256}, verify)
            return dest
        s3key = self._s3key(key)
        with atomic_path(dest) as tmp:
            try:
                meta = self._retrying(f"head {self.uri_for(key)}", lambda: self.client.head_object(
                    Bucket=self.bucket, Key=s3key))["Metadata"]
                self._retrying(f"download {self.uri_for(key)}", lambda: self.client.download_file(
                    self.bucket, s3key, str(tmp), Config=self._transfer_config()))
            except Exception as e:  # noqa: BLE001
                raise self._translate(e, key) from e
            self._check_sum(key, sha256_file(tmp), meta, verify)
        return dest

    def get_bytes(self, key: str, *, verify: bool | None = None) -> bytes:
        entry = self._spooled(key)
        if entry is not None:
            data = entry.data.read_bytes()
            self._check_sum(key, hashlib.sha256(data).hexdigest(), {CHECKSUM_META: entry.sha256}, verify)
            return data
        s3key = self._s3key(key)

        def fetch() -> tuple[bytes, dict[str, str]]:
            r = self.client.get_object(Bucket=self.bucket, Key=s3key)
            return r["Body"].read(), r.get("Metadata", {})

        try:
            data, meta = self._retrying(f"download {self.uri_for(key)}", fetch)
        except Exception as e:  # noqa: BLE001
            raise self._translate(e, key) from e
        self._check_sum(key, hashlib.sha256(data).hexdigest(), meta, verify)
        return data

    def exists(self, key: str) -> bool:
        if self._spooled(key) is not None:
            return True
        s3key = self._s3key(key)
        try:
            self._retrying(f"head {self.uri_for(key)}",
                           lambda: self.client.head_object(Bucket=self.bucket, Key=s3key))
            return True
        except Exception as e:  # noqa: BLE001
            err = self._translate(e, key)
            if isinstance(err, ObjectNotFound):
                return False
            raise err from e

    def list(self, prefix: str = "") -> list[str]:
        full = _join(self.prefix, prefix) if prefix else (self.prefix + "/" if self.prefix else "")
        strip = len(self.prefix) + 1 if self.prefix else 0

        def fetch() -> list[str]:
            keys = []
            for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=full):
                keys += [o["Key"][strip:] for o in page.get("Contents", [])]
            return keys

        try:
            keys = set(self._retrying(f"list {self.uri}/{prefix}", fetch))
        except Exception as e:  # noqa: BLE001
            raise self._translate(e, None) from e
        if self.spool is not None:
            keys |= {e.key for e in self.spool.entries() if e.key.startswith(prefix)}
        return sorted(keys)

    def delete(self, key: str) -> None:
        s3key = self._s3key(key)
        if self.spool is not None:
            with self.spool.locked():
                for entry in self.spool.entries():
                    if entry.key == key:
                        self.spool.remove(entry)
        try:
            self._retrying(f"delete {self.uri_for(key)}",
                           lambda: self.client.delete_object(Bucket=self.bucket, Key=s3key))
        except Exception as e:  # noqa: BLE001
            err = self._translate(e, key)
            if not isinstance(err, ObjectNotFound):
                raise err from e


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return " ".join(text.split())[:300]


# --------------------------------------------------------------------------------------------


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
    "ArtifactStore", "BucketNotFound", "ChecksumError", "FlushReport", "LocalStore",
    "ObjectNotFound", "S3Store", "Stored", "StorageAuthError", "StorageConfig",
    "StorageConfigError", "StorageError", "StorageUnavailable", "atomic_path",
    "atomic_write_bytes", "is_transient", "open_store", "parse_uri", "sha256_file",
]
