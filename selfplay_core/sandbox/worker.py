"""The sandbox worker: a small, warm, stdlib-only fork server.

This file runs in two places:

* as the worker process (``python -I -S -c <this source> <uid> <isolation>``), started by a
  backend inside bubblewrap or a container. It forks one child per job (call tests) or per
  test (stdin tests); the child drops privileges, applies rlimits and runs the untrusted code;
* imported by the trusted parent, which also re-exports the value codec from it (the one codec
  shared by both sides lives in `selfplay_core/values.py`; the worker's program is that file's
  source followed by this one's).

It must import nothing outside the standard library and must stay light: every fork copies it.

Wire protocol (newline-delimited, UTF-8):

parent -> worker   ``{"op": "run", "id", "mode": "call"|"stdin", "code", "entry", "inputs",
                     "time_limit", "memory_mb", "output_mb", "deadline"}`` | ``{"op": "abort", "id"}``
worker -> parent   ``READY <json>`` once; then ``R <id> <json>`` per result record and
                   ``E <id> <json>`` once per job (status, signal, exit code, wall time).

Result records of a call job come from the child and are *untrusted*: the parent parses them
defensively. Expected outputs never reach this process.
"""

import json
import os
import sys

# Worker-side state, set in main().
_UID = None  # uid the children run as (None: cannot drop privileges)
_ISOLATION = "none"
_SCRATCH_ROOT = "/tmp/sp-scratch"

# Modules solutions commonly use. Importing them once here makes every child start warm and
# keeps imports working after the child has dropped to a uid that cannot read the stdlib dir.
_PRELOAD = (
    "math cmath collections itertools functools heapq bisect re string typing operator copy "
    "random decimal fractions statistics datetime hashlib array struct enum dataclasses "
    "abc numbers textwrap io traceback time signal resource select errno"
).split()


# --------------------------------------------------------------------------------------------
# Value codec: selfplay_core/values.py. The trusted parent imports it here; in the sandbox this
# file runs as __main__ with the codec's source ahead of it (backends.worker_source).
# --------------------------------------------------------------------------------------------

if __name__ != "__main__":
    from selfplay_core.values import (  # noqa: F401 - the names the worker's users import from it
        _BIG, _LARGE, Digest, Opaque, Unserializable, _digest, _hashable, _is_large, _plain,
        _untag, decode_value, encode_value, from_json_obj)


# --------------------------------------------------------------------------------------------
# Child side: runs untrusted code. Everything below happens after fork, in the child only.
# --------------------------------------------------------------------------------------------

class _TestTimeout(BaseException):
    pass


def _on_alarm(signum, frame):
    raise _TestTimeout()


def _confine(job, scratch, out_fd, in_path):
    """Drop privileges and set limits. Called in the child before any untrusted code runs."""
    import resource

    os.setsid()
    # Standard streams: stdin from the test input (or /dev/null), stdout/stderr to a file in
    # scratch whose size RLIMIT_FSIZE caps. Nothing else stays open but the result pipe.
    fd0 = os.open(in_path or "/dev/null", os.O_RDONLY)
    os.dup2(fd0, 0)
    os.close(fd0)
    if _UID is not None:
        os.setgroups([])
        os.setgid(_UID)
        os.setuid(_UID)
    os.chdir(scratch)
    fd1 = os.open(os.path.join(scratch, "stdout"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd1, 1)
    os.dup2(fd1, 2)
    os.close(fd1)
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
    if _UID is not None:
        # Counted per uid, so only meaningful once we run as a uid of our own.
        resource.setrlimit(resource.RLIMIT_NPROC, (16, 16))
    # CPython ignores SIGXFSZ; restore the default so exceeding the output cap ends the run.
    import signal
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch,
                       "LANG": "C.UTF-8"})
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    sys.stdin = open(0, "r", closefd=False)
    sys.argv = ["solution.py"]
    sys.setrecursionlimit(10000)


def _emit(fd, obj):
    data = (json.dumps(obj, ensure_ascii=True, separators=(",", ":")) + "\n").encode()
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _compile(code, fd):
    try:
        return compile(code, "solution.py", "exec")
    except BaseException as e:  # SyntaxError, ValueError (NUL bytes), MemoryError, RecursionError
        _emit(fd, {"c": "compile_error", "m": "%s: %s" % (type(e).__name__, str(e)[:300])})
        return None


def _err_record(i, e, t):
    if isinstance(e, _TestTimeout):
        name = "__timeout__"
    elif isinstance(e, OSError) and e.errno == 27:  # EFBIG: RLIMIT_FSIZE hit by a write
        name = "__output_limit__"
    else:
        name = type(e).__name__
    try:
        msg = str(e)[:300]
    except BaseException:
        msg = ""
    return {"i": i, "e": name, "m": msg, "t": t}


def _child_call(job, fd):
    """Run every call test in this one process, streaming one record per test."""
    import copy
    import signal
    import time

    code = _compile(job["code"], fd)
    if code is None:
        return
    signal.signal(signal.SIGALRM, _on_alarm)
    limit = float(job["time_limit"])
    g = {"__name__": "__main__", "__builtins__": __builtins__}
    t0 = time.perf_counter()
    try:
        signal.setitimer(signal.ITIMER_REAL, limit)
        exec(code, g)
        signal.setitimer(signal.ITIMER_REAL, 0)
    except BaseException as e:
        signal.setitimer(signal.ITIMER_REAL, 0)
        rec = _err_record(-1, e, time.perf_counter() - t0)
        rec["c"] = "load_error"
        _emit(fd, rec)
        return
    entry = job["entry"]
    try:
        if "." in entry:
            cls_name, meth = entry.split(".", 1)
            fn = getattr(g[cls_name](), meth)
        else:
            fn = g[entry]
    except BaseException as e:
        _emit(fd, {"c": "load_error", "e": "MissingEntryPoint",
                   "m": "%s not defined (%s)" % (entry, type(e).__name__)})
        return
    _emit(fd, {"c": "loaded"})
    for i, raw in enumerate(job["inputs"]):
        args = from_json_obj(raw)
        t0 = time.perf_counter()
        try:
            signal.setitimer(signal.ITIMER_REAL, limit)
            out = fn(*args)
            signal.setitimer(signal.ITIMER_REAL, 0)
            try:
                enc = None
                if _is_large(out):
                    try:
                        enc = '{"__h__":"%s"}' % _digest(out)
                    except ValueError:  # not marshallable: a non-plain object
                        pass
                if enc is None:
                    enc = encode_value(out)
                t = time.perf_counter() - t0  # serialization counts: the worker's clock sees it
                rec = '{"i":%d,"t":%r,"o":%s}' % (i, t, enc)
            except (Unserializable, ValueError, TypeError, RecursionError) as e:
                t = time.perf_counter() - t0
                rec = None
                _emit(fd, {"i": i, "e": "UnserializableResult", "m": str(e)[:300], "t": t})
            if rec is not None:
                data = (rec + "\n").encode()
                while data:
                    data = data[os.write(fd, data):]
        except BaseException as e:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _emit(fd, _err_record(i, e, time.perf_counter() - t0))
            if isinstance(e, (_TestTimeout, MemoryError)):
                return  # the process state is no longer trustworthy for timing
    _emit(fd, {"c": "done"})


def _child_stdin(job, fd, i):
    """Run the program once as a script, on the stdin already wired to fd 0."""
    import signal
    import time

    code = _compile(job["code"], fd)
    if code is None:
        return
    signal.signal(signal.SIGALRM, _on_alarm)
    g = {"__name__": "__main__", "__builtins__": __builtins__}
    t0 = time.perf_counter()
    rec = {"i": i}
    try:
        signal.setitimer(signal.ITIMER_REAL, float(job["time_limit"]))
        exec(code, g)
        signal.setitimer(signal.ITIMER_REAL, 0)
    except SystemExit as e:
        signal.setitimer(signal.ITIMER_REAL, 0)
        if e.code not in (None, 0):
            rec.update(e="SystemExit", m=str(e.code)[:100])
    except BaseException as e:
        signal.setitimer(signal.ITIMER_REAL, 0)
        rec.update(_err_record(i, e, 0.0))
    rec["t"] = time.perf_counter() - t0
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    _emit(fd, rec)


# --------------------------------------------------------------------------------------------
# Worker side: trusted. Forks children, enforces wall clock, cleans up, relays records.
# --------------------------------------------------------------------------------------------

def _send(line):
    data = (line + "\n").encode()
    while data:
        data = data[os.write(1, data):]


def _make_scratch(job_id):
    import shutil
    path = os.path.join(_SCRATCH_ROOT, "job-%d" % job_id)
    if os.path.lexists(path):
        shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path, mode=0o700)
    if _UID is not None:
        os.chown(path, _UID, _UID)
    return path


def _wipe_tmp():
    """Docker backend: children share our uid there and can write anywhere in /tmp (the only
    writable place). Remove everything a job left, including entries it made unreadable, so
    nothing carries over to the next sample. If that fails, exit: the backend starts a fresh
    container."""
    import stat
    try:
        stack = [os.path.join("/tmp", n) for n in os.listdir("/tmp")]
        dirs = []
        while stack:
            p = stack.pop()
            st = os.lstat(p)
            if stat.S_ISDIR(st.st_mode):
                os.chmod(p, 0o700)
                dirs.append(p)
                stack.extend(os.path.join(p, n) for n in os.listdir(p))
            else:
                os.unlink(p)
        for p in reversed(dirs):
            os.rmdir(p)
        os.makedirs(_SCRATCH_ROOT, mode=0o755)
    except OSError:
        os._exit(3)


def _sweep(child_pid):
    """Kill everything the job left behind (setsid'd daemons included), then reap."""
    import signal
    import time
    try:
        os.killpg(child_pid, signal.SIGKILL)
    except OSError:
        pass
    me = os.getpid()
    if _ISOLATION != "none":
        # Private pid namespace: every process but its init and us is job debris.
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) not in (1, me):
                try:
                    os.kill(int(name), signal.SIGKILL)
                except OSError:
                    pass
    elif _UID is not None:
        # Shared pid namespace: a helper running as the job's uid kills all of that uid.
        pid = os.fork()
        if pid == 0:
            try:
                os.setgid(_UID)
                os.setuid(_UID)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
    end = time.monotonic() + 2.0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            if time.monotonic() > end:
                break
            time.sleep(0.001)


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


def _poll_abort(job_id, timeout):
    """True if the parent asked to abort this job (other control lines are dropped)."""
    line = _ctrl_line(timeout)
    if line is None:
        return False
    try:
        msg = json.loads(line)
    except ValueError:
        return False
    return msg.get("op") == "abort" and msg.get("id") == job_id


def _run_child(job, scratch, mode, test_index, in_path, deadline_at, relay):
    """Fork one child, relay its records, enforce time; return (status, signal, code)."""
    import select
    import signal
    import time

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # ---- child
        try:
            os.close(r)
            _confine(job, scratch, w, in_path)
            if mode == "call":
                _child_call(job, w)
            else:
                _child_stdin(job, w, test_index)
        except BaseException as e:
            try:
                _emit(w, {"c": "harness", "m": "%s: %s" % (type(e).__name__, e)})
            except BaseException:
                pass
        os._exit(0)
    # ---- worker
    os.close(w)
    limit = float(job["time_limit"])
    stall = limit * 1.5 + 0.5
    cap = int(job["output_mb"]) << 20
    buf, pending = [], 0  # the current partial line, as chunks, and its length
    status, last = None, time.monotonic()
    job_id = job["id"]
    exited = None  # the child's wait status, once reaped
    while True:
        now = time.monotonic()
        wait = min(deadline_at, last + stall) - now
        if wait <= 0:
            status = "timeout"
            break
        # Poll the child's exit too: a process it left behind can hold the pipe open, so EOF
        # alone would only come at the stall deadline.
        ready, _, _ = select.select([r, 0], [], [], min(wait, 0.05) if exited is None else 0)
        if 0 in ready and _poll_abort(job_id, 0.0):
            status = "aborted"
            break
        if r in ready:
            try:
                chunk = os.read(r, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            last = time.monotonic()
            # Keep a partial line as a list of chunks: re-scanning one growing buffer would be
            # quadratic in the size of a large result.
            if b"\n" in chunk:
                buf.append(chunk)
                *lines, rest = b"".join(buf).split(b"\n")
                buf, pending = [rest], len(rest)
                for line in lines:
                    if line:
                        relay(line)
            else:
                buf.append(chunk)
                pending += len(chunk)
            if pending > cap:
                status = "output_limit"
                break
        elif exited is not None:
            break  # the child is gone and its pipe is drained
        if exited is None:
            p, st = os.waitpid(pid, os.WNOHANG)
            if p:
                exited = st
    os.close(r)
    sig = code = None
    if status is None:
        # The child ended; collect its exit status (bounded wait if only EOF was seen).
        end = time.monotonic() + max(0.0, min(deadline_at, last + stall) - time.monotonic())
        while exited is None:
            p, st = os.waitpid(pid, os.WNOHANG)
            if p:
                exited = st
            elif time.monotonic() > end:
                status = "timeout"
                break
            else:
                time.sleep(0.0005)
        if exited is not None:
            if os.WIFSIGNALED(exited):
                sig = os.WTERMSIG(exited)
                status = {signal.SIGXCPU: "timeout", signal.SIGXFSZ: "output_limit"}.get(
                    sig, "signal")
            else:
                code = os.WEXITSTATUS(exited)
                status = "exited"
    _sweep(pid)
    return status, sig, code


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


def _run_job(job):
    import shutil
    import time

    t0 = time.monotonic()
    job_id = job["id"]
    deadline_at = t0 + float(job["deadline"])
    prefix = ("R %d " % job_id).encode()

    def relay(line):
        os.write(1, prefix + line + b"\n")

    scratch = _make_scratch(job_id)
    end = {"status": "exited", "signal": None, "code": None}
    try:
        if job["mode"] == "call":
            st, sig, code = _run_child(job, scratch, "call", None, None, deadline_at, relay)
            end.update(status=st, signal=sig, code=code)
        else:
            in_path = os.path.join(_SCRATCH_ROOT, "input-%d" % job_id)
            cap = int(job["output_mb"]) << 20
            for i, text in enumerate(job["inputs"]):
                with open(in_path, "w") as f:
                    f.write(text)
                records = []
                st, sig, code = _run_child(job, scratch, "stdin", i, in_path, deadline_at,
                                           records.append)
                rec = None
                for line in records:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        rec = {"c": "harness", "m": "bad record from child"}
                if st != "exited" or rec is None or rec.get("c"):
                    for line in records:
                        relay(line)
                    end.update(status=st, signal=sig, code=code, test=i)
                    break
                data = _read_output(os.path.join(scratch, "stdout"), cap + 1)
                if len(data) > cap:
                    end.update(status="output_limit", test=i)
                    break
                rec["s"] = data.decode("utf-8", "replace")
                relay(json.dumps(rec, ensure_ascii=True).encode())
                # Fresh scratch per test: nothing carries over between runs.
                shutil.rmtree(scratch, ignore_errors=True)
                scratch = _make_scratch(job_id)
                if _poll_abort(job_id, 0):
                    end.update(status="aborted")
                    break
            try:
                os.unlink(in_path)
            except OSError:
                pass
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    end["wall"] = time.monotonic() - t0
    _send("E %d %s" % (job_id, json.dumps(end)))


def main(argv):
    global _UID, _ISOLATION
    import ctypes
    import importlib

    uid = int(argv[1])
    _ISOLATION = argv[2]
    for name in _PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    sys.set_int_max_str_digits(0)
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
    _send("READY " + json.dumps({"pid": os.getpid(), "uid": _UID, "isolation": _ISOLATION,
                                 "python": sys.version.split()[0]}))
    while True:
        line = _ctrl_line(None)
        try:
            job = json.loads(line)
        except ValueError:
            continue
        if job.get("op") == "run":
            try:
                _run_job(job)
            except Exception as e:  # a bug here must not take the worker down silently
                _send("E %d %s" % (job.get("id", -1), json.dumps(
                    {"status": "harness", "note": "%s: %s" % (type(e).__name__, e)})))
            if _ISOLATION == "docker":
                _wipe_tmp()


if __name__ == "__main__":
    main(sys.argv)
