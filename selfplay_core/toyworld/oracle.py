"""The toy world's exact knowledge of its own tasks: every true one-step easier variant of a task,
true harder variants, and whether a problem is a toy task at all.

This is what makes the toy world a laboratory: a real code world has no such oracle. Everything
here is used only by *diagnostics* (the oracle-curriculum arm of the learning study, frontier
goalpost mining, fidelity and Guide accuracy); it never enters a reward.

* One-step easier variants (`easier_variants`): on the f axis, the task with one step removed;
  on the io axis, one non-native representation made native (one adapter line fewer). All of
  them, deduplicated, non-degenerate.
* Harder variants (`harder_variants`): `variants.variant(..., "harder")` drawn with a seeded RNG.
"""

from __future__ import annotations

import random

from selfplay_core.problems import Problem
from selfplay_core.toyworld.tasks import (IN_REPS, NATIVE, OUT_REPS, Task, TaskError, degenerate,
                                          is_redundant, task_from_key)
from selfplay_core.toyworld.variants import variant


def task_of(problem: Problem) -> Task | None:
    """The toy task a problem was made from (its `metadata["key"]`), else None."""
    key = (problem.metadata or {}).get("key")
    if not key:
        return None
    try:
        return task_from_key(key)
    except TaskError:
        return None


def _refit_out(task: Task, steps) -> str | None:
    from selfplay_core.toyworld.primitives import PRIMITIVES

    t = PRIMITIVES[steps[-1][0]].out_type
    return task.out_rep if OUT_REPS[task.out_rep].base == t else NATIVE[t]


def _ok(in_rep: str, steps, out_rep: str) -> Task | None:
    if not steps or is_redundant(steps):
        return None
    try:
        t = Task(in_rep, tuple(steps), out_rep)
    except TaskError:
        return None
    return None if degenerate(t) else t


def easier_variants(task: Task, axes=("f", "io")) -> list[tuple[str, Task]]:
    """Every true one-step easier variant as (axis, task), in a fixed order, without repeats."""
    out: list[tuple[str, Task]] = []
    seen = {task.key}

    def add(axis, t):
        if t is not None and t.key not in seen:
            seen.add(t.key)
            out.append((axis, t))

    if "f" in axes and task.depth >= 2:
        for i in range(task.depth):
            steps = list(task.steps[:i] + task.steps[i + 1:])
            out_rep = _refit_out(task, steps)
            add("f", _ok(task.in_rep, steps, out_rep) if out_rep else None)
    if "io" in axes:
        base_in, base_out = IN_REPS[task.in_rep].base, OUT_REPS[task.out_rep].base
        if task.in_rep != NATIVE[base_in]:
            add("io", _ok(NATIVE[base_in], list(task.steps), task.out_rep))
        if task.out_rep != NATIVE[base_out]:
            add("io", _ok(task.in_rep, list(task.steps), NATIVE[base_out]))
    return out


def harder_variants(task: Task, n: int, rng: random.Random, axes=("f", "io"),
                    exclude: set[str] | frozenset = frozenset()) -> list[tuple[str, Task]]:
    """Up to n distinct true harder variants (axis drawn per try), none whose key is in
    `exclude` (e.g. the goalposts and the evaluation split)."""
    out, seen = [], {task.key} | set(exclude)
    for _ in range(n * 6):
        if len(out) >= n:
            break
        axis = rng.choice(axes)
        v = variant(task, axis, "harder", rng)
        if v is not None and v.key not in seen:
            seen.add(v.key)
            out.append((axis, v))
    return out
