"""Where an iteration's wall time goes: generation, verification, update, evaluation, goalpost
tracking, orchestration (logged every iteration as `time/split/<part>_s`).

* generation — inside `engine.generate` (the engine is wrapped), outside the stages below;
* verification — inside the executor (`verify`, `run`: sandboxed programs), same;
* update — the `update` stage: advantages, the learner's epochs, the weight sync;
* evaluation, goalposts — the whole `evaluate` / `goalposts` stages (their own generation and
  verification included: they are their own cost);
* orchestration — the rest of the iteration: task wrappers (Prefect), prompt building, parsing,
  rewards, buffers, the loop's own Python.
The checkpoint, state and MLflow writes after the iteration are not in `time/iteration_s`.
"""

from __future__ import annotations

import time
from typing import Any

# Stages whose whole time is one part of the split.
WHOLE_STAGES = {"update": "update", "evaluate": "evaluation", "goalposts": "goalposts"}
PARTS = ("generation", "verification", "update", "evaluation", "goalposts", "orchestration")


class WallClock:
    def __init__(self):
        self.stage: str | None = None
        self.reset()

    def reset(self) -> None:
        self.inner = {"generation": 0.0, "verification": 0.0}
        self.whole = {part: 0.0 for part in WHOLE_STAGES.values()}

    def add_inner(self, part: str, seconds: float) -> None:
        if self.stage not in WHOLE_STAGES:
            self.inner[part] += seconds

    def add_stage(self, name: str, seconds: float) -> None:
        if name in WHOLE_STAGES:
            self.whole[WHOLE_STAGES[name]] += seconds

    def split(self, iteration_s: float) -> dict[str, float]:
        parts = {**self.inner, **self.whole}
        parts["orchestration"] = max(0.0, iteration_s - sum(parts.values()))
        return {f"time/split/{p}_s": parts[p] for p in PARTS}


class _Timed:
    """Delegates everything to the wrapped object; the named methods add their time."""

    _methods: dict[str, str] = {}

    def __init__(self, inner: Any, clock: WallClock):
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_clock", clock)

    def __getattr__(self, name):
        value = getattr(self._inner, name)
        part = self._methods.get(name)
        if part is None or not callable(value):
            return value
        clock = self._clock

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                clock.add_inner(part, time.perf_counter() - t0)
        return timed

    def __setattr__(self, name, value):
        setattr(self._inner, name, value)

    @property
    def wrapped(self):
        return self._inner


class TimedEngine(_Timed):
    _methods = {"generate": "generation"}


class TimedExecutor(_Timed):
    _methods = {"verify": "verification", "run": "verification"}


def attach(ctx) -> WallClock:
    """Wrap the run's engine and executor so that the clock sees their time."""
    clock = WallClock()
    if not isinstance(ctx.engine, _Timed):
        ctx.engine = TimedEngine(ctx.engine, clock)
    teacher = getattr(ctx, "teacher_engine", None)   # a frozen teacher generates too
    if teacher is not None and not isinstance(teacher, _Timed):
        ctx.teacher_engine = TimedEngine(teacher, clock)
    if not isinstance(ctx.executor, _Timed):
        ctx.executor = TimedExecutor(ctx.executor, clock)
    return clock
