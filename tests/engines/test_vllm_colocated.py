"""Colocated single-GPU placement (issue 15, failure 4, the learner's side), against the PROTOCOL
TEST DOUBLE of the vLLM server (fake_vllm_server.py — not vLLM; sleep mode needs a GPU).

For each update the server sleeps (level 1), the learner steps and releases its CUDA cache, then
the server wakes its weights, receives the new ones, and only then its KV cache; a server the run
launches gets the learner's GPU, --enable-sleep-mode and the memory share the plan sized for the
learner's steady state. (Before: the loop refused colocated placement, and `wake_up` tags were
sent as one string "['weights']", which vLLM reads as an unknown tag.)"""

import json
import os
import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from fake_vllm_server import FakeVLLM, toy_loop_script
from test_vllm_loop import free_port, loop_sets

FAKE = Path(__file__).with_name("fake_vllm_server.py")

COLOCATED = ["gpu.device=cuda", "gpu.engine=vllm", "gpu.vllm_placement=colocated", "gpu.num_gpus=1",
             "gpu.dtype=float32", "gpu.gradient_checkpointing=false", "gpu.weight_sync=filesystem",
             "plan.model_shape=0.5b"]


def test_colocated_server_sleeps_through_the_update_then_wakes_weights_sync_kv_cache(
        micro_model_dir, tmp_path, executor, monkeypatch):
    from transformers import AutoTokenizer

    import selfplay_core.rl.learner as learner_mod
    from selfplay_core.config import load_config
    from selfplay_core.loop.driver import run_selfplay

    served = tmp_path / "served"
    served.mkdir()
    fake = FakeVLLM(model=str(served), served_dir=str(served), script=toy_loop_script,
                    tokenizer=AutoTokenizer.from_pretrained(str(micro_model_dir))).start()
    marks = []  # (what, number of server requests so far)
    step = learner_mod.Learner.step

    def recording_step(self, rollouts):
        marks.append(("step", len(fake.requests), fake.sleeping))
        return step(self, rollouts)

    monkeypatch.setattr(learner_mod.Learner, "step", recording_step)
    # no GPU here: record the cache release instead of calling torch.cuda (stand-in, says so)
    monkeypatch.setattr(learner_mod, "empty_cuda_cache",
                        lambda: marks.append(("empty_cache", len(fake.requests), fake.sleeping)))
    try:
        cfg = load_config(None, loop_sets(micro_model_dir, tmp_path / "runs", fake.url)
                          + [f"engine.served_model_dir={served}", f"gpu.server_url={fake.url}"]
                          + COLOCATED)
        summary = run_selfplay(cfg, executor=executor)
    finally:
        fake.stop()

    paths = fake.paths()
    assert paths.count("/sleep") == 1 and paths.count("/wake_up") == 2  # one update
    i = paths.index("/sleep")
    assert fake.queries[i] == {"level": ["1"]}
    # the learner stepped while the server slept, and released its cache before any wake-up
    assert [m for m in marks if m[0] == "step"] == [("step", i + 1, True)]
    assert ("empty_cache", i + 1, True) in marks
    after = list(zip(paths[i + 1:i + 7], fake.queries[i + 1:i + 7]))
    assert after == [("/wake_up", {"tags": ["weights"]}), ("/collective_rpc", {}),
                     ("/reset_prefix_cache", {}), ("/wake_up", {"tags": ["kv_cache"]}),
                     ("/is_sleeping", {}),  # the engine checks that nothing sleeps any more
                     ("/v1/completions", {})]
    assert "/v1/completions" in paths[:i] and not fake.sleeping
    assert len(fake.reloads) == 1 and "model.safetensors" in fake.reloads[0]["files"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(summary.tracking_uri)
    for key in ("engine/wake_weights_s", "engine/wake_kv_cache_s", "learner/changed_share"):
        assert client.get_metric_history(summary.run_id, key), key


def test_a_failed_step_leaves_the_server_awake(fake_vllm):
    from selfplay_core.engines.vllm import VLLMEngine, VLLMEngineConfig
    from selfplay_core.loop.engine_setup import VLLMSetup

    setup = SimpleNamespace(colocated=True, asleep=False,
                            engine=VLLMEngine(VLLMEngineConfig(base_url=fake_vllm.url)))
    with pytest.raises(RuntimeError, match="out of memory"):
        with VLLMSetup.learner_turn(setup):
            assert fake_vllm.sleeping
            raise RuntimeError("CUDA out of memory (stand-in)")
    assert not fake_vllm.sleeping and not setup.asleep
    assert fake_vllm.paths()[-1] == "/wake_up" and fake_vllm.queries[-1] == {}  # all of it


def fake_venv(tmp_path, monkeypatch):
    py = tmp_path / "vllm-venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    # the CUDA build, as far as the launcher can tell (it reads the venv's dist-info)
    (py.parent.parent / "lib" / "python3.11" / "site-packages" / "vllm-0.31.0.dist-info").mkdir(
        parents=True)
    monkeypatch.setenv("SELFPLAY_VLLM_VENV", str(py.parent.parent))


@pytest.mark.parametrize("extra, flags", [
    ([], {"--enable-sleep-mode": None, "--gpu-memory-utilization": "0.44"}),
    (["gpu.gpu_memory_utilization=0.3"], {"--gpu-memory-utilization": "0.3"}),
])
def test_a_launched_colocated_server_gets_the_learners_gpu_sleep_mode_and_the_sized_share(
        tmp_path, monkeypatch, extra, flags):
    from selfplay_core.config import load_config
    from selfplay_core.engines.vllm_server import build_command
    from selfplay_core.loop.engine_setup import serve_options

    fake_venv(tmp_path, monkeypatch)
    url = f"http://127.0.0.1:{free_port()}"
    cfg = load_config(None, ["model.path=/m", "engine.backend=vllm", f"engine.vllm_url={url}",
                             "gpu.vllm_placement=colocated", "gpu.launch_server=true",
                             "gpu.num_gpus=1", "plan.model_shape=7b", "learner.micro_batch_size=4",
                             "engine.max_new_tokens_student=1024",
                             "engine.max_new_tokens_teacher=1024"] + extra)
    opts = serve_options(cfg, str(tmp_path), "filesystem")
    argv, env = build_command(opts)
    assert env["CUDA_VISIBLE_DEVICES"] == "0"  # the learner's GPU
    assert "--enable-sleep-mode" in argv
    for flag, value in flags.items():
        assert flag in argv
        if value is not None:
            assert argv[argv.index(flag) + 1] == value
    assert opts.gpu_memory_utilization == cfg.resolved_plan().vllm_memory_utilization


def test_a_launched_lora_server_gets_a_rank_vllm_accepts(tmp_path, monkeypatch):
    from selfplay_core.config import load_config
    from selfplay_core.engines.vllm_server import build_command
    from selfplay_core.loop.engine_setup import serve_options

    fake_venv(tmp_path, monkeypatch)
    cfg = load_config(None, ["model.path=/m", "engine.backend=vllm",
                             "engine.vllm_url=http://127.0.0.1:8123", "gpu.launch_server=true",
                             "gpu.num_gpus=2", "gpu.rollout_gpus=1", "gpu.weight_sync=lora",
                             "gpu.lora={r: 24, alpha: 48}"])
    argv, env = build_command(serve_options(cfg, str(tmp_path), "lora"))
    assert argv[argv.index("--max-lora-rank") + 1] == "32"  # 24 is not a rank vLLM takes
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and "--enable-sleep-mode" not in argv
