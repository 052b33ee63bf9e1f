"""Where the benchmark data comes from, pinned: public release files with their sha256.

`selfplay data fetch` puts each file under the data root (`$SELFPLAY_DATA`, else
`~/.cache/selfplay/data`), in the folder the loaders read (`humanevalplus/`, `mbppplus/`, ...),
from one of two places:

* the public release itself (HTTPS), or
* a local mirror (`--mirror DIR`, laid out like the data root), for machines without a network.

Every file is checked against its pinned sha256 before it lands (written atomically), so a
truncated download, a changed upstream file or a corrupt mirror is one clear error, never data
that silently differs from what the project's numbers were measured on. LiveCodeBench comes
from the Hugging Face hub (`livecodebench/code_generation_lite`, by release tag) through the
LiveCodeBench loader, which records the hub commit it read.
"""

from __future__ import annotations

import os
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from selfplay_core.problems import InputError
from selfplay_core.storage.files import atomic_path, sha256_file


@dataclass(frozen=True)
class SourceFile:
    dataset: str     # folder under the data root, as the loader reads it
    name: str        # file name in that folder
    version: str
    url: str         # the public release file
    sha256: str
    size: int
    license: str

    @property
    def rel(self) -> str:
        return f"{self.dataset}/{self.name}"


SOURCES: tuple[SourceFile, ...] = (
    SourceFile("humanevalplus", "HumanEvalPlus.jsonl.gz", "v0.1.10",
               "https://github.com/evalplus/humanevalplus_release/releases/download/v0.1.10/"
               "HumanEvalPlus.jsonl.gz",
               "272720b90ac375502c8ed23cd791c2a93dfb22a911641a494da74a426c09f101", 925932,
               "Apache-2.0"),
    SourceFile("mbppplus", "MbppPlus.jsonl.gz", "v0.2.0",
               "https://github.com/evalplus/mbppplus_release/releases/download/v0.2.0/"
               "MbppPlus.jsonl.gz",
               "af43697e8791c4c149bdfd6b489d8b5412507551ac20e28a439f650b8225db63", 336032,
               "Apache-2.0"),
    SourceFile("humaneval", "HumanEval.jsonl.gz", "openai/human-eval@6d43fb9",
               "https://raw.githubusercontent.com/openai/human-eval/"
               "6d43fb980f9fee3c892a914eda09951f772ad10d/data/HumanEval.jsonl.gz",
               "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef", 44877, "MIT"),
    SourceFile("mbpp", "sanitized-mbpp.json", "google-research@30adf0e",
               "https://raw.githubusercontent.com/google-research/google-research/"
               "30adf0ec5f35f9609c2f1d896005e184195d9146/mbpp/sanitized-mbpp.json",
               "ca95deaa9a01ef0a6f439f88bcf0dd3db3563d22f22aad6cae04ebb9a8d8c8e9", 255053,
               "CC-BY-4.0"),
)
DATASETS = tuple(s.dataset for s in SOURCES)
LCB_HUB = "hf://datasets/livecodebench/code_generation_lite"


def default_data_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "selfplay" / "data"


@dataclass(frozen=True)
class Fetched:
    source: SourceFile
    how: str         # "present" | "mirror" | "download"
    path: Path


def _download(url: str, dest: Path, timeout_s: float) -> None:
    req = urllib.request.Request(url, headers={"User-Agent": "selfplay-data-fetch"})
    with urllib.request.urlopen(req, timeout=timeout_s) as r, open(dest, "wb") as f:
        shutil.copyfileobj(r, f)


def _sha256(path: Path) -> str:
    return sha256_file(path) if path.is_file() else ""


def fetch_one(src: SourceFile, root: Path, *, mirror: Path | None = None, url: str | None = None,
              timeout_s: float = 60.0) -> Fetched:
    """Make `root/<dataset>/<name>` hold exactly the pinned file; raise InputError otherwise.

    `url` overrides the source's (a test serves a mirror on loopback this way)."""
    dest = root / src.rel
    if _sha256(dest) == src.sha256:
        return Fetched(src, "present", dest)
    with atomic_path(dest) as tmp:
        if mirror is not None:
            origin = mirror / src.rel
            if not origin.is_file():
                raise InputError(f"{origin}: not in the mirror (a mirror is laid out like the "
                                 f"data root: {src.rel})")
            shutil.copyfile(origin, tmp)
            where, how = str(origin), "mirror"
        else:
            where, how = url or src.url, "download"
            try:
                _download(where, tmp, timeout_s)
            except (urllib.error.URLError, OSError, TimeoutError) as e:
                reason = getattr(e, "reason", None) or e
                raise InputError(f"{src.rel}: could not download {where} ({reason}); offline? "
                                 "pass --mirror DIR (a copy laid out like the data root) or set "
                                 "$SELFPLAY_DATA to one") from None
        got = sha256_file(tmp)
        if got != src.sha256:
            # Raising inside atomic_path discards the temp file: nothing half-right lands.
            raise InputError(f"{src.rel} from {where}: sha256 {got[:16]}... is not the pinned "
                             f"{src.sha256[:16]}... ({src.version}); the file is corrupt or "
                             "differs from the release this project pins")
    return Fetched(src, how, dest)


def fetch(root: Path, datasets: tuple[str, ...] = DATASETS, *, mirror: Path | None = None,
          urls: dict[str, str] | None = None, timeout_s: float = 60.0,
          on_file: Callable[[Fetched], None] | None = None) -> list[Fetched]:
    unknown = sorted(set(datasets) - set(DATASETS))
    if unknown:
        raise InputError(f"unknown dataset(s) {', '.join(unknown)}; known: {', '.join(DATASETS)}")
    if mirror is not None and not mirror.is_dir():
        raise InputError(f"--mirror {mirror}: no such folder")
    done = []
    for src in SOURCES:
        if src.dataset in datasets:
            done.append(fetch_one(src, root, mirror=mirror, url=(urls or {}).get(src.rel),
                                  timeout_s=timeout_s))
            if on_file:
                on_file(done[-1])
    return done
