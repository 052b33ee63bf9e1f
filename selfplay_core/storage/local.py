"""A store in a local directory; sha256 sidecars under .selfplay-checksums/."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from pathlib import Path

from selfplay_core.storage.base import ArtifactStore, Stored
from selfplay_core.storage.config import LOCAL_CHECKSUM_DIR, check_key
from selfplay_core.storage.errors import ChecksumError, ObjectNotFound, StorageError
from selfplay_core.storage.files import atomic_path, atomic_write_bytes, copy_hashing, sha256_file

class LocalStore(ArtifactStore):
    def __init__(self, root: str | os.PathLike, verify_checksums: bool = True):
        self.root = Path(root).resolve()
        self.uri = str(self.root)
        self.verify_checksums = verify_checksums

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def _sum_path(self, key: str) -> Path:
        return self.root / LOCAL_CHECKSUM_DIR / f"{key}.sha256"

    def uri_for(self, key: str) -> str:
        return str(self._path(key))

    def put_file(self, path: str | os.PathLike, key: str) -> Stored:
        src = Path(path)
        if not src.is_file():
            raise StorageError(f"cannot store {src}: not a file")
        dest = self._path(key)
        with atomic_path(dest) as tmp:
            sha, size = copy_hashing(src, tmp)
        atomic_write_bytes(self._sum_path(key), sha.encode())
        return Stored(key, str(dest), sha, size)

    def put_bytes(self, data: bytes, key: str) -> Stored:
        dest = self._path(key)
        atomic_write_bytes(dest, data)
        sha = hashlib.sha256(data).hexdigest()
        atomic_write_bytes(self._sum_path(key), sha.encode())
        return Stored(key, str(dest), sha, len(data))

    def _verify(self, key: str, got: str, verify: bool | None) -> None:
        """Compare the sha256 of what was read (``got``) with the one recorded at put time."""
        if not (self.verify_checksums if verify is None else verify):
            return
        try:
            want = self._sum_path(key).read_text().strip()
        except FileNotFoundError:
            raise ChecksumError(f"no checksum recorded for {self.uri_for(key)} (not written by "
                                "the store?); pass verify=False to read it anyway") from None
        if got != want:
            raise ChecksumError(f"checksum mismatch for {self.uri_for(key)}: the file changed or "
                                "is corrupt")

    def get_file(self, key: str, dest: str | os.PathLike, *, verify: bool | None = None) -> Path:
        src = self._path(key)
        if not src.is_file():
            raise ObjectNotFound(f"{src} does not exist")
        dest = Path(dest)
        with atomic_path(dest) as tmp:
            shutil.copyfile(src, tmp)
            self._verify(key, sha256_file(tmp), verify)
        return dest

    def get_bytes(self, key: str, *, verify: bool | None = None) -> bytes:
        src = self._path(key)
        try:
            data = src.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            raise ObjectNotFound(f"{src} does not exist") from None
        self._verify(key, hashlib.sha256(data).hexdigest(), verify)
        return data

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "") -> list[str]:
        if not self.root.is_dir():
            return []
        keys = []
        for p in self.root.rglob("*"):
            rel = p.relative_to(self.root).as_posix()
            if (p.is_file() and not rel.startswith(LOCAL_CHECKSUM_DIR + "/")
                    and not _is_temp(p) and rel.startswith(prefix)):
                keys.append(rel)
        return sorted(keys)

    def delete(self, key: str) -> None:
        for p in (self._path(key), self._sum_path(key)):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()


def _is_temp(p: Path) -> bool:
    """A write in progress (files.atomic_path's temp name), not an object."""
    return p.name.startswith(".") and p.name.endswith(".part")
