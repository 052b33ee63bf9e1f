"""selfplay serve: a local stack to click through — Prefect server + worker, MLflow, S3.

Starts (all on loopback, state under --dir): a Ceph RGW S3 server when its binaries are
installed (infra/s3/ceph_rgw.sh; skipped with a note otherwise) for the workers' checkpoint
store, an MLflow server on the store `selfplay run` writes by default (runs/mlruns: one MLflow for
`make run` and `make up`), a Prefect server (SQLite under --dir/prefect), registers the
deployments of prefect.yaml, and starts a process worker on the selfplay-local pool whose flow
runs log to the served MLflow. Prints the URLs; Ctrl-C, SIGINT or SIGTERM stops everything
(SIGTERM to each process group, a grace period, then SIGKILL: a background Prefect worker can
ignore SIGTERM), and so does removing --pid-file (how `make up` passes on a SIGINT sent to make
alone: make deletes the target file of the recipe it is running, and waits).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from selfplay_cli._common import CLIError
from selfplay_core.processes import signal_group

REPO = Path(__file__).resolve().parents[1]
RGW_SCRIPT = REPO / "infra" / "s3" / "ceph_rgw.sh"
RGW_BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "ceph")
BUCKET = "selfplay"
# Usage data off: Prefect's client (DO_NOT_TRACK) and server, MLflow.
TELEMETRY_OFF = {"DO_NOT_TRACK": "true", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                 "MLFLOW_ENABLE_TELEMETRY": "false"}
# ENVIRONMENT.md: offline switches, and MLflow without its 7 job workers (~2.4 GB -> ~0.5 GB).
QUIET_ENV = {**TELEMETRY_OFF, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
             "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120", "HF_HUB_OFFLINE": "1"}


def register(sub) -> None:
    p = sub.add_parser(
        "serve", help="start Prefect server + worker, MLflow and S3 locally (Ctrl-C stops all)",
        description="A local stack for a person to click through: Prefect server and UI, a "
        "process worker on the selfplay-local pool, the deployments of prefect.yaml, an MLflow "
        "server, and a Ceph RGW S3 server when radosgw is installed. Everything listens on "
        "127.0.0.1; state lives under --dir. Ctrl-C stops everything.")
    p.add_argument("--dir", default="runs/serve", help="state directory (default runs/serve)")
    p.add_argument("--mlflow-store", default="runs/mlruns", metavar="DIR",
                   help="MLflow store to serve: DIR/mlflow.db, artifacts in DIR/artifacts "
                   "(default runs/mlruns, where `selfplay run` logs by default)")
    p.add_argument("--pid-file", metavar="PATH",
                   help="write this process's pid here; removing the file stops the stack")
    p.add_argument("--prefect-port", type=int, default=4200)
    p.add_argument("--mlflow-port", type=int, default=5000)
    p.add_argument("--s3-port", type=int, default=7480)
    p.add_argument("--no-s3", action="store_true", help="do not start the S3 server")
    p.add_argument("--no-worker", action="store_true", help="do not start a worker")
    p.add_argument("--no-deploy", action="store_true", help="do not register the deployments")
    p.add_argument("--startup-timeout", type=float, default=180.0,
                   help="seconds to wait for each server to answer (default 180)")
    p.add_argument("--stop-timeout", type=float, default=15.0,
                   help="seconds between SIGTERM and SIGKILL on shutdown (default 15)")
    p.set_defaults(func=run)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def wait_http(url: str, timeout: float, proc: subprocess.Popen | None = None, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise CLIError(f"{what or url} exited with status {proc.returncode} before answering")
        try:
            with urllib.request.urlopen(url, timeout=3) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1.0)
    raise CLIError(f"{what or url} did not answer at {url} within {timeout:.0f} s")


class Processes:
    """Child processes, each in its own session (so Ctrl-C reaches only us and we stop them in
    order); stop() sends SIGTERM to each group, waits, then SIGKILLs what is left."""

    def __init__(self) -> None:
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self._logs = []

    def start(self, name: str, cmd: list[str], env: dict, log_path: Path | None = None,
              cwd: str | Path | None = None) -> subprocess.Popen:
        out = subprocess.DEVNULL
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            out = open(log_path, "ab")
            self._logs.append(out)
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append((name, proc))
        return proc

    def dead(self) -> list[tuple[str, int]]:
        return [(n, p.returncode) for n, p in self.procs if p.poll() is not None]

    def stop(self, timeout: float = 15.0, log=None) -> list[str]:
        """Stop every process; returns the names of those that needed SIGKILL."""
        live = [(n, p) for n, p in reversed(self.procs) if p.poll() is None]
        for _, p in live:
            signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        killed = []
        for n, p in live:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                killed.append(n)
        if killed and log:
            log(f"still running {timeout:.0f} s after SIGTERM, killed: {', '.join(killed)}")
        for _, p in self.procs:  # the group may outlive its leader (a worker's flow runs)
            signal_group(p, signal.SIGKILL)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for f in self._logs:
            f.close()
        self._logs.clear()
        return killed


def start_s3(root: Path, port: int, log) -> dict | None:
    missing = [b for b in RGW_BINARIES if shutil.which(b) is None]
    if missing:
        log(f"note: no S3 server (missing {', '.join(missing)}); checkpoints stay on disk. "
            "Install one with: apt-get install -y --no-install-recommends radosgw ceph-mon ceph-osd")
        return None
    rgw = root / "rgw"
    subprocess.run([str(RGW_SCRIPT), "stop", str(rgw)], capture_output=True)  # a stale one
    log(f"starting S3 (Ceph RGW) on 127.0.0.1:{port} ...")
    out = subprocess.run([str(RGW_SCRIPT), "start", str(rgw), str(port)], capture_output=True,
                         text=True, timeout=300)
    if out.returncode != 0:
        raise CLIError(f"S3 (Ceph RGW) did not start: {out.stderr.strip()[-500:]} (logs in "
                       f"{rgw}/log; --no-s3 skips it)")
    env = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    import boto3

    s3 = boto3.client("s3", endpoint_url=env["S3_ENDPOINT_URL"],
                      aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                      region_name=env["AWS_DEFAULT_REGION"])
    try:
        s3.create_bucket(Bucket=BUCKET)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    return env


def stop_s3(root: Path) -> None:
    if (root / "rgw").exists():
        subprocess.run([str(RGW_SCRIPT), "stop", str(root / "rgw")], capture_output=True)


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # SIGTERM stops the stack as Ctrl-C does


def watch_pid_file(path: Path, interval: float = 0.5) -> threading.Event:
    """Stop this process (SIGTERM to itself, i.e. the Ctrl-C path) once `path` is gone.

    Why: `make up` runs this command as a recipe. A SIGINT sent to make's pid alone is not
    passed on (make assumes the terminal sent it to the whole process group and waits for its
    children), but make does delete the recipe's target file first; the Makefile makes this
    pid file the target, so its removal is the signal. Set the returned event to stop watching
    (before removing the file on the way out)."""
    done = threading.Event()

    def loop() -> None:
        while not done.wait(interval):
            if not path.exists():
                os.kill(os.getpid(), signal.SIGTERM)
                return

    threading.Thread(target=loop, name="pid-file-watch", daemon=True).start()
    return done


def experiment_urls(mlflow_url: str, limit: int = 4) -> list[tuple[str, str]]:
    """(experiment name, URL of its runs list) for experiments in the served store with runs.
    `workflowType=machine_learning` makes MLflow 3.17's UI show the runs table and the
    machine-learning side bar (it opens on "GenAI apps & agents" otherwise)."""
    from mlflow.tracking import MlflowClient

    try:
        exps = MlflowClient(mlflow_url).search_experiments(max_results=50)
    except Exception:  # the UI still works; the links are a convenience
        return []
    exps = [e for e in exps if e.name != "Default"] or exps
    return [(e.name, runs_url(mlflow_url, e.experiment_id)) for e in exps[:limit]]


def runs_url(mlflow_url: str, experiment_id: str) -> str:
    return f"{mlflow_url.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def run_url(mlflow_url: str, experiment_id: str, run_id: str) -> str:
    return (f"{mlflow_url.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
            "?workflowType=machine_learning")


def bin_of(name: str) -> str:
    """A console script of this interpreter's environment (the venv's prefect, mlflow)."""
    cand = Path(sys.executable).parent / name
    return str(cand) if cand.exists() else (shutil.which(name) or name)


def run(args) -> int:
    # This process imports Prefect as well (registering the deployments), and Prefect prints
    # "Prefect collects anonymous usage data ..." on import in a terminal unless DO_NOT_TRACK is
    # set: the stack's telemetry settings hold here too, not only in the processes it starts.
    os.environ.update(TELEMETRY_OFF)
    root = Path(args.dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    store = Path(args.mlflow_store).resolve()
    store.mkdir(parents=True, exist_ok=True)
    logs = root / "logs"
    pid_file = Path(args.pid_file).resolve() if args.pid_file else None
    for port, flag in ((args.prefect_port, "--prefect-port"), (args.mlflow_port, "--mlflow-port")):
        if not port_free(port):
            raise CLIError(f"port {port} on 127.0.0.1 is taken ({flag} picks another)")
    procs = Processes()
    s3_env = None
    base = {**os.environ, **QUIET_ENV}
    prefect_api = f"http://127.0.0.1:{args.prefect_port}/api"
    mlflow_url = f"http://127.0.0.1:{args.mlflow_port}"
    print_ = lambda m: print(m, flush=True)  # noqa: E731
    # Explicit handlers: a shell starts background jobs with SIGINT ignored, and Python then
    # never raises KeyboardInterrupt; SIGTERM stops the stack as Ctrl-C does.
    old_handlers = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    watching = None
    if pid_file is not None:
        pid_file.parent.mkdir(parents=True, exist_ok=True)
        pid_file.write_text(f"{os.getpid()}\n")
        watching = watch_pid_file(pid_file)
    try:
        if not args.no_s3:
            if not port_free(args.s3_port):
                raise CLIError(f"port {args.s3_port} on 127.0.0.1 is taken (--s3-port, --no-s3)")
            s3_env = start_s3(root, args.s3_port, print_)
        s3_vars = {}
        if s3_env:
            s3_vars = {"MLFLOW_S3_ENDPOINT_URL": s3_env["S3_ENDPOINT_URL"],
                       "SELFPLAY_S3_ENDPOINT_URL": s3_env["S3_ENDPOINT_URL"],
                       "AWS_ACCESS_KEY_ID": s3_env["AWS_ACCESS_KEY_ID"],
                       "AWS_SECRET_ACCESS_KEY": s3_env["AWS_SECRET_ACCESS_KEY"],
                       "AWS_DEFAULT_REGION": s3_env["AWS_DEFAULT_REGION"]}
        print_("starting Prefect server and MLflow (20-60 s) ...")
        prefect_env = {**base, "PREFECT_HOME": str(root / "prefect"), "PREFECT_API_URL": prefect_api}
        server = procs.start("prefect server", [bin_of("prefect"), "server", "start", "--host",
                             "127.0.0.1", "--port", str(args.prefect_port)], prefect_env,
                             logs / "prefect-server.log")
        # The store `selfplay run` writes (sqlite, artifacts as plain files beside it): runs made
        # with `make run` appear here, and runs of the worker land there. Artifacts stay on disk
        # (not S3) so that a process writing to the SQLite file directly (`make run`) and one
        # logging through this server can share an experiment.
        artifacts = (store / "artifacts").as_uri()
        mlflow = procs.start("mlflow server", [
            bin_of("mlflow"), "server", "--backend-store-uri", f"sqlite:///{store / 'mlflow.db'}",
            "--default-artifact-root", artifacts, "--artifacts-destination", artifacts,
            "--host", "127.0.0.1", "--port", str(args.mlflow_port)], {**base, **s3_vars},
            logs / "mlflow.log")
        wait_http(f"{prefect_api}/health", args.startup_timeout, server, "Prefect server")
        wait_http(f"{mlflow_url}/health", args.startup_timeout, mlflow, "MLflow server")
        if not args.no_deploy:
            from selfplay_cli.deploy import deploy
            deploy(prefect_api, env=prefect_env, echo=print_)
        worker_env = {**prefect_env, **s3_vars, "MLFLOW_TRACKING_URI": mlflow_url}
        if s3_env:
            worker_env["SELFPLAY_STORAGE_URI"] = f"s3://{BUCKET}/runs"
        if not args.no_worker:
            procs.start("prefect worker", [bin_of("prefect"), "worker", "start", "--pool",
                        "selfplay-local", "--type", "process"], worker_env, logs / "worker.log",
                        cwd=REPO)
        print_("")
        print_(f"Prefect UI   http://127.0.0.1:{args.prefect_port}   (PREFECT_API_URL={prefect_api})")
        print_(f"MLflow UI    {mlflow_url}   (store {store})")
        for name, url in experiment_urls(mlflow_url):
            print_(f"  runs of {name}: {url}")
        print_("  MLflow 3.17 opens on 'GenAI apps & agents': switch its side bar's workflow "
               "selector to 'Machine learning' for the runs list (tick runs, then Compare).")
        if s3_env:
            print_(f"S3           {s3_env['S3_ENDPOINT_URL']}  bucket {BUCKET}  "
                   f"key {s3_env['AWS_ACCESS_KEY_ID']} / {s3_env['AWS_SECRET_ACCESS_KEY']}")
        print_(f"logs         {logs}")
        print_("Run a deployment from the UI (Deployments -> Run -> Custom run), or from a shell "
               "in the repository root (README, 'From the Prefect UI'):")
        print_(f"  . .venv/bin/activate; export PREFECT_API_URL={prefect_api}")
        print_("  prefect deployment run selfplay/nightly")
        print_("Ctrl-C stops everything.")
        while True:
            dead = procs.dead()
            if dead:
                name, rc = dead[0]
                raise CLIError(f"{name} exited with status {rc}; see {logs}")
            time.sleep(1.0)
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut cleanup short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print_(f"stopping (SIGTERM, up to {args.stop_timeout:.0f} s, then SIGKILL) ...")
        procs.stop(args.stop_timeout, log=print_)
        if s3_env is not None or (root / "rgw").exists():
            stop_s3(root)
        if watching is not None:
            watching.set()
            pid_file.unlink(missing_ok=True)
        print_("stopped.")
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
