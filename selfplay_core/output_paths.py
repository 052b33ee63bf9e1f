"""Where results go, checked before the long work that makes them.

A command that trains for half an hour and then cannot write its folder has lost the half hour;
one that replaces a folder the user named by mistake has lost their data. So every command that
writes a folder or a file calls one of these first: each either returns the path, ready to write,
or raises `OutputPathError` with one line (what, where, what to do).

Writability is probed by creating and removing a file, not by `os.access`: permission bits do not
tell for root, read-only mounts or /proc-like file systems.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_root() -> Path:
    """Where runs cache what they can rebuild (bootstrapped models, mined goalposts):
    $SELFPLAY_CACHE, else ~/.cache/selfplay."""
    return Path(os.environ.get("SELFPLAY_CACHE") or Path.home() / ".cache" / "selfplay")


class OutputPathError(ValueError):
    """An output path that cannot be written; the message names it and what to do."""


def check_output_dir(path: str | Path, what: str) -> Path:
    """The folder `path` could be made and written, checked without making anything (so a later
    refusal leaves no trace): the nearest existing one of it and its ancestors is a folder a file
    can be written in. `what` names it in the error, e.g. "--out" or "the run folder"."""
    p = Path(path).expanduser()
    _check_writable(p, f"{what} {p}", named=True)
    return p


def ensure_output_dir(path: str | Path, what: str) -> Path:
    """`check_output_dir`, then the folder is made."""
    p = check_output_dir(path, what)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputPathError(f"{what} {p}: cannot create the folder ({_reason(e)}); "
                              "give a path you can write") from None
    return p


def check_output_file(path: str | Path, what: str) -> Path:
    """A file about to be written at `path` (by a writer that makes its missing folders), checked
    without making anything: `path` is not a folder and `check_output_dir` holds for its folder."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise OutputPathError(f"{what} {p}: is a folder; give a file path")
    _check_writable(p.parent, f"{what} {p}", named=False)
    return p


def check_replaceable_dir(path: str | Path, what: str, marker: str) -> Path:
    """A folder a command builds elsewhere and then moves into place at `path`, replacing what is
    there: allowed when `path` is absent, an empty folder, or an earlier result (it holds
    `marker`); anything else is the user's data and is refused. Its folder is checked as
    `check_output_file` checks a file's (nothing is made), as the new folder is built beside it."""
    p = Path(path).expanduser()
    if p.exists():
        if not p.is_dir():
            raise OutputPathError(f"{what} {p}: exists and is not a folder; give a new folder path")
        if any(p.iterdir()) and not (p / marker).is_file():
            raise OutputPathError(f"{what} {p}: is a folder with other files in it (no {marker}), "
                                  "and writing here would replace it; give a new or empty folder")
    _check_writable(p.parent, f"{what} {p}", named=False)
    return p


def _check_writable(folder: Path, label: str, named: bool) -> None:
    """The nearest existing one of `folder` and its ancestors is a folder a file can be written
    in (probed: a file made and removed). `named`: `folder` is the path `label` names, not the
    folder of a file it names."""
    base = folder.absolute()
    while not base.exists():
        base = base.parent
    itself = named and base == folder.absolute()
    if not base.is_dir():
        where = "exists and" if itself else f"its folder {base}"
        raise OutputPathError(f"{label}: {where} is not a folder; give a folder path")
    try:
        fd, tmp = tempfile.mkstemp(dir=base, prefix=".write-check-")
    except OSError as e:
        where = "" if itself else f"its folder {base}: "
        raise OutputPathError(f"{label}: {where}cannot write in it ({_reason(e)}); "
                              "give a path you can write") from None
    os.close(fd)
    os.unlink(tmp)


def _reason(e: OSError) -> str:
    return e.strerror or type(e).__name__
