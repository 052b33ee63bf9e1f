"""Before any long work: every endpoint the run will talk to answers.

A run that meets an unreachable MLflow server, vLLM server or S3 endpoint in its first iteration
has already spent minutes loading a model and mining goalposts, and then spends more in the
client libraries' own retries (urllib3, botocore) before it fails in a traceback. So the CLI (and
a deployed flow run) probes each configured endpoint first, all at once and with a short timeout,
and stops with one line per endpoint that does not answer: the config key (or environment
variable) that names it, the URL, and what to do.

One endpoint is allowed to be down on purpose: the S3 endpoint of a checkpoint store with its
spool on. The store then keeps each upload on local disk and delivers it when the endpoint is
back (storage/__init__.py), so the run goes on and the preflight says so, and where it spools.

Any HTTP answer from a health path counts as up except 404 and 5xx (a 401 or 403 is a server
that wants credentials, which the client has). No Prefect import here: the CLI adds the Prefect
API URL as an extra `Endpoint`.
"""

from __future__ import annotations

import http.client
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

PROBE_TIMEOUT_S = 3.0
# Where S3 clients find a custom endpoint, in the order the checkpoint store reads them
# (storage.config.StorageConfig.from_env, then storage.s3.S3Store).
S3_ENDPOINT_VARS = ("SELFPLAY_S3_ENDPOINT_URL", "MLFLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                    "AWS_ENDPOINT_URL")


@dataclass(frozen=True)
class Endpoint:
    key: str            # the config key or environment variable that names it
    url: str
    fix: str            # what to do when it does not answer
    path: str = "/"     # what to GET: a health path where the service has one
    degrades: str | None = None   # instead of an error: what the run does without it


@dataclass(frozen=True)
class Report:
    errors: list[str]   # one line each: the run must not start
    notes: list[str]    # one line each: the run starts, degraded as stated


def probe(url: str, path: str = "/", timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when `url` answers GET `path` (see the module doc); else why not, in a few words."""
    parts = urlsplit(url)
    https = parts.scheme == "https"
    conn_cls = http.client.HTTPSConnection if https else http.client.HTTPConnection
    try:
        conn = conn_cls(parts.hostname, parts.port or (443 if https else 80), timeout=timeout_s)
        try:
            conn.request("GET", parts.path.rstrip("/") + path, headers={"Connection": "close"})
            status = conn.getresponse().status
        finally:
            conn.close()
    except (TimeoutError, socket.timeout):
        return f"no answer within {timeout_s:g} s"
    except (OSError, http.client.HTTPException) as e:
        return getattr(e, "strerror", None) or str(e) or type(e).__name__
    if status == 404 or status >= 500:
        return f"GET {parts.path.rstrip('/') + path} answered HTTP {status}: is this the right URL?"
    return None


def endpoints(cfg) -> list[Endpoint]:
    """The endpoints `cfg` will use, with what to do about each (RunConfig; no I/O)."""
    from selfplay_core.loop.engine_setup import launches_server, serve_hint

    out: list[Endpoint] = []
    # As tracking.mlflow_run.resolve_tracking chooses, short of making the local store.
    uri = cfg.tracking.mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI") or ""
    if uri.startswith(("http://", "https://")):
        key = "tracking.mlflow_uri" if cfg.tracking.mlflow_uri else "$MLFLOW_TRACKING_URI"
        out.append(Endpoint(key, uri, "start the MLflow server (`make up` serves one on port 5000), "
                            f"or unset {key} to log to the local store under out_dir/mlruns",
                            path="/health"))
    if cfg.engine.backend == "vllm" and not launches_server(cfg):
        out += [Endpoint("engine.vllm_url", u, serve_hint(cfg), path="/health")
                for u in cfg.engine.vllm_urls]
    if cfg.teacher.vllm_url:
        out.append(Endpoint("teacher.vllm_url", cfg.teacher.vllm_url,
                            f"start the teacher's server (`selfplay vllm-serve {cfg.teacher.model} "
                            "--port PORT`) or fix the URL", path="/health"))
    var, s3 = s3_endpoint()
    if s3 and (cfg.tracking.checkpoint_store or "").startswith("s3://"):
        out.append(Endpoint(var, s3, f"start the S3 server or fix {var}",
                            degrades=_spool_note(cfg, var, s3)))
    if s3 and (cfg.tracking.artifact_store or "").startswith("s3://"):
        out.append(Endpoint(var, s3, f"start the S3 server or fix {var} (tracking.artifact_store "
                            f"{cfg.tracking.artifact_store} holds MLflow's artifacts, which have "
                            "no spool)"))
    return out


def s3_endpoint() -> tuple[str | None, str | None]:
    """(variable, URL) of the custom S3 endpoint the environment names; (None, None) for AWS's
    own, which is not probed (a machine without network has no use for an s3:// store on AWS)."""
    for var in S3_ENDPOINT_VARS:
        if os.environ.get(var):
            return f"${var}", os.environ[var]
    return None, None


def _spool_note(cfg, var: str, url: str) -> str | None:
    """The degradation line for the checkpoint store, or None when its spool is off (then an
    unreachable endpoint is an error)."""
    from selfplay_core.storage import StorageConfig
    from selfplay_core.storage.spool import default_spool_root

    conf = StorageConfig.from_env(uri=cfg.tracking.checkpoint_store)
    if not conf.spool:
        return None
    root = conf.spool_dir or default_spool_root()
    return (f"tracking.checkpoint_store {cfg.tracking.checkpoint_store}: the S3 endpoint {url} "
            f"({var}) does not answer ({{reason}}); the run goes on and spools each checkpoint "
            f"upload under {root}, delivered when the endpoint answers")


def docker_problem(timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when a Docker daemon answers a ping at $DOCKER_HOST (default: its local socket);
    else the error line for sandbox.backend docker."""
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        import docker
    except ImportError:
        return "sandbox.backend = docker needs the docker SDK: pip install 'docker>=7'"
    try:
        docker.from_env(timeout=timeout_s).ping()
    except Exception as e:  # DockerException, requests' ConnectionError, a timeout: all "not up"
        reason = " ".join(str(e).split())[:200] or type(e).__name__
        return (f"sandbox.backend = docker: no Docker daemon answers at {where} ({reason}): "
                "start dockerd or set DOCKER_HOST, or use sandbox.backend local")
    return None


def check(found: list[Endpoint], timeout_s: float = PROBE_TIMEOUT_S, docker: bool = False) -> Report:
    """Probe every endpoint (and with `docker`, the Docker daemon) at once, so the wait is one
    timeout rather than one per endpoint."""
    unique = list(dict.fromkeys((e.url, e.path) for e in found))
    with ThreadPoolExecutor(max_workers=len(unique) + 1) as pool:
        daemon = pool.submit(docker_problem, timeout_s) if docker else None
        reasons = dict(zip(unique, pool.map(lambda up: probe(up[0], up[1], timeout_s), unique)))
        errors = [daemon.result()] if daemon is not None and daemon.result() else []
    notes = []
    for e in found:
        reason = reasons[(e.url, e.path)]
        if reason is None:
            continue
        if e.degrades:
            notes.append(e.degrades.format(reason=reason))
        else:
            errors.append(f"{e.key} = {e.url} does not answer ({reason}): {e.fix}")
    return Report(list(dict.fromkeys(errors)), list(dict.fromkeys(notes)))


def preflight(cfg, extra: list[Endpoint] = (), timeout_s: float = PROBE_TIMEOUT_S) -> Report:
    """Probe the endpoints of `cfg` (and `extra`): one error line per endpoint that does not
    answer, one note per stated degradation. The caller prints the notes, then stops on errors."""
    return check(endpoints(cfg) + list(extra), timeout_s, docker=cfg.sandbox.backend == "docker")
