"""Real servers on loopback for the storage tests, also usable by hand.

* :class:`CephRGW` wraps ``infra/s3/ceph_rgw.sh`` (a single-node Ceph RGW: a real S3 server).
* :class:`FaultProxy` is a tiny HTTP proxy that injects S3 errors (503 SlowDown, 500) in front
  of an upstream (moto's server): throttling and 5xx on demand cannot be provoked from a healthy
  RGW, so this is the one place where moto stands in for S3.
* :class:`MlflowServer` runs ``mlflow server`` with its artifacts on S3.

    python tests/storage/s3servers.py rgw      # start an RGW, print its env, stop on Enter
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]
RGW_SCRIPT = REPO / "infra" / "s3" / "ceph_rgw.sh"
RGW_BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "ceph")
RGW_INSTALL = "apt-get install -y --no-install-recommends radosgw ceph-mon ceph-osd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def missing_rgw_binaries() -> list[str]:
    return [b for b in RGW_BINARIES if shutil.which(b) is None]


class CephRGW:
    """A throw-away Ceph cluster + radosgw under a temp dir; ``env`` holds endpoint and keys."""

    def __init__(self, root: str | None = None):
        # Short paths: Ceph's admin sockets are unix sockets (108-byte path limit).
        self.root = Path(root or tempfile.mkdtemp(prefix="rgw-", dir="/tmp"))
        self.env: dict[str, str] = {}

    def start(self, timeout: float = 240) -> "CephRGW":
        out = subprocess.run([str(RGW_SCRIPT), "start", str(self.root)], capture_output=True,
                             text=True, timeout=timeout)
        if out.returncode != 0:
            logs = self.root / "log"
            tail = ""
            for f in sorted(logs.glob("*.log")) if logs.is_dir() else []:
                tail += f"\n--- {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-15:])
            self.stop()
            raise RuntimeError(f"Ceph RGW failed to start: {out.stderr.strip()}{tail}")
        self.env = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
        return self

    @property
    def endpoint(self) -> str:
        return self.env["S3_ENDPOINT_URL"]

    def client(self, **kw):
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=kw.pop("key", self.env["AWS_ACCESS_KEY_ID"]),
                            aws_secret_access_key=kw.pop("secret", self.env["AWS_SECRET_ACCESS_KEY"]),
                            config=Config(s3={"addressing_style": "path"}), **kw)

    def stop(self) -> None:
        subprocess.run([str(RGW_SCRIPT), "stop", str(self.root)], capture_output=True, timeout=120)


# --------------------------------------------------------------------------------------------


@dataclass
class Fault:
    """Answer matching requests with an S3 error instead of forwarding them."""

    status: int
    code: str
    times: int | None = None  # None: forever
    match: Callable[[str, str], bool] = lambda method, path: True  # (method, path?query)


@dataclass
class Seen:
    method: str
    path: str
    status: int
    injected: bool


@dataclass
class FaultProxy:
    upstream_port: int
    port: int = 0
    faults: list[Fault] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)

    def start(self) -> "FaultProxy":
        proxy = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest output clean
                pass

            def _body(self) -> bytes:
                if "chunked" in self.headers.get("Transfer-Encoding", ""):
                    data = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        chunk = self.rfile.read(size + 2)[:size]
                        if size == 0:
                            # trailers until a blank line
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return data
                        data += chunk
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _handle(self) -> None:
                body = self._body()
                with lock:
                    fault = next((f for f in proxy.faults
                                  if (f.times is None or f.times > 0) and f.match(self.command, self.path)),
                                 None)
                    if fault and fault.times is not None:
                        fault.times -= 1
                if fault:
                    xml = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{fault.code}</Code>"
                           f"<Message>injected</Message></Error>").encode()
                    # Record before answering: the client may look at `seen` as soon as it has
                    # its response.
                    proxy.seen.append(Seen(self.command, self.path, fault.status, True))
                    self.send_response(fault.status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(xml)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(xml)
                    return
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("transfer-encoding", "connection", "expect")}
                headers["Content-Length"] = str(len(body))
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                proxy.seen.append(Seen(self.command, self.path, resp.status, False))
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length",
                                         "server", "date"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# --------------------------------------------------------------------------------------------


class MlflowServer:
    """``mlflow server`` on loopback: sqlite metadata, artifacts proxied to S3."""

    def __init__(self, workdir: Path, artifacts_destination: str, s3_env: dict[str, str]):
        self.workdir, self.dest, self.s3_env = Path(workdir), artifacts_destination, s3_env
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180) -> "MlflowServer":
        env = {**os.environ, **self.s3_env,
               "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",  # else 7 job workers, ~2.4 GB
               "MLFLOW_ENABLE_TELEMETRY": "false", "DO_NOT_TRACK": "true"}
        self.log = open(self.workdir / "mlflow-server.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1", "--backend-store-uri", f"sqlite:///{self.workdir / 'mlflow.db'}",
             "--artifacts-destination", self.dest],
            env=env, cwd=self.workdir, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {self._tail()}")
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=2)
                return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"mlflow server not healthy within {timeout}s: {self._tail()}")

    def _tail(self) -> str:
        return (self.workdir / "mlflow-server.log").read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its own session: uvicorn + workers
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(15)
        if getattr(self, "log", None):
            self.log.close()


if __name__ == "__main__" and sys.argv[1:] == ["rgw"]:
    if missing_rgw_binaries():
        sys.exit(f"missing {missing_rgw_binaries()}; install with: {RGW_INSTALL}")
    rgw = CephRGW().start()
    print("\n".join(f"export {k}={v}" for k, v in rgw.env.items()))
    try:
        input("RGW running; press Enter to stop\n")
    finally:
        rgw.stop()
