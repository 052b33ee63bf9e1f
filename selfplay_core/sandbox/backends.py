"""How a sandbox worker process is started: bubblewrap, bare local process, or a container.

Every backend runs the same worker source (`worker.py`, passed with `-c`, so no project file
needs to be visible inside) and speaks the same line protocol over the worker's stdin/stdout;
verdicts therefore do not depend on the backend.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from typing import Protocol

from selfplay_core import values as _values
from selfplay_core.sandbox import worker as _worker_mod

log = logging.getLogger(__name__)

_READY_TIMEOUT_S = 30.0
# A minimal environment: nothing from the parent (credentials, proxies, tokens) is passed on.
_CLEAN_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_CHOWN")


class SandboxUnavailable(RuntimeError):
    """The requested isolation cannot be provided on this machine."""


@functools.lru_cache(maxsize=1)
def worker_source() -> str:
    """The worker's program: the value codec, then the worker itself (which imports the codec
    only when the trusted parent imports it as a module)."""
    return inspect.getsource(_values) + "\n\n" + inspect.getsource(_worker_mod)


class WorkerProcess(Protocol):
    ready_info: dict

    def fileno(self) -> int: ...
    def send(self, data: bytes) -> None: ...
    def read_chunk(self) -> bytes: ...
    def kill(self) -> None: ...
    def close(self) -> None: ...


class Launcher(Protocol):
    isolation: str

    def spawn(self, index: int) -> WorkerProcess: ...


class PipeWorker:
    """A worker reached through a child process's stdin/stdout pipes."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None):
        self.popen = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env if env is not None else dict(_CLEAN_ENV), close_fds=True,
            start_new_session=True, cwd="/",
        )
        self.ready_info = self._wait_ready()

    def _wait_ready(self) -> dict:
        import select
        fd = self.popen.stdout.fileno()
        end = time.monotonic() + _READY_TIMEOUT_S
        buf = b""
        while b"\n" not in buf:
            left = end - time.monotonic()
            r, _, _ = select.select([fd], [], [], max(0.0, left))
            if not r:
                self.kill()
                raise SandboxUnavailable(f"sandbox worker did not start within {_READY_TIMEOUT_S:.0f} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                err = self.popen.stderr.read().decode(errors="replace").strip()
                self.kill()
                raise SandboxUnavailable(f"sandbox worker failed to start: {err[-500:] or 'no output'}")
            buf += chunk
        line, rest = buf.split(b"\n", 1)
        if not line.startswith(b"READY "):
            self.kill()
            raise SandboxUnavailable(f"sandbox worker sent {line[:200]!r} instead of READY")
        if rest:
            raise SandboxUnavailable("sandbox worker sent data before any job")
        return json.loads(line[6:])

    def fileno(self) -> int:
        return self.popen.stdout.fileno()

    def send(self, data: bytes) -> None:
        self.popen.stdin.write(data)
        self.popen.stdin.flush()

    def read_chunk(self) -> bytes:
        try:
            return os.read(self.fileno(), 1 << 16)
        except OSError:
            return b""

    def kill(self) -> None:
        try:
            os.killpg(self.popen.pid, 9)
        except OSError:
            pass
        try:
            self.popen.kill()
        except OSError:
            pass
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            try:
                f.close()
            except OSError:
                pass

    def close(self) -> None:
        try:
            self.popen.stdin.close()  # EOF: the worker exits by itself
            self.popen.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            pass
        self.kill()


def _python() -> tuple[str, str]:
    """The base interpreter (not a venv shim) and its prefix: all a worker needs to run."""
    exe = os.path.realpath(sys.executable)
    return exe, os.path.realpath(sys.base_prefix)


@functools.lru_cache(maxsize=1)
def bwrap_problem() -> str | None:
    """None if bubblewrap can give us the namespaces we need, else why not."""
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return "bubblewrap is not installed (Debian/Ubuntu: apt-get install -y bubblewrap)"
    argv = [bwrap, *_namespace_args(), "--ro-bind", "/", "/", "--", "/bin/true"]
    try:
        r = subprocess.run(argv, capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bubblewrap failed to run: {e}"
    if r.returncode != 0:
        return f"bubblewrap cannot create namespaces here: {r.stderr.decode(errors='replace').strip()[:300]}"
    return None


def _namespace_args() -> list[str]:
    args = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    if os.geteuid() != 0:
        args.insert(0, "--unshare-user")
    return args


class LocalLauncher:
    """Workers on this machine: inside bubblewrap when possible, else bare (loudly)."""

    def __init__(self, isolation: str = "auto", require_isolation: bool = False,
                 uid_base: int | None = None):
        problem = bwrap_problem() if isolation in ("auto", "bwrap") else "isolation is set to none"
        if problem is None:
            self.isolation = "bwrap"
        elif isolation == "bwrap" or require_isolation:
            raise SandboxUnavailable(
                f"the sandbox cannot isolate untrusted code: {problem}. "
                "Install bubblewrap, use backend: docker, or set require_isolation: false "
                "to run without namespaces (unsafe)."
            )
        else:
            self.isolation = "none"
            msg = (f"WARNING: executor running WITHOUT isolation ({problem}). Untrusted code can "
                   "reach the network and read this machine's files. Install bubblewrap or set "
                   "sandbox.require_isolation: true to refuse to run like this.")
            log.warning(msg)
            print(msg, file=sys.stderr)
        # A block of 512 uids per executor (workers <= 512), far above regular users' uids.
        self.uid_base = uid_base if uid_base is not None else 100000 + (os.getpid() % 4096) * 512

    def argv(self, index: int) -> list[str]:
        exe, prefix = _python()
        uid = self.uid_base + index if os.geteuid() == 0 else -1
        cmd = [exe, "-I", "-S", "-c", worker_source(), str(uid), self.isolation]
        if self.isolation == "none":
            return cmd
        args = ["bwrap", *_namespace_args()]
        if os.geteuid() == 0:
            for cap in _CAPS:
                args += ["--cap-add", cap]
        # A minimal view of the file system: system dirs read-only, the interpreter, a private
        # /tmp. The project, home directories, datasets and run outputs are not visible.
        for d in ("/usr", "/bin", "/lib", "/lib64", "/lib32", "/sbin", "/etc"):
            if os.path.islink(d):
                args += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                args += ["--ro-bind", d, d]
        for d in sorted({prefix, os.path.dirname(exe)}):
            if not d.startswith("/usr/"):
                parts = d.strip("/").split("/")
                for k in range(1, len(parts)):
                    args += ["--perms", "0755", "--dir", "/" + "/".join(parts[:k])]
                args += ["--ro-bind", d, d]
        args += ["--perms", "0755", "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev",
                 "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8",
                 "--chdir", "/tmp", "--"]
        return args + cmd

    def spawn(self, index: int) -> WorkerProcess:
        return PipeWorker(self.argv(index))
