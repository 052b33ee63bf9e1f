"""Trusted side of the executor: a pool of warm sandbox workers and the event loop that feeds
them jobs, relays their records to per-job callbacks and recovers from worker failures.

One thread drives all workers through `selectors`; no thread or `signal.alarm` is needed, so
the pool works from any thread (Prefect tasks, a learner's thread, a notebook).
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import time
from dataclasses import dataclass, field
from collections import deque
from typing import Callable, Sequence

from selfplay_core.sandbox import worker as _worker_mod
from selfplay_core.sandbox.backends import Launcher, WorkerProcess

log = logging.getLogger(__name__)

# Time granted on top of a job's own deadline before the parent declares the worker stuck.
_PARENT_GRACE_S = 10.0


@dataclass
class Job:
    """One program run: call mode (one child runs all tests) or stdin mode (one per test).

    `inputs_json` is a JSON array text: tagged-JSON argument lists (call) or strings (stdin).
    `on_record(record) -> bool` sees each result record as it arrives; returning False aborts
    the job (early exit).
    """

    mode: str
    code: str
    entry: str | None
    inputs_json: str
    n_tests: int
    time_limit: float
    memory_mb: int
    output_mb: int
    deadline: float
    on_record: Callable[[dict], bool] | None = None
    worker: int | None = None  # run on this worker slot (mod pool size); None: any


@dataclass
class JobOutcome:
    records: list[dict] = field(default_factory=list)
    end: dict = field(default_factory=dict)
    harness_error: str | None = None
    aborted: bool = False
    wall: float = 0.0


def _job_line(job_id: int, job: Job) -> bytes:
    head = json.dumps({
        "op": "run", "id": job_id, "mode": job.mode, "code": job.code, "entry": job.entry,
        "time_limit": job.time_limit, "memory_mb": job.memory_mb, "output_mb": job.output_mb,
        "deadline": job.deadline,
    })
    return (head[:-1] + ',"inputs":' + job.inputs_json + "}\n").encode()


def _parse_record(payload: bytes) -> dict:
    # Records come from untrusted code: decode defensively, never trust their shape.
    try:
        rec = _worker_mod.decode_value(payload)
    except (ValueError, RecursionError, TypeError, IndexError, KeyError, MemoryError,
            AttributeError, UnicodeDecodeError):
        return {"c": "corrupt"}
    if type(rec) is not dict:
        return {"c": "corrupt"}
    return rec


class _Slot:
    def __init__(self, index: int, proc: WorkerProcess):
        self.index = index
        self.proc = proc
        self.buf: list[bytes] = []  # a partial line, as chunks (joined once it completes)
        self.job_id: int | None = None
        self.started = 0.0
        self.abort_sent = False

    def feed(self, chunk: bytes) -> list[bytes]:
        """Complete lines in `chunk` (plus what was pending); linear in the data size."""
        self.buf.append(chunk)
        if b"\n" not in chunk:
            return []
        *lines, rest = b"".join(self.buf).split(b"\n")
        self.buf = [rest] if rest else []
        return lines


class WorkerPool:
    def __init__(self, launcher: Launcher, workers: int):
        self.launcher = launcher
        self.n = workers
        self._slots: list[_Slot] = []
        self._next_id = 0
        self.info: dict = {}

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        while len(self._slots) < self.n:
            i = len(self._slots)
            self._slots.append(_Slot(i, self._spawn(i)))

    def _spawn(self, index: int) -> WorkerProcess:
        proc = self.launcher.spawn(index)
        self.info = proc.ready_info
        return proc

    def _respawn(self, slot: _Slot) -> None:
        slot.proc.kill()
        slot.proc = self._spawn(slot.index)
        slot.buf = []
        slot.job_id = None
        slot.abort_sent = False

    def close(self) -> None:
        for s in self._slots:
            s.proc.close()
        self._slots.clear()

    # ---- running ---------------------------------------------------------------------------
    def run(self, jobs: Sequence[Job], on_done: Callable[[int, JobOutcome], None] | None = None
            ) -> list[JobOutcome]:
        self.start()
        outcomes = [JobOutcome() for _ in jobs]
        # Pinned jobs wait for their slot; the rest go to whichever slot frees up first.
        shared: deque[int] = deque()
        pinned: list[deque[int]] = [deque() for _ in self._slots]
        for i, job in enumerate(jobs):
            (shared if job.worker is None else pinned[job.worker % len(self._slots)]).append(i)
        by_id: dict[int, int] = {}
        sel = selectors.DefaultSelector()

        def dispatch(slot: _Slot) -> bool:
            own = pinned[slot.index]
            if own:
                idx = own.popleft()
            elif shared:
                idx = shared.popleft()
            else:
                return False
            self._next_id += 1
            jid = self._next_id
            by_id[jid] = idx
            slot.job_id, slot.started, slot.abort_sent = jid, time.monotonic(), False
            try:
                slot.proc.send(_job_line(jid, jobs[idx]))
            except OSError as e:
                finish(slot, harness=f"could not send job to sandbox worker: {e}")
            return True

        def finish(slot: _Slot, end: dict | None = None, harness: str | None = None) -> None:
            idx = by_id.pop(slot.job_id)
            out = outcomes[idx]
            out.wall = time.monotonic() - slot.started
            if end is not None:
                out.end = end
                if end.get("status") == "harness":
                    out.harness_error = end.get("note", "sandbox worker failed")
            if harness:
                out.harness_error = harness
            slot.job_id = None
            if on_done:
                on_done(idx, out)

        for slot in self._slots:
            sel.register(slot.proc.fileno(), selectors.EVENT_READ, slot)
            dispatch(slot)
        try:
            while any(s.job_id is not None for s in self._slots):
                now = time.monotonic()
                timeout = 1.0
                for slot in self._slots:
                    if slot.job_id is not None:
                        limit = jobs[by_id[slot.job_id]].deadline + _PARENT_GRACE_S
                        timeout = max(0.0, min(timeout, slot.started + limit - now))
                events = sel.select(timeout)
                for key, _ in events:
                    slot: _Slot = key.data
                    chunk = slot.proc.read_chunk()
                    if not chunk:
                        self._worker_lost(slot, sel, finish, "sandbox worker exited unexpectedly")
                        dispatch(slot)
                        continue
                    for line in slot.feed(chunk):
                        self._handle_line(slot, line, jobs, by_id, outcomes, finish)
                    if slot.job_id is None:
                        dispatch(slot)
                now = time.monotonic()
                for slot in self._slots:
                    if slot.job_id is not None:
                        limit = jobs[by_id[slot.job_id]].deadline + _PARENT_GRACE_S
                        if now - slot.started > limit:
                            self._worker_lost(slot, sel, finish,
                                              "sandbox worker stopped answering; restarted")
                            dispatch(slot)
        finally:
            sel.close()
        return outcomes

    def _worker_lost(self, slot: _Slot, sel, finish, why: str) -> None:
        if slot.job_id is not None:
            finish(slot, harness=why)
        sel.unregister(slot.proc.fileno())
        log.warning("%s (worker %d)", why, slot.index)
        self._respawn(slot)
        sel.register(slot.proc.fileno(), selectors.EVENT_READ, slot)

    def _handle_line(self, slot: _Slot, line: bytes, jobs, by_id, outcomes, finish) -> None:
        kind, _, rest = line.partition(b" ")
        sid, _, payload = rest.partition(b" ")
        try:
            jid = int(sid)
        except ValueError:
            return
        if jid != slot.job_id:
            return  # a late line from a job already finished
        idx = by_id[jid]
        if kind == b"R":
            out = outcomes[idx]
            if out.aborted:
                return
            rec = _parse_record(payload)
            out.records.append(rec)
            cb = jobs[idx].on_record
            if cb is not None and not cb(rec) and not slot.abort_sent:
                out.aborted = True
                slot.abort_sent = True
                try:
                    slot.proc.send(b'{"op":"abort","id":%d}\n' % jid)
                except OSError:
                    pass
        elif kind == b"E":
            try:
                end = json.loads(payload)
            except ValueError:
                end = {"status": "harness", "note": "unreadable end record"}
            finish(slot, end=end)
