"""One entry point for every benchmark: `load_benchmark(name, ...) -> BenchmarkSet`."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from selfplay_core.datasets.benchmark import BenchmarkSet
from selfplay_core.datasets.classic import load_humaneval, load_mbpp
from selfplay_core.datasets.evalplus import file_sha256, load_humanevalplus, load_mbppplus
from selfplay_core.datasets.expected import attach_expected
from selfplay_core.datasets.livecodebench import load_lcb
from selfplay_core.problems import InputError

BENCHMARKS = ("humanevalplus", "mbppplus", "humaneval", "mbpp", "lcb")

_EVALPLUS_RELEASES = {
    "272720b90ac375502c8ed23cd791c2a93dfb22a911641a494da74a426c09f101": "HumanEval+ v0.1.10",
    "298f79977b2663b8b8ab6b5fa50b17d6f23a92603d24f39e26203fe58c37eeda": "HumanEval+ v0.1.10 NoExtreme",
    "91486741f1627101021fbe50523df08eebb5b0bf5e804b633dcd5ca3c14dbd2f": "HumanEval+ v0.1.10 Mini",
    "af43697e8791c4c149bdfd6b489d8b5412507551ac20e28a439f650b8225db63": "MBPP+ v0.2.0",
    "72d32acaea73d5606cb97041b30d45bbda9435a675369d3e31965513ee94e564": "MBPP+ v0.2.0 NoExtreme",
}


def load_evalplus(name: str, path: str | Path | None = None, *, executor=None,
                  progress: Callable[[int], None] | None = None, ids=None,
                  on_compute: Callable[[int], None] | None = None) -> BenchmarkSet:
    """HumanEval+ / MBPP+ with expected outputs from the canonical solutions (cached).
    With `ids`, only those problems are loaded (and their expected outputs computed).
    `on_compute` / `progress`: see `attach_expected`."""
    loader = {"humanevalplus": load_humanevalplus, "mbppplus": load_mbppplus}[name]
    problems, canon, src = loader(path, with_path=True)
    sha = file_sha256(src)
    excluded: set[str] = set()
    if ids is not None:
        keep = _check_ids(name, ids, {p.id for p in problems})
        excluded = {p.id for p in problems if p.id not in keep}
        problems = [p for p in problems if p.id in keep]
    # Every test keeps its expected value or loading fails (expected.attach_expected).
    problems = attach_expected(problems, canon, dataset_key=f"{name}-{sha[:16]}",
                               executor=executor, progress=progress, on_compute=on_compute)
    return BenchmarkSet(name=name, version=_EVALPLUS_RELEASES.get(sha, "unknown (local file)"),
                        source=str(src), source_sha256=sha, problems=problems, skipped=[],
                        references=canon, excluded_ids=excluded,
                        filters={"ids": sorted(set(ids))} if ids is not None else {},
                        notes=["expected outputs computed by running the canonical solutions in "
                               "the sandbox (evalplus's method); time limit per test = "
                               "max(1 s, 4 x the canonical's slowest test), in CPU seconds"])


def load_benchmark(name: str, data: str | Path | None = None, *, executor=None,
                   progress: Callable[[int], None] | None = None, ids=None,
                   on_compute: Callable[[int], None] | None = None, **lcb) -> BenchmarkSet:
    """Load a benchmark by name.

    data: a file (or, for LCB, a directory of official files); default: the copy under
    $SELFPLAY_DATA or the data `selfplay data fetch` downloaded. `lcb` keywords go to `load_lcb` (release, window,
    date_from, date_to, platforms, difficulties, kinds, tests, time_limit_s).
    ids: keep only these problem ids (an unknown id is an error).
    on_compute(n) / progress(1): expected outputs being computed (HumanEval+, MBPP+; see
    `attach_expected`).
    """
    if name not in BENCHMARKS:
        raise InputError(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}")
    if lcb and name != "lcb":
        raise InputError(f"options {', '.join(sorted(lcb))} apply to --benchmark lcb only")
    if name == "lcb":
        bench = load_lcb(data, **lcb)
    elif name in ("humanevalplus", "mbppplus"):
        return load_evalplus(name, data, executor=executor, progress=progress, ids=ids,
                             on_compute=on_compute)
    elif name == "humaneval":
        bench = load_humaneval(data, executor=executor)
    else:
        bench = load_mbpp(data, executor=executor)
    if ids is not None:
        bench = select(bench, ids)
    return bench


def _check_ids(name: str, ids, known: set[str]) -> set[str]:
    ids = [str(i) for i in ids]
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise InputError(f"{name}: unknown problem id(s): {', '.join(unknown[:5])}"
                         + (f" (+{len(unknown) - 5} more)" if len(unknown) > 5 else ""))
    return set(ids)


def select(bench: BenchmarkSet, ids) -> BenchmarkSet:
    """A copy of `bench` restricted to `ids` (recorded in its filters and content hash)."""
    import dataclasses

    outside = [str(i) for i in ids if str(i) in bench.excluded_ids]
    if outside:
        raise InputError(f"{bench.name}: problem id(s) outside the selection made by the filters "
                         f"{ {k: v for k, v in bench.filters.items() if v} }: {', '.join(outside[:5])}")
    keep = _check_ids(bench.name, ids, set(bench.by_id()))
    return dataclasses.replace(
        bench, problems=[p for p in bench.problems if p.id in keep],
        filters=dict(bench.filters, ids=sorted(keep)),
        excluded_ids=bench.excluded_ids | {p.id for p in bench.problems if p.id not in keep},
        _content_hash=None)
