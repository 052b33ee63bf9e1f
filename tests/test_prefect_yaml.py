"""prefect.yaml without a server: every deployment's entrypoint imports, its parameters validate
against the flow's typed signature (the forms the UI renders), its pool is one `selfplay deploy`
can create, and a self-play deployment's config is a reference to a config file, resolved by the
build steps as `prefect deploy` resolves it."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SPEC = yaml.safe_load((REPO / "prefect.yaml").read_text())
DEPLOYMENTS = {d["name"]: d for d in SPEC["deployments"]}


@pytest.fixture(scope="module")
def build_outputs() -> dict:
    """The outputs of prefect.yaml's build steps, run by Prefect's own step runner in the
    repository root (what `prefect deploy` does before it fills in the deployments)."""
    import os

    from prefect.deployments.steps.core import run_steps

    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        return asyncio.run(run_steps(SPEC["build"], print_function=lambda *a, **k: None))
    finally:
        os.chdir(cwd)


def parameters(name: str, outputs: dict) -> dict:
    """A deployment's parameters with the build steps' outputs filled in, by Prefect's templating."""
    from prefect.utilities.templating import apply_values

    return apply_values(DEPLOYMENTS[name].get("parameters") or {}, outputs)


def load_flow(entrypoint: str, monkeypatch):
    from prefect.flows import load_flow_from_entrypoint

    monkeypatch.chdir(REPO)  # entrypoints are relative to the repository root, as for prefect deploy
    return load_flow_from_entrypoint(entrypoint)


def test_the_project_deployments_are_declared():
    assert set(DEPLOYMENTS) == {"nightly", "checkpoint", "toy-world", "nightly-gpu-docker",
                                "nightly-gpu-k8s"}
    nightly = DEPLOYMENTS["nightly"]
    assert nightly["schedules"] == [{"cron": "0 2 * * *", "timezone": "UTC", "active": True}]
    assert nightly["work_pool"]["name"] == "selfplay-local"
    for name in ("nightly-gpu-docker", "nightly-gpu-k8s"):  # off until a GPU worker serves them
        assert [s["active"] for s in DEPLOYMENTS[name]["schedules"]] == [False]


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_entrypoint_imports_and_parameters_validate(name, build_outputs, monkeypatch):
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.utilities.callables import parameter_schema

    dep = DEPLOYMENTS[name]
    flow = load_flow(dep["entrypoint"], monkeypatch)
    params = flow.validate_parameters(parameters(name, build_outputs))
    schema = parameter_schema(flow).model_dump()
    (model_param,) = [k for k in ("config", "params") if k in params]
    model = params[model_param]
    # The parameter is a pydantic model: the UI form has one field per config field.
    ref = schema["properties"][model_param]
    defn = schema["definitions"][type(model).__name__]
    assert "$ref" in json.dumps(ref) and set(type(model).model_fields) == set(defn["properties"])
    for s in dep.get("schedules") or []:
        CronSchedule(cron=s["cron"], timezone=s["timezone"])


def test_self_play_deployments_take_their_config_from_a_file(build_outputs):
    """No config is copied into prefect.yaml: a self-play deployment's `config` is one
    reference to a build step's output, which is the config file it names, as loaded."""
    from selfplay_core.config import RunConfig, load_config

    expected = {"nightly": "configs/tiny-cpu.yaml", "nightly-gpu-docker": "configs/qwen2.5-coder-7b-gasp.yaml",
                "nightly-gpu-k8s": "configs/qwen2.5-coder-7b-gasp.yaml"}
    selfplay = {name for name, d in DEPLOYMENTS.items() if d["entrypoint"].endswith(":selfplay")}
    assert selfplay == set(expected)
    steps = {s["id"]: s for step in SPEC["build"] for s in step.values()}
    for name, path in expected.items():
        ref = DEPLOYMENTS[name]["parameters"]["config"]
        step_id, key = ref.removeprefix("{{ ").removesuffix(" }}").split(".")
        assert steps[step_id][key] == path, name
        got = RunConfig.model_validate(parameters(name, build_outputs)["config"])
        assert got == load_config(REPO / path), f"{name}: not the config of {path}"


def test_a_config_file_that_does_not_load_stops_the_deploy(tmp_path):
    from prefect.deployments.steps.core import StepExecutionError, run_steps

    from selfplay_core.config import ConfigError
    from selfplay_cli.deploy import run_configs

    bad = tmp_path / "bad.yaml"
    bad.write_text("iterations: 0\n")
    with pytest.raises(ConfigError, match="iterations"):
        run_configs(nightly=str(bad))
    step = [{"selfplay_cli.deploy.run_configs": {"id": "configs", "nightly": str(bad)}}]
    with pytest.raises(StepExecutionError):
        asyncio.run(run_steps(step, print_function=lambda *a, **k: None))


def test_bad_parameters_are_rejected_by_the_flow_signature(monkeypatch):
    from prefect.exceptions import ParameterTypeError

    ev = load_flow(DEPLOYMENTS["checkpoint"]["entrypoint"], monkeypatch)
    with pytest.raises(ParameterTypeError, match="ks"):
        ev.validate_parameters({"params": {"n": 1, "ks": [5]}})
    with pytest.raises(ParameterTypeError, match="benchmarks"):
        ev.validate_parameters({"params": {"benchmarks": ["nope"]}})
    sp = load_flow(DEPLOYMENTS["nightly"]["entrypoint"], monkeypatch)
    with pytest.raises(ParameterTypeError, match="iterations"):
        sp.validate_parameters({"config": {"iterations": 0}})


def test_pools_code_location_and_job_variables():
    from selfplay_cli.deploy import POOLS

    # Local deployments run from the directory `prefect deploy` ran in (no git, no network).
    (step,) = [b["prefect.deployments.steps.run_shell_script"] for b in SPEC["build"]
               if "prefect.deployments.steps.run_shell_script" in b]
    assert step["id"] == "repo" and step["script"] == "pwd"
    assert SPEC["pull"] == [{"prefect.deployments.steps.set_working_directory":
                             {"directory": "{{ repo.stdout }}"}}]
    workdir = [ln.split()[1] for ln in (REPO / "Dockerfile").read_text().splitlines()
               if ln.startswith("WORKDIR")][-1]
    for dep in SPEC["deployments"]:
        pool = dep["work_pool"]["name"]
        assert pool in POOLS, f"{dep['name']}: selfplay deploy cannot create pool {pool}"
        pool_type, template = POOLS[pool]
        if template is None:
            assert pool_type == "process" and "pull" not in dep
            continue
        # GPU pools: the CUDA image holds the code; job variables exist in the pool template.
        assert dep["pull"] == [{"prefect.deployments.steps.set_working_directory": {"directory": workdir}}]
        variables = json.loads((REPO / template).read_text())["variables"]["properties"]
        for key in dep["work_pool"]["job_variables"]:
            assert key in variables, f"{dep['name']}: job variable {key} not in {template}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_deploy_cli_errors_are_one_line(capsys):
    from selfplay_cli.main import main

    assert main(["deploy", "--name", "nope"]) == 2
    err = capsys.readouterr().err
    assert "selfplay deploy: error: --name nope: no such deployment" in err and "Traceback" not in err
    assert main(["deploy", "--api-url", f"http://127.0.0.1:{_free_port()}/api"]) == 2
    err = capsys.readouterr().err
    assert "does not answer" in err and "selfplay serve" in err
    assert main(["deploy", "--prefect-file", "/nonexistent/prefect.yaml"]) == 2
    assert "file not found" in capsys.readouterr().err


def test_deployed_runs_without_a_name_get_a_folder_per_scheduled_start():
    from datetime import datetime, timezone

    from flows.selfplay import choose_run_dir
    from selfplay_core.config import RunConfig

    cfg = RunConfig(out_dir="runs")
    night = datetime(2026, 11, 30, 2, 0, tzinfo=timezone.utc)
    assert choose_run_dir(cfg, None, night, "abc") == "runs/gasp-s0"  # not deployed: the default
    a = choose_run_dir(cfg, "dep-1", night, "0123456789abcdef")
    b = choose_run_dir(cfg, "dep-1", datetime(2026, 12, 1, 2, 0, tzinfo=timezone.utc), "fedcba9876543210")
    assert a == "runs/gasp-s0-20261130T0200-01234567" and a != b
    named = RunConfig.model_validate({"tracking": {"run_name": "mine"}})
    assert choose_run_dir(named, "dep-1", night, "0123456789abcdef") == "runs/mine"
