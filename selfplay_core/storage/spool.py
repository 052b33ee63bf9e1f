"""The spool: uploads waiting, on local disk, for the endpoint to come back."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from selfplay_core.storage.errors import StorageError
from selfplay_core.storage.files import atomic_write_bytes, fsync_dir

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
            fsync_dir(self.root)
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
