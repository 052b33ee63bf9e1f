"""Acceptance: a real Prefect server on loopback, the project's deployments registered by
`selfplay deploy`, checked through the API (schedules, typed parameter schemas, pools, code
location), three flow runs triggered with parameters and run by a real process worker, each
COMPLETED with its MLflow run in the store its parameters named."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EXPECTED = {  # deployment -> (flow, pool, schedules as (cron, timezone, active))
    "nightly": ("selfplay", "selfplay-local", [("0 2 * * *", "UTC", True)]),
    "checkpoint": ("evaluate", "selfplay-local", []),
    "toy-world": ("mine_goalposts", "selfplay-local", []),
    "nightly-gpu-docker": ("selfplay", "selfplay-gpu-docker", [("0 2 * * *", "UTC", False)]),
    "nightly-gpu-k8s": ("selfplay", "selfplay-gpu-k8s", [("0 2 * * *", "UTC", False)]),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(api_url: str, home: Path) -> dict:
    env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_HOME": str(home),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "true",
           # The worker's flow runs import this checkout (the venv's editable install may
           # point at another one).
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env.pop("MLFLOW_TRACKING_URI", None)  # runs log where their parameters say
    return env


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory):
    from selfplay_cli.serve import Processes, wait_http

    root = tmp_path_factory.mktemp("prefect-server")
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = _env(api, root / "home")
    procs = Processes()
    server = procs.start("prefect server", [sys.executable, "-m", "prefect", "server", "start",
                                            "--host", "127.0.0.1", "--port", str(port)],
                         env, root / "server.log")
    try:
        t0 = time.monotonic()
        wait_http(f"{api}/health", 120, server, "Prefect server")
        print(f"prefect server healthy after {time.monotonic() - t0:.1f} s")
        yield {"api": api, "env": env, "root": root, "procs": procs}
    finally:
        procs.stop(timeout=15)  # SIGTERM, wait, SIGKILL: a background worker may ignore TERM


def small_selfplay_config(tmp: Path) -> dict:
    from selfplay_core.config import load_config
    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    sets = [f"model.path={ASSET_DIR}", f"out_dir={tmp}/runs", "iterations=1",
            "method.goalposts_per_iteration=2", "method.proposals_per_anchor=2",
            "student.samples_per_task=2", "student.batch_size=16",
            "eval.n=1", "eval.verdict_n=null", "eval.ks=[1]", "eval.max_problems=4", "eval.goalpost_every=1",
            "eval.goalpost_k=1", "world.goalpost_k=2", "world.max_goalposts=3",
            "engine.max_new_tokens_teacher=64", "engine.max_new_tokens_student=32",
            "sandbox.workers=1", "tracking.run_name=deployed",
            f"tracking.mlflow_uri=sqlite:///{tmp}/mlflow-sp.db"]
    return load_config(None, sets).model_dump(mode="json")


async def _deployments(api: str) -> dict:
    from prefect.client.orchestration import PrefectClient

    async with PrefectClient(api) as client:
        out = {}
        for d in await client.read_deployments():
            flow = await client.read_flow(d.flow_id)
            out[d.name] = (flow.name, d)
        pools = {p.name: p.type for p in await client.read_work_pools()}
        return {"deployments": out, "pools": pools}


async def _trigger(api: str, runs: dict) -> dict:
    from prefect.client.orchestration import PrefectClient
    from prefect.exceptions import PrefectHTTPStatusError

    async with PrefectClient(api) as client:
        ids = {}
        for name, (flow, params) in runs.items():
            dep = await client.read_deployment_by_name(f"{flow}/{name}")
            fr = await client.create_flow_run_from_deployment(dep.id, parameters=params)
            ids[name] = fr.id
        # The server checks parameters against the typed schema before a run exists.
        dep = await client.read_deployment_by_name("selfplay/nightly")
        with pytest.raises(PrefectHTTPStatusError, match="config.iterations"):
            await client.create_flow_run_from_deployment(dep.id, parameters={"config": {"iterations": 0}})
        return ids


async def _states(api: str, ids: dict) -> dict:
    from prefect.client.orchestration import PrefectClient

    async with PrefectClient(api) as client:
        return {name: (await client.read_flow_run(i)).state for name, i in ids.items()}


def test_deploy_trigger_and_run_with_a_worker(prefect_server, tmp_path):
    from mlflow.tracking import MlflowClient

    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    api, env = prefect_server["api"], prefect_server["env"]

    # 1. `selfplay deploy` creates the pools and registers every deployment of prefect.yaml.
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "selfplay_cli.main", "deploy", "--api-url", api],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    print(f"selfplay deploy: {time.monotonic() - t0:.1f} s")

    # 2. Through the API: flows, pools, schedules, parameter schemas, code location.
    got = asyncio.run(_deployments(api))
    assert got["pools"] == {"selfplay-local": "process", "selfplay-gpu-docker": "docker",
                            "selfplay-gpu-k8s": "kubernetes"}
    deps = got["deployments"]
    assert set(deps) == set(EXPECTED)
    for name, (flow, pool, schedules) in EXPECTED.items():
        flow_name, d = deps[name]
        assert flow_name == flow and d.work_pool_name == pool, name
        assert [(s.schedule.cron, s.schedule.timezone, s.active) for s in d.schedules] == schedules
        assert d.enforce_parameter_schema
        (step,) = d.pull_steps
        directory = step["prefect.deployments.steps.set_working_directory"]["directory"]
        assert directory == (str(REPO) if pool == "selfplay-local" else "/src"), (name, directory)
    fields = {"selfplay": ("config", "RunConfig", {"method", "iterations", "seed", "model", "teacher"}),
              "evaluate": ("params", "CheckpointEvalConfig", {"checkpoint", "benchmarks", "n", "ks",
                                                               "max_problems", "mlflow_uri"}),
              "mine_goalposts": ("params", "GoalpostMiningConfig", {"model_path", "world", "k",
                                                                     "out_dir"})}
    for name, (flow, _, _) in EXPECTED.items():
        schema = deps[name][1].parameter_openapi_schema
        param, model, keys = fields[flow]
        assert param in schema["properties"], name
        assert keys <= set(schema["definitions"][model]["properties"]), name
    # Each self-play deployment's config is its config file, as `prefect deploy` resolved the
    # reference of prefect.yaml.
    from selfplay_core.config import RunConfig, load_config
    for name, path in (("nightly", "tiny-cpu.yaml"), ("nightly-gpu-docker", "qwen2.5-coder-7b-gasp.yaml"),
                       ("nightly-gpu-k8s", "qwen2.5-coder-7b-gasp.yaml")):
        deployed = RunConfig.model_validate(deps[name][1].parameters["config"])
        assert deployed == load_config(REPO / "configs" / path), name
    assert deps["nightly"][1].parameters["config"]["iterations"] == 12  # the embedded default
    assert deps["nightly-gpu-docker"][1].job_variables == {"image": "selfplay-gpu:latest",
                                                           "gpu_count": 2, "shm_size": "16g"}

    # 3. Trigger the three local deployments with small parameters; a worker runs them.
    # One store per flow: three processes creating one new SQLite store at once race on its
    # schema migration (MLflow's limit; `selfplay serve` gives workers a tracking server).
    uris = {k: f"sqlite:///{tmp_path}/mlflow-{k}.db" for k in ("sp", "ev", "gp")}
    small = {"out_dir": str(tmp_path / "out"), "sandbox": {"workers": 1}}
    ids = asyncio.run(_trigger(api, {
        "nightly": ("selfplay", {"config": small_selfplay_config(tmp_path)}),
        "checkpoint": ("evaluate", {"params": {"checkpoint": str(ASSET_DIR), "benchmarks": ["toy"],
                                               "n": 2, "ks": [1, 2], "max_problems": 3,
                                               "run_name": "ev", "mlflow_uri": uris["ev"], **small}}),
        "toy-world": ("mine_goalposts", {"params": {"k": 2, "chunk": 2, "max_candidates": 3,
                                                    "run_name": "gp", "mlflow_uri": uris["gp"], **small}}),
    }))
    t0 = time.monotonic()
    worker = prefect_server["procs"].start(
        "prefect worker", [sys.executable, "-m", "prefect", "worker", "start", "--pool",
                           "selfplay-local", "--run-once"], env, tmp_path / "worker.log", cwd=tmp_path)
    try:
        worker.wait(timeout=420)
    except subprocess.TimeoutExpired:
        pass
    states = asyncio.run(_states(api, ids))
    log = (tmp_path / "worker.log").read_text(errors="replace")[-4000:]
    assert all(s.is_completed() for s in states.values()), f"{states}\n--- worker log ---\n{log}"
    print(f"worker ran 3 flow runs in {time.monotonic() - t0:.1f} s")

    # 4. Each run is in the MLflow store its parameters named.
    client = MlflowClient(uris["sp"])
    (sp,) = client.search_runs([client.get_experiment_by_name("selfplay").experiment_id],
                               "attributes.run_name = 'deployed'")
    assert sp.info.status == "FINISHED" and sp.data.tags["method"] == "gasp"
    assert [m.step for m in client.get_metric_history(sp.info.run_id, "eval/all/pass_at_1")] == [0, 1]
    assert (tmp_path / "runs" / "deployed" / "state.json").exists()
    client = MlflowClient(uris["ev"])
    (ev,) = client.search_runs([client.get_experiment_by_name("selfplay-eval").experiment_id])
    assert ev.info.status == "FINISHED" and "toy/pass_at_2" in ev.data.metrics
    assert (tmp_path / "out" / "ev" / "toy" / "report.json").exists()
    client = MlflowClient(uris["gp"])
    (gp,) = client.search_runs([client.get_experiment_by_name("selfplay-goalposts").experiment_id])
    assert gp.info.status == "FINISHED" and "goalposts/count" in gp.data.metrics
    assert (tmp_path / "out" / "gp" / "goalposts.json").exists()


README = REPO / "README.md"


def readme_trigger_block() -> str:
    """The README's shell block that triggers each deployment (the one that exports
    PREFECT_API_URL)."""
    blocks = README.read_text().split("```bash\n")[1:]
    (block,) = [b.split("```", 1)[0] for b in blocks if "prefect deployment run" in b.split("```", 1)[0]]
    return block


async def _flow_runs(api: str, ids: list[str]) -> dict:
    from prefect.client.orchestration import PrefectClient

    async with PrefectClient(api) as client:
        out = {}
        for i in ids:
            fr = await client.read_flow_run(i)
            dep = await client.read_deployment(fr.deployment_id)
            flow = await client.read_flow(dep.flow_id)
            out[f"{flow.name}/{dep.name}"] = (fr, dep)
        return out


async def _delete_flow_runs(api: str, ids: list[str]) -> None:
    from prefect.client.orchestration import PrefectClient

    async with PrefectClient(api) as client:
        for i in ids:
            await client.delete_flow_run(i)


def test_readme_trigger_commands_work_as_written(prefect_server, tmp_path):
    """The README's trigger block, run by bash in the repository root against a real server:
    the only change is the server's port (the README names make up's 4200). Every command
    exits 0 and creates a flow run that the server accepted (it validates parameters against
    the typed schema); the runs carry the README's parameters. They are deleted afterwards
    (their execution on the embedded default is what test_deploy_trigger_and_run_with_a_worker
    shows with smaller parameters; here they would write into the checkout's runs/)."""
    import re

    api, env = prefect_server["api"], prefect_server["env"]
    if not asyncio.run(_deployments(api))["deployments"]:
        out = subprocess.run([sys.executable, "-m", "selfplay_cli.main", "deploy", "--api-url", api],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout + out.stderr

    block = readme_trigger_block()
    assert "export PREFECT_API_URL=http://127.0.0.1:4200/api" in block
    script = block.replace("http://127.0.0.1:4200/api", api)
    if not (REPO / ".venv" / "bin" / "activate").exists():  # a suite run from another venv
        script = script.replace(". .venv/bin/activate", f". {Path(sys.executable).parents[1]}/bin/activate")
    shell_env = {k: v for k, v in env.items() if k != "PREFECT_API_URL"}  # the block exports it
    shell_env["PATH"] = "/usr/bin:/bin"  # prefect must come from the venv the block activates
    t0 = time.monotonic()
    out = subprocess.run(["bash", "-e", "-c", script], cwd=REPO, env=shell_env, capture_output=True,
                         text=True, timeout=300)
    print(f"README trigger block: {time.monotonic() - t0:.1f} s")
    assert out.returncode == 0, out.stdout + out.stderr
    ids = re.findall(r"UUID:\s*([0-9a-f-]{36})", out.stdout)
    commands = [ln for ln in block.splitlines() if ln.startswith("prefect deployment run")]
    assert len(ids) == len(commands) == 3, out.stdout
    try:
        runs = asyncio.run(_flow_runs(api, ids))
        assert set(runs) == {"selfplay/nightly", "evaluate/checkpoint", "mine_goalposts/toy-world"}
        # nightly: no --param, so the deployment's own config (the embedded default).
        fr, dep = runs["selfplay/nightly"]
        assert fr.parameters == dep.parameters and fr.parameters["config"]["iterations"] == 12
        assert fr.state.is_scheduled()
        # The others: exactly the README's JSON (parsed independently of the CLI).
        for name, key in (("evaluate/checkpoint", "evaluate/checkpoint"),
                          ("mine_goalposts/toy-world", "mine_goalposts/toy-world")):
            line = next(c for c in commands if f" {key} " in c + " ")
            expected = json.loads(line.split("params=", 1)[1].strip().strip("'"))
            fr, _ = runs[name]
            assert fr.parameters == {"params": expected}, name
            assert fr.state.is_scheduled(), name
    finally:
        asyncio.run(_delete_flow_runs(api, ids))


def test_a_deployed_run_checks_its_endpoints_first(prefect_server, tmp_path):
    """A nightly run whose MLflow server does not answer (a port nothing listens on) ends Failed
    at its start, its state and its log naming the key and the URL (one line per attempt: the
    flow's retry checks again), and no attempt made a run folder."""
    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    api, env = prefect_server["api"], prefect_server["env"]
    out = subprocess.run([sys.executable, "-m", "selfplay_cli.main", "deploy", "--api-url", api],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    url = f"http://127.0.0.1:{_free_port()}"
    config = small_selfplay_config(tmp_path)
    config["tracking"]["mlflow_uri"] = url

    async def trigger():
        async with PrefectClient(api) as client:
            dep = await client.read_deployment_by_name("selfplay/nightly")
            return (await client.create_flow_run_from_deployment(dep.id, parameters={"config": config})).id

    run_id = asyncio.run(trigger())
    worker = prefect_server["procs"].start(
        "prefect worker", [sys.executable, "-m", "prefect", "worker", "start", "--pool",
                           "selfplay-local", "--run-once"], env, tmp_path / "worker.log", cwd=tmp_path)
    try:
        worker.wait(timeout=300)
    except subprocess.TimeoutExpired:
        pass

    async def outcome():
        async with PrefectClient(api) as client:
            fr = await client.read_flow_run(run_id)
            logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
            return fr, [entry.message for entry in logs]

    fr, logs = asyncio.run(outcome())
    line = f"tracking.mlflow_uri = {url} does not answer"
    worker_log = (tmp_path / "worker.log").read_text(errors="replace")[-3000:]
    assert fr.state.is_failed() and line in fr.state.message, f"{fr.state}\n{worker_log}"
    ours = [m for m in logs if m.startswith(line)]
    assert len(ours) == fr.run_count and all("\n" not in m for m in ours), logs
    # (Prefect's engine then logs "Engine execution exited with unexpected exception" and a
    # traceback of its own for any Failed flow run in a worker; not ours to change.)
    assert not (tmp_path / "runs" / "deployed").exists()
