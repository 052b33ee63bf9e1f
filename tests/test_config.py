"""Run configs: defaults validate, overrides apply, and every bad config is one clear error."""

from pathlib import Path

import pytest

from selfplay_core.config import ConfigError, RunConfig, dump_config, load_config


ROOT_CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_defaults_are_the_embedded_toy_run():
    cfg = load_config()
    assert cfg.method.name == "gasp" and cfg.model.path == "toy" and cfg.engine.backend == "hf"
    assert cfg.sandbox.backend == "local"


def test_the_defaults_are_configs_tiny_cpu_yaml():
    """One source of truth: `selfplay run` without --config runs what tiny-cpu.yaml says."""
    assert load_config(None) == load_config(ROOT_CONFIGS / "tiny-cpu.yaml") == RunConfig()
    cfg = load_config(None)   # the values that used to differ, spelled out
    assert (cfg.iterations, cfg.updates_per_iteration, cfg.engine.teacher_temperature,
            cfg.world.max_goalposts, cfg.eval.max_problems) == (12, 4, 0.4, 40, 60)


def test_overrides_with_yaml_typed_values(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("method: azr\nlearner:\n  lr: 1.0e-5\n")
    cfg = load_config(f, ["learner.clip_eps=0.3", "teacher.axes=[f]", "iterations=3"])
    assert cfg.method.name == "azr" and cfg.learner.lr == 1e-5 and cfg.learner.clip_eps == 0.3
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
    (["method.lemma_band=[0.8, 0.2]"], "method: lemma_band must satisfy"),
    (["method=nonsense"], "method: unknown method 'nonsense'; one of azr, compassplay, gasp, gasp+rlvr, gasp-edit, rlvr, r-zero, sgs, spice, star"),
    (["method.references=3"], "method.references: unknown key"),          # an AZR key under gasp
    (["method=azr", "method.lemma_band=[0.3, 0.7]"], "method.lemma_band: unknown key"),
    (["method.advantage=ppo"], "method.advantage"),
    (["method=azr", "student.replay_tasks_per_iteration=4"], "method azr does not replay"),
    (["student.train_band=[0.9, 0.3]"], "student.train_band"),
    (["method=rlvr"], "real_tasks_per_iteration"),
    (["engine.backend=vllm"], "engine.vllm_url"),
    (["eval.ks=[1, 64]", "eval.n=8"], "eval.ks"),
    (["sandbox.backend=podman"], "sandbox.backend"),
    (["learner=3"], "learner"),
    (["noequals"], "expected key=value"),
    (["world.name=lcb", "world.eval_sets=[lcb, apps]"], "world: eval_sets: unknown set 'apps'"),
    (["world.data=/x.jsonl"], "world.data: unknown key (a key of world 'lcb'; this run's world is 'toy')"),
    (["engine.vllm_url=localhost:8000"], "engine.vllm_url must look like http://HOST:PORT"),
    # GASP's judges are one slot: the old keys name the new spelling; the slot names its choices
    (["method.guide={gate: 0.5}"], "config: method.guide: no longer a key; write method.judge: {name: guide, ...} instead"),
    (["method.code_relevance={power: 4}"], "method.code_relevance: no longer a key; write method.judge: {name: code, ...}"),
    (["method.judge={gate: 0.5}"], "method.judge: needs its `name`: one of guide, code, gradient"),
    (["method.judge={name: guide, gate: 2}"], "method.judge.gate: Input should be less than or equal to 1 (got 2)"),
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
    cfg = load_config(None, ["method=azr", "method.task_types=[deduction, abduction, induction]"])
    assert cfg.method.task_types == ("deduction", "abduction", "induction")
    assert load_config(None, ["method=azr"]).method.task_types == ("induction",)   # the toy default
    with pytest.raises(ConfigError, match=r"method\.task_types\.0"):
        load_config(None, ["method=azr", "method.task_types=[guessing]"])
    with pytest.raises(ConfigError, match="at least one"):
        load_config(None, ["method=azr", "method.task_types=[]"])
    with pytest.raises(ConfigError, match="repeated"):
        load_config(None, ["method=azr", "method.task_types=[abduction, abduction]"])
    with pytest.raises(ConfigError, match="seed_input"):
        load_config(None, ["method=azr", "method.seed_input=__import__('os')"])
    full = load_config(ROOT_CONFIGS / "azr-full.yaml")
    assert full.method.name == "azr" and set(full.method.task_types) == {"deduction", "abduction", "induction"}


def test_each_method_has_its_own_section_and_defaults():
    gasp, azr, rlvr = (load_config(None, o).method for o in
                       ([], ["method=azr"], ["method=rlvr", "student.real_tasks_per_iteration=4"]))
    assert (type(gasp).__name__, type(azr).__name__, type(rlvr).__name__) == ("GASPConfig", "AZRConfig", "RLVRConfig")
    assert (gasp.advantage, azr.advantage, rlvr.advantage) == ("trr++", "trr++", "grpo")
    assert gasp.lemma_band == (0.3, 0.7) and not hasattr(azr, "lemma_band")
    # `method: NAME` is short for `method: {name: NAME}`; a later --set method.KEY adds to it
    assert load_config(None, ["method=azr", "method.references=2"]).method.references == 2
    # every estimator, REINFORCE½ included, is reachable from the config
    assert load_config(None, ["method.advantage=reinforce_half"]).method.advantage == "reinforce_half"


def test_a_file_that_extends_another_with_another_method_replaces_the_section(tmp_path):
    (tmp_path / "base.yaml").write_text("method: {name: gasp, lemma_band: [0.2, 0.8]}\niterations: 3\n")
    (tmp_path / "azr.yaml").write_text("extends: base.yaml\nmethod: {name: azr, references: 2}\n")
    (tmp_path / "ablation.yaml").write_text("extends: base.yaml\nmethod: {one_step: hard}\n")
    azr = load_config(tmp_path / "azr.yaml")
    assert azr.method.name == "azr" and azr.method.references == 2 and azr.iterations == 3
    ablation = load_config(tmp_path / "ablation.yaml").method
    assert ablation.name == "gasp" and ablation.one_step == "hard" and ablation.lemma_band == (0.2, 0.8)


def test_configs_written_before_the_method_section_still_load(tmp_path, caplog):
    """A run's saved config.yaml from before method sections (teacher.* GASP keys, an azr:
    section, a top-level advantage) resumes with the same settings; keys that are not options of
    the run's method are ignored (they were then, too), with one warning."""
    old = tmp_path / "config.yaml"
    old.write_text("method: gasp\nadvantage: grpo\niterations: 2\n"
                   "teacher: {goalposts_per_iteration: 3, lemma_band: [0.2, 0.6], one_step: medium, axes: [f]}\n"
                   "azr: {task_types: [deduction], references: 4}\n")
    with caplog.at_level("WARNING"):
        cfg = load_config(old)
    m = cfg.method
    assert (m.name, m.advantage, m.goalposts_per_iteration, m.lemma_band, m.one_step) == \
        ("gasp", "grpo", 3, (0.2, 0.6), "medium")
    assert cfg.teacher.axes == ("f",)
    assert "azr.references" in caplog.text and "ignored" in caplog.text
    azr = load_config(old, ["method=azr"]).method
    assert (azr.task_types, azr.references, azr.advantage) == (("deduction",), 4, "grpo")
    # and the old spelling of an override still wins over the file's value
    assert load_config(ROOT_CONFIGS / "tiny-cpu.yaml",
                       ["teacher.goalposts_per_iteration=5"]).method.goalposts_per_iteration == 5


def test_each_stage_is_limited_by_the_timeout_of_its_kind():
    """flow.timeouts: a stage's first word picks its key; stages without one share other_s."""
    cfg = load_config(None, ["flow.timeouts.update_s=20", "flow.timeouts.estimate_s=null"])
    t = cfg.flow.timeouts
    expected = {"propose_lemma": "propose_s", "validate_lift": "validate_s", "estimate_lemma": "estimate_s",
                "solve_real": "solve_s", "solve_replay": "solve_s", "update": "update_s",
                "evaluate": "evaluate_s", "evaluate_full": "evaluate_s", "evaluate-humanevalplus": "evaluate_s",
                "goalposts": "goalposts_s", "score_lemma": "other_s", "fill_student": "other_s",
                "compass_gain": "other_s", "rationalize": "other_s"}
    assert {stage: t.key_of(stage) for stage in expected} == expected
    assert t.for_stage("update") == 20 and t.for_stage("estimate_lift") is None
    assert t.for_stage("propose_lemma") == 3600 and t.for_stage("evaluate_full") == 7200
    with pytest.raises(ConfigError, match=r"flow\.timeouts\.update_s"):
        load_config(None, ["flow.timeouts.update_s=0"])
