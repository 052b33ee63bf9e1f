"""Each loop stage as a Prefect task: a named task run per stage and iteration in the UI.

Stages take live objects (model, engine, executor) as arguments, so there is no result
persistence or input hashing (NO_CACHE); retries stay off, since a stage mutates run state
and the flow-level resume is what makes a crash cheap.
"""

from __future__ import annotations

from typing import Callable

from prefect import task
from prefect.cache_policies import NO_CACHE

_TASKS: dict[tuple[str, Callable], object] = {}

# Callables told the name of each stage as it starts (the CLI's progress display).
stage_listeners: list[Callable[[str], None]] = []


def as_task(name: str, fn: Callable, *args):
    """Run `fn(*args)` as the Prefect task `name`. A bound method (a method's hook, e.g. a round's
    `propose`) becomes a task of its function with the object as first argument, so one task
    serves every iteration's round object."""
    for listener in stage_listeners:
        listener(name)
    owner = getattr(fn, "__self__", None)
    if owner is not None:
        fn, args = fn.__func__, (owner, *args)
    key = (name, fn)
    t = _TASKS.get(key)
    if t is None:
        t = task(fn, name=name, cache_policy=NO_CACHE, persist_result=False, log_prints=True)
        _TASKS[key] = t
    return t(*args)
