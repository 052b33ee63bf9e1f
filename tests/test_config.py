"""Run configs: defaults validate, overrides apply, and every bad config is one clear error."""

from pathlib import Path

import pytest

from selfplay_core.config import ConfigError, RunConfig, dump_config, load_config


ROOT_CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_defaults_are_the_embedded_toy_run():
    cfg = load_config()
    assert cfg.method == "gasp" and cfg.model.path == "toy" and cfg.engine.backend == "hf"
    assert cfg.sandbox.backend == "local"


def test_overrides_with_yaml_typed_values(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("method: azr\nlearner:\n  lr: 1.0e-5\n")
    cfg = load_config(f, ["learner.clip_eps=0.3", "teacher.axes=[f]", "iterations=3"])
    assert cfg.method == "azr" and cfg.learner.lr == 1e-5 and cfg.learner.clip_eps == 0.3
    assert cfg.teacher.axes == ("f",) and cfg.iterations == 3


def test_round_trip_through_yaml(tmp_path):
    cfg = load_config(None, ["seed=7"])
    f = tmp_path / "dump.yaml"
    f.write_text(dump_config(cfg))
    assert load_config(f) == cfg


def test_configs_are_frozen():
    with pytest.raises(Exception):
        RunConfig().seed = 3


BAD = [
    (["learner.lrr=1"], "learner.lrr: unknown key"),
    (["nonsense=1"], "nonsense: unknown key"),
    (["iterations=many"], "iterations"),
    (["learner.lr=-1"], "learner.lr"),
    (["student.batch_size=12", "student.samples_per_task=8"], "student.batch_size (12) must be divisible"),
    (["teacher.lemma_band=[0.8, 0.2]"], "teacher.lemma_band"),
    (["student.train_band=[0.9, 0.3]"], "student.train_band"),
    (["method=rlvr"], "real_tasks_per_iteration"),
    (["engine.backend=vllm"], "engine.vllm_url"),
    (["eval.ks=[1, 64]", "eval.n=8"], "eval.ks"),
    (["sandbox.backend=podman"], "sandbox.backend"),
    (["learner=3"], "learner"),
    (["noequals"], "expected key=value"),
    (["world.name=lcb", "world.eval_sets=[lcb, apps]"], "world: eval_sets: unknown set 'apps'"),
    (["world.data=/x.jsonl"], "world.data / world.lcb_release are for world 'lcb'"),
    (["engine.vllm_url=localhost:8000"], "engine.vllm_url must look like http://HOST:PORT"),
]


def test_real_data_world_keys_and_eval_set_aliases():
    cfg = load_config(None, ["world.name=lcb", "world.eval_sets=[lcb, humaneval+, mbpp+, lcb]",
                             "world.goalposts=runs/x/goalposts.json"])
    assert cfg.world.eval_sets == ("lcb", "humanevalplus", "mbppplus")
    assert cfg.world.goalposts == "runs/x/goalposts.json"
    gpu = load_config(ROOT_CONFIGS / "qwen2.5-coder-7b-gasp.yaml")
    assert gpu.world.name == "lcb" and gpu.engine.backend == "vllm" and gpu.gpu.launch_server
    assert gpu.world.eval_sets == ("lcb", "humanevalplus", "mbppplus")
    with pytest.raises(ConfigError, match="gpu.server_url .* and engine.vllm_url .* name different"):
        load_config(ROOT_CONFIGS / "qwen2.5-coder-7b-gasp.yaml",
                    ["gpu.server_url=http://10.0.0.2:8000", "gpu.launch_server=false"])


@pytest.mark.parametrize("overrides,fragment", BAD)
def test_bad_config_is_one_clear_error_naming_the_key(overrides, fragment):
    with pytest.raises(ConfigError) as e:
        load_config(None, overrides)
    msg = str(e.value)
    assert fragment in msg and "\n" not in msg


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("method: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(bad)


def test_every_shipped_config_validates():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "configs"
    names = sorted(p.name for p in root.glob("*.yaml"))
    assert {"tiny-cpu.yaml", "qwen2.5-coder-7b-gasp.yaml", "azr-tiny-cpu.yaml", "rlvr-tiny-cpu.yaml"} <= set(names)
    for name in names:
        cfg = load_config(root / name)
        assert cfg.iterations >= 1
    assert load_config(root / "ablation-no-io-axis.yaml").teacher.axes == ("f",)
    assert load_config(root / "ablation-no-io-axis.yaml").learner.lr == load_config(root / "tiny-cpu.yaml").learner.lr


def test_dry_run_prints_the_resolved_gpu_plan():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "selfplay_cli.main", "run", "--config",
                        "configs/qwen2.5-coder-7b-gasp.yaml", "--dry-run"], cwd=root,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for fragment in ("resolved plan:", "vllm-server", "learner", "memory per learner GPU", "fits: yes"):
        assert fragment in r.stdout


def test_gpu_section_must_match_the_engine():
    with pytest.raises(ConfigError, match="gpu.engine"):
        load_config(None, ["gpu={engine: vllm, num_gpus: 2, learner_gpus: 1, rollout_gpus: 1, launch_server: true}"])


def test_azr_task_types_and_seed_are_checked():
    from pathlib import Path

    cfg = load_config(None, ["method=azr", "azr.task_types=[deduction, abduction, induction]"])
    assert cfg.azr.task_types == ("deduction", "abduction", "induction")
    assert load_config(None, []).azr.task_types == ("induction",)   # the toy default
    with pytest.raises(ConfigError, match="azr.task_types.0"):
        load_config(None, ["azr.task_types=[guessing]"])
    with pytest.raises(ConfigError, match="at least one"):
        load_config(None, ["azr.task_types=[]"])
    with pytest.raises(ConfigError, match="repeated"):
        load_config(None, ["azr.task_types=[abduction, abduction]"])
    with pytest.raises(ConfigError, match="azr.seed_input"):
        load_config(None, ["azr.seed_input=__import__('os')"])
    full = load_config(Path(__file__).resolve().parents[1] / "configs" / "azr-full.yaml")
    assert full.method == "azr" and set(full.azr.task_types) == {"deduction", "abduction", "induction"}
