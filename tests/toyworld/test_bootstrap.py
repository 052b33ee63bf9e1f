import json

import pytest
import torch

from selfplay_core.toyworld.bootstrap import BootstrapConfig, bootstrap_toy_model, cached_model_dir

from selfplay_core.toyworld.bootstrap import MICRO_TEST_CONFIG as MICRO


def test_saved_model_loads_with_auto_classes(micro_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(micro_model_dir)
    tok = AutoTokenizer.from_pretrained(micro_model_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert model.config.vocab_size == len(tok) == MICRO["vocab_size"]
    assert model.config.tie_word_embeddings
    ids = tok("### Task\nGiven a list of numbers, take the sum.\n", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model(input_ids=ids)
    assert out.logits.shape == (1, ids.shape[1], len(tok))
    meta = json.loads((micro_model_dir / "bootstrap.json").read_text())
    assert meta["parameters"] == sum(p.numel() for p in model.parameters())
    assert meta["splits"]["eval"]["hash"].startswith("sha256:")
    assert meta["versions"]["torch"] == torch.__version__   # what tells two environments' builds apart


def test_training_lowered_the_loss(micro_model_dir):
    meta = json.loads((micro_model_dir / "bootstrap.json").read_text())
    assert meta["final_loss"] < 0.6 * torch.log(torch.tensor(float(MICRO["vocab_size"]))).item()


def test_bootstrap_is_deterministic_and_cached(tmp_path, monkeypatch, micro_model_dir):
    from safetensors.torch import load_file

    monkeypatch.setenv("SELFPLAY_CACHE", str(tmp_path / "cache"))
    cfg = BootstrapConfig(**MICRO)
    path = bootstrap_toy_model(cfg, progress=False, log=lambda m: None)
    assert path == cached_model_dir(cfg) and str(path).startswith(str(tmp_path / "cache"))
    a = load_file(path / "model.safetensors")
    b = load_file(micro_model_dir / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    messages = []
    assert bootstrap_toy_model(cfg, progress=False, log=messages.append) == path
    assert "cached" in messages[0]


def test_config_rejects_unknown_and_bad_values():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        BootstrapConfig(n_exampels=10)
    with pytest.raises(ValidationError):
        BootstrapConfig(bug_rate=1.5)
    assert BootstrapConfig().key() != BootstrapConfig(seed=1).key()


def test_cli_bootstrap_without_prefect(tmp_path, capsys):
    from selfplay_cli.main import main

    out = tmp_path / "m"
    rc = main(["bootstrap", "--no-prefect", "--examples", "150", "--out", str(out)])
    # The default model size on 150 examples takes a few seconds; the point is the wiring.
    assert rc == 0 and capsys.readouterr().out.strip() == str(out)
    assert (out / "config.json").is_file() and (out / "bootstrap.json").is_file()
    assert main(["bootstrap", "--no-prefect", "--examples", "5"]) == 2
    assert main(["bootstrap", "--no-prefect", "--teacher-steps", "-1"]) == 2


@pytest.mark.slow
def test_prefect_flow_runs_the_bootstrap(tmp_path):
    from flows.bootstrap_toy_model import bootstrap_toy_model as flow

    out = tmp_path / "flow-model"
    path = flow(config=BootstrapConfig(**MICRO), out_dir=str(out))
    assert path == str(out) and (out / "bootstrap.json").is_file()


def test_teacher_phase_corpus_gives_the_rest_to_students_in_the_main_corpus_proportions():
    from selfplay_core.toyworld.corpus import teacher_phase_settings

    s = teacher_phase_settings(0.6, 0.1, 100)
    shares = dict(s.student_depth_shares)
    assert sum(shares.values()) == pytest.approx(0.3)
    assert shares[1] == pytest.approx(0.3 * 0.545 / 0.64)     # 0.545 : 0.08 : 0.015, scaled
    assert shares[2] / shares[3] == pytest.approx(0.08 / 0.015)
    assert s.guide_share == 0.1 and s.n_examples == 100
    with pytest.raises(ValueError, match="must leave a share"):
        teacher_phase_settings(0.95, 0.1, 100)


def test_teacher_phase_settings_enter_the_key_only_when_the_phase_runs():
    from pydantic import ValidationError

    off = BootstrapConfig()
    assert off.key() == BootstrapConfig(teacher_share=0.3, teacher_lr=5e-4).key()
    on = BootstrapConfig(teacher_steps=2000)
    assert on.key() != off.key() != BootstrapConfig(teacher_steps=2000, teacher_share=0.3).key()
    with pytest.raises(ValidationError, match="teacher_share 0.95 \\+ guide_share 0.1 must leave a share"):
        BootstrapConfig(teacher_steps=10, teacher_share=0.95, guide_share=0.1)
    BootstrapConfig(guide_share=0.45)   # without the phase its share is not checked


def test_teacher_phase_trains_on_more_steps_and_is_deterministic(tmp_path, micro_model_dir):
    from safetensors.torch import load_file

    cfg = BootstrapConfig(**MICRO, teacher_steps=6)
    paths = [bootstrap_toy_model(cfg, out_dir=tmp_path / name, progress=False, log=lambda m: None)
             for name in ("a", "b")]
    meta = json.loads((paths[0] / "bootstrap.json").read_text())
    plain = json.loads((micro_model_dir / "bootstrap.json").read_text())
    phase = meta["teacher_phase"]
    assert phase["steps"] == 6 and phase["examples"] == 6 * MICRO["batch_size"]
    assert meta["steps"] == plain["steps"] and meta["corpus"] == plain["corpus"]
    assert "teacher_phase" not in plain and meta["config"]["teacher_steps"] == 6
    a, b, c = (load_file(p / "model.safetensors") for p in (*paths, micro_model_dir))
    assert all(torch.equal(a[k], b[k]) for k in a)           # deterministic
    assert any(not torch.equal(a[k], c[k]) for k in a)       # the phase moved the weights
