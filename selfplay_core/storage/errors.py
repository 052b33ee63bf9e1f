"""Storage errors: one-line messages that name the URI or key."""

from __future__ import annotations

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
