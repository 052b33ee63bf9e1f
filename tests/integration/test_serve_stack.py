"""`selfplay serve` as a person runs it: the Prefect server and MLflow answer at the printed URLs,
a worker serves the local pool, and Ctrl-C (SIGINT) stops every process it started (S3 and the
deployments are left out here: tests/storage covers the RGW, test_deployments_server deploy)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(pid: int) -> set[int]:
    """Processes whose session is `pid`'s or one of the sessions its children lead."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,sid="], capture_output=True, text=True).stdout
    rows = [tuple(map(int, ln.split())) for ln in out.splitlines() if ln.strip()]
    kids, frontier = set(), {pid}
    while frontier:
        nxt = {p for p, pp, _ in rows if pp in frontier} - kids
        kids |= nxt
        frontier = nxt
    sessions = {s for p, _, s in rows if p in kids}
    return kids | {p for p, _, s in rows if s in sessions}


async def _online_workers(api: str) -> list:
    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.filters import WorkerFilter

    async with PrefectClient(api) as client:
        return await client.read_workers_for_work_pool(
            "selfplay-local", worker_filter=WorkerFilter(status={"any_": ["ONLINE"]}))


def test_serve_starts_the_stack_and_ctrl_c_stops_it(tmp_path):
    pp, mp = _free_port(), _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("PREFECT_API_URL", None)
    log = tmp_path / "serve.out"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "selfplay_cli.main", "serve", "--dir",
                                 str(tmp_path / "state"), "--prefect-port", str(pp), "--mlflow-port",
                                 str(mp), "--no-s3", "--no-deploy", "--stop-timeout", "10"],
                                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
                                start_new_session=True)
    children: set[int] = set()
    try:
        deadline = time.monotonic() + 240
        while "Ctrl-C stops everything" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(1)
        text = log.read_text()
        assert f"Prefect UI   http://127.0.0.1:{pp}" in text and f"MLflow UI    http://127.0.0.1:{mp}" in text
        assert "note: no S3 server" not in text  # --no-s3 skips it without the install note
        with urllib.request.urlopen(f"http://127.0.0.1:{pp}/api/health", timeout=5) as r:
            assert r.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{mp}/health", timeout=5) as r:
            assert r.status == 200
        workers = []
        while not workers and time.monotonic() < deadline:
            try:
                workers = asyncio.run(_online_workers(f"http://127.0.0.1:{pp}/api"))
            except Exception:  # the pool appears when the worker first polls
                pass
            time.sleep(2)
        assert workers, log.read_text()
        children = _descendants(proc.pid) - {proc.pid}
        assert len(children) >= 3  # prefect server, mlflow server (+ its uvicorn), worker

        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=60)
        took = time.monotonic() - t0
        print(f"serve stopped in {took:.1f} s")
        assert rc == 0, log.read_text()
        assert "stopped." in log.read_text()
        time.sleep(0.5)
        alive = [p for p in children if Path(f"/proc/{p}").exists()
                 and "zombie" not in Path(f"/proc/{p}/status").read_text().lower()]
        assert not alive, f"left running: {alive}\n{log.read_text()}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for p in children:
            try:
                os.killpg(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
