"""Each loop stage as a Prefect task: a named task run per stage and iteration in the UI.

Stages take live objects (model, engine, executor) as arguments, so there is no result
persistence or input hashing (NO_CACHE); retries stay off, since a stage mutates run state
and the flow-level resume is what makes a crash cheap. A stage may have a timeout
(`flow.timeouts` of the run config): past it the task fails and so does the flow run, whose
retry resumes from the last complete iteration.

Arguments are passed wrapped in Prefect's `quote`: otherwise Prefect walks every argument
before each task run (twice: to resolve upstream futures and to record them as the run's
inputs), which for the run context, its problems, buffers and state is ~71,000 objects and
~1 s per stage. Stages run in-process and take live objects, never futures, so there is
nothing to find.
"""

from __future__ import annotations

import logging
from typing import Callable

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.task_engine import TaskRunTimeoutError
from prefect.utilities.annotations import quote

log = logging.getLogger(__name__)

_TASKS: dict[tuple[str, Callable, float | None], object] = {}

# Callables told the name of each stage as it starts (the CLI's progress display).
stage_listeners: list[Callable[[str], None]] = []


def as_task(name: str, fn: Callable, *args, timeout_s: float | None = None):
    """Run `fn(*args)` as the Prefect task `name`, failing it after `timeout_s` seconds (None:
    no limit). A bound method (a method's hook, e.g. a round's `propose`) becomes a task of its
    function with the object as first argument, so one task serves every iteration's round
    object."""
    for listener in stage_listeners:
        listener(name)
    owner = getattr(fn, "__self__", None)
    if owner is not None:
        fn, args = fn.__func__, (owner, *args)
    key = (name, fn, timeout_s)
    t = _TASKS.get(key)
    if t is None:
        t = task(fn, name=name, cache_policy=NO_CACHE, persist_result=False, log_prints=True,
                 timeout_seconds=timeout_s)
        _TASKS[key] = t
    return t(*(quote(a) for a in args))


def stage_caller(timeouts) -> Callable:
    """The `call(name, fn, *args)` of the self-play flow: each stage a task limited by its key of
    `timeouts` (a config.StageTimeouts). A stage past its limit raises TaskRunTimeoutError after
    one line naming the key to raise."""

    def call(name: str, fn: Callable, *args):
        limit = timeouts.for_stage(name)
        try:
            return as_task(name, fn, *args, timeout_s=limit)
        except TaskRunTimeoutError:
            key = timeouts.key_of(name)
            log.error("stage %s ran past its limit of %g s (flow.timeouts.%s) and was stopped; "
                      "if it is only slow, raise flow.timeouts.%s", name, limit, key, key)
            raise

    return call
