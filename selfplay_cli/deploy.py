"""selfplay deploy: register the deployments of prefect.yaml with a Prefect server.

Creates the work pools they name when missing (the local process pool with Prefect's default
template; the GPU pools from infra/work-pools/*.json), then runs `prefect --no-prompt deploy`
in the repository root, where the build step records that directory as the flow runs' working
directory (no git, no network). Another build step, `run_configs`, reads the config files the
deployments name, so each deployment's parameters are its config file as of `selfplay deploy`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from selfplay_cli._common import CLIError

REPO = Path(__file__).resolve().parents[1]

# Pools the project's prefect.yaml may name: type and base job template (None: the type's own).
POOLS: dict[str, tuple[str, str | None]] = {
    "selfplay-local": ("process", None),
    "selfplay-gpu-docker": ("docker", "infra/work-pools/docker-gpu.json"),
    "selfplay-gpu-k8s": ("kubernetes", "infra/work-pools/kubernetes-gpu.json"),
}


def register(sub) -> None:
    p = sub.add_parser(
        "deploy", help="register the Prefect deployments of prefect.yaml (creates work pools)",
        description="Create the work pools prefect.yaml needs (process pool selfplay-local; "
        "GPU pools from infra/work-pools/*.json) and register its deployments with the Prefect "
        "server at --api-url / $PREFECT_API_URL. Start a server with `selfplay serve` or "
        "`prefect server start`.")
    p.add_argument("--api-url", help="Prefect API (default: $PREFECT_API_URL or the active "
                   "profile's), e.g. http://127.0.0.1:4200/api")
    p.add_argument("--prefect-file", default=None,
                   help="deployment file (default: prefect.yaml of the repository)")
    p.add_argument("--name", "-n", action="append", default=[],
                   help="deploy only this deployment (FLOW/NAME or NAME; repeatable; default: all)")
    p.add_argument("--skip-gpu-pools", action="store_true",
                   help="deploy only deployments whose pools are process pools")
    p.set_defaults(func=run)


def run_configs(**files: str) -> dict[str, dict]:
    """A `prefect deploy` build step: each named run config file, loaded and validated (its
    `extends` resolved) as the flow's `config` parameter; prefect.yaml refers to one as
    `{{ <step id>.<name> }}`. Paths are relative to the directory `prefect deploy` runs in (the
    repository root). A file that does not load stops the deploy with its one-line error."""
    from selfplay_core.config import load_config

    return {name: load_config(path).model_dump(mode="json", exclude_unset=True)
            for name, path in files.items()}


def resolve_api_url(explicit: str | None) -> str:
    url = explicit or os.environ.get("PREFECT_API_URL")
    if not url:
        from prefect.settings import get_current_settings
        url = get_current_settings().api.url
    if not url:
        raise CLIError("no Prefect API to deploy to: pass --api-url or set PREFECT_API_URL "
                       "(e.g. http://127.0.0.1:4200/api); `selfplay serve` starts a server")
    return url.rstrip("/")


def check_api(url: str, timeout: float = 5.0) -> None:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as r:
            if r.status == 200:
                return
    except (urllib.error.URLError, OSError) as e:
        raise CLIError(f"Prefect API {url} does not answer ({getattr(e, 'reason', e)}); start "
                       "one with `selfplay serve` or `prefect server start`") from None
    raise CLIError(f"Prefect API {url}/health did not answer 200")


def load_spec(path: Path) -> dict:
    import yaml

    if not path.is_file():
        raise CLIError(f"{path}: file not found")
    try:
        spec = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise CLIError(f"{path}: not valid YAML ({e})") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("deployments"), list):
        raise CLIError(f"{path}: expected a mapping with a 'deployments' list")
    return spec


def pool_of(dep: dict) -> str | None:
    return (dep.get("work_pool") or {}).get("name")


def base_job_template(pool_type: str, template: str | None, repo: Path) -> dict:
    if template is not None:
        return json.loads((repo / template).read_text())
    if pool_type == "process":
        from prefect.workers.process import ProcessWorker
        return ProcessWorker.get_default_base_job_template()
    raise CLIError(f"no base job template for pool type {pool_type!r}")


async def _ensure_pools(api_url: str, wanted: list[str], repo: Path) -> list[str]:
    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound

    created = []
    async with PrefectClient(api_url) as client:
        for name in wanted:
            try:
                await client.read_work_pool(name)
                continue
            except ObjectNotFound:
                pass
            if name not in POOLS:
                raise CLIError(f"work pool {name!r} does not exist and selfplay deploy does not "
                               f"know how to create it (it knows {', '.join(POOLS)}); create it "
                               "with `prefect work-pool create`")
            pool_type, template = POOLS[name]
            await client.create_work_pool(WorkPoolCreate(
                name=name, type=pool_type,
                base_job_template=base_job_template(pool_type, template, repo)))
            created.append(name)
    return created


def ensure_pools(api_url: str, wanted: list[str], repo: Path = REPO) -> list[str]:
    import asyncio

    return asyncio.run(_ensure_pools(api_url, wanted, repo))


def select(spec: dict, names: list[str], skip_gpu: bool) -> list[dict]:
    deps = spec["deployments"]
    if skip_gpu:
        deps = [d for d in deps if POOLS.get(pool_of(d), ("process",))[0] == "process"]
    if names:
        known = {d.get("name") for d in deps}
        wanted = {n.split("/")[-1] for n in names}
        unknown = sorted(wanted - known)
        if unknown:
            raise CLIError(f"--name {', '.join(unknown)}: no such deployment in prefect.yaml "
                           f"(there are {', '.join(sorted(k for k in known if k))})")
        deps = [d for d in deps if d.get("name") in wanted]
    return deps


def deploy(api_url: str | None = None, prefect_file: str | Path | None = None,
           names: list[str] = (), skip_gpu_pools: bool = False, env: dict | None = None,
           timeout: float = 600, echo=print) -> list[dict]:
    """Create the pools and register the selected deployments; returns them (from the yaml)."""
    path = Path(prefect_file).resolve() if prefect_file else REPO / "prefect.yaml"
    spec = load_spec(path)
    repo = path.parent
    deps = select(spec, list(names), skip_gpu_pools)
    if not deps:
        raise CLIError(f"{path}: nothing to deploy")
    url = resolve_api_url(api_url)
    check_api(url)
    pools = list(dict.fromkeys(p for p in map(pool_of, deps) if p))
    created = ensure_pools(url, pools, repo)
    if created:
        echo(f"created work pools: {', '.join(created)}")
    cmd = [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--prefect-file", str(path)]
    for d in deps:
        cmd += ["-n", d["name"]]
    run_env = {**os.environ, **(env or {}), "PREFECT_API_URL": url}
    run_env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    run_env.setdefault("DO_NOT_TRACK", "true")
    try:
        out = subprocess.run(cmd, cwd=repo, env=run_env, capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CLIError(f"prefect deploy did not finish within {timeout:.0f} s") from None
    if out.returncode != 0:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-25:])
        raise CLIError(f"prefect deploy failed (exit {out.returncode}):\n{tail}")
    ui = url[:-4] if url.endswith("/api") else url
    for d in deps:
        sched = ", ".join(f"{s.get('cron') or s.get('interval')} {s.get('timezone', '')}".strip()
                          + ("" if s.get("active", True) else " (off)")
                          for s in d.get("schedules") or []) or "by hand"
        full = f"{d['entrypoint'].split(':')[-1]}/{d['name']}"
        echo(f"  {full:<30} pool {pool_of(d):<20} {sched}")
    echo(f"Prefect UI: {ui}/deployments")
    return deps


def run(args) -> int:
    deploy(args.api_url, args.prefect_file, args.name, args.skip_gpu_pools)
    return 0
