"""Expected outputs for benchmarks that ship inputs only: run the canonical solution once in the
sandbox, derive per-problem time limits from its timings (evalplus's rule: max(1 s, 4 x the
slowest canonical test)), and cache the result keyed by the data file's hash."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Callable

from selfplay_core.problems import InputError, Problem, TestCase
from selfplay_core.sandbox import Executor, SandboxConfig
from selfplay_core.values import Opaque, from_json_obj, to_json_obj

CACHE_FORMAT = "3"  # bump when limits or encoding change what a run produces


def _has_opaque(v) -> bool:
    if isinstance(v, Opaque):
        return True
    if isinstance(v, (list, tuple, set, frozenset)):
        return any(_has_opaque(x) for x in v)
    if isinstance(v, dict):
        return any(_has_opaque(k) or _has_opaque(x) for k, x in v.items())
    return False


def cache_dir() -> Path:
    root = os.environ.get("SELFPLAY_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "selfplay")
    return Path(root) / "expected"


def _apply(problem: Problem, expected: list, time_limit: float, keep: list[int]) -> Problem:
    tests = [TestCase(args=problem.tests[i].args, expected=expected[k], has_expected=True)
             for k, i in enumerate(keep)]
    meta = dict(problem.metadata)
    dropped = len(problem.tests) - len(keep)
    if dropped:
        meta["dropped_tests"] = dropped
    return dataclasses.replace(problem, tests=tests, time_limit_s=time_limit, metadata=meta)


def attach_expected(problems: list[Problem], canonical: dict[str, str], *, dataset_key: str,
                    executor=None, min_time_s: float = 1.0, time_factor: float = 4.0,
                    progress: Callable[[int], None] | None = None,
                    on_compute: Callable[[int], None] | None = None) -> list[Problem]:
    """Return copies of `problems` with expected outputs and time limits filled in.

    A test on which the canonical solution itself fails is dropped and counted in
    `metadata["dropped_tests"]` (never silently). `on_compute(n)` is told, before the work,
    how many problems need their canonical solution run (0: all cached); `progress(1)` then
    follows each one as it finishes.
    """
    path = cache_dir() / f"{dataset_key}-v{CACHE_FORMAT}.jsonl"
    cached: dict[str, dict] = {}
    if path.exists():
        with open(path, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                cached[row["id"]] = row
    todo = [p for p in problems if p.id not in cached]
    if on_compute:
        on_compute(len(todo))
    if todo:
        own = executor is None
        ex = executor or Executor(SandboxConfig(max_sample_time_s=3600.0))
        try:
            runs = ex.run([(dataclasses.replace(p, time_limit_s=60.0), canonical[p.id]) for p in todo],
                          progress=progress)
        finally:
            if own:
                ex.close()
        new_rows = []
        for p, r in zip(todo, runs):
            keep = [i for i, e in enumerate(r.errors)
                    if e is None and (p.oracle == "not_none" or not _has_opaque(r.outputs[i]))]
            if not keep:
                raise InputError(f"{dataset_key}: canonical solution of {p.id} fails every test "
                                 f"({r.detail}); the data file or the sandbox is broken")
            outs = [r.outputs[i] for i in keep]
            if p.oracle == "not_none":
                outs = [o is not None for o in outs]
            slowest = max(r.times) if r.times else 0.0
            row = {"id": p.id, "keep": keep, "expected": to_json_obj(outs),
                   "time_limit_s": round(max(min_time_s, time_factor * slowest), 3)}
            cached[p.id] = row
            new_rows.append(row)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for row in cached.values():
                f.write(json.dumps(row) + "\n")
        os.replace(tmp, path)
    out = []
    for p in problems:
        row = cached[p.id]
        out.append(_apply(p, from_json_obj(row["expected"]), row["time_limit_s"], row["keep"]))
    return out
