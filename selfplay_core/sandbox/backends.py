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
from selfplay_core.sandbox import seccomp as _seccomp_mod
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
    """The worker's program: the value codec, the seccomp filters, then the worker itself
    (which imports both only when the trusted parent imports it as a module)."""
    return "\n\n".join(inspect.getsource(m) for m in (_values, _seccomp_mod, _worker_mod))


class WorkerProcess(Protocol):
    ready_info: dict

    def fileno(self) -> int: ...
    def send(self, data: bytes) -> None: ...
    def read_chunk(self) -> bytes: ...
    def kill(self) -> None: ...
    def close(self) -> None: ...


class Launcher(Protocol):
    isolation: str

    def spawn(self, index: int, hash_seed: int | None = None,
              preload: str | None = None) -> WorkerProcess: ...


class MemoryCgroup:
    """One worker's memory cgroup: every process of the worker and of its jobs is charged
    to it, by every route (heap, forked children, tmpfs files, pipe and socket buffers).
    The parent sets its limit to the running job's memory limit + the scratch size + the
    worker's own share before the job starts."""

    WORKER_MB = 64

    def __init__(self, path: str, version: int):
        self.path, self.version = path, version
        self.limit_mb: int | None = None

    @property
    def procs(self) -> str:
        return os.path.join(self.path, "cgroup.procs")

    def _write(self, name: str, value: str) -> None:
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def set_limit(self, mb: int) -> None:
        nbytes = str(int(mb) << 20)
        if self.version == 1:
            # memsw (memory + swap) must stay >= memory: raise it first, lower it last (a new
            # cgroup starts unlimited in both: memory first).
            memsw = os.path.exists(os.path.join(self.path, "memory.memsw.limit_in_bytes"))
            grow = self.limit_mb is not None and mb > self.limit_mb
            if memsw and grow:
                self._write("memory.memsw.limit_in_bytes", nbytes)
            self._write("memory.limit_in_bytes", nbytes)
            if memsw and not grow:
                self._write("memory.memsw.limit_in_bytes", nbytes)
        else:
            self._write("memory.max", nbytes)
            if os.path.exists(os.path.join(self.path, "memory.swap.max")):
                self._write("memory.swap.max", "0")
        self.limit_mb = mb

    def remove(self) -> None:
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)  # its last processes are still exiting
        log.warning("could not remove sandbox cgroup %s", self.path)


class _CgroupRoot:
    """Where this process may create memory cgroups: its own cgroup in the v1 memory
    hierarchy, or in cgroup v2 when the memory controller is delegated below it."""

    def __init__(self, base: str, version: int):
        self.base, self.version = base, version
        self._n = 0

    @classmethod
    def detect(cls, controller: str = "memory") -> "_CgroupRoot | None":
        """Memory: cgroup v1 or a delegated v2 controller. cpuacct: cgroup v1 only."""
        import uuid
        try:
            with open("/proc/self/cgroup") as f:
                own = [line.rstrip("\n").split(":", 2) for line in f if line.strip()]
            with open("/proc/self/mountinfo") as f:
                mounts = [line.split() for line in f]
        except OSError:
            return None
        found = None
        for _, controllers, path in own:
            if controller in controllers.split(","):
                for m in mounts:
                    sep = m.index("-")
                    if m[sep + 1] == "cgroup" and controller in m[sep + 3].split(","):
                        found = (os.path.join(m[4], path.lstrip("/")), 1)
                        break
        if found is None and controller == "memory":
            v2 = next((path for h, c, path in own if h == "0" and c == ""), None)
            mnt = next((m[4] for m in mounts if m[m.index("-") + 1] == "cgroup2"), None)
            if v2 is not None and mnt is not None:
                d = os.path.join(mnt, v2.lstrip("/"))
                try:
                    with open(os.path.join(d, "cgroup.subtree_control")) as f:
                        if "memory" in f.read().split():
                            found = (d, 2)
                except OSError:
                    pass
        if found is None:
            return None
        base = os.path.join(found[0], f"selfplay-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            os.mkdir(base)
            if found[1] == 2:
                with open(os.path.join(base, "cgroup.subtree_control"), "w") as f:
                    f.write("+memory")
        except OSError:
            try:
                os.rmdir(base)
            except OSError:
                pass
            return None
        return cls(base, found[1])

    def make(self, index: int) -> MemoryCgroup:
        self._n += 1
        path = os.path.join(self.base, f"w{index}-{self._n}")
        os.mkdir(path)
        return MemoryCgroup(path, self.version)

    def remove(self) -> None:
        MemoryCgroup(self.base, self.version).remove()


class PipeWorker:
    """A worker reached through a child process's stdin/stdout pipes."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None,
                 cgroup: MemoryCgroup | None = None, scratch_mb: int = 0,
                 cpu_cgroup: MemoryCgroup | None = None):
        self.cgroup = cgroup
        self.cpu_cgroup = cpu_cgroup
        self.scratch_mb = scratch_mb
        if cgroup is not None:
            # Join the cgroup before exec, so bubblewrap and everything below it is inside;
            # the worker itself is never the OOM killer's choice (its children ask to be).
            argv = ["/bin/sh", "-c", 'echo $$ > "$0" && { echo -1000 > /proc/self/oom_score_adj; '
                    '} 2>/dev/null; exec "$@"', cgroup.procs, *argv]
            cgroup.set_limit(1024 + scratch_mb + cgroup.WORKER_MB)
        self.popen = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env if env is not None else dict(_CLEAN_ENV), close_fds=True,
            start_new_session=True, cwd="/",
        )
        self.ready_info = self._wait_ready()

    @property
    def memory_limit_mb(self) -> int | None:
        return None if self.cgroup is None else self.cgroup.limit_mb

    def limit_memory(self, job_mb: int) -> None:
        """Before a job with this memory limit starts (no-op without a cgroup)."""
        if self.cgroup is not None:
            mb = int(job_mb) + self.scratch_mb + self.cgroup.WORKER_MB
            if mb != self.cgroup.limit_mb:
                self.cgroup.set_limit(mb)

    def job_fits(self, job_mb: int) -> bool:
        """Whether a job can be queued behind the running one without a new limit."""
        return self.cgroup is None or \
            int(job_mb) + self.scratch_mb + self.cgroup.WORKER_MB == self.cgroup.limit_mb

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
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        if self.cpu_cgroup is not None:
            self.cpu_cgroup.remove()
            self.cpu_cgroup = None

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
    # --as-pid-1: the worker's zygote is pid 1 of the namespace, which the worker's kill(-1)
    # of a job's processes spares (see worker._zygote).
    args = ["--unshare-ipc", "--unshare-pid", "--as-pid-1", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
    if os.geteuid() != 0:
        args.insert(0, "--unshare-user")
    return args


# Where a worker sees its job CPU cgroup (bound there by bubblewrap).
_CPU_CGROUP_MOUNT = "/run/sp-cpu"


def _worker_cmd(exe: str, uid: int, isolation: str, hash_seed: int | None,
                preload: str | None, memcg: bool = False, cpu_cgroup: str | None = None
                ) -> list[str]:
    """The worker's command line. With a fixed hash seed the interpreter must read
    PYTHONHASHSEED, so `-I` (which implies -E) becomes -s -P: the environment is ours alone
    either way (cleared by bwrap or by Popen)."""
    flags = ["-I", "-S"] if hash_seed is None else ["-s", "-P", "-S"]
    return [exe, *flags, "-c", worker_source(), str(uid), isolation,
            preload if preload is not None else "-", "memcg" if memcg else "-",
            cpu_cgroup or "-"]


class _UidBlock:
    """A block of 512 uids held for this executor's lifetime (an flock'd file per block), so
    two executors on one machine never share a uid, whatever their pids."""

    SIZE = 512
    LOCK_DIR = "/tmp/selfplay-sandbox-uids"

    def __init__(self, base: int | None):
        import fcntl
        import random
        self.fd = None
        rng = random.SystemRandom()
        if base is not None or os.geteuid() != 0:
            # Given, or not root: children then keep our uid (no uid is switched to).
            self.base = base if base is not None else 200_000 + rng.randrange(0, 4_000_000) * self.SIZE
            return
        os.makedirs(self.LOCK_DIR, mode=0o700, exist_ok=True)
        for _ in range(64):
            k = rng.randrange(0, 4_000_000)
            fd = os.open(os.path.join(self.LOCK_DIR, f"{k}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.fd, self.base = fd, 200_000 + k * self.SIZE
            return
        raise SandboxUnavailable("could not reserve a block of sandbox uids")

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class LocalLauncher:
    """Workers on this machine: inside bubblewrap when possible, else bare (loudly)."""

    def __init__(self, isolation: str = "auto", require_isolation: bool = False,
                 uid_base: int | None = None, scratch_mb: int = 256, memory_cgroup: str = "auto"):
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
        self.require_isolation = require_isolation
        self.scratch_mb = scratch_mb
        self._uids = _UidBlock(uid_base)
        self.uid_base = self._uids.base
        self._cgroups = _CgroupRoot.detect() if memory_cgroup != "off" else None
        if self._cgroups is None and memory_cgroup == "required":
            self._uids.release()
            raise SandboxUnavailable(
                "sandbox.memory_cgroup is 'required' but no memory cgroup can be created here "
                "(cgroup v1 memory hierarchy or a delegated cgroup v2 memory controller)")
        if self._cgroups is None and memory_cgroup == "auto":
            log.info("no memory cgroup available: a job's memory is bounded per process "
                     "(address space), by its process count and by the scratch size")
        # A cpuacct cgroup per worker holds its running job's processes: their CPU time is read
        # from outside (descendants, setsid'd or not, included) and they can be killed by list.
        self._cpu_cgroups = _CgroupRoot.detect("cpuacct")
        if self._cpu_cgroups is None:
            log.warning("no cpuacct cgroup can be created here (cgroup v1 cpuacct, writable as "
                        "root): a job's CPU time is its main process's; CPU its descendants use "
                        "is bounded only by the wall-clock backstop (2 x limit + 1 s)")

    @property
    def memory_cgroups(self) -> bool:
        return self._cgroups is not None

    @property
    def cpu_cgroups(self) -> bool:
        return self._cpu_cgroups is not None

    def release(self) -> None:
        self._uids.release()
        if self._cpu_cgroups is not None:
            self._cpu_cgroups.remove()
            self._cpu_cgroups = None
        if self._cgroups is not None:
            self._cgroups.remove()
            self._cgroups = None

    def argv(self, index: int, hash_seed: int | None = None, preload: str | None = None,
             cpu_cgroup: str | None = None) -> list[str]:
        exe, prefix = _python()
        uid = self.uid_base + index if os.geteuid() == 0 else -1
        inside = cpu_cgroup if self.isolation == "none" or cpu_cgroup is None else _CPU_CGROUP_MOUNT
        cmd = _worker_cmd(exe, uid, self.isolation, hash_seed, preload, self.memory_cgroups, inside)
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
        # /tmp (scratch dirs, stdin files) is memory: its size is capped, so files a job
        # writes count against a bound too.
        args += ["--perms", "0755", "--size", str(self.scratch_mb << 20), "--tmpfs", "/tmp",
                 "--proc", "/proc", "--dev", "/dev",
                 "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8"]
        if hash_seed is not None:
            args += ["--setenv", "PYTHONHASHSEED", str(hash_seed)]
        if cpu_cgroup is not None:
            # Only this worker's job cgroup is visible (its files are root's: a job's uid can
            # read them, never move a process out).
            args += ["--bind", cpu_cgroup, _CPU_CGROUP_MOUNT]
        args += ["--chdir", "/tmp", "--"]
        return args + cmd

    def spawn(self, index: int, hash_seed: int | None = None,
              preload: str | None = None) -> WorkerProcess:
        env = None
        if self.isolation == "none" and hash_seed is not None:
            env = dict(_CLEAN_ENV, PYTHONHASHSEED=str(hash_seed))
        cg = self._cgroups.make(index) if self._cgroups is not None else None
        cpu = self._cpu_cgroups.make(index) if self._cpu_cgroups is not None else None
        try:
            w = PipeWorker(self.argv(index, hash_seed, preload, cpu.path if cpu else None),
                           env=env, cgroup=cg, scratch_mb=self.scratch_mb, cpu_cgroup=cpu)
        except BaseException:
            for c in (cg, cpu):
                if c is not None:
                    c.remove()
            raise
        if not w.ready_info.get("seccomp"):
            msg = ("sandbox workers run without a seccomp filter here (only x86-64 is "
                   "supported): SysV IPC, keyrings and namespaces stay reachable")
            if self.require_isolation:
                w.kill()
                raise SandboxUnavailable(msg)
            log.warning(msg)
        return w
