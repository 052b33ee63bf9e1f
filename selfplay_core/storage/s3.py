"""A store on any S3-compatible endpoint (boto3): botocore's retries, spool, checksums in metadata."""

from __future__ import annotations

import hashlib
import io
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from selfplay_core.storage.base import ArtifactStore, FlushReport, Stored
from selfplay_core.storage.config import StorageConfig, check_key, join, parse_uri
from selfplay_core.storage.errors import (
    BucketNotFound, ChecksumError, ObjectNotFound, StorageAuthError, StorageConfigError,
    StorageError, StorageUnavailable,
)
from selfplay_core.storage.files import atomic_path, copy_hashing, sha256_file
from selfplay_core.storage.spool import Spool, SpoolEntry, default_spool_root

log = logging.getLogger("selfplay.storage")

CHECKSUM_META = "sha256"  # S3 user metadata key (sent as x-amz-meta-sha256)

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
        client = boto3.session.Session().client("s3", endpoint_url=self.endpoint_url, config=bconf)
        client.meta.events.register("needs-retry.s3", self._note_retry)
        return client

    def _transfer_config(self):
        from boto3.s3.transfer import TransferConfig

        c = self.config
        return TransferConfig(multipart_threshold=c.multipart_threshold,
                              multipart_chunksize=c.multipart_chunksize,
                              max_concurrency=c.max_concurrency,
                              use_threads=c.max_concurrency > 1)

    def _s3key(self, key: str) -> str:
        return join(self.prefix, check_key(key))

    def uri_for(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._s3key(key)}"

    # Error handling ----------------------------------------------------------------------

    def _note_retry(self, attempts: int = 0, response=None, caught_exception=None, operation=None,
                    **_) -> None:
        """botocore's `needs-retry` event, seen after every attempt: count and log the attempts
        its standard retry mode will repeat (it alone retries; this never changes its decision)."""
        if caught_exception is not None:
            transient = is_transient(caught_exception)
            why = _one_line(caught_exception)
        elif response is not None:
            http, parsed = response
            code = str((parsed or {}).get("Error", {}).get("Code", ""))
            status = getattr(http, "status_code", 0) or 0
            transient = (code in _THROTTLE_CODES or code in _TRANSIENT_CODES or status >= 500
                         or status == 429)
            why = f"HTTP {status} {code}".strip()
        else:
            return
        if transient and attempts < self.config.max_attempts:
            self.stats["retries"] += 1
            name = getattr(operation, "name", "request")
            log.warning("storage: %s on %s failed (%s); retry %d/%d", name, self.uri, why, attempts,
                        self.config.max_attempts - 1)

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
            self.client.head_bucket(Bucket=self.bucket)
        except Exception as e:  # noqa: BLE001
            raise self._translate(e, None) from e

    # Writes ------------------------------------------------------------------------------

    def _upload_file(self, path: Path, key: str, sha: str) -> None:
        s3key = self._s3key(key)
        self.client.upload_file(
            str(path), self.bucket, s3key, ExtraArgs={"Metadata": {CHECKSUM_META: sha}},
            Config=self._transfer_config())

    def _put(self, key: str, size: int, sha: str, upload: Callable[[], None],
             to_spool: Callable[[Path], tuple[str, int]]) -> Stored:
        check_key(key)
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
                         lambda dst: copy_hashing(src, dst))

    def put_bytes(self, data: bytes, key: str) -> Stored:
        sha = hashlib.sha256(data).hexdigest()
        s3key = self._s3key(key)

        def upload() -> None:
            self.client.upload_fileobj(
                io.BytesIO(data), self.bucket, s3key, ExtraArgs={"Metadata": {CHECKSUM_META: sha}},
                Config=self._transfer_config())

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
                meta = self.client.head_object(Bucket=self.bucket, Key=s3key)["Metadata"]
                self.client.download_file(self.bucket, s3key, str(tmp), Config=self._transfer_config())
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
            data, meta = fetch()
        except Exception as e:  # noqa: BLE001
            raise self._translate(e, key) from e
        self._check_sum(key, hashlib.sha256(data).hexdigest(), meta, verify)
        return data

    def exists(self, key: str) -> bool:
        if self._spooled(key) is not None:
            return True
        s3key = self._s3key(key)
        try:
            self.client.head_object(Bucket=self.bucket, Key=s3key)
            return True
        except Exception as e:  # noqa: BLE001
            err = self._translate(e, key)
            if isinstance(err, ObjectNotFound):
                return False
            raise err from e

    def list(self, prefix: str = "") -> list[str]:
        full = join(self.prefix, prefix) if prefix else (self.prefix + "/" if self.prefix else "")
        strip = len(self.prefix) + 1 if self.prefix else 0

        def fetch() -> list[str]:
            keys = []
            for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=full):
                keys += [o["Key"][strip:] for o in page.get("Contents", [])]
            return keys

        try:
            keys = set(fetch())
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
            (self.client.delete_object(Bucket=self.bucket, Key=s3key))
        except Exception as e:  # noqa: BLE001
            err = self._translate(e, key)
            if not isinstance(err, ObjectNotFound):
                raise err from e


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return " ".join(text.split())[:300]
