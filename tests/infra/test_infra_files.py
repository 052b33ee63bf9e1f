"""Static checks of the infra files: what can be validated without a Docker daemon or a cluster.

Not covered here (no registry, daemon or cluster on CI): building the images, starting the
compose stack, scheduling a GPU pod. See infra/README.md, "What is validated where".
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "infra" / "docker-compose.yml"
POOLS = REPO / "infra" / "work-pools"


# ---------------------------------------------------------------------------------------------
# docker-compose.yml


def test_compose_services_and_references():
    spec = yaml.safe_load(COMPOSE.read_text())
    services = spec["services"]
    assert {"prefect-server", "prefect-db", "mlflow", "mlflow-db", "s3", "s3-init",
            "prefect-worker", "prefect-worker-gpu"} <= set(services)
    for name, svc in services.items():
        for dep in svc.get("depends_on", {}):
            assert dep in services, f"{name} depends on unknown service {dep}"
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if not src.startswith((".", "/")):
                assert src in spec["volumes"], f"{name} mounts undeclared volume {src}"
    host_ports = [p.split(":")[0] for s in services.values() for p in s.get("ports", [])]
    assert len(host_ports) == len(set(host_ports))
    # Both workers point checkpoints and MLflow at the same S3 endpoint and keep the spool
    # on a named volume, so an outage cannot lose uploads when a container is replaced.
    for w in ("prefect-worker", "prefect-worker-gpu"):
        env = services[w]["environment"]
        assert env["SELFPLAY_S3_ENDPOINT_URL"] == env["MLFLOW_S3_ENDPOINT_URL"] == "http://s3:9000"
        assert any(v.endswith(":" + env["SELFPLAY_SPOOL_DIR"]) for v in services[w]["volumes"])
    gpu = services["prefect-worker-gpu"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["driver"] == "nvidia" and "gpu" in gpu["capabilities"]
    assert "--artifacts-destination=s3://${S3_BUCKET:-selfplay}/mlflow" in services["mlflow"]["command"]


def _compose_cli() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_compose_config_validates():
    cli = _compose_cli()
    if cli is None:
        pytest.skip("no docker compose / docker-compose CLI (apt-get install docker-compose)")
    for extra in ([], ["--profile", "gpu"]):
        out = subprocess.run([*cli, "-f", str(COMPOSE), *extra, "config", "-q"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr


# ---------------------------------------------------------------------------------------------
# Work-pool base job templates


def load_pool(name: str) -> dict:
    return json.loads((POOLS / name).read_text())


def render(template: dict, values: dict) -> dict:
    """What a worker does with a template: variable defaults, overrides, placeholders."""
    from prefect.utilities.templating import apply_values
    from prefect.workers.base import BaseJobConfiguration

    variables = BaseJobConfiguration._get_base_config_defaults(template["variables"]["properties"])
    variables.update(values)
    return apply_values(template["job_configuration"], variables)


@pytest.mark.parametrize("name,pool_type", [("docker-gpu.json", "docker"),
                                            ("kubernetes-gpu.json", "kubernetes")])
def test_templates_pass_prefect_server_validation(name, pool_type):
    from prefect.server.schemas.actions import WorkPoolCreate

    template = load_pool(name)
    WorkPoolCreate(name=f"selfplay-{pool_type}", type=pool_type, base_job_template=template)
    # Every placeholder refers to a declared variable (the server checks this too; say which).
    declared = set(template["variables"]["properties"])
    used = set(re.findall(r"{{\s*([\w.]+)\s*}}", json.dumps(template["job_configuration"])))
    assert used <= declared, used - declared


def test_docker_template_requests_gpus_the_docker_sdk_accepts():
    from docker.types import HostConfig

    template = load_pool("docker-gpu.json")
    default = render(template, {})
    assert default["container_create_kwargs"]["device_requests"] == [
        {"driver": "nvidia", "count": 1, "capabilities": [["gpu", "utility", "compute"]]}]
    two = render(template, {"gpu_count": 2, "shm_size": "32g"})["container_create_kwargs"]
    host = HostConfig(version="1.44", **two)  # what docker-py builds for containers.create
    assert host["DeviceRequests"][0]["Count"] == 2 and host["DeviceRequests"][0]["Driver"] == "nvidia"
    assert host["ShmSize"] == 32 * 1024 ** 3
    assert "selfplay-spool:/var/lib/selfplay/spool" in default["volumes"]


def test_kubernetes_template_wires_gpu_resources_through_variables():
    template = load_pool("kubernetes-gpu.json")
    pod = render(template, {"gpu_count": 4, "node_selector": {"gpu": "h100"}})["job_manifest"][
        "spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert pod["nodeSelector"] == {"gpu": "h100"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    assert volumes["spool"]["persistentVolumeClaim"]["claimName"] == "selfplay-spool"
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/dev/shm", "/var/lib/selfplay/spool"}
    default = render(template, {})["job_manifest"]["spec"]["template"]["spec"]["containers"][0]
    assert default["resources"]["limits"]["nvidia.com/gpu"] == 1


@pytest.mark.parametrize("module,cls,name", [
    ("prefect_docker.worker", "DockerWorkerJobConfiguration", "docker-gpu.json"),
    ("prefect_kubernetes.worker", "KubernetesWorkerJobConfiguration", "kubernetes-gpu.json"),
])
def test_templates_build_the_workers_job_configuration(module, cls, name, monkeypatch):
    """With the worker packages installed, render exactly as the worker does."""
    mod = pytest.importorskip(module, reason=f"{module.split('.')[0]} not installed")
    import prefect.workers.base as base

    async def unchanged(template, client=None):  # no block/variable references in our templates
        return template

    monkeypatch.setattr(base, "resolve_block_document_references", unchanged)
    monkeypatch.setattr(base, "resolve_variables", unchanged)
    config = asyncio.run(getattr(mod, cls).from_template_and_values(load_pool(name), {"gpu_count": 2}))
    dumped = json.dumps(config.model_dump(mode="json"))
    assert '"nvidia.com/gpu": 2' in dumped or '"count": 2' in dumped


# ---------------------------------------------------------------------------------------------
# Dockerfile


def test_dockerfile_dependency_step_and_separate_vllm_venv():
    text = (REPO / "Dockerfile").read_text()
    # The requirement list the image installs is derived from pyproject exactly as the RUN does.
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + project["optional-dependencies"]["trl"]
    assert reqs and not any(r.startswith("vllm") for r in reqs)
    assert "p['dependencies'] + p['optional-dependencies']['trl']" in text
    # vLLM only goes into /opt/vllm, by the same script users run, and `selfplay vllm-serve`
    # finds it through SELFPLAY_VLLM_VENV; the build checks that the project venv cannot import it.
    assert "make_vllm_venv.sh /opt/vllm" in text and "SELFPLAY_VLLM_VENV=/opt/vllm" in text
    assert not any("pip install" in line and "vllm" in line for line in text.splitlines())
    assert (REPO / "infra" / "vllm" / "make_venv.sh").is_file()
    assert '! python -c "import vllm"' in text
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def test_ceph_rgw_script_is_valid_bash():
    out = subprocess.run(["bash", "-n", str(REPO / "infra" / "s3" / "ceph_rgw.sh")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert sys.version_info >= (3, 11)  # tomllib above
