"""Variants of a task along GASP's two axes.

* f axis (the algorithm): "easier" removes one step, "harder" inserts one, "same" replaces one
  (another primitive of the same type, or the same primitive with another constant).
* io axis (the representation): the steps stay; one of the input/output representations changes.
  "easier" turns a non-native representation into the native one (one adapter line fewer),
  "harder" the reverse, "same" swaps one non-native representation for another.

Every variant is a valid, non-degenerate task; `None` when no such variant exists.
"""

from __future__ import annotations

import random

from selfplay_core.toyworld.primitives import PRIMITIVES
from selfplay_core.toyworld.tasks import (IN_REPS, NATIVE, OUT_REPS, Task, TaskError, degenerate,
                                          is_redundant, sample_step)

AXES = ("f", "io")
DIRECTIONS = ("easier", "harder", "same")


def variant(task: Task, axis: str, direction: str, rng: random.Random, tries: int = 30) -> Task | None:
    if axis not in AXES:
        raise ValueError(f"axis must be one of {AXES}, got {axis!r}")
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    make = _f_candidate if axis == "f" else _io_candidate
    for _ in range(tries):
        cand = make(task, direction, rng)
        if cand is not None and cand != task and not degenerate(cand):
            return cand
    return None


def _valid(in_rep, steps, out_rep) -> Task | None:
    if not steps or is_redundant(steps):
        return None
    try:
        return Task(in_rep, tuple(steps), out_rep)
    except TaskError:
        return None


def _type_before(task: Task, i: int) -> str:
    t = IN_REPS[task.in_rep].base
    for name, _ in task.steps[:i]:
        t = PRIMITIVES[name].out_type
    return t


def _refit_out(task: Task, steps) -> str | None:
    """The output representation for new steps: kept when the final type is unchanged, else
    the native one (changing the algorithm's result type changes how it is returned)."""
    t = PRIMITIVES[steps[-1][0]].out_type if steps else None
    if t is None:
        return None
    return task.out_rep if OUT_REPS[task.out_rep].base == t else NATIVE[t]


def _f_candidate(task: Task, direction: str, rng: random.Random) -> Task | None:
    steps = list(task.steps)
    i = rng.randrange(len(steps) + (1 if direction == "harder" else 0))
    if direction == "easier":
        if len(steps) < 2:
            return None
        new = steps[:i] + steps[i + 1:]
    elif direction == "harder":
        prev = steps[i - 1][0] if i > 0 else None
        s = sample_step(rng, _type_before(task, i), prev)
        if s is None:
            return None
        new = steps[:i] + [s] + steps[i:]
    else:
        name, c = steps[i]
        p = PRIMITIVES[name]
        if p.has_const and rng.random() < 0.5:
            others = [k for k in p.consts if k != c]
            new_step = (name, rng.choice(others))
        else:
            same_type = [q for q in PRIMITIVES.values()
                         if q.in_type == p.in_type and q.out_type == p.out_type and q.name != name]
            if not same_type:
                return None
            q = rng.choice(same_type)
            new_step = (q.name, rng.choice(q.consts) if q.has_const else None)
        new = steps[:i] + [new_step] + steps[i + 1:]
    out = _refit_out(task, new)
    return _valid(task.in_rep, new, out) if out else None


def _io_candidate(task: Task, direction: str, rng: random.Random) -> Task | None:
    base_in = IN_REPS[task.in_rep].base
    base_out = OUT_REPS[task.out_rep].base
    ins = [r for r in IN_REPS if IN_REPS[r].base == base_in]
    outs = [r for r in OUT_REPS if OUT_REPS[r].base == base_out]
    moves = []  # (new_in, new_out)
    for side, cur, options in (("in", task.in_rep, ins), ("out", task.out_rep, outs)):
        native = NATIVE[base_in if side == "in" else base_out]
        for r in options:
            if r == cur:
                continue
            if direction == "easier" and not (cur != native and r == native):
                continue
            if direction == "harder" and not (cur == native and r != native):
                continue
            if direction == "same" and (cur == native or r == native):
                continue
            moves.append((r, task.out_rep) if side == "in" else (task.in_rep, r))
    if not moves:
        return None
    new_in, new_out = rng.choice(moves)
    return _valid(new_in, list(task.steps), new_out)


def adapter_count(task: Task) -> int:
    return int(IN_REPS[task.in_rep].adapter is not None) + int(OUT_REPS[task.out_rep].adapter is not None)
