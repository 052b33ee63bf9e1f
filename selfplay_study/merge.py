"""One report from several study folders (`selfplay study --merge A B --out M`).

A study registered after another (a new arm judged against an earlier study's floor and arms, on
the same checkpoint and goalposts) runs in its own folder: its protocol, and so its key, differs.
Each run is deterministic per seed and the final evaluation is fixed by the protocol, so the
evaluations of studies that share the start checkpoint, the budget, the common overrides, the
final evaluation and the goalpost set are one study's; their arms are merged here, checked first,
never silently: an arm in two folders, or any difference in those settings, is an error.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from selfplay_study.protocol import Arm, NotAStudyFolder, Protocol, saved_protocol


class MergeError(ValueError):
    pass


def _load(folder: Path) -> tuple[Protocol, list[str] | None]:
    try:
        proto = saved_protocol(folder)
    except NotAStudyFolder as e:
        raise MergeError(str(e)) from None
    gps = folder / "goalposts.json"
    return proto, json.loads(gps.read_text()) if gps.is_file() else None


def _same(field: str, a: Path, b: Path, va, vb) -> None:
    if va != vb:
        raise MergeError(f"{a} and {b} differ in {field} ({va!r} vs {vb!r}): only studies of one "
                         "start checkpoint, budget and final evaluation can be merged")


def merge_protocols(folders: list[Path], order: list[str] | None = None
                    ) -> tuple[Protocol, dict[str, tuple[Path, Protocol, Arm]]]:
    """The merged protocol (the first folder's settings, every folder's arms, the union of seeds,
    the floor's samplings from the folder that sampled it) and, per arm, the folder that ran it,
    that folder's protocol and the arm."""
    if len(folders) < 2:
        raise MergeError("--merge needs at least two study folders")
    loaded = [(f, *_load(f)) for f in folders]
    first, p0, g0 = loaded[0]
    owner: dict[str, tuple[Path, Protocol, Arm]] = {}
    for folder, p, gps in loaded:
        for field in ("name", "iterations", "common"):
            _same(field, first, folder, getattr(p0, field), getattr(p, field))
        fa = p0.final.model_dump(exclude={"floor_samplings"})
        _same("final evaluation", first, folder, fa, p.final.model_dump(exclude={"floor_samplings"}))
        if g0 is not None and gps is not None:
            _same("goalpost set (goalposts.json)", first, folder, g0, gps)
        for a in p.arms:
            if a.name in owner:
                raise MergeError(f"arm {a.name!r} is in both {owner[a.name][0]} and {folder}: "
                                 "merge each arm from one folder")
            owner[a.name] = (folder, p, a)
    names = order or list(owner)
    unknown = [n for n in names if n not in owner]
    if unknown:
        raise MergeError(f"--arms {unknown} not in the merged folders; they hold {sorted(owner)}")
    floors = [p.final.floor_samplings for _, p, _ in loaded if any(not a.trains for a in p.arms)]
    final = p0.final.model_copy(update={"floor_samplings": floors[0] if floors else p0.final.floor_samplings})
    seeds = tuple(sorted({s for _, p, _ in loaded for s in p.seeds}))
    merged = p0.model_copy(update={"arms": tuple(owner[n][2] for n in names), "seeds": seeds, "final": final})
    return Protocol.model_validate(merged.model_dump()), {n: owner[n] for n in names}


def merge_into(folders: list[Path], out: Path, order: list[str] | None = None) -> Protocol:
    """Write `out` as a study folder of the merged protocol: protocol.json (with the folders it
    came from), goalposts.json and each arm's evaluations, copied from the folder that ran it."""
    proto, owner = merge_protocols(folders, order)
    if out.resolve() in {f.resolve() for f in folders}:
        raise MergeError(f"--out {out} is one of the merged folders: give a new folder")
    old = out / "protocol.json"
    if old.is_file() and "merged_from" not in json.loads(old.read_text()):
        raise MergeError(f"--out {out} holds a study of its own: give a new folder (a merge "
                         "only replaces an earlier merge)")
    if (out / "evals").is_dir():   # an earlier merge: its evaluations are copies, rebuilt here
        shutil.rmtree(out / "evals")
    (out / "evals").mkdir(parents=True, exist_ok=True)
    for name, (folder, src, arm) in owner.items():
        runs = src.seeds if arm.trains else range(src.final.floor_samplings)
        for s in runs:
            path = folder / "evals" / f"{name}-s{s}.json"
            if path.is_file():
                shutil.copy(path, out / "evals" / path.name)
    gps = next((f / "goalposts.json" for f in folders if (f / "goalposts.json").is_file()), None)
    if gps is not None:
        shutil.copy(gps, out / "goalposts.json")
    (out / "protocol.json").write_text(json.dumps(
        {"key": proto.key(), "protocol": proto.model_dump(mode="json"),
         "merged_from": [str(f) for f in folders]}, indent=1) + "\n")
    return proto
