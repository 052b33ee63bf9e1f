"""`make up` as a person runs it: the Prefect server and MLflow answer at the printed URLs, a
worker serves the local pool, the MLflow it serves is the store `selfplay run` writes (a run
made beside the stack shows in it, and a run logged through it is in that store), and a SIGINT
sent to make's pid alone (not its process group, which Ctrl-C would reach) stops every process
it started. S3 and the deployments are left out here: tests/storage covers the RGW,
test_deployments_server the deployments."""

from __future__ import annotations

import asyncio
import os
import shutil
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
VENV = Path(sys.executable).parents[1]


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


def _alive(pids) -> list[int]:
    return [p for p in pids if Path(f"/proc/{p}").exists()
            and "zombie" not in Path(f"/proc/{p}/status").read_text().lower()]


async def _online_workers(api: str) -> list:
    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.filters import WorkerFilter

    async with PrefectClient(api) as client:
        return await client.read_workers_for_work_pool(
            "selfplay-local", worker_filter=WorkerFilter(status={"any_": ["ONLINE"]}))


def make_up(tmp: Path, args: str, log: Path) -> subprocess.Popen:
    """`make up` from the repository root with this interpreter's venv (-o: never reinstall it)
    and its state under tmp. Started with SIGINT at its default disposition, as a shell's
    foreground job has it (a non-interactive shell's background job ignores SIGINT: POSIX)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("PREFECT_API_URL", None)
    env.pop("MLFLOW_TRACKING_URI", None)
    with open(log, "wb") as out:
        return subprocess.Popen(
            [shutil.which("make"), "-C", str(REPO), "-o", f"{VENV}/.selfplay-installed", f"VENV={VENV}",
             f"UP_PID={tmp}/serve.pid", f"UP_ARGS={args}", "up"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_default_sigint)


def _default_sigint() -> None:
    # An ignored signal stays ignored across exec, so a suite started as a background job
    # (nohup, `cmd &` in a script) would hand make an ignored SIGINT and the Ctrl-C tests would
    # wait for nothing; a handler does not survive exec, so only SIG_IGN needs undoing.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for(log: Path, text: str, proc: subprocess.Popen, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(1)
    return log.read_text()


def tiny_selfplay_run(cwd: Path) -> None:
    """`selfplay run` as `make run` does it, scaled down, from `cwd`, with no tracking setting:
    it logs to its default store, cwd/runs/mlruns."""
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    sets = [f"model.path={ASSET_DIR}", "iterations=1", "method.goalposts_per_iteration=2",
            "method.proposals_per_anchor=2", "student.samples_per_task=2", "student.batch_size=16",
            "eval.n=1", "eval.verdict_n=null", "eval.ks=[1]", "eval.max_problems=4", "eval.goalpost_every=1",
            "eval.goalpost_k=1", "world.goalpost_k=2", "world.max_goalposts=3",
            "engine.max_new_tokens_teacher=64", "engine.max_new_tokens_student=32",
            "sandbox.workers=1", "tracking.run_name=beside-make-up"]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["PYTHONPATH"] = str(REPO)
    cmd = [sys.executable, "-m", "selfplay_cli.main", "run", "--no-prefect",
           "--config", str(REPO / "configs" / "tiny-cpu.yaml")] + [a for s in sets for a in ("--set", s)]
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "compare runs:" in out.stdout


def test_make_up_serves_the_run_store_and_sigint_to_makes_pid_stops_it(tmp_path):
    from mlflow.tracking import MlflowClient

    pp, mp = _free_port(), _free_port()
    store = tmp_path / "runs" / "mlruns"  # what `selfplay run` writes from tmp_path
    log = tmp_path / "up.out"
    proc = make_up(tmp_path, f"--dir {tmp_path}/state --mlflow-store {store} --prefect-port {pp} "
                   f"--mlflow-port {mp} --no-s3 --no-deploy --stop-timeout 10", log)
    children: set[int] = set()
    try:
        text = wait_for(log, "Ctrl-C stops everything", proc, 240)
        assert f"Prefect UI   http://127.0.0.1:{pp}" in text and f"MLflow UI    http://127.0.0.1:{mp}" in text
        assert str(store) in text and "Machine learning" in text
        assert "note: no S3 server" not in text  # --no-s3 skips it without the install note
        assert (tmp_path / "serve.pid").read_text().strip().isdigit()
        with urllib.request.urlopen(f"http://127.0.0.1:{pp}/api/health", timeout=5) as r:
            assert r.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{mp}/health", timeout=5) as r:
            assert r.status == 200
        deadline = time.monotonic() + 240
        workers = []
        while not workers and time.monotonic() < deadline:
            try:
                workers = asyncio.run(_online_workers(f"http://127.0.0.1:{pp}/api"))
            except Exception:  # the pool appears when the worker first polls
                pass
            time.sleep(2)
        assert workers, log.read_text()

        # One MLflow: a self-play run made beside the stack, with no tracking setting, is in
        # the served store (metrics and its heatmap artifact, read through the server)...
        tiny_selfplay_run(tmp_path)
        served = MlflowClient(f"http://127.0.0.1:{mp}")
        (exp,) = [e for e in served.search_experiments() if e.name == "selfplay-toy"]
        (run,) = served.search_runs([exp.experiment_id], "attributes.run_name = 'beside-make-up'")
        assert run.info.status == "FINISHED"
        assert [m.step for m in served.get_metric_history(run.info.run_id, "eval/all/pass_at_1")] == [0, 1]
        assert "plots/goalpost_heatmap.png" in [a.path for a in served.list_artifacts(run.info.run_id, "plots")]
        got = served.download_artifacts(run.info.run_id, "plots/goalpost_heatmap.png", str(tmp_path / "dl"))
        assert Path(got).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        # ... and a run logged through the server (as the worker's flow runs are) is in that
        # store, in the same experiment, with its artifacts as plain files beside it.
        rid = served.create_run(exp.experiment_id, run_name="through-the-server").info.run_id
        served.log_metric(rid, "eval/all/pass_at_1", 0.25, step=0)
        served.log_text(rid, "hello", "note.txt")
        served.set_terminated(rid)
        direct = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
        assert direct.get_run(rid).data.metrics["eval/all/pass_at_1"] == 0.25
        assert (store / "artifacts").exists() and any(p.name == "note.txt" for p in store.rglob("note.txt"))

        # SIGINT to make's pid, and only to it.
        children = _descendants(proc.pid) - {proc.pid}
        assert len(children) >= 4  # selfplay serve, prefect server, mlflow server, worker
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=90)
        print(f"make up stopped {time.monotonic() - t0:.1f} s after SIGINT to make's pid")
        text = log.read_text(errors="replace")
        assert rc != 0 and "stopped." in text, text  # make reports the interrupt, serve cleaned up
        assert not (tmp_path / "serve.pid").exists()
        time.sleep(0.5)
        assert not _alive(children), f"left running: {_alive(children)}\n{text}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for p in children:
            try:
                os.killpg(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_makes_pid_during_start_up_stops_it(tmp_path, sig):
    """The same during start-up (servers still coming up), for SIGTERM (which make passes on)
    and SIGINT (which make does not: the pid file it deletes is what stops serve)."""
    log = tmp_path / "up.out"
    proc = make_up(tmp_path, f"--dir {tmp_path}/state --mlflow-store {tmp_path}/mlruns "
                   f"--prefect-port {_free_port()} --mlflow-port {_free_port()} --no-s3 --no-deploy "
                   "--no-worker --stop-timeout 10", log)
    children: set[int] = set()
    try:
        wait_for(log, "starting Prefect server and MLflow", proc, 120)
        children = _descendants(proc.pid) - {proc.pid}
        os.kill(proc.pid, sig)
        proc.wait(timeout=60)
        text = log.read_text(errors="replace")
        assert "stopped." in text and "Ctrl-C stops everything" not in text, text
        time.sleep(0.5)
        assert not _alive(children), f"left running: {_alive(children)}\n{text}"
        assert not (tmp_path / "serve.pid").exists()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for p in children:
            try:
                os.killpg(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def test_serve_default_store_is_the_one_selfplay_run_writes(tmp_path, monkeypatch):
    """Same cwd, no settings: `selfplay serve` serves exactly the SQLite file and artifact
    folder that `selfplay run` (the embedded default config) logs to."""
    from selfplay_cli.main import build_parser
    from selfplay_core.config import load_config
    from selfplay_core.tracking.mlflow_run import resolve_tracking

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    args = build_parser().parse_args(["serve"])
    cfg = load_config(str(REPO / "configs" / "tiny-cpu.yaml"), [])
    uri, artifacts = resolve_tracking(cfg.tracking.mlflow_uri, cfg.out_dir)
    store = Path(args.mlflow_store).resolve()
    assert uri == f"sqlite:///{store / 'mlflow.db'}"
    assert artifacts == (store / "artifacts").as_uri()


def test_make_up_in_a_terminal_starts_with_usage_data_off(tmp_path):
    """`make up` in a terminal, for a person whose Prefect has never run (fresh home) and who has
    set nothing: Prefect prints its "collects anonymous usage data" notice on import in a terminal
    unless told not to track, and this stack imports Prefect itself (to register the
    deployments). The notice must not appear, and the Prefect server gets its analytics off."""
    import pty
    import threading

    from prefect._internal.analytics.ci_detection import CI_ENV_VARS

    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in CI_ENV_VARS and k not in ("DO_NOT_TRACK", "PREFECT_SERVER_ANALYTICS_ENABLED",
                                                 "PREFECT_API_URL", "MLFLOW_TRACKING_URI")}
    env.update(HOME=str(home), PREFECT_HOME=str(home / ".prefect"), TERM="xterm",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    pp = _free_port()
    args = (f"--dir {tmp_path}/state --mlflow-store {tmp_path}/mlruns --prefect-port {pp} "
            f"--mlflow-port {_free_port()} --no-s3 --no-worker --stop-timeout 10")
    main, tty = pty.openpty()
    proc = subprocess.Popen(
        [shutil.which("make"), "-C", str(REPO), "-o", f"{VENV}/.selfplay-installed", f"VENV={VENV}",
         f"UP_PID={tmp_path}/serve.pid", f"UP_ARGS={args}", "up"],
        env=env, stdin=tty, stdout=tty, stderr=tty, start_new_session=True, preexec_fn=_default_sigint)
    os.close(tty)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(main, 4096)
            except OSError:  # the terminal closed: every process on it has exited
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    text = lambda: b"".join(chunks).decode(errors="replace")  # noqa: E731
    children: set[int] = set()
    try:
        deadline = time.monotonic() + 300
        while "Ctrl-C stops everything" not in text():
            assert proc.poll() is None and time.monotonic() < deadline, text()
            time.sleep(1)
        children = _descendants(proc.pid) - {proc.pid}
        servers = [p for p in _alive(children)
                   if b"server\x00start" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert servers, text()
        server_env = dict(kv.split(b"=", 1) for kv in Path(f"/proc/{servers[0]}/environ").read_bytes().split(b"\0")
                          if b"=" in kv)
        assert server_env[b"PREFECT_SERVER_ANALYTICS_ENABLED"] == b"false"
        assert server_env[b"DO_NOT_TRACK"] == b"true"
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=90)
        reader.join(timeout=10)
        out = text()
        assert f"http://127.0.0.1:{pp}/deployments" in out, out  # registered from this process
        assert "anonymous usage data" not in out, out
        assert "stopped." in out, out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for p in children:
            try:
                os.killpg(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        os.close(main)
