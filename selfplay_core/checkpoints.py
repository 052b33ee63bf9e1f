"""Run checkpoints that a crash cannot corrupt, that a resume can verify, and that survive the
loss of the run directory.

Layout under a run directory::

    checkpoints/iter-0003/                 a Hugging Face folder (save_pretrained) plus
        model.safetensors, config.json, tokenizer files, ...
        trainer_state.pt                   optimizer, learner steps, RNG states
        checkpoint_manifest.json           iteration + sha256 and size of every other file

* **Atomic.** A checkpoint is written into ``checkpoints/.tmp-iter-NNNN-<pid>``, every file and
  the folder fsynced, the manifest written last, then the folder is renamed into place. A kill at
  any moment leaves either no ``iter-NNNN`` or a complete one; the previous checkpoint stays
  until the state that points at the new one has been saved (``prune`` runs after that).
* **Verifiable.** The run state records the sha256 of the manifest, so a resume checks that the
  folder is the very checkpoint the state was saved with and that no file changed; any mismatch
  is a :class:`StateError` naming the file and the last good iteration.
* **Stored.** With a checkpoint store (``tracking.checkpoint_store``) each checkpoint is also
  uploaded through :mod:`selfplay_core.storage` (spooled during an outage, sha256 per object), and
  a resume whose local folder is gone fetches it back and verifies it the same way.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from selfplay_core.storage import StorageConfig, StorageError, open_store
from selfplay_core.storage.files import fsync_dir, sha256_file

MANIFEST = "checkpoint_manifest.json"
DIR = "checkpoints"
log = logging.getLogger(__name__)
_NAME = re.compile(r"^iter-(\d{4,})$")


class StateError(RuntimeError):
    """A missing or corrupt state/checkpoint file; the message names the file. (Defined here,
    below `state`, which re-exports it: loading a state names the last good checkpoint.)"""


def checkpoint_name(iteration: int) -> str:
    return f"iter-{iteration:04d}"


@dataclass(frozen=True)
class Checkpoint:
    path: Path          # the local folder
    iteration: int
    manifest_sha256: str


def write_checkpoint(run_dir: Path, iteration: int, save: Callable[[Path], None]) -> Checkpoint:
    """`save(folder)` writes the files; the folder appears under its final name only complete."""
    root = Path(run_dir) / DIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(iteration)
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        save(tmp)
        files = {}
        for p in sorted(q for q in tmp.rglob("*") if q.is_file()):
            with open(p, "rb+") as f:
                os.fsync(f.fileno())
            files[p.relative_to(tmp).as_posix()] = {"sha256": sha256_file(p), "size": p.stat().st_size}
        data = json.dumps({"iteration": iteration, "files": files}, indent=1, sort_keys=True).encode()
        with open(tmp / MANIFEST, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        for d in sorted({p.parent for p in tmp.rglob("*")} | {tmp}):
            fsync_dir(d)
        if final.exists():  # left by an attempt killed after the rename but before its state was saved
            shutil.rmtree(final)
        os.rename(tmp, final)
        fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Checkpoint(final, iteration, hashlib.sha256(data).hexdigest())


def read_manifest(path: Path) -> dict:
    """The manifest of a checkpoint folder; StateError if it is missing or unreadable."""
    m = Path(path) / MANIFEST
    try:
        data = json.loads(m.read_text(encoding="utf-8"))
        if not isinstance(data.get("files"), dict) or not isinstance(data.get("iteration"), int):
            raise ValueError("no 'files' or 'iteration'")
        return data
    except FileNotFoundError:
        raise StateError(f"{m}: checkpoint manifest not found (the checkpoint is incomplete or "
                         "was not written by selfplay)") from None
    except (OSError, ValueError, AttributeError) as e:
        raise StateError(f"{m}: checkpoint manifest is corrupt ({e})") from None


def verify_checkpoint(path: Path, manifest_sha256: str | None = None) -> dict:
    """Check every file against the manifest (and the manifest against the state's sha256).
    Returns the manifest; raises StateError naming the first bad file."""
    path = Path(path)
    if not path.is_dir():
        raise StateError(f"{path}: checkpoint folder not found")
    m = path / MANIFEST
    manifest = read_manifest(path)
    if manifest_sha256 is not None and sha256_file(m) != manifest_sha256:
        raise StateError(f"{m}: does not match the sha256 recorded in the run state (the folder "
                         "holds a different or modified checkpoint)")
    for rel, info in sorted(manifest["files"].items()):
        f = path / rel
        if not f.is_file():
            raise StateError(f"{f}: checkpoint file missing")
        if f.stat().st_size != info.get("size") or sha256_file(f) != info.get("sha256"):
            raise StateError(f"{f}: checkpoint file is corrupt (sha256 differs from {MANIFEST})")
    return manifest


def prune(run_dir: Path, keep: Path) -> None:
    """Remove every checkpoint folder but `keep` (and temp folders of killed writes)."""
    root = Path(run_dir) / DIR
    if not root.is_dir():
        return
    keep = Path(keep).resolve()
    for d in root.iterdir():
        if d.is_dir() and d.resolve() != keep and (_NAME.match(d.name) or d.name.startswith(".tmp-")
                                                   or d.name == "last"):
            shutil.rmtree(d, ignore_errors=True)


def last_good(run_dir: Path) -> tuple[int, Path] | None:
    """The newest local checkpoint that verifies against its own manifest, if any."""
    root = Path(run_dir) / DIR
    if not root.is_dir():
        return None
    found = sorted(((int(m.group(1)), d) for d in root.iterdir()
                    if d.is_dir() and (m := _NAME.match(d.name))), reverse=True)
    for it, d in found:
        try:
            verify_checkpoint(d)
        except StateError:
            continue
        return it, d
    return None


def last_good_hint(run_dir: Path) -> str:
    """For error messages: what survives of a run whose state cannot be used."""
    got = last_good(run_dir)
    if got is None:
        return "no intact checkpoint in this run directory, so the last good iteration is unknown"
    return f"the last good iteration on disk is {got[0]} (checkpoint {got[1]} verifies)"


def resolve_checkpoint(run_dir: Path, state, cfg) -> Path:
    """The folder of the state's checkpoint, verified against the manifest sha256 the state
    recorded; when the local copy is gone or damaged and the run has a checkpoint store, the
    stored copy is fetched (and verified) in its place. Otherwise a StateError that names the
    file and the last good iteration."""

    run_dir = Path(run_dir)
    path = Path(state.last_checkpoint)
    if not path.is_absolute():
        path = run_dir / path
    good = f"iteration {state.iteration} is the last good one per {run_dir / 'state.json'}"
    if state.checkpoint_sha256 is None and path.is_dir():  # a state from before manifests
        log.warning("%s: no manifest sha256 in the run state; loading it unverified", path)
        return path
    try:
        if not path.exists():
            raise StateError(f"{path}: checkpoint folder not found")
        verify_checkpoint(path, state.checkpoint_sha256)
        return path
    except StateError as e:
        if not (state.checkpoint_key and cfg.tracking.checkpoint_store):
            raise StateError(f"{e}; {good}, and no checkpoint store holds a copy "
                             "(tracking.checkpoint_store is not set for this run)") from None
        log.warning("%s; fetching the stored copy %s", e, state.checkpoint_uri)
    try:
        fetch(open_checkpoint_store(cfg), state.checkpoint_key, path, state.checkpoint_sha256)
    except (StateError, StorageError) as e:
        raise StateError(f"{path}: checkpoint missing or corrupt locally, and its stored copy "
                         f"{state.checkpoint_uri} could not be used ({e}); {good}") from None
    log.info("fetched checkpoint of iteration %d from %s", state.iteration, state.checkpoint_uri)
    return path


# ---- the store ----------------------------------------------------------------------------------

def store_key(run_id: str, iteration: int) -> str:
    return f"{run_id}/{DIR}/{checkpoint_name(iteration)}"


def upload(store, ckpt: Checkpoint, key: str) -> str:
    """put_dir (files, then the store's manifest, last); spooled when the endpoint is down."""
    store.put_dir(ckpt.path, key)
    return store.uri_for(key)


def fetch(store, key: str, dest: Path, manifest_sha256: str | None) -> Path:
    """Download a stored checkpoint into `dest` (atomically), verified twice: each object against
    the store's sha256, the folder against our manifest and the state's sha256."""
    dest = Path(dest)
    tmp = dest.with_name(f".tmp-fetch-{dest.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        store.get_dir(key, tmp)
        verify_checkpoint(tmp, manifest_sha256)
        if dest.exists():
            shutil.rmtree(dest)
        os.rename(tmp, dest)
        fsync_dir(dest.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def open_checkpoint_store(cfg):
    """The run's checkpoint store (tracking.checkpoint_store); S3 settings from the environment."""
    return open_store(StorageConfig.from_env(uri=cfg.tracking.checkpoint_store))


# ---- RNG states (saved in trainer_state.pt) -----------------------------------------------------

def rng_states() -> dict:
    """The global generators the model stack draws from: torch's (CPU, and CUDA when present).
    The loop itself draws only from explicit generators whose state is in RunState (ctx.rng) or
    derived from counters there (sampling seeds); it uses no global `random` or numpy state,
    which Prefect, MLflow and others share, so those are neither saved nor overwritten."""
    import torch

    out = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def restore_rng_states(states: dict | None) -> None:
    if not states:
        return
    import torch

    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available() and len(states["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(states["cuda"])
