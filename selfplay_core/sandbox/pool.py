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

from selfplay_core.sandbox.backends import Launcher, WorkerProcess

log = logging.getLogger(__name__)

# A worker with a job that has said nothing for this long is stuck (it sends a keepalive at
# least every worker._KEEPALIVE_S). Silence, not the job's deadline: the worker stretches
# deadlines by the time its child waited for a CPU, which only it can see, so on a loaded
# machine a healthy worker can run past the deadline the parent knows.
_SILENCE_S = 30.0


@dataclass
class Job:
    """One program run: call mode (one child runs all tests) or stdin mode (one per test).

    `inputs_json` is a JSON array text: tagged-JSON argument lists (call) or strings (stdin).
    `on_record(test, wall_s, cpu_s, payload) -> bool` sees each test result as it arrives
    (test index and times measured by the worker, payload as sent: see `worker`); returning False
    aborts the job (early exit). Records are never buffered here.
    `pure`: run under an import allow-list with the pure seccomp profile (reference runs):
    `{"allowed": [...], "clock_offset": seconds}`.
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
    on_record: Callable[[int, float, float, bytes], bool] | None = None
    worker: int | None = None  # run on this worker slot (mod pool size); None: any
    pure: dict | None = None


@dataclass
class JobOutcome:
    end: dict = field(default_factory=dict)
    harness_error: str | None = None
    aborted: bool = False
    wall: float = 0.0


def _job_line(job_id: int, job: Job) -> bytes:
    head = {
        "op": "run", "id": job_id, "mode": job.mode, "code": job.code, "entry": job.entry,
        "time_limit": job.time_limit, "memory_mb": job.memory_mb, "output_mb": job.output_mb,
        "deadline": job.deadline,
    }
    if job.pure is not None:
        head["pure"] = job.pure
    text = json.dumps(head)
    return (text[:-1] + ',"inputs":' + job.inputs_json + "}\n").encode()


class _BadLine(ValueError):
    """A worker line that breaks the framing: the worker (trusted code) is broken."""


def _parse_result(rest: bytes) -> tuple[int, float, float, bytes]:
    """`<test> <wall seconds> <cpu seconds> <payload>` of an R line."""
    i, _, rest = rest.partition(b" ")
    wall, _, rest = rest.partition(b" ")
    cpu, _, payload = rest.partition(b" ")
    if not (i.isdigit() and len(i) < 10) or len(wall) > 20 or len(cpu) > 20:
        raise _BadLine("bad result framing")
    try:
        secs = float(wall), float(cpu)
    except ValueError:
        raise _BadLine("bad result time") from None
    if not all(0.0 <= x < 1e7 for x in secs):
        raise _BadLine("bad result time")
    return int(i), secs[0], secs[1], payload


class _Slot:
    def __init__(self, index: int, proc: WorkerProcess):
        self.index = index
        self.proc = proc
        self.buf: list[bytes] = []  # a partial line, as chunks (joined once it completes)
        # Jobs sent to this worker, oldest (the running one) first. Up to `_DEPTH` are sent
        # ahead, so the worker starts its next job without waiting for a round trip to us.
        self.queue: deque[int] = deque()
        self.started = 0.0        # when the running job started (as far as we can tell)
        self.heard = 0.0          # when the worker last sent anything (or its job started)
        self.aborted: set[int] = set()
        self.restart = False      # the worker said it will exit after its job: replace it

    @property
    def job_id(self) -> int | None:
        return self.queue[0] if self.queue else None

    def feed(self, chunk: bytes) -> list[bytes]:
        """Complete lines in `chunk` (plus what was pending); linear in the data size."""
        self.buf.append(chunk)
        if b"\n" not in chunk:
            return []
        *lines, rest = b"".join(self.buf).split(b"\n")
        self.buf = [rest] if rest else []
        return lines


_DEPTH = 2
# A job is sent ahead (while its worker runs another one) only if its line fits the pipe
# unread: a longer write would block this loop while the worker may be blocked writing its
# results to us.
_AHEAD_MAX_BYTES = 32 << 10


class WorkerPool:
    """`spawn_args[i]` (optional) are extra keyword arguments for slot i's `launcher.spawn`
    (hash seed, preload list: the reference pool uses them)."""

    def __init__(self, launcher: Launcher, workers: int, spawn_args: list[dict] | None = None,
                 index_base: int = 0):
        self.launcher = launcher
        self.n = workers
        self.spawn_args = spawn_args or [{} for _ in range(workers)]
        self.index_base = index_base
        self._slots: list[_Slot] = []
        self._next_id = 0
        self.info: dict = {}
        self.respawns = 0

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        while len(self._slots) < self.n:
            i = len(self._slots)
            self._slots.append(_Slot(i, self._spawn(i)))

    def _spawn(self, index: int) -> WorkerProcess:
        proc = self.launcher.spawn(self.index_base + index, **self.spawn_args[index])
        self.info = proc.ready_info
        return proc

    def _respawn(self, slot: _Slot) -> None:
        slot.proc.kill()
        self.respawns += 1
        slot.proc = self._spawn(slot.index)
        slot.buf = []
        slot.queue.clear()
        slot.aborted.clear()
        slot.restart = False

    def ready_infos(self) -> list[dict]:
        self.start()
        return [s.proc.ready_info for s in self._slots]

    def close(self) -> None:
        for s in self._slots:
            s.proc.close()
        self._slots.clear()

    # ---- running ---------------------------------------------------------------------------
    def run(self, jobs: Sequence[Job], on_done: Callable[[int, JobOutcome], None] | None = None
            ) -> list[JobOutcome]:
        self.start()
        outcomes = [JobOutcome() for _ in jobs]
        # Pinned jobs wait for their slot; the rest go to whichever slot has room first.
        shared: deque[int] = deque()
        pinned: list[deque[int]] = [deque() for _ in self._slots]
        for i, job in enumerate(jobs):
            (shared if job.worker is None else pinned[job.worker % len(self._slots)]).append(i)
        by_id: dict[int, int] = {}
        sel = selectors.DefaultSelector()

        def replace(slot: _Slot) -> None:
            """A fresh worker in this slot; jobs still queued there (sent, not started: the
            running one has been finished by the caller) go back to be sent again."""
            for jid in reversed(slot.queue):
                idx = by_id.pop(jid)
                (shared if jobs[idx].worker is None else pinned[slot.index]).appendleft(idx)
            slot.queue.clear()
            sel.unregister(slot.proc.fileno())
            self._respawn(slot)
            sel.register(slot.proc.fileno(), selectors.EVENT_READ, slot)

        def send_one(slot: _Slot) -> bool:
            own = pinned[slot.index]
            source = own if own else shared
            if not source:
                return False
            idx = source[0]
            job = jobs[idx]
            if slot.queue and (len(job.code) + len(job.inputs_json) > _AHEAD_MAX_BYTES
                               or not getattr(slot.proc, "job_fits", lambda mb: True)(job.memory_mb)):
                return False  # wait for the worker to be idle (see _AHEAD_MAX_BYTES; cgroups)
            self._next_id += 1
            jid = self._next_id
            line = _job_line(jid, job)
            if slot.queue and len(line) > _AHEAD_MAX_BYTES:
                return False  # escaping made it longer than it looked
            limit = getattr(slot.proc, "limit_memory", None)
            if limit is not None and not slot.queue:
                limit(job.memory_mb)  # the worker is idle: set its cgroup to this job's limit
            source.popleft()
            by_id[jid] = idx
            if not slot.queue:
                slot.started = slot.heard = time.monotonic()
            slot.queue.append(jid)
            for attempt in (0, 1):
                try:
                    slot.proc.send(line)
                    return True
                except OSError as e:
                    if attempt or len(slot.queue) > 1:
                        # A fresh worker refused it too (or others are queued there): the
                        # harness is broken; report this job, the rest is handled on EOF.
                        finish(slot, jid, harness=f"could not send job to sandbox worker: {e}")
                        return True
                    # The worker died while idle (nobody's fault): replace it and retry.
                    slot.queue.clear()
                    replace(slot)
                    slot.queue.append(jid)
                    slot.started = slot.heard = time.monotonic()
            return True

        def dispatch(slot: _Slot) -> None:
            if slot.restart:
                # The worker exits after the job it finished: jobs sent behind that one never
                # started there, so they go to its replacement, never charged to it.
                replace(slot)
            while len(slot.queue) < _DEPTH and send_one(slot):
                pass

        def finish(slot: _Slot, jid: int, end: dict | None = None, harness: str | None = None) -> None:
            idx = by_id.pop(jid)
            out = outcomes[idx]
            now = time.monotonic()
            out.wall = now - slot.started
            if end is not None:
                out.end = end
                if end.get("status") == "harness":
                    out.harness_error = str(end.get("note", "sandbox worker failed"))[:300]
                if end.get("restart"):
                    slot.restart = True
            if harness:
                out.harness_error = harness
            out.aborted = out.aborted or jid in slot.aborted
            slot.aborted.discard(jid)
            if jid in slot.queue:
                slot.queue.remove(jid)
            slot.started = slot.heard = now
            if on_done:
                on_done(idx, out)

        def lost(slot: _Slot, why: str) -> None:
            if slot.queue:
                finish(slot, slot.queue[0], harness=why)
            log.warning("%s (worker %d)", why, slot.index)
            replace(slot)

        for slot in self._slots:
            sel.register(slot.proc.fileno(), selectors.EVENT_READ, slot)
            dispatch(slot)
        try:
            while any(s.queue for s in self._slots):
                now = time.monotonic()
                timeout = 1.0
                for slot in self._slots:
                    if slot.queue:
                        timeout = max(0.0, min(timeout, slot.heard + _SILENCE_S - now))
                events = sel.select(timeout)
                for key, _ in events:
                    slot: _Slot = key.data
                    chunk = slot.proc.read_chunk()
                    slot.heard = time.monotonic()
                    if not chunk:
                        lost(slot, "sandbox worker exited unexpectedly")
                        dispatch(slot)
                        continue
                    for line in slot.feed(chunk):
                        try:
                            self._handle_line(slot, line, jobs, by_id, outcomes, finish)
                        except _BadLine as e:
                            if slot.queue:
                                finish(slot, slot.queue[0],
                                       harness=f"sandbox worker sent a bad line ({e})")
                            slot.restart = True
                    dispatch(slot)
                now = time.monotonic()
                for slot in self._slots:
                    if slot.queue and now - slot.heard > _SILENCE_S:
                        lost(slot, "sandbox worker stopped answering; restarted")
                        dispatch(slot)
        finally:
            sel.close()
        return outcomes

    def _handle_line(self, slot: _Slot, line: bytes, jobs, by_id, outcomes, finish) -> None:
        kind, _, rest = line.partition(b" ")
        sid, _, payload = rest.partition(b" ")
        try:
            jid = int(sid)
        except ValueError:
            raise _BadLine("bad job id") from None
        if jid != slot.job_id:
            return  # a late line from a job already finished
        idx = by_id[jid]
        if kind == b"R":
            out = outcomes[idx]
            if jid in slot.aborted:
                return
            test, wall, cpu, data = _parse_result(payload)
            cb = jobs[idx].on_record
            if cb is not None and not cb(test, wall, cpu, data):
                slot.aborted.add(jid)
                out.aborted = True
                try:
                    slot.proc.send(b'{"op":"abort","id":%d}\n' % jid)
                except OSError:
                    pass
        elif kind == b"K":
            return  # alive (every byte from the worker already counted as such)
        elif kind == b"E":
            try:
                end = json.loads(payload)
            except (ValueError, RecursionError):
                end = None
            if type(end) is not dict or type(end.get("status")) is not str:
                raise _BadLine("unreadable end record")
            finish(slot, jid, end=end)
        else:
            raise _BadLine("unknown line type")
