"""SIGINT and SIGTERM end a run between stages, never inside one.

A run's state is saved atomically after each complete iteration, so stopping anywhere is safe
(a SIGKILL test shows it); stopping *cleanly* means more: no traceback, the MLflow run marked
KILLED, the Prefect flow run Cancelled rather than Crashed, and one line saying how to resume.
A signal that lands inside a stage (a Prefect task, whose engine reports any exception raised
in it as a crash) or while an iteration is being committed (checkpoint, state, MLflow) is held
until that stage or commit ends; anywhere else (model loading, goalpost mining, between stages)
it stops the run at once. A second signal stops it at once wherever it is: for a stage that
takes too long, at the price of the engine's crash report.

The CLI arms this (`arm`); the driver installs the handlers for the length of a run (`trap`),
inside the Prefect flow, whose engine installs its own SIGTERM handler when the flow starts. A
flow run started by a Prefect worker is not armed: there SIGTERM is how the worker cancels it.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager

_armed = False
_requested: str | None = None   # the signal's name, once one arrived
_depth = 0                      # nesting of `deferred` blocks on the main thread


class RunInterrupted(BaseException):
    """The run was stopped by a signal (a BaseException, as KeyboardInterrupt is: no `except
    Exception` on the way mistakes it for a failure to handle)."""

    def __init__(self, signame: str):
        super().__init__(signame)
        self.signame = signame


def arm() -> None:
    """Make the next runs in this process stop cleanly on SIGINT / SIGTERM (the CLI calls it)."""
    global _armed
    _armed = True


def _handler(signum, frame) -> None:
    global _requested
    name = signal.Signals(signum).name
    if _requested is not None or _depth == 0:
        _requested = name
        raise RunInterrupted(name)
    _requested = name
    os.write(2, f"\n{name}: stopping after the current stage (again to stop at once)\n".encode())


@contextmanager
def trap():
    """SIGINT / SIGTERM raise RunInterrupted (see the module doc) while the block runs, if armed
    and on the main thread; the previous handlers come back afterwards."""
    global _requested, _depth
    if not _armed or threading.current_thread() is not threading.main_thread():
        yield
        return
    _requested, _depth = None, 0
    previous = {s: signal.signal(s, _handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextmanager
def deferred():
    """A signal that arrives in the block stops the run when the block ends, not inside it."""
    global _depth
    main = threading.current_thread() is threading.main_thread()
    if main:
        _depth += 1
    try:
        yield
    finally:
        if main:
            _depth -= 1
    if main and _depth == 0 and _requested is not None:
        raise RunInterrupted(_requested)


def requested() -> str | None:
    """The name of the signal that stopped (or is stopping) the last trapped run, if any."""
    return _requested
