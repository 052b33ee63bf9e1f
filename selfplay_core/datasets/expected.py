"""Expected outputs for benchmarks that ship inputs only: run the canonical solution in the
sandbox, derive per-problem time limits from its CPU times (`limits.time_limit_from_reference`),
and cache the result keyed by the data file's hash.

The cache never holds a load-dependent result: a row is written only when the canonical
solution returned a plain value on *every* test. A canonical run that fails, times out or hits
a harness error is retried (`RETRIES` more times, alone, under a generous deadline); if a test
still fails, loading stops with an error naming the problem and the test. No test is ever
dropped: a partial row is exactly what once made Mbpp/599 keep 23 of its 91 tests forever.
Limits are measured in CPU seconds, which a loaded machine does not stretch.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Callable

from selfplay_core.datasets.limits import time_limit_from_reference
from selfplay_core.problems import InputError, Problem, TestCase
from selfplay_core.sandbox import Executor, SandboxConfig
from selfplay_core.storage.files import atomic_write_text
from selfplay_core.values import Opaque, from_json_obj, to_json_obj

CACHE_FORMAT = "4"  # bump when limits or encoding change what a run produces
RETRIES = 2
# Per-test CPU limit of a canonical run, and its whole-row wall cap: generous, since these
# runs measure; the limit they produce is what judges samples.
CANONICAL_LIMIT_S = 60.0
CANONICAL_ROW_CAP_S = 4 * 3600.0


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


def _apply(problem: Problem, expected: list, time_limit: float) -> Problem:
    tests = [TestCase(args=t.args, expected=e, has_expected=True)
             for t, e in zip(problem.tests, expected)]
    return dataclasses.replace(problem, tests=tests, time_limit_s=time_limit)


def _failures(p: Problem, r) -> list[str]:
    """Why a canonical run cannot be cached: one line per failing test (empty: usable)."""
    out = []
    for i, e in enumerate(r.errors):
        if e is not None:
            out.append(f"test {i}: {e}")
        elif p.oracle != "not_none" and _has_opaque(r.outputs[i]):
            out.append(f"test {i}: returned a non-plain value")
    if len(r.errors) < len(p.tests):
        out.append(f"tests {len(r.errors)}..{len(p.tests) - 1}: not run ({r.detail})")
    return out


def _read_cache(path: Path, wanted: dict[str, Problem]) -> dict[str, dict]:
    cached: dict[str, dict] = {}
    if not path.exists():
        return cached
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a torn line (never written by us): recompute that problem
            p = wanted.get(row.get("id"))
            # A row is usable only when complete: one expected value per input.
            if p is not None and len(row.get("expected", ())) == len(p.tests):
                cached[row["id"]] = row
    return cached


def attach_expected(problems: list[Problem], canonical: dict[str, str], *, dataset_key: str,
                    executor=None, progress: Callable[[int], None] | None = None,
                    on_compute: Callable[[int], None] | None = None) -> list[Problem]:
    """Return copies of `problems` with expected outputs and time limits filled in.

    Raises InputError (before anything is cached for that problem) if a canonical solution
    fails a test in every one of its 1 + RETRIES runs. `on_compute(n)` is told, before the
    work, how many problems need their canonical solution run (0: all cached); `progress(1)`
    then follows each one as its first run finishes."""
    path = cache_dir() / f"{dataset_key}-v{CACHE_FORMAT}.jsonl"
    by_id = {p.id: p for p in problems}
    cached = _read_cache(path, by_id)
    todo = [p for p in problems if p.id not in cached]
    if on_compute:
        on_compute(len(todo))
    if todo:
        own = executor is None
        ex = executor or Executor(SandboxConfig())
        try:
            rows, broken = _compute(ex, todo, canonical, progress)
        finally:
            if own:
                ex.close()
        cached.update(rows)
        atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in cached.values()))
        if broken:
            lines = [f"{pid}: {'; '.join(why[:3])}" for pid, why in sorted(broken.items())]
            raise InputError(
                f"{dataset_key}: the canonical solution fails on {len(broken)} problem(s) in "
                f"{1 + RETRIES} runs each, so their expected outputs are unknown (nothing was "
                f"cached for them): " + " | ".join(lines[:5])
                + ("" if len(lines) <= 5 else f" | ... {len(lines) - 5} more")
                + ". The data file or the sandbox is broken.")
    return [_apply(p, from_json_obj(cached[p.id]["expected"]), cached[p.id]["time_limit_s"])
            for p in problems]


def _compute(ex, todo: list[Problem], canonical: dict[str, str], progress):
    rows: dict[str, dict] = {}
    broken: dict[str, list[str]] = {}
    pending = list(todo)
    for attempt in range(1 + RETRIES):
        # Retries run one problem at a time, so a row is never measured while its siblings
        # compete for the same cores.
        batches = [pending] if attempt == 0 else [[p] for p in pending]
        again = []
        for batch in batches:
            runs = ex.run([(dataclasses.replace(p, time_limit_s=CANONICAL_LIMIT_S), canonical[p.id])
                           for p in batch], max_sample_time_s=CANONICAL_ROW_CAP_S,
                          progress=progress if attempt == 0 else None)  # each problem once
            for p, r in zip(batch, runs):
                why = _failures(p, r)
                if why:
                    broken[p.id] = why
                    again.append(p)
                    continue
                broken.pop(p.id, None)
                outs = r.outputs
                if p.oracle == "not_none":
                    outs = [o is not None for o in outs]
                rows[p.id] = {"id": p.id, "expected": to_json_obj(outs),
                              "time_limit_s": time_limit_from_reference(r.cpu_times),
                              "reference_cpu_s": round(max(r.cpu_times, default=0.0), 6)}
        pending = again
        if not pending:
            break
    return rows, broken
