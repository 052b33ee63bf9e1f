"""The docker backend: each sandbox worker lives in its own long-lived, locked-down container.

The container runs the same stdlib-only worker as the local backend
(``python3 -I -S -c <worker source> -1 docker``) and the same line protocol, carried over the
container's stdin/stdout through a socket attached to the Docker daemon; `DockerWorker`
de-multiplexes Docker's stream frames so the pool's selector can wait on that socket.

Per container: no network (``network_mode=none``: only its own loopback), read-only root file
system, a size-limited tmpfs at /tmp as the only writable place, uid/gid 65534 (so the worker
does not switch uids: children share the container's unprivileged uid and the pids cgroup stops
fork bombs), memory = memory+swap limit, pids limit, every capability dropped,
``no-new-privileges``, no IPC mounts, no environment from the host, no log driver (results
never touch the daemon's disk), auto-remove. The worker's zygote is pid 1 of the container (see
worker._zygote), so the job debris the worker sweeps after every job is every process but those
two. The worker itself is pid 2 and shares its children's uid: a job can kill it, which ends that
job as a harness error (retried, then excluded); the bubblewrap backend gives children a uid of
their own instead.

The ``docker`` package is imported here only, lazily: the rest of the sandbox does not need it.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import time
import uuid

from selfplay_core.sandbox.backends import SandboxUnavailable, worker_source

log = logging.getLogger(__name__)

_READY_TIMEOUT_S = 60.0
_PYTHON = "python3"
_CONTAINER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
_LABEL = "selfplay.executor"
_BUILD_HINT = ("build it with `docker build -t selfplay-executor:latest -f infra/executor.Dockerfile "
               "infra` or, without a registry, `infra/build_executor_image.sh`")
_STDOUT, _STDERR = 1, 2


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return (text[:300] + "...") if len(text) > 300 else text


def _docker_sdk():
    try:
        import docker  # noqa: PLC0415 - heavy and optional: only this backend needs it
    except ImportError as e:
        raise SandboxUnavailable(
            "backend 'docker' needs the docker SDK: pip install 'selfplay[docker]'") from e
    return docker


class DockerLauncher:
    """Starts one container per worker from `config.docker_image`."""

    isolation = "docker"

    def __init__(self, config):
        docker = _docker_sdk()
        self.config = config
        self._errors = docker.errors
        where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        try:
            self.client = docker.from_env(timeout=60)
            self.client.ping()
        except Exception as e:  # DockerException, requests' ConnectionError, ...
            raise SandboxUnavailable(
                f"no Docker daemon answers at {where} ({_short(e)}); start dockerd (see "
                "infra/README.md) or set DOCKER_HOST, or use sandbox backend 'local'") from e
        try:
            self.client.images.get(config.docker_image)
        except docker.errors.ImageNotFound as e:
            raise SandboxUnavailable(
                f"executor image {config.docker_image!r} is not on the Docker daemon at {where}: "
                f"{_BUILD_HINT}") from e
        except docker.errors.APIError as e:
            raise SandboxUnavailable(f"Docker daemon at {where} failed to look up image "
                                     f"{config.docker_image!r}: {_short(e)}") from e
        self.run_tag = uuid.uuid4().hex[:12]

    def container_options(self, index: int, hash_seed: int | None = None,
                          preload: str | None = None) -> tuple[dict, dict]:
        """(container config, host config) for the low-level `create_container` call."""
        from selfplay_core.sandbox.backends import _worker_cmd
        cfg = self.config
        env = dict(_CONTAINER_ENV)
        if hash_seed is not None:
            env["PYTHONHASHSEED"] = str(hash_seed)
        mem = f"{cfg.docker_memory_mb}m"
        tmp_mb = max(64, min(1024, cfg.docker_memory_mb // 4))
        config = dict(
            image=cfg.docker_image,
            command=_worker_cmd(_PYTHON, -1, self.isolation, hash_seed, preload),
            # (memory: the container's own cgroup, mem_limit below)
            user="65534:65534",
            environment=env,
            use_config_proxy=False,  # no proxy variables from the client's config either
            working_dir="/tmp",
            hostname="sandbox",
            # Not detached + open stdin = StdinOnce: when our attach ends (we closed it, or this
            # process died) the worker's stdin closes and it exits; auto-remove does the rest.
            detach=False,
            stdin_open=True,
            tty=False,
            labels={_LABEL: "1", f"{_LABEL}.run": self.run_tag,
                    f"{_LABEL}.worker": str(index), f"{_LABEL}.host_pid": str(os.getpid())},
        )
        host = dict(
            network_mode="none",
            ipc_mode="none",
            read_only=True,
            tmpfs={"/tmp": f"rw,nosuid,nodev,noexec,size={tmp_mb}m,mode=1777",
                   # Docker mounts a world-writable mqueue fs here; cover it read-only.
                   "/dev/mqueue": "ro,nosuid,nodev,noexec,size=4k,mode=0555"},
            mem_limit=mem,
            memswap_limit=mem,
            pids_limit=cfg.docker_pids_limit,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            log_config={"type": "none", "config": {}},
            auto_remove=True,
        )
        return config, host

    def spawn(self, index: int, hash_seed: int | None = None,
              preload: str | None = None) -> "DockerWorker":
        return DockerWorker(self, index, hash_seed, preload)


class DockerWorker:
    """A worker in a container, reached through an attached stdin/stdout socket."""

    def __init__(self, launcher: DockerLauncher, index: int, hash_seed: int | None = None,
                 preload: str | None = None):
        self._launcher = launcher
        self._api = launcher.client.api
        self._raw = b""
        self._out = b""
        self._err = bytearray()
        self._eof = False
        self._closed = False
        self.container_id: str | None = None
        self.timings: dict[str, float] = {}
        t0 = time.monotonic()
        opts, host = launcher.container_options(index, hash_seed, preload)
        try:
            cid = self._api.create_container(
                host_config=self._api.create_host_config(**host), **opts)["Id"]
        except launcher._errors.ImageNotFound as e:
            raise SandboxUnavailable(
                f"executor image {opts['image']!r} disappeared: {_BUILD_HINT}") from e
        except launcher._errors.APIError as e:
            raise SandboxUnavailable(f"could not create the sandbox container: {_short(e)}") from e
        self.container_id = cid
        try:
            # Attach before starting, so no output (READY, or a start-up error) is missed.
            self._io = self._api.attach_socket(
                cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            self._sock: socket.socket = getattr(self._io, "_sock", self._io)
            self._sock.setblocking(True)
            t1 = time.monotonic()
            self._api.start(cid)
            self.timings["create_s"] = t1 - t0
            self.timings["start_s"] = time.monotonic() - t1
            self.ready_info = self._wait_ready()
        except SandboxUnavailable:
            self.kill()
            raise
        except Exception as e:
            self.kill()
            raise SandboxUnavailable(
                f"sandbox container failed to start ({_short(e)}); check the daemon's log and "
                f"that image {opts['image']!r} has {_PYTHON} (3.11+): {_BUILD_HINT}") from e
        self.timings["ready_s"] = time.monotonic() - t0
        log.debug("docker worker %d: container %s ready in %.2f s", index, cid[:12],
                  self.timings["ready_s"])

    # ---- stream de-multiplexing ------------------------------------------------------------
    def _pump(self, timeout: float | None) -> bool:
        """Read what the socket has (waiting up to `timeout`); False once it is closed."""
        if self._eof:
            return False
        if timeout is not None:
            r, _, _ = select.select([self._sock], [], [], max(0.0, timeout))
            if not r:
                return True
        try:
            data = self._sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            data = b""
        if not data:
            self._eof = True
            return False
        self._raw += data
        # Frames: 1 byte stream type, 3 zero bytes, 4-byte big-endian length, payload.
        while len(self._raw) >= 8:
            size = int.from_bytes(self._raw[4:8], "big")
            if len(self._raw) < 8 + size:
                break
            kind, payload = self._raw[0], self._raw[8:8 + size]
            self._raw = self._raw[8 + size:]
            if kind == _STDOUT:
                self._out += payload
            elif kind == _STDERR:
                self._err += payload
                del self._err[:-4096]  # keep the tail, for error messages
        return True

    def _wait_ready(self) -> dict:
        import json
        end = time.monotonic() + _READY_TIMEOUT_S
        while b"\n" not in self._out:
            left = end - time.monotonic()
            if left <= 0:
                raise SandboxUnavailable(
                    f"sandbox container did not report ready within {_READY_TIMEOUT_S:.0f} s")
            if not self._pump(left):
                err = self._err.decode(errors="replace").strip()
                raise SandboxUnavailable(
                    "sandbox container exited during start-up: "
                    f"{err[-500:] or 'no output'} (image {self._launcher.config.docker_image!r}: "
                    f"it needs {_PYTHON} 3.11+; {_BUILD_HINT})")
        line, rest = self._out.split(b"\n", 1)
        if not line.startswith(b"READY "):
            raise SandboxUnavailable(f"sandbox container sent {line[:200]!r} instead of READY")
        if rest:
            raise SandboxUnavailable("sandbox container sent data before any job")
        self._out = b""
        return json.loads(line[6:])

    # ---- WorkerProcess ---------------------------------------------------------------------
    def fileno(self) -> int:
        return self._sock.fileno()

    def send(self, data: bytes) -> None:
        if self._closed:
            raise OSError("sandbox container is closed")
        self._sock.sendall(data)

    def read_chunk(self) -> bytes:
        """Worker stdout bytes; b"" once the container's stream has ended.

        Called when the socket is readable. A read may end inside a frame or bring only stderr;
        then wait (bounded) for more: the daemon writes each frame at once, and the worker
        writes to stderr only when it is dying, after which the stream ends.
        """
        end = None
        while not self._out:
            if end is None:
                alive = self._pump(0.0)
                end = time.monotonic() + 5.0
            else:
                left = end - time.monotonic()
                if left <= 0:
                    log.warning("sandbox container %s: no protocol output after stderr %r",
                                (self.container_id or "?")[:12], self.stderr_tail[-200:])
                    return b""  # the pool replaces a worker in this state
                alive = self._pump(left)
            if not alive:
                break
        out, self._out = self._out, b""
        return out

    @property
    def stderr_tail(self) -> str:
        return self._err.decode(errors="replace")

    def kill(self) -> None:
        self._closed = True
        sock = getattr(self, "_sock", None)
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
            try:
                self._io.close()
            except Exception:
                pass
        if self.container_id is None:
            return
        cid, self.container_id = self.container_id, None
        try:
            self._api.remove_container(cid, force=True)
        except self._launcher._errors.NotFound:
            pass  # auto-removed already
        except self._launcher._errors.APIError as e:
            if getattr(e, "status_code", None) != 409:  # 409: removal already in progress
                log.warning("could not remove sandbox container %s: %s", cid[:12], _short(e))
        except Exception as e:  # daemon gone: the container dies with its attach anyway
            log.warning("could not remove sandbox container %s: %s", cid[:12], _short(e))

    def close(self) -> None:
        self.kill()
