"""One progress display for long work (rich), on stderr.

On a terminal it is a live bar (description, done/total, elapsed, time left) redrawn in place.
Anywhere else — a log file, CI, a pipe, Prefect's captured output — it writes plain lines that
are never redrawn: one per step, or one per 5 % of the total when there are more than
`LINE_PER_STEP_UP_TO` steps, so a captured log stays a few lines long and still says how far
the work is and how long the rest should take:

    verify: 120/600 samples (20%), 0:00:12 elapsed, about 0:00:48 left

The time left is the steps left at the mean pace so far: of the steps' own durations when the
caller reports them (`advance_to(done, step_seconds=...)`: a run's iterations, not its set-up),
else of the time since the start.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from typing import IO

LINE_PER_STEP_UP_TO = 100


def _clock(seconds: float) -> str:
    return str(timedelta(seconds=int(seconds)))


class StepProgress:
    def __init__(self, total: int | None, desc: str, unit: str = "step", *, file: IO | None = None,
                 terminal: bool | None = None, console=None):
        from rich.console import Console

        self.total, self.desc, self.unit = total, desc, unit
        self.done, self.postfix = 0, ""
        self._console = console or Console(file=file if file is not None else sys.stderr,
                                           force_terminal=terminal, highlight=False, soft_wrap=True)
        self._t0 = time.monotonic()
        self._step_seconds: list[float] = []
        self._last_mark = -1
        self._live = None
        if self._console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._live = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(),
                                  TextColumn("{task.fields[left]}"), TextColumn("{task.fields[postfix]}"),
                                  console=self._console, transient=False)
            self._live.start()
            self._task = self._live.add_task(desc, total=total, postfix="", left="")

    # Callers pass `bar.update` as a progress callback.
    def update(self, n: int = 1) -> None:
        self.advance_to(self.done + n)

    def advance_to(self, done: int, step_seconds: float | None = None) -> None:
        """`done` steps so far; `step_seconds`: how long the last one took (paces the estimate)."""
        self.done = done
        if step_seconds is not None:
            self._step_seconds.append(step_seconds)
        if self._live is not None:
            left = self.left()
            self._live.update(self._task, completed=self.done, total=self.total,
                              left=f"about {left} left" if left else "")
        else:
            self._line_if_due()

    def left(self) -> str | None:
        """The time the steps left should take at the mean pace so far (None: no estimate yet)."""
        if not self.total or self.done >= self.total:
            return None
        if self._step_seconds:
            pace = sum(self._step_seconds) / len(self._step_seconds)
        elif self.done:
            pace = (time.monotonic() - self._t0) / self.done
        else:
            return None
        return _clock(pace * (self.total - self.done))

    def set_total(self, total: int | None) -> None:
        self.total = total
        if self._live is not None:
            self._live.update(self._task, total=total)

    def reset(self, total: int | None = None) -> None:
        """Start counting again (a second phase of the same work)."""
        self.done, self.total, self._t0, self._last_mark = 0, total, time.monotonic(), -1
        self._step_seconds = []
        if self._live is not None:
            self._live.reset(self._task, total=total)

    def set_description(self, desc: str) -> None:
        self.desc = desc
        if self._live is not None:
            self._live.update(self._task, description=desc)

    def set_postfix(self, **values) -> None:
        self.postfix = ", ".join(f"{k} {v}" for k, v in values.items())
        if self._live is not None:
            self._live.update(self._task, postfix=self.postfix)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        elif self.done and self._last_mark != self._mark():
            self._line()

    def __enter__(self) -> "StepProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- plain lines ---------------------------------------------------------------------------
    def _mark(self) -> int:
        """Which line the current count belongs to: the step itself, or its 5 % bucket."""
        if not self.total or self.total <= LINE_PER_STEP_UP_TO:
            return self.done
        return self.done * 20 // self.total

    def _line_if_due(self) -> None:
        mark = self._mark()
        if mark != self._last_mark:
            self._line()

    def _line(self) -> None:
        self._last_mark = self._mark()
        elapsed = time.monotonic() - self._t0
        if self.total:
            text = (f"{self.desc}: {self.done}/{self.total} {self.unit}s "
                    f"({100 * self.done // self.total}%), {_clock(elapsed)} elapsed")
            left = self.left()
            if left:
                text += f", about {left} left"
        else:
            text = f"{self.desc}: {self.done} {self.unit}s, {_clock(elapsed)} elapsed"
        if self.postfix:
            text += f" ({self.postfix})"
        self._console.print(text, markup=False)
