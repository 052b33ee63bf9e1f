"""The sandbox worker: a small, warm, stdlib-only fork server.

This file runs in two places:

* as the worker (``python -I -S -c <this source> <uid> <isolation> ...``), started by a backend
  inside bubblewrap or a container. The first process loads what programs need and becomes
  the zygote (pid 1 of the sandbox), which never reads a job; it forks the worker, which speaks
  to the parent, and, on the worker's request, one child per job. The child reads its own job
  from a pipe, drops privileges, applies rlimits and a seccomp filter, and runs the untrusted
  code: every call test in that process, or (stdin) every test in a runner process forked from
  it, whose results it relays (a new runner when one ends its process);
* imported by the trusted parent, which also re-exports the value codec from it (the one codec
  shared by both sides lives in `selfplay_core/values.py`; the worker's program is the codec's
  and the seccomp filters' sources followed by this one's, see `backends.worker_source`).

It must import nothing outside the standard library and must stay light: every fork copies it.

Wire protocol, parent <-> worker (newline-delimited; the worker is trusted):

parent -> worker   ``{"op": "run", "id", "mode": "call"|"stdin", "code", "entry", "inputs",
                     "time_limit", "memory_mb", "output_mb", "deadline"[, "pure"]}`` |
                   ``{"op": "abort", "id"}``
worker -> parent   ``READY <json>`` once; then per job ``R <id> <test> <seconds> <payload>``
                   per test result and ``E <id> <json>`` once at its end. The test index and
                   the time are the worker's own (its clock, its count); the payload is one of
                   ``O <tagged json>`` (a call result, decoded strictly by the parent),
                   ``E <json {"e", "m"}>`` (an exception), ``U <json {"m"}>`` (unserializable
                   result), ``S <json string>`` (a stdin program's stdout); and
                   ``K <id>`` at least every `_KEEPALIVE_S` while a job's child runs (the
                   worker is alive: its deadlines stretch with time spent waiting for a CPU,
                   which the parent cannot see, so the parent watches for silence instead).

Child -> worker (the result pipe; untrusted once the program runs): one ASCII line per message.

    S                    set-up done (written by trusted code before any untrusted code runs)
    H <text>             set-up failed (only valid before S: the one harness error of a child)
    C <text>             compile error           X <name> <text>   load error (call mode)
    L                    loaded: module ran, entry found, Solution() built (call mode);
                         compiled (stdin mode)
    O <json>             one test's result        E <name> <text>   one test raised
    U <text>             result not serializable
  stdin mode (runners never hold this pipe: the child relays their result lines, and turns
  anything else a runner writes into "?", a corrupt channel):
    P <pid>              a runner started          S <json string>   one test's stdout
    E <name> <text>      one test raised / exited non-zero        V  its stdout was over the cap
    X <status> <cpu>     the runner is gone (wait status, its CPU seconds)

The worker checks every line against this grammar and its position; anything else ends the
job as ``corrupt`` (that sample's runtime error). Time is the worker's: every window (set-up,
load incl. ``Solution()`` construction, each test) is enforced by the worker's clock and a
SIGKILL, whatever the child does with its own signals. Expected outputs never reach this
process.
"""

import json
import os
import sys

# Worker-side state, set in main().
_UID = None  # uid the children run as (None: cannot drop privileges)
_ISOLATION = "none"
_SCRATCH_ROOT = "/tmp/sp-scratch"
_SECCOMP = None  # (base filter, pure filter) as ctypes sock_fprog objects, or None
_MEMCG = False   # the worker lives in a memory cgroup of its own (the parent set its limit)
_CPUCG_DIR = None  # this worker's job CPU cgroup (cgroup v1 cpuacct), if the parent made one
_CPUCG = None      # its (cpuacct.usage, cgroup.procs for writing) fds

# Modules solutions commonly use. Importing them once here makes every child start warm and
# keeps imports working after the child has dropped to a uid that cannot read the stdlib dir.
# Every preloaded module makes every fork dearer (page tables), so the list stays short.
_PRELOAD = (
    "math cmath collections itertools functools heapq bisect re string typing operator copy "
    "random decimal fractions statistics datetime array enum dataclasses abc numbers "
    "io traceback errno"
).split()
# What the worker itself needs, also when a reference pool preloads only its allow-list.
_ESSENTIAL = "time signal resource select struct ctypes hashlib marshal platform".split()

_START_S = 10.0          # fork -> "S": trusted set-up; longer means the machine is stuck
_KEEPALIVE_S = 2.0       # "K <id>" to the parent at least this often while a job runs
_LINE_MAX = 4096         # any child line other than "O"
_NAME_MAX = 100
_TEXT_MAX = 300


# --------------------------------------------------------------------------------------------
# Value codec: selfplay_core/values.py. The trusted parent imports it here; in the sandbox this
# file runs as __main__ with the codec's source ahead of it (backends.worker_source).
# --------------------------------------------------------------------------------------------

if __name__ != "__main__":
    from selfplay_core.values import (  # noqa: F401 - the names the worker's users import from it
        _BIG, _LARGE, Digest, Opaque, Unserializable, _digest, _hashable, _is_large, _plain,
        _untag, decode_value, encode_value, from_json_obj)


# --------------------------------------------------------------------------------------------
# Seccomp: selfplay_core/sandbox/seccomp.py. In the sandbox its source runs ahead of this
# file's (backends.worker_source); the trusted parent never needs it.
# --------------------------------------------------------------------------------------------

if __name__ != "__main__":  # imported by the parent: the worker's main() is not run here
    from selfplay_core.sandbox.seccomp import build_filters, install_filter  # noqa: F401


# --------------------------------------------------------------------------------------------
# Child side: runs untrusted code. Everything below happens after fork, in the child only.
# --------------------------------------------------------------------------------------------

def _confine(job, scratch, out_fd, in_path, err_fd):
    """Drop privileges, set limits, install seccomp. Runs before any untrusted code."""
    import resource
    import signal

    os.setpgid(0, 0)  # own process group; setsid() would build a scheduler autogroup (slow)
    # Standard streams: stdin from the test input (or /dev/null), stdout to a file in scratch
    # whose size RLIMIT_FSIZE caps, stderr to a pipe the worker drains and keeps the head of
    # (never compared: it cannot change a verdict). Nothing else stays open but the result pipe.
    fd0 = os.open(in_path or "/dev/null", os.O_RDONLY)
    os.dup2(fd0, 0)
    os.close(fd0)
    if _MEMCG:
        # When the cgroup runs out, its OOM killer must pick the job, never the worker.
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        os.write(fd, b"1000")
        os.close(fd)
    if _UID is not None:
        os.setgroups([])
        os.setgid(_UID)
        os.setuid(_UID)
    os.chdir(scratch)
    fd1 = os.open(os.path.join(scratch, "stdout"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd1, 1)
    os.close(fd1)
    os.dup2(err_fd, 2)
    os.close(err_fd)
    os.closerange(3, out_fd)
    os.closerange(out_fd + 1, 65536)
    mem = int(job["memory_mb"]) << 20
    out = int(job["output_mb"]) << 20
    cpu = max(1, int(job["deadline"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_DATA, (mem, mem))
    resource.setrlimit(resource.RLIMIT_FSIZE, (out, out))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, 0))
    if _UID is not None:
        # Counted per uid, so only meaningful once we run as a uid of our own.
        resource.setrlimit(resource.RLIMIT_NPROC, (16, 16))
    # CPython ignores SIGXFSZ; restore the default so exceeding the output cap ends the run.
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    # The environment (PATH, LANG) and sys.std* (unbuffered so far, on fds 0-2 that were just
    # re-pointed) were set up once in the worker; only the scratch paths are per job.
    os.environ["HOME"] = os.environ["TMPDIR"] = scratch
    sys.argv = ["solution.py"]
    sys.setrecursionlimit(10000)
    pure = job.get("pure")
    if pure is not None:
        for name in sorted(pure["allowed"]):
            try:
                __import__(name)  # loaded now: the program's imports then need no file access
            except ImportError:
                pass
        if _SECCOMP is None:
            raise OSError("reference runs need the seccomp filter (x86-64 only)")
        install_filter(_SECCOMP, "pure")
        _purify(pure)  # after seccomp: its ctypes calls would trip the audit hook


class BannedImport(ImportError):
    """A reference program reached for a module (or an OS facility) outside its allow-list."""


def _purify(pure):
    """Reference runs under an import allow-list: every import the program makes is checked
    at run time (import statements and __import__ through its builtins; importlib and any
    other route end in the audit hook's "import"/"open" events), and sensitive audit events
    (files, processes, sockets, ctypes, new module loads) raise. With `clock_probe` the clock
    is broken (see _break_clock). The pure seccomp filter, installed before this, refuses the
    OS calls themselves, whatever route reaches them."""
    import builtins
    import time

    allowed = frozenset(pure["allowed"])
    real_import = builtins.__import__

    def guarded(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name.partition(".")[0] not in allowed:
            raise BannedImport("import of %r is not allowed here" % name)
        return real_import(name, globals, locals, fromlist, level)

    _PROGRAM_BUILTINS.update(vars(builtins))
    _PROGRAM_BUILTINS["__import__"] = guarded

    blocked = ("open", "os.", "shutil.", "subprocess.", "socket.", "ctypes.", "mmap.",
               "gc.get_", "sys._current_frames", "pty.", "resource.setrlimit", "signal.")

    def hook(event, args):
        if event == "import":
            if args and str(args[0]).partition(".")[0] not in allowed:
                raise BannedImport("import of %r is not allowed here" % (args[0],))
        elif event.startswith(blocked):
            raise BannedImport("%s is not allowed here" % event)

    sys.addaudithook(hook)
    if pure.get("clock_probe"):
        _break_clock(time)


def _break_clock(time):
    """The determinism probe's clock: every reading is NaN (floats) or an error (integers,
    broken-down times), so whatever the program computes from the clock differs from the
    run with the real clock (an hour bucket, a parity, an elapsed-time loop), instead of
    matching it by chance as a shifted clock would for about half of the buckets."""
    nan = float("nan")

    def no_clock(*args, **kw):
        raise OSError("the clock is not available here")

    for name in ("time", "monotonic", "perf_counter", "process_time", "thread_time"):
        setattr(time, name, lambda: nan)
    for name in ("time_ns", "monotonic_ns", "perf_counter_ns", "process_time_ns",
                 "thread_time_ns", "clock_gettime", "clock_gettime_ns"):
        setattr(time, name, no_clock)
    for name in ("localtime", "gmtime", "ctime"):
        real = getattr(time, name)
        setattr(time, name, (lambda f: lambda *a: f(*a) if a and a[0] is not None else no_clock())(real))
    real_strftime = time.strftime
    time.strftime = lambda fmt, *a: real_strftime(fmt, *a) if a else no_clock()
    real_asctime = time.asctime
    time.asctime = lambda *a: real_asctime(*a) if a else no_clock()


# The builtins the program's module namespace sees: the real ones, or a guarded copy.
_PROGRAM_BUILTINS = {}


def _program_globals():
    return {"__name__": "__main__",
            "__builtins__": _PROGRAM_BUILTINS if _PROGRAM_BUILTINS else __builtins__}


def _line(fd, data):
    data += b"\n"
    while data:
        data = data[os.write(fd, data):]


def _clean(text, limit=_TEXT_MAX):
    try:
        s = str(text)[:limit]
    except BaseException:
        s = "?"
    return s.replace("\n", " ").replace("\r", " ").encode("ascii", "backslashreplace")[:limit * 4]


def _ename(e):
    return type(e).__name__[:_NAME_MAX].encode("ascii", "replace") or b"Exception"


def _child_call(job, fd):
    """Run every call test in this one process, one result line per test, in order."""
    try:
        code = compile(job["code"], "solution.py", "exec")
    except BaseException as e:  # SyntaxError, ValueError (NUL bytes), MemoryError, RecursionError
        _line(fd, b"C " + _ename(e) + b": " + _clean(e))
        return
    g = _program_globals()
    try:
        exec(code, g)
        entry = job["entry"]
        if "." in entry:
            cls_name, meth = entry.split(".", 1)
            if cls_name not in g:
                raise LookupError("%s not defined" % cls_name)
            fn = getattr(g[cls_name](), meth)
        else:
            if entry not in g:
                raise LookupError("%s not defined" % entry)
            fn = g[entry]
    except BaseException as e:
        name = b"MissingEntryPoint" if type(e) is LookupError else _ename(e)
        _line(fd, b"X " + name + b" " + _clean(e))
        return
    _line(fd, b"L")
    for raw in job["inputs"]:
        args = from_json_obj(raw)
        try:
            out = fn(*args)
        except BaseException as e:
            _line(fd, b"E " + _ename(e) + b" " + _clean(e))
            if isinstance(e, MemoryError):
                return  # the process state is no longer trustworthy
            continue
        try:
            enc = None
            if _is_large(out):
                try:
                    enc = '{"__h__":"%s"}' % _digest(out)
                except ValueError:  # not marshallable: a non-plain object
                    pass
            if enc is None:
                enc = encode_value(out)
        except BaseException as e:
            _line(fd, b"U " + _clean(e))
            continue
        _line(fd, b"O " + enc.encode("ascii"))


_BETWEEN_TESTS = 86  # a runner's exit status when it stopped between two tests


def _child_stdin_batch(job, fd):
    """Stdin mode: compile once, then run the sample's tests in a runner process forked from
    this one (whose memory holds only this sample's job). The runner runs test after test
    in-process (fresh globals, fresh streams, the test's input file on fd 0, a file of its own
    on fd 1) and writes each result to this process, which alone speaks to the worker: it
    relays result lines ("S", "E", "V"; anything else becomes "?", a corrupt channel), so the
    program cannot forge the framing ("P <pid>" when a runner starts, "X <wait status> <cpu>"
    when it is gone) that opens and closes time windows. A program that ends its process
    (os._exit after printing, a crash) ends only its test: this process reports that test
    from the exit status and forks a new runner for the next one."""
    import ctypes
    try:
        code = compile(job["code"], "solution.py", "exec")
    except BaseException as e:
        _line(fd, b"C " + _ename(e) + b": " + _clean(e))
        return 1
    # A runner shares this process's uid: keep it from reading or writing this one's memory.
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    _line(fd, b"L")
    n = len(job["inputs"])
    cap = int(job["output_mb"]) << 20
    scratch = _scratch_path(job["id"])
    k = 0
    while k < n:
        rr, rw = os.pipe()
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                os.close(rr)
                os.close(fd)  # the worker's channel stays here
                status = _runner(job, code, k, rw, cap)
            finally:
                os._exit(status)
        os.close(rw)
        _line(fd, b"P %d" % pid)
        done = _relay(pid, rr, fd)
        os.close(rr)
        _, st, ru = os.wait4(pid, 0)
        k += done
        if k < n and os.WIFEXITED(st) and os.WEXITSTATUS(st) != _BETWEEN_TESTS:
            # The runner ended inside test k: the test's outcome is its process's.
            if os.WEXITSTATUS(st) == 0:
                out = _read_output(os.path.join(scratch, "out-%d" % k), cap + 1)
                _line(fd, b"V" if len(out) > cap else
                      b"S " + json.dumps(out.decode("utf-8", "replace")).encode())
            else:
                _line(fd, b"E NonZeroExit exit status %d" % os.WEXITSTATUS(st))
            k += 1
        _line(fd, b"X %d %.6f" % (st, ru.ru_utime + ru.ru_stime))
        if not os.WIFEXITED(st):
            return 1  # killed (limits): the worker ends the job
    return 0


def _relay(pid, rr, fd):
    """Relay a runner's result lines to the worker until the runner exits (not until EOF:
    processes it left may hold the pipe); the number of results relayed."""
    import select
    pfd = _pidfd(pid)
    parts, count, eof = [], 0, False
    while True:
        if pfd >= 0:
            ready = select.select(([] if eof else [rr]) + [pfd], [], [])[0]
            gone = pfd in ready
        else:
            ready = select.select([] if eof else [rr], [], [], 0.01)[0]
            gone = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        chunks = []
        if gone:
            os.set_blocking(rr, False)
            while not eof:
                try:
                    chunk = os.read(rr, 1 << 16)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        elif rr in ready:
            chunk = os.read(rr, 1 << 16)
            if chunk:
                chunks.append(chunk)
            else:
                eof = True  # the runner closed it: wait for its exit
        for chunk in chunks:
            parts.append(chunk)
            if b"\n" in chunk:
                *lines, rest = b"".join(parts).split(b"\n")
                parts = [rest]
                for line in lines:
                    if line[:2] in (b"S ", b"E ") or line == b"V":
                        _line(fd, line)
                        count += 1
                    else:
                        _line(fd, b"?")  # not a result: the worker ends the job as corrupt
        if gone:
            break
    if pfd >= 0:
        os.close(pfd)
    return count


def _runner(job, code, k, fd, cap):
    """Run tests k.. of a stdin job in this process; one result line per test to `fd`."""
    stem = _input_path(job["id"])
    n = len(job["inputs"])
    scratch = _scratch_path(job["id"])
    while k < n:
        os.chdir(scratch)
        _tidy_scratch()
        f0 = os.open("%s-%d" % (stem, k), os.O_RDONLY)
        os.dup2(f0, 0)
        os.close(f0)
        f1 = os.open("out-%d" % k, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f1, 1)
        os.close(f1)
        sys.stdin = sys.__stdin__ = open(0, "r", closefd=False)
        sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)
        failed = None
        try:
            exec(code, _program_globals())
        except SystemExit as e:
            if e.code not in (None, 0):
                failed = b"E SystemExit " + _clean(e.code, 100)
        except BaseException as e:
            failed = b"E " + _ename(e) + b" " + _clean(e)
            if isinstance(e, MemoryError):
                _line(fd, failed)
                return _BETWEEN_TESTS  # the process is no longer trustworthy: a new runner
        try:
            sys.stdout.flush()
        except BaseException:
            pass
        if failed is None:
            out = _read_output(os.path.join(scratch, "out-%d" % k), cap + 1)
            if len(out) > cap:
                _line(fd, b"V")
                return 1
            _line(fd, b"S " + json.dumps(out.decode("utf-8", "replace")).encode())
        else:
            _line(fd, failed)
        k += 1
    return 0


def _tidy_scratch():
    """Best effort, between two tests of one sample: what one left is gone for the next (a
    courtesy within a sample, not a boundary; samples never share a scratch dir)."""
    for name in os.listdir("."):
        try:
            if os.path.isdir(name) and not os.path.islink(name):
                _flatten_remove(os.path.abspath(name))
            else:
                os.unlink(name)
        except Exception:
            pass


# --------------------------------------------------------------------------------------------
# Worker side: trusted. Forks children, enforces every window, cleans up, relays results.
# --------------------------------------------------------------------------------------------

_pending = []  # result lines held for the next write to the parent (see _flush)
# The running child's stderr (read end, -1 when closed) and the head of what the job wrote.
_STDERR = [-1, bytearray()]
_STDERR_KEEP = 2000


def _drain_stderr():
    """Read what the child wrote to stderr: the head is kept, the rest discarded, so a chatty
    program never blocks on a full pipe and never grows the worker."""
    fd = _STDERR[0]
    try:
        chunk = os.read(fd, 1 << 16)
    except BlockingIOError:
        return
    except OSError:
        chunk = b""
    if not chunk:
        os.close(fd)
        _STDERR[0] = -1
        return
    head = _STDERR[1]
    if len(head) < _STDERR_KEEP:
        head += chunk[:_STDERR_KEEP - len(head)]


def _close_stderr():
    if _STDERR[0] >= 0:
        _drain_stderr()
        if _STDERR[0] >= 0:
            os.close(_STDERR[0])
            _STDERR[0] = -1


def _send(data):
    """One line to the parent, after every line held in `_pending` (order is kept)."""
    _pending.append(data)
    _flush()


def _flush():
    """Write the held lines in one system call. Results of one chunk of a child's output
    go out together (and the last ones with the job's end line), so the parent wakes once
    per chunk, not once per test; what the parent sees, and when relative to the child's
    progress, is otherwise unchanged."""
    if not _pending:
        return
    _pending.append(b"")
    data = b"\n".join(_pending)
    del _pending[:]
    while data:
        data = data[os.write(1, data):]


def _scratch_path(job_id):
    return os.path.join(_SCRATCH_ROOT, "job-%d" % job_id)


def _input_path(job_id):
    return os.path.join(_SCRATCH_ROOT, "input-%d" % job_id)


def _make_scratch(job_id):
    path = _scratch_path(job_id)
    if os.path.lexists(path):
        _remove_tree(path)
    os.mkdir(path, 0o700)
    if _UID is not None:
        os.chown(path, _UID, _UID)
    return path


def _remove_tree(path):
    """Remove a job's scratch dir, whatever the job left in it (no job process is alive by
    then). The fast path (only the stdout file) costs two syscalls. Otherwise the tree is
    flattened: every directory is renamed into a fresh directory of our own before it is
    emptied, so depth, path length and names cannot matter and nothing recurses; each
    directory is made ours (mode 0700) before it is opened. Never raises: whatever cannot
    be removed stays (the caller then replaces the worker)."""
    try:
        names = os.listdir(path)
    except OSError:
        names = None
    if names is not None and all(n == "stdout" for n in names):
        try:
            for n in names:
                os.unlink(os.path.join(path, n))
            os.rmdir(path)
            return
        except OSError:
            pass
    try:
        _flatten_remove(path)
    except Exception:
        pass  # os.path.lexists(path) tells the caller


def _removed(path):
    return not (os.path.lexists(path) or os.path.lexists(path + ".rm"))


def _flatten_remove(path):
    import stat
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        os.unlink(path)
        return
    grave = path + ".rm"
    if os.path.lexists(grave):
        raise OSError("a previous removal was interrupted")
    os.mkdir(grave, 0o700)
    gfd = os.open(grave, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.rename(path, os.path.join(grave, "0"))
        todo, n = ["0"], 0
        while todo:
            name = todo.pop()
            os.chmod(name, 0o700, dir_fd=gfd)  # a directory (checked when it was moved here)
            dfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=gfd)
            try:
                for entry in os.scandir(dfd):
                    if entry.is_dir(follow_symlinks=False):
                        n += 1
                        os.rename(entry.name, str(n), src_dir_fd=dfd, dst_dir_fd=gfd)
                        todo.append(str(n))
                    else:
                        os.unlink(entry.name, dir_fd=dfd)
            finally:
                os.close(dfd)
            os.rmdir(name, dir_fd=gfd)
    finally:
        os.close(gfd)
    os.rmdir(grave)


def _wipe_tmp():
    """Docker backend: children share our uid there and can write anywhere in /tmp (the only
    writable place). Remove everything a job left, including entries it made unreadable, so
    nothing carries over to the next sample. If that fails, exit: the backend starts a fresh
    container."""
    try:
        for n in os.listdir("/tmp"):
            _remove_tree(os.path.join("/tmp", n))
        if os.listdir("/tmp"):
            raise OSError("leftovers in /tmp")
        os.makedirs(_SCRATCH_ROOT, mode=0o755)
    except OSError:
        os._exit(3)


def _kill_all(child_pid):
    """Kill every process the job left (daemons, setsid'd, still forking).

    In a private pid namespace (bwrap) or a container, kill(-1) reaches every process but
    pid 1 and this one, in one kernel pass that excludes new forks: a process that keeps
    forking cannot outrun it, and a killed process never runs user code again. Without a pid
    namespace a helper running as the job's uid does the same for that uid."""
    import signal
    for kill in ((os.killpg, os.kill) if child_pid > 0 else ()):
        try:
            kill(child_pid, signal.SIGKILL)
        except OSError:
            pass
    if _ISOLATION != "none":
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
    elif _UID is not None:
        pid = os.fork()
        if pid == 0:
            try:
                os.setgid(_UID)
                os.setuid(_UID)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)


def _reap():
    """Wait for every killed process to be gone (the zygote reaps them: it is their parent
    or, as pid 1 or subreaper, the parent of their orphans). False if one is still there
    after 5 s (the worker then exits and is replaced)."""
    try:
        return _zy(b"R") == b"D1"
    except OSError:
        return False


def _cgroup_cpu():
    """CPU seconds used by every process ever in this worker's job cgroup, or None."""
    try:
        return int(os.pread(_CPUCG[0], 64, 0)) / 1e9
    except (OSError, ValueError):
        return None


def _kill_others(child_pid, keep=None):
    """Kill every process of the job cgroup but the job's main one (and `keep`)."""
    import signal
    # A fresh open each time: cgroup v1 serves a re-read of an open cgroup.procs from a pid
    # list cached for a second, which would miss processes started since.
    try:
        fd = os.open(_CPUCG_DIR + "/cgroup.procs", os.O_RDONLY)
        try:
            pids = os.read(fd, 1 << 20).split()
        finally:
            os.close(fd)
    except OSError:
        return
    for p in pids:
        p = int(p)
        if p > 0 and p != child_pid and p != keep and p != _ZPID:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


def _sweep(child_pid):
    _kill_all(child_pid)
    return _reap()


_ctrl = [b""]  # unread bytes from the parent (stdin is read unbuffered, so select() is exact)


def _ctrl_line(timeout):
    """Next control line from the parent, waiting up to `timeout` (None: forever)."""
    import select
    while b"\n" not in _ctrl[0]:
        if timeout is not None:
            r, _, _ = select.select([0], [], [], timeout)
            if not r:
                return None
        chunk = os.read(0, 1 << 20)
        if not chunk:
            os._exit(0)  # the parent is gone
        _ctrl[0] += chunk
        timeout = None if timeout is None else 0
    line, _ctrl[0] = _ctrl[0].split(b"\n", 1)
    return line


_queued = []  # jobs the parent sent ahead while another one ran


def _poll_abort(job_id, timeout):
    """True if the parent asked to abort this job. Jobs sent ahead are queued; aborts of
    other jobs (already finished) are dropped."""
    line = _ctrl_line(timeout)
    while line is not None:
        if line.startswith(b'{"op": "run"'):
            msg = None
            _queued.append(line)  # parsed when it runs
        else:
            try:
                msg = json.loads(line)
            except ValueError:
                msg = None
        if type(msg) is dict:
            if msg.get("op") == "abort" and msg.get("id") == job_id:
                return True
            if msg.get("op") == "run":
                _queued.append(line)
        line = _ctrl_line(0) if b"\n" in _ctrl[0] else None
    return False


def _split_err(rest):
    """b"<name> <text>" from a child line -> (name, text), both validated; None if bad."""
    name, _, text = rest.partition(b" ")
    if not (0 < len(name) <= _NAME_MAX and name.replace(b"_", b"a").replace(b".", b"a").isalnum()
            and (name[:1].isalpha() or name[:1] == b"_")):
        return None
    return name.decode("ascii"), text[:_TEXT_MAX * 4].decode("ascii", "replace")


def _wall_limit(limit):
    """The wall-clock backstop of a window whose CPU-time limit is `limit`: a program that
    sleeps or blocks uses no CPU. It counts wall time the child did not spend waiting for a
    CPU (see _run_delay), so a loaded machine, which stretches wall time, cannot trip it."""
    return 2.0 * limit + 1.0


def _run_delay(pid, top):
    """Seconds process `pid` (its main thread) has waited on a run queue, from
    /proc/<pid>/schedstat; None where the kernel does not keep it, and None while the job has
    other processes: then the wait may be for the job's own processes (a fork bomb), which
    must not buy it time."""
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid), "rb") as f:
                if f.read().strip():
                    return None
        with open("/proc/%d/task/%d/children" % (_ZPID, _ZPID), "rb") as f:
            if sorted(f.read().split()) != sorted([b"%d" % top, b"%d" % os.getpid()]):
                return None  # an orphan of the job was handed to the zygote
        with open("/proc/%d/schedstat" % pid, "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class _Window(object):
    """A child's current window: started at (wall, cpu), limited to `limit` CPU seconds and
    `_wall_limit(limit)` wall seconds. Before "S" only a fixed wall window applies."""

    def __init__(self, job):
        self.limit = float(job["time_limit"])
        self.phase = "start"
        self.wall0 = self.cpu0 = 0.0
        self.k = 0
        self.waited = 0.0

    def open(self, phase, now, cpu):
        self.phase, self.wall0, self.cpu0 = phase, now, cpu

    def took(self, now, cpu):
        return now - self.wall0, max(0.0, cpu - self.cpu0)


class _Call(_Window):
    """Worker-side state of a call-mode child: which window is open, which test is next."""

    def __init__(self, job, relay):
        _Window.__init__(self, job)
        self.n = len(job["inputs"])
        self.relay = relay

    def on_line(self, line, now, cpu):
        """-> end dict, or None to go on."""
        tag = line[:1]
        if self.phase == "start":
            if line == b"S":
                self.open("load", now, cpu)
                return None
            if tag == b"H":
                return {"status": "harness", "note": line[2:300].decode("ascii", "replace")}
            return {"status": "harness", "note": "sandbox child broke the protocol"}
        if self.phase == "load":
            if line == b"L":
                self.open("test", now, cpu)
                return None
            if tag == b"C" and line[1:2] == b" ":
                return {"status": "compile_error", "m": line[2:2000].decode("ascii", "replace")}
            if tag == b"X" and line[1:2] == b" ":
                err = _split_err(line[2:])
                if err:
                    return {"status": "load_error", "e": err[0], "m": err[1]}
            return {"status": "corrupt"}
        # phase "test"
        if len(line) > 1 and line[1:2] != b" ":
            return {"status": "corrupt"}
        if tag == b"O":
            payload = line
        elif tag == b"E":
            err = _split_err(line[2:])
            if err is None:
                return {"status": "corrupt"}
            payload = b"E " + json.dumps({"e": err[0], "m": err[1]}).encode()
        elif tag == b"U":
            payload = b"U " + json.dumps({"m": line[2:1200].decode("ascii", "replace")}).encode()
        else:
            return {"status": "corrupt"}
        wall, used = self.took(now, cpu)
        self.relay(self.k, wall, used, payload)
        self.k += 1
        self.open("test", now, cpu)
        if self.k == self.n:
            return {"status": "done"}
        return None


class _StdinBatch(_Window):
    """Worker-side state of a stdin-mode child: compile, then "P" (a runner started: the
    window of the next test opens), one result line per test, "X" (the runner is gone)."""

    def __init__(self, job, relay, scratch, cap):
        _Window.__init__(self, job)
        self.n = len(job["inputs"])
        self.relay, self.scratch, self.cap = relay, scratch, cap
        self.top = None       # the child (set by the caller)
        self.cpu_pid = None   # the runner, while one runs

    def on_line(self, line, now, cpu):
        tag = line[:1]
        if self.phase == "start":
            if line == b"S":
                self.open("load", now, cpu)
                return None
            if tag == b"H":
                return {"status": "harness", "note": line[2:300].decode("ascii", "replace")}
            return {"status": "harness", "note": "sandbox child broke the protocol"}
        if self.phase == "load":
            if line == b"L":
                self.open("wait", now, cpu)
                return None
            if tag == b"C" and line[1:2] == b" ":
                return {"status": "compile_error", "m": line[2:2000].decode("ascii", "replace")}
            return {"status": "corrupt"}
        if self.phase == "wait":
            if tag == b"P" and line[2:].isdigit() and len(line) < 20:
                self.cpu_pid = int(line[2:])
                # Without a cgroup the window is the run's own CPU clock, which starts at 0.
                self.open("test", now, cpu if _CPUCG is not None else 0.0)
                return None
            return {"status": "corrupt"}
        # phase "test": results of the runner (or of its parent, for a test it did not finish)
        if tag == b"X":
            try:
                st = int(line[2:].split()[0])
            except (ValueError, IndexError):
                return {"status": "corrupt"}
            self.cpu_pid = None
            if not os.WIFEXITED(st):
                end = _exit_end(self, st)
                end["test"] = self.k
                return end
            self.open("wait", now, cpu if _CPUCG is not None else (_proc_cpu(self.top) or 0.0))
            return None
        if line == b"V":
            return {"status": "output_limit", "test": self.k}
        if tag == b"S" and line[1:2] == b" ":
            payload = line  # the parent decodes it strictly
        elif tag == b"E" and line[1:2] == b" ":
            err = _split_err(line[2:])
            if err is None:
                return {"status": "corrupt"}
            payload = b"E " + json.dumps({"e": err[0], "m": err[1]}).encode()
        else:
            return {"status": "corrupt"}
        wall, used = self.took(now, cpu)
        self.relay(self.k, wall, used, payload)
        self.k += 1
        if self.k == self.n:
            return {"status": "done"}
        self.open("test", now, cpu)
        return None


def _proc_cpu(pid):
    import time
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except (OSError, TypeError):
        return None


def _pidfd(pid):
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1


def _watch(pid, r, job, deadline_at, state, cap, credit=0.0, credit_wanted=lambda now: False):
    """Feed the child's lines to `state` under the worker's clocks until the child is done.

    Limits, all enforced here: before "S" a fixed wall window; then per window (load, each
    test) `time_limit` seconds of the child's CPU time, read from the kernel's per-process
    CPU clock, and a wall-clock backstop; and the job's whole-sample wall deadline. Wall time
    spent waiting for a CPU is credited to both (`credit`: what earlier children of the job
    waited). Returns (end dict or None, wait status or None, wall time at the end, child CPU
    time at the end); `state.waited` is this child's run-queue wait, read (a few /proc
    files) only where `credit_wanted(now)` says the job's deadline could come into play."""
    import select
    import time

    job_id = job["id"]
    pfd = _pidfd(pid)
    cpu_now = [0.0]

    def cpu():
        if _CPUCG is not None:
            # The job's whole process tree, from outside (cgroup accounting).
            v = _cgroup_cpu()
            if v is not None:
                cpu_now[0] = v
            return cpu_now[0]
        # CPU clock of the process (MAKE_PROCESS_CPUCLOCK, SCHED): the child, or the run of
        # the stdin test in progress
        v = _proc_cpu(getattr(state, "cpu_pid", None) or pid)
        if v is not None:
            cpu_now[0] = v  # else the process is gone: its last value stands
        return cpu_now[0]

    started = time.monotonic()
    alive = started  # when the parent last heard of this job (see _KEEPALIVE_S)
    grace = None  # the window that already had its one look into the pipe after its limit
    buf, pending = [], 0
    exited, eof = None, False
    end = None
    try:
        while end is None:
            now = time.monotonic()
            if state.phase == "start":
                if now - started >= _START_S:
                    end = {"status": "harness", "note": "sandbox child did not start in time"}
                    break
                wait = started + _START_S - now
            else:
                used = cpu() - state.cpu0
                wall_left = state.wall0 + _wall_limit(state.limit) - now
                late = now >= deadline_at
                if (wall_left <= 0 or late) and used < state.limit:
                    # Time spent waiting for a CPU is not the program's: credit it (all of the
                    # child's waiting so far, a slight overestimate for later windows).
                    delay = _run_delay(getattr(state, "cpu_pid", None) or pid, pid) or 0.0
                    wall_left += delay
                    late = now - delay - credit >= deadline_at
                if used >= state.limit or wall_left <= 0 or late:
                    # A result already in the pipe when the limit passed counts (the worker may
                    # have been slow to look): one look, then the window is over.
                    token = (state.phase, state.k, state.wall0)
                    ready = []
                    if not eof and grace != token:
                        ready, _, _ = select.select([r], [], [], 0)
                    grace = token
                    if not ready:
                        end = {"status": "timeout"}
                        break
                    wait = 0.0
                else:
                    # CPU time cannot run ahead of wall time by more than the thread count;
                    # waking at the CPU budget's wall equivalent catches it at the next look.
                    wait = min(max(wall_left, 0.01), state.limit - used,
                               max(deadline_at - now, 0.01))
            if exited is not None:
                wait = 0.0  # drain what is already in the pipe, then stop
            elif pfd < 0:
                wait = min(wait, 0.005)
            fds = [0]
            if not eof:
                fds.append(r)
            if _STDERR[0] >= 0:
                fds.append(_STDERR[0])
            if pfd >= 0 and exited is None:
                fds.append(pfd)
            ready, _, _ = select.select(fds, [], [], max(0.0, min(wait, _KEEPALIVE_S)))
            if time.monotonic() - alive >= _KEEPALIVE_S:
                _send(b"K %d" % job_id)
                alive = time.monotonic()
            if 0 in ready and _poll_abort(job_id, 0.0):
                end = {"status": "aborted"}
                break
            if _STDERR[0] in ready:
                _drain_stderr()
            if r in ready:
                try:
                    chunk = os.read(r, 1 << 16)
                except OSError:
                    chunk = b""
                if not chunk:
                    eof = True
                else:
                    now = time.monotonic()
                    # A partial line is kept as a list of chunks: re-scanning one growing
                    # buffer would be quadratic in the size of a large result.
                    if b"\n" in chunk:
                        buf.append(chunk)
                        *lines, rest = b"".join(buf).split(b"\n")
                        buf, pending = [rest], len(rest)
                        c = cpu()
                        k0 = state.k
                        for line in lines:
                            if len(line) > _LINE_MAX and line[:1] not in (b"O", b"S"):
                                end = {"status": "corrupt"}
                                break
                            end = state.on_line(line, now, c)
                            if end is not None:
                                break
                        if state.k != k0 and _CPUCG is not None:
                            # what a test started dies with it
                            _kill_others(pid, getattr(state, "cpu_pid", None))
                    else:
                        buf.append(chunk)
                        pending += len(chunk)
                    if end is None and pending > cap:
                        end = {"status": "output_limit"}
                    if end is None:
                        _flush()  # else they go out with the job's end line
                    continue
            if exited is None and (pfd < 0 or pfd in ready or eof):
                if pfd in ready and credit_wanted(now):
                    state.waited = _run_delay(pid, pid) or 0.0  # readable until reaped
                waited = _zy_wait(pid, False)
                if waited is not None:
                    exited = waited[0]
                    if _CPUCG is None:
                        cpu_now[0] = waited[1]
                    else:
                        cpu()
                elif eof and pfd < 0:
                    time.sleep(0.0002)
                continue
            if exited is not None and r not in ready:
                break  # the child is gone and its pipe holds nothing more
    finally:
        if pfd >= 0:
            os.close(pfd)
    if exited is None:
        cpu()
    return end, exited, time.monotonic(), cpu_now[0]


def _exit_end(state, exited):
    """The end of a child that exited (or was signalled) without an explicit end."""
    import signal
    if exited is None:
        return {"status": "exited"}
    if os.WIFSIGNALED(exited):
        sig = os.WTERMSIG(exited)
        status = {signal.SIGXCPU: "timeout", signal.SIGXFSZ: "output_limit"}.get(sig, "signal")
        if sig == signal.SIGKILL and _MEMCG:
            # The worker kills a child only after it is done watching it: a SIGKILL seen
            # here came from the cgroup's OOM killer (or the program itself).
            status = "memory_limit"
        end = {"status": status, "signal": sig}
    else:
        end = {"status": "exited", "code": os.WEXITSTATUS(exited)}
    if state.phase == "start":
        return {"status": "harness", "note": "sandbox child died during set-up (%s)" % end}
    return end


def _fork_child(job, test):
    """A fresh child for `job` (its test `test` in stdin mode), forked by the zygote, which
    never held a job: the child's memory holds its own job, read from a pipe, and nothing
    else of this worker (queued jobs, earlier jobs, protocol state)."""
    import select
    import socket
    import time
    jr, jw = os.pipe()
    r, w = os.pipe()
    er, ew = os.pipe()
    os.set_blocking(er, False)
    try:
        socket.send_fds(_ZSOCK, [b"F"], [jr, w, ew])
        reply = _ZSOCK.recv(64)
    finally:
        os.close(jr)
        os.close(w)
        os.close(ew)
    _STDERR[0] = er
    if reply[:1] != b"P":
        os.close(jw)
        os.close(r)
        raise OSError("the zygote could not fork a child: %r" % reply[:60])
    pid = int(reply[1:])
    # The child reads its job before anything else (trusted code); it cannot block us for
    # longer than a set-up window.
    data = memoryview(b"%d\n" % test + job["_raw"])
    os.set_blocking(jw, False)
    end = time.monotonic() + _START_S
    try:
        while data:
            try:
                data = data[os.write(jw, data[:1 << 20]):]
            except BlockingIOError:
                left = end - time.monotonic()
                if left <= 0:
                    break  # the child is stuck: its start window says so
                select.select([], [jw], [], left)
    except BrokenPipeError:
        pass  # the child died: _watch reports it
    finally:
        os.close(jw)
    return pid, r


def _child_main(job_fd, out_fd, err_fd):
    """A child, just forked by the zygote: read its job, confine itself, run it."""
    status = 0
    try:
        chunks = []
        while True:
            chunk = os.read(job_fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(job_fd)
        head, _, raw = b"".join(chunks).partition(b"\n")
        del chunks
        job = json.loads(raw)
        del raw
        call = job["mode"] == "call"
        try:
            _confine(job, _scratch_path(job["id"]), out_fd, None, err_fd)
        except BaseException as e:
            _line(out_fd, b"H " + _ename(e) + b": " + _clean(e))
            os._exit(0)
        _line(out_fd, b"S")
        status = (_child_call if call else _child_stdin_batch)(job, out_fd) or 0
    except BaseException:
        status = 1
    os._exit(status)


# --------------------------------------------------------------------------------------------
# The zygote: the worker's first process. It loads what children need, then forks the
# worker (which speaks to the parent) and from then on only forks children, waits for them
# and reaps what a job leaves. It never reads a job, so what it forks is clean. It is pid 1
# of the sandbox's pid namespace (bwrap --as-pid-1, docker), which kill(-1) spares.
# --------------------------------------------------------------------------------------------

_ZSOCK = None  # the worker's end of its socket to the zygote
_ZPID = None   # the zygote's pid, as the worker sees it


def _zy(msg):
    _ZSOCK.send(msg)
    return _ZSOCK.recv(64)


def _zy_wait(pid, block):
    """(wait status, CPU seconds) of child `pid` once it has exited, else None."""
    reply = _zy(b"%s%d" % (b"W" if block else b"w", pid))
    if reply[:1] != b"S":
        return None
    st, cpu = reply[1:].split()
    return int(st), float(cpu)


def _zygote(sock, worker_pid):
    import socket
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 64, 3)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)  # the worker is gone: so is this sandbox
        op = msg[:1]
        if op == b"F" and len(fds) == 3:
            pid = os.fork()
            if pid == 0:
                sock.close()
                _child_main(*fds)
            reply = b"P%d" % pid
        elif op in (b"W", b"w"):
            try:
                p, st, ru = os.wait4(int(msg[1:]), 0 if op == b"W" else os.WNOHANG)
                reply = b"S%d %.9f" % (st, ru.ru_utime + ru.ru_stime) if p else b"N"
            except (ChildProcessError, ValueError):
                reply = b"X"
        elif op == b"R":
            reply = b"D1" if _reap_all(worker_pid) else b"D0"
        else:
            reply = b"?"
        for fd in fds:
            os.close(fd)
        try:
            sock.send(reply)
        except OSError:
            os._exit(0)


def _reap_all(worker_pid):
    """Reap every process a job left (killed by the worker) until the worker is this
    process's only child. False if one is still there after 5 s."""
    import time
    end = time.monotonic() + 5.0
    me = os.getpid()
    while True:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                os._exit(0)
            if pid == worker_pid:
                os._exit(0)
            if pid == 0:
                break
        try:
            with open("/proc/self/task/%d/children" % me, "rb") as f:
                if f.read().split() == [b"%d" % worker_pid]:
                    return True
        except OSError:
            pass
        if time.monotonic() > end:
            return False
        time.sleep(0.0001)


def _run_job(job):
    import time

    t0 = time.monotonic()
    job_id = job["id"]
    deadline_at = t0 + float(job["deadline"])
    cap = int(job["output_mb"]) << 20
    prefix = b"R %d " % job_id

    def relay(i, wall, cpu, payload):
        _pending.append(prefix + b"%d %.6f %.6f " % (i, wall, cpu) + payload)

    scratch = _make_scratch(job_id)
    del _STDERR[1][:]
    try:
        if job["mode"] == "call":
            state = _Call(job, relay)
            pid, r = _fork_child(job, 0)
            try:
                res, exited, _, _ = _watch(pid, r, job, deadline_at, state, cap)
            finally:
                os.close(r)
            # Every process of the job is dead and reaped before its end record goes out:
            # a verdict never coexists with a live process of its sample.
            clean = _sweep(pid)
            _close_stderr()
            end = res if res is not None else _exit_end(state, exited)
            if end["status"] in ("exited", "signal", "timeout", "output_limit", "corrupt"):
                end.setdefault("test", state.k)
                end["phase"] = state.phase
        else:
            end, clean = _run_stdin(job, scratch, deadline_at, cap, relay)
    except BaseException:
        _sweep(-1)  # whatever the job started dies with the worker's failure
        _close_stderr()
        raise
    _remove_tree(scratch)
    end["wall"] = time.monotonic() - t0
    if _STDERR[1]:
        end["stderr"] = _STDERR[1].decode("utf-8", "replace")
    restart = not clean or not _removed(scratch)
    if restart:
        end["restart"] = True  # the parent replaces this worker before its next job
    _send(b"E %d %s" % (job_id, json.dumps(end).encode()))
    if restart:
        os._exit(3)  # something of this job could not be removed: start a fresh worker


def _run_stdin(job, scratch, deadline_at, cap, relay):
    """One child for all of a sample's tests (see _child_stdin_batch); the inputs are files
    it can read, written here first."""
    stem = _input_path(job["id"])
    paths = []
    try:
        for i, text in enumerate(job["inputs"]):
            paths.append("%s-%d" % (stem, i))
            with open(paths[-1], "w") as f:
                f.write(text)
            os.chmod(paths[-1], 0o644)
        state = _StdinBatch(job, relay, scratch, cap)
        pid, r = _fork_child(job, 0)
        state.top = pid
        try:
            res, exited, _, _ = _watch(pid, r, job, deadline_at, state, cap)
        finally:
            os.close(r)
        clean = _sweep(pid)
        _close_stderr()
    finally:
        for path in paths:
            try:
                os.unlink(path)
            except OSError:
                pass
    end = res if res is not None else _exit_end(state, exited)
    if end["status"] in ("exited", "signal", "timeout", "output_limit", "corrupt", "memory_limit"):
        end.setdefault("test", state.k)
        end["phase"] = state.phase
    return end, clean


def _read_output(path, limit):
    """Read the program's stdout file without trusting it: the program may have replaced it
    with a FIFO (a blocking read would hang the worker), a symlink, or a directory."""
    import stat
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return b""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        chunks, n = [], 0
        while n < limit:
            chunk = os.read(fd, min(1 << 20, limit - n))
            if not chunk:
                break
            chunks.append(chunk)
            n += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def main(argv):
    global _UID, _ISOLATION, _SECCOMP, _MEMCG
    import ctypes
    import gc
    import importlib

    uid = int(argv[1])
    _ISOLATION = argv[2]
    preload = argv[3].split(",") if len(argv) > 3 and argv[3] != "-" else _PRELOAD
    _MEMCG = len(argv) > 4 and argv[4] == "memcg"
    if len(argv) > 5 and argv[5] != "-":
        global _CPUCG_DIR
        _CPUCG_DIR = argv[5]
    sys.path[:] = [p for p in sys.path if p]  # never import from the working directory
    for name in _ESSENTIAL + [m for m in preload if m]:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    sys.set_int_max_str_digits(0)
    hash_seed = os.environ.get("PYTHONHASHSEED")
    # What every child starts from: a minimal environment and fresh text streams on fds 0-2
    # (never written by the worker, so a fork copies no buffered data).
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    sys.stdin = open(0, "r", closefd=False)
    try:
        _SECCOMP = build_filters()
        if _SECCOMP is not None:
            install_filter(_SECCOMP, "base")
    except Exception:
        _SECCOMP = None
    # Orphans of a job (daemonized grandchildren) become our children, so we can reap them.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        pass
    # Can we run children under their own uid? (root, or CAP_SETUID inside the sandbox)
    if uid >= 0 and os.geteuid() == 0:
        pid = os.fork()
        if pid == 0:
            try:
                os.setgid(uid)
                os.setuid(uid)
                os._exit(0)
            except OSError:
                os._exit(1)
        _, st = os.waitpid(pid, 0)
        if os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0:
            _UID = uid
    if _ISOLATION == "docker":
        # The container runs as one unprivileged uid, shared by our children, so shield the
        # worker from them: as pid 1 the kernel drops every signal we have no handler for
        # (CPython's SIGINT handler is the only one), and a non-dumpable process can be neither
        # ptraced nor have its /proc files (memory, fds: our stdout) opened by same-uid code.
        import signal
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    os.makedirs(_SCRATCH_ROOT, mode=0o755, exist_ok=True)
    # Objects that exist now are never collected: a child's garbage collections then do not
    # touch (and copy) these pages.
    gc.collect()
    gc.freeze()
    _split(hash_seed)


def _split(hash_seed):
    """This process becomes the zygote; its child becomes the worker, which alone reads the
    parent's jobs (see _zygote)."""
    global _ZSOCK, _ZPID
    import socket
    zsock, wsock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    zygote = os.getpid()
    pid = os.fork()
    if pid:
        wsock.close()
        # The parent's pipes are the worker's alone; children get their own fds 0-2.
        null = os.open("/dev/null", os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        _zygote(zsock, pid)
        os._exit(0)
    zsock.close()
    _ZSOCK, _ZPID = wsock, zygote
    if _CPUCG_DIR is not None:
        global _CPUCG
        d = _CPUCG_DIR
        _CPUCG = (os.open(d + "/cpuacct.usage", os.O_RDONLY),
                  os.open(d + "/cgroup.procs", os.O_WRONLY))
        # The zygote joins the job cgroup (the worker stays out): every child it forks is
        # born there, so every process of a job is counted and listed however it detaches,
        # and no job pays for a migration (milliseconds each in cgroup v1). The zygote only
        # forks and reaps, outside every time window.
        os.write(_CPUCG[1], b"%d" % zygote)
    _send(b"READY " + json.dumps({
        "pid": os.getpid(), "zygote": zygote, "uid": _UID, "isolation": _ISOLATION,
        "python": sys.version.split()[0], "seccomp": _SECCOMP is not None, "memcg": _MEMCG,
        "cpu_cgroup": _CPUCG is not None, "hash_seed": hash_seed}).encode())
    while True:
        if _queued:
            line = _queued.pop(0)
        else:
            line = _ctrl_line(None)
        try:
            job = json.loads(line)
        except ValueError:
            continue
        if type(job) is dict and job.get("op") == "run":
            job["_raw"] = line
            try:
                _run_job(job)
            except Exception as e:  # a bug here must not take the worker down silently
                _send(b"E %d %s" % (job.get("id", -1), json.dumps(
                    {"status": "harness", "note": "%s: %s" % (type(e).__name__, e),
                     "restart": True}).encode()))
                os._exit(3)
            if _ISOLATION == "docker":
                _wipe_tmp()


if __name__ == "__main__":
    main(sys.argv)
