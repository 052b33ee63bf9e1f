#!/usr/bin/env python
"""Fetch the pure-Python dependencies tools/gpu_check.py needs on a machine that lacks them.

The lent accelerator has torch, transformers, accelerate and peft but no pydantic and no package
index; the project's configs are pydantic models. This script, run where an index is reachable,
downloads the exact wheels of pydantic and its dependencies (the versions installed here, the
ones the project is tested with) for the target interpreter and platform, unpacks them into
`OUT/site` and writes `OUT/manifest.json`. Carry OUT to the machine (about 8 MB unpacked; the
carry limit is 64 MiB): gpu_check.py puts `OUT/site` on sys.path when pydantic is missing and
refuses, with one line, a folder made for another Python.

    python tools/gpu_check_deps.py                       # cp312, manylinux x86_64 -> .gpu_check_deps
    python tools/gpu_check_deps.py --python 3.11         # another interpreter
    python tools/gpu_check_deps.py --from-installed      # copy this environment's files
                                                              # (only for a target = this Python)

Only the standard library is used here.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / ".gpu_check_deps"
# pydantic and what it imports; typing-extensions is in torch's environment too, carried anyway
# because pydantic needs a newer one than an old torch pins
PACKAGES = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions")
PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64")


def pinned_versions(packages=PACKAGES) -> dict[str, str]:
    out = {}
    for name in packages:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            raise SystemExit(f"gpu_check_deps: {name} is not installed in this environment, so its "
                             "version cannot be pinned; run this from the project's venv") from None
    return out


def python_tag(version: str) -> str:
    major, minor = version.split(".")[:2]
    return f"{major}.{minor}"


def download(versions: dict[str, str], python: str, platforms, dest: Path) -> list[Path]:
    """`pip download` of the exact wheels for the target interpreter (binary only, no deps)."""
    digits = python.replace(".", "")
    cmd = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps",
           "--python-version", python, "--implementation", "cp", "--abi", f"cp{digits}",
           "--abi", "abi3", "--abi", "none", "-d", str(dest)]
    for p in platforms:
        cmd += ["--platform", p]
    cmd += [f"{n}=={v}" for n, v in versions.items()]
    print("gpu_check_deps:", " ".join(cmd), file=sys.stderr)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit("gpu_check_deps: pip download failed (is a package index reachable?):\n"
                         + proc.stderr[-2000:])
    wheels = sorted(dest.glob("*.whl"))
    got = {w.name.split("-")[0].replace("_", "-").lower() for w in wheels}
    missing = [n for n in versions if n.replace("_", "-").lower() not in got]
    if missing:
        raise SystemExit(f"gpu_check_deps: no wheel came back for {missing}")
    return wheels


def unpack(wheels: list[Path], site: Path) -> None:
    for w in wheels:
        with zipfile.ZipFile(w) as z:
            z.extractall(site)


def copy_installed(versions: dict[str, str], site: Path) -> None:
    """This environment's installed files of each package (for a target = this interpreter)."""
    for name in versions:
        dist = md.distribution(name)
        for f in dist.files or []:
            src = Path(dist.locate_file(f))
            if src.is_file() and "__pycache__" not in f.parts:
                dst = site / f
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)


def _digest(site: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in site.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(site)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def build(out: Path, *, python: str, platforms=PLATFORMS, from_installed: bool = False,
          versions: dict[str, str] | None = None) -> dict:
    versions = versions or pinned_versions()
    if from_installed and python_tag(python) != python_tag(sys.version):
        raise SystemExit(f"gpu_check_deps: --from-installed copies this Python's "
                         f"({python_tag(sys.version)}) files; it cannot make a {python} folder")
    out = Path(out)
    site = out / "site"
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    if from_installed:
        copy_installed(versions, site)
        source = "installed"
    else:
        with tempfile.TemporaryDirectory() as tmp:
            unpack(download(versions, python, platforms, Path(tmp)), site)
        source = "wheels"
    size = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
    manifest = {"python": python_tag(python), "platforms": list(platforms), "source": source,
                "packages": versions, "bytes": size, "sha256": _digest(site)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(DEFAULT_OUT), help=f"folder to carry (default {DEFAULT_OUT})")
    p.add_argument("--python", default="3.12", help="target interpreter version (default 3.12)")
    p.add_argument("--platform", action="append", help=f"wheel platform tag (default {PLATFORMS})")
    p.add_argument("--from-installed", action="store_true",
                   help="copy this environment's installed files instead of downloading")
    args = p.parse_args(argv)
    m = build(Path(args.out), python=args.python, platforms=tuple(args.platform or PLATFORMS),
              from_installed=args.from_installed)
    print(json.dumps(m))
    print(f"gpu_check_deps: {args.out} holds {m['bytes'] / 2**20:.1f} MiB for CPython "
          f"{m['python']}; carry it (e.g. run(carry=['.gpu_check_deps'])) and gpu_check.py uses it "
          "when pydantic is missing", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
