"""The store interface, plus folder upload/download with a manifest (checkpoints)."""

from __future__ import annotations

import json
import os
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from selfplay_core.storage.config import check_key
from selfplay_core.storage.errors import ChecksumError, ObjectNotFound, StorageError
from selfplay_core.storage.files import sha256_file

MANIFEST_NAME = "_selfplay_manifest.json"

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
        check_key(prefix, what="prefix")
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
        check_key(prefix, what="prefix")
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
            check_key(rel)
            key = f"{prefix}/{rel}"
            got = self.get_file(key, dest / rel)
            if sha256_file(got) != info["sha256"]:
                raise ChecksumError(f"{self.uri_for(key)} does not match the sha256 in {MANIFEST_NAME}")
        return dest
