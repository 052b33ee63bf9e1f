"""The preflight: every endpoint a run will use is probed before any long work, and one that does
not answer is one line naming its key, its URL and what to do (exit 2), or, for the S3 endpoint
of a checkpoint store, one line saying the uploads will spool and where.

Unreachable endpoints here are real: a port on 127.0.0.1 that nothing listens on. Reachable ones
are a real HTTP server in this process."""

import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from selfplay_core.config import load_config
from selfplay_core.preflight import preflight

REPO = Path(__file__).resolve().parents[1]


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def health_server():
    """An HTTP server answering GET /health with 200 and any other path with 404."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def run_cli(args, tmp_path, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API_URL", "MLFLOW_", "AWS_", "SELFPLAY_S3"))}
    e.update(PYTHONPATH=str(REPO), PREFECT_HOME=str(tmp_path / "prefect-home"), **env)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "selfplay_cli.main", "run", "--set", f"out_dir={out}", *args],
                       cwd=tmp_path, env=e, capture_output=True, text=True, timeout=300)
    return r, out


@pytest.mark.parametrize("key, args, env", [
    ("tracking.mlflow_uri", ["--set", "tracking.mlflow_uri={url}"], {}),
    ("$MLFLOW_TRACKING_URI", [], {"MLFLOW_TRACKING_URI": "{url}"}),
    ("engine.vllm_url", ["--set", "engine.backend=vllm", "--set", "engine.vllm_url={url}"], {}),
    ("PREFECT_API_URL", [], {"PREFECT_API_URL": "{url}/api"}),
])
def test_an_unreachable_endpoint_is_one_line_before_the_run_starts(tmp_path, key, args, env):
    url = f"http://127.0.0.1:{closed_port()}"
    r, out = run_cli([a.format(url=url) for a in args], tmp_path, **{k: v.format(url=url) for k, v in env.items()})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr[-3000:]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert lines[0].startswith(f"selfplay run: error: {key} = {url}") and "does not answer" in lines[0]
    assert not out.exists()  # nothing was started: no run folder, no MLflow store


def test_an_unreachable_s3_endpoint_of_the_checkpoint_store_says_it_spools_and_where(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}"
    spool = tmp_path / "spool"
    # With MLflow unreachable as well the run stops, after the S3 line: the two kinds side by side.
    r, _ = run_cli(["--set", "tracking.checkpoint_store=s3://ckpts/runs",
                    "--set", f"tracking.mlflow_uri={url}"], tmp_path,
                   SELFPLAY_S3_ENDPOINT_URL=url, SELFPLAY_SPOOL_DIR=str(spool))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    note, error = r.stderr.strip().splitlines()
    assert note.startswith("note: tracking.checkpoint_store s3://ckpts/runs: the S3 endpoint "
                           f"{url} ($SELFPLAY_S3_ENDPOINT_URL) does not answer")
    assert f"spools each checkpoint upload under {spool}" in note
    assert error.startswith(f"selfplay run: error: tracking.mlflow_uri = {url}")


def test_the_spooling_store_alone_lets_the_run_start(tmp_path, monkeypatch):
    url = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("SELFPLAY_S3_ENDPOINT_URL", url)
    monkeypatch.setenv("SELFPLAY_SPOOL_DIR", str(tmp_path / "spool"))
    report = preflight(load_config(None, ["tracking.checkpoint_store=s3://ckpts/runs", f"out_dir={tmp_path}"]))
    assert report.errors == [] and len(report.notes) == 1 and url in report.notes[0]


def test_mlflow_artifacts_on_an_unreachable_s3_endpoint_are_an_error(tmp_path, monkeypatch):
    url = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", url)
    report = preflight(load_config(None, ["tracking.artifact_store=s3://mlflow/art", f"out_dir={tmp_path}"]))
    assert report.notes == []
    assert len(report.errors) == 1 and report.errors[0].startswith(f"$MLFLOW_S3_ENDPOINT_URL = {url} does not answer")
    assert "tracking.artifact_store" in report.errors[0]


def test_reachable_endpoints_pass_and_a_wrong_path_is_named(tmp_path, health_server, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = load_config(None, [f"tracking.mlflow_uri={health_server}", "engine.backend=vllm",
                             f"engine.vllm_url={health_server}", f"out_dir={tmp_path}"])
    assert preflight(cfg).errors == []
    # A server that is up but answers 404 on the health path is not the service the key names.
    cfg = load_config(None, [f"tracking.mlflow_uri={health_server}/not-mlflow", f"out_dir={tmp_path}"])
    (error,) = preflight(cfg).errors
    assert "answered HTTP 404" in error and error.startswith("tracking.mlflow_uri")


def test_the_docker_backend_needs_a_daemon_that_answers(tmp_path, monkeypatch):
    pytest.importorskip("docker", reason="the docker extra is not installed")
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{closed_port()}")
    (error,) = preflight(load_config(None, ["sandbox.backend=docker", f"out_dir={tmp_path}"])).errors
    assert error.startswith("sandbox.backend = docker: no Docker daemon answers at tcp://127.0.0.1:")
