"""GPU deployment validation and the resolved plan, against hand-computed numbers."""

import pytest
from pydantic import ValidationError

from selfplay_core.engines.gpu_config import (GIB, QWEN25_CODER, BatchShape, GPUConfig,
                                              LoraSettings, ModelShape, resolve_plan)

Q7 = QWEN25_CODER["7b"]


# ---- parameter counts (the public model cards: 0.49B, 1.54B, 7.61B) -----------------------------
def test_qwen25_coder_parameter_counts_match_hand_computation():
    # 7B: untied 152064 x 3584 embeddings and head; per layer q/o 3584^2, k/v 3584 x 512,
    # MLP 3 x 3584 x 18944, qkv biases 3584 + 2 x 512, two norms; one final norm.
    layer = 2 * 3584**2 + 2 * 3584 * 512 + 3 * 3584 * 18944 + (3584 + 1024) + 2 * 3584
    assert Q7.num_params() == 2 * 152064 * 3584 + 28 * layer + 3584 == 7_615_616_512
    assert QWEN25_CODER["1.5b"].num_params() == 1_543_714_304
    assert QWEN25_CODER["0.5b"].num_params() == 494_032_768


def test_shape_matches_a_transformers_model_built_from_it():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tiny = ModelShape(name="t", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                      intermediate_size=96, vocab_size=100, tie_word_embeddings=False)
    model = Qwen2ForCausalLM(Qwen2Config(**tiny.hf_config_kwargs()))
    assert tiny.num_params() == sum(p.numel() for p in model.parameters())
    assert ModelShape.from_hf_config(model.config, name="t") == tiny


# ---- validation ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kw, message", [
    (dict(device="cpu", engine="hf", dtype="bfloat16"), "dtype bfloat16 on CPU"),
    (dict(device="cpu", engine="vllm", dtype="float32"), "engine 'vllm' needs CUDA"),
    (dict(engine="vllm", num_gpus=2, rollout_gpus=1), "vllm server URL missing"),
    (dict(engine="vllm", launch_server=True, num_gpus=4, learner_gpus=1, rollout_gpus=3,
          tensor_parallel_size=2), "tensor_parallel_size=2 does not divide rollout_gpus=3"),
    (dict(engine="vllm", launch_server=True, num_gpus=4, learner_gpus=1,
          rollout_gpus=4, tensor_parallel_size=4), "exceed num_gpus"),
    (dict(engine="vllm", server_url="http://h:8000", num_gpus=2, rollout_gpus=1,
          weight_sync="ipc"), "weight_sync 'ipc' .* vllm_placement 'colocated'"),
    (dict(engine="vllm", launch_server=True, num_gpus=1, rollout_gpus=0), "rollout_gpus >= 1"),
    (dict(engine="hf", num_gpus=4, learner_gpus=4), "learner_gpus=4 needs distributed: ddp"),
    (dict(engine="hf", num_gpus=4, learner_gpus=4, distributed="fsdp"), "'fsdp' is not implemented"),
    (dict(engine="hf", dtype="float16"), "float16 weights with precision 'pure' overflow"),
    (dict(engine="hf", dtype="float16", precision="master"), "overflow"),
    (dict(engine="vllm", server_url="http://h:8000", weight_sync="lora"), "needs lora settings"),
    (dict(engine="vllm", server_url="h:8000"), "must look like http://HOST:PORT"),
    (dict(engine="vllm", server_url="http://h:8000", num_gpus=2, learner_gpus=2,
          distributed="zero3"), "'zero3' is not implemented"),
    (dict(engine="vllm", vllm_placement="colocated", launch_server=True, num_gpus=4,
          learner_gpus=4, distributed="ddp", tensor_parallel_size=4),
     "multi-process learner needs vllm_placement 'server'"),
    (dict(engine="vllm", vllm_placement="colocated", launch_server=True, num_gpus=2,
          tensor_parallel_size=2), "does not divide the 1 colocated"),
    (dict(engine="hf", lora=dict(r=1024)), "less than or equal to 512"),
    (dict(engine="hf", rollout_gpus=1), "rollout_gpus is for engine 'vllm'"),
])
def test_impossible_combinations_fail_with_one_clear_message(kw, message):
    with pytest.raises(ValidationError, match=message):
        GPUConfig(**kw)


def test_valid_deployments_pass_and_the_config_is_frozen():
    cpu = GPUConfig(device="cpu", engine="hf", dtype="float32")
    one = GPUConfig(engine="vllm", launch_server=True, num_gpus=2, learner_gpus=1, rollout_gpus=1)
    remote = GPUConfig(engine="vllm", server_url="http://10.0.0.5:8000", num_gpus=1,
                       lora=LoraSettings(r=8))
    assert cpu.device == "cpu" and one.rollout_gpus == 1 and remote.lora.r == 8
    with pytest.raises(ValidationError):
        one.num_gpus = 3
    with pytest.raises(ValidationError, match="extra"):
        GPUConfig(engine="hf", tp=2)


# ---- the plan ------------------------------------------------------------------------------------
def test_plan_for_qwen_7b_on_two_gpus_matches_hand_computed_memory():
    gpu = GPUConfig(engine="vllm", launch_server=True, num_gpus=2, learner_gpus=1, rollout_gpus=1,
                    gpu_memory_gib=80.0, max_model_len=4096)
    batch = BatchShape(prompts_per_step=64, samples_per_prompt=8, max_prompt_len=1024,
                       max_completion_len=1024, micro_batch_size=4)
    plan = resolve_plan(gpu, Q7, batch)
    P = 7_615_616_512
    T = 4 * 2048
    lm = plan.memory["learner"]
    assert lm["weights"] == pytest.approx(2 * P / GIB)          # 14.19 GiB bf16
    assert lm["grads"] == pytest.approx(2 * P / GIB)
    assert lm["optimizer"] == pytest.approx(4 * P / GIB)        # two bf16 AdamW moments
    # checkpointing: 28 layer inputs (T x 3584 x 2 B) + one layer's tensors
    assert lm["activations"] == pytest.approx(
        (28 * T * 3584 * 2 + T * (6 * 3584 + 2 * 512 + 4 * 18944) * 2) / GIB)
    # the head on completion tokens only, 1024 rows at a time: float32 logits + softmax + the
    # bf16 head output, plus one bf16 head-weight gradient (1.02 GiB) before accumulation
    assert lm["logits"] == pytest.approx((1024 * 152064 * 10 + 152064 * 3584 * 2) / GIB)
    assert lm["total"] == pytest.approx(62.24, abs=0.01)        # was 76.0 with full fp32 logits
    assert lm["total"] + 1.0 < 80 - 12                          # >= 12 GiB of headroom
    rm = plan.memory["rollout"]
    assert rm["kv_bytes_per_token"] == 2 * 28 * 4 * 128 * 2 == 57344
    assert rm["kv_cache"] == pytest.approx(0.9 * 80 - 2 * P / GIB - 2.0)
    assert rm["kv_tokens"] == int((0.9 * 80 - 2 * P / GIB - 2.0) * GIB / 57344)
    assert rm["max_len_sequences"] == rm["kv_tokens"] // 4096
    assert plan.fits
    assert plan.gpus["learner"] == [0] and plan.gpus["rollout"] == [1]
    assert plan.batch["rollouts_per_step"] == 512 and plan.batch["micro_batches_per_gpu"] == 128
    assert [p["name"] for p in plan.processes] == ["vllm-server", "learner", "sandbox"]
    text = plan.render()
    assert "fits: yes" in text and "in the run's process on one GPU" in text


def test_plan_scales_shards_and_lora_as_expected():
    batch = BatchShape(micro_batch_size=1, max_prompt_len=512, max_completion_len=512)
    P = 7_615_616_512
    # bytes per parameter: weights, grads, optimizer (rl/optim.py)
    for precision, (w, g, o) in {"pure": (2, 2, 4), "kahan": (2, 2, 6), "master": (2, 2, 12),
                                 "amp": (4, 4, 8)}.items():
        lm = resolve_plan(GPUConfig(engine="hf", precision=precision), Q7, batch).memory["learner"]
        assert (lm["weights"], lm["grads"], lm["optimizer"]) == pytest.approx(
            (w * P / GIB, g * P / GIB, o * P / GIB)), precision
        assert lm["steady"] == pytest.approx((w + o) * P / GIB)
    lora = LoraSettings(r=16)
    with_lora = GPUConfig(engine="hf", lora=lora)
    T = Q7.lora_params(lora)
    # r x (in + out) for q, k, v, o, gate, up, down, 28 layers
    assert T == 28 * 16 * ((3584 + 3584) * 2 + (3584 + 512) * 2 + (3584 + 18944) * 3)
    lm = resolve_plan(with_lora, Q7, batch).memory["learner"]
    assert lm["optimizer"] == pytest.approx(8 * T / GIB) and lm["grads"] == pytest.approx(4 * T / GIB)


def test_plan_reports_what_does_not_fit():
    gpu = GPUConfig(engine="vllm", launch_server=True, num_gpus=2, learner_gpus=1, rollout_gpus=1,
                    gpu_memory_utilization=0.2, gpu_memory_gib=80.0, gradient_checkpointing=False)
    plan = resolve_plan(gpu, Q7, BatchShape(micro_batch_size=8))
    assert not plan.fits
    assert any("learner needs" in n for n in plan.notes)
    assert any("leave no KV cache" in n for n in plan.notes)
    colo = GPUConfig(engine="vllm", vllm_placement="colocated", launch_server=True, num_gpus=1,
                     gpu_memory_utilization=0.5, gpu_memory_gib=80.0)
    plan = resolve_plan(colo, Q7, BatchShape(micro_batch_size=1))
    assert any("colocated: learner weights + AdamW states" in n for n in plan.notes)
    assert not plan.fits
    master = GPUConfig(engine="vllm", vllm_placement="colocated", launch_server=True, num_gpus=1,
                       precision="master", gpu_memory_gib=80.0)
    plan = resolve_plan(master, Q7, BatchShape(micro_batch_size=1))
    assert not plan.fits and any("beside a sleeping vLLM server" in n for n in plan.notes)


def test_colocated_utilisation_is_sized_for_the_learners_steady_state():
    """One 80 GB GPU, 7B pure bf16: between steps the learner keeps weights (2 B) and AdamW
    moments (4 B) per parameter; vLLM gets what is left after the learner's CUDA context and
    1 GiB of slack, as a hundredth-rounded share."""
    P = 7_615_616_512
    gpu = GPUConfig(engine="vllm", vllm_placement="colocated", launch_server=True, num_gpus=1,
                    gpu_memory_gib=80.0)
    plan = resolve_plan(gpu, Q7, BatchShape())
    steady = 6 * P / GIB                                        # 42.56 GiB
    expected = int(100 * (80 - steady - 1.0 - 1.0) / 80) / 100  # 0.44
    assert plan.vllm_memory_utilization == expected == 0.44
    rm, colo = plan.memory["rollout"], plan.memory["colocated"]
    assert rm["budget"] == pytest.approx(0.44 * 80)
    assert colo["generating"] == pytest.approx(steady + 1.0 + 0.44 * 80) and colo["generating"] <= 80
    assert colo["learner_step"] == pytest.approx(plan.memory["learner"]["total"] + 1.0 + 2.0)
    assert plan.fits and rm["max_len_sequences"] >= 64
    assert "--enable-sleep-mode" in plan.render() and "gpu_memory_utilization=0.44" in plan.render()
    # a server on GPUs of its own keeps the usual 0.9; an explicit value always wins
    own = GPUConfig(engine="vllm", launch_server=True, num_gpus=2, rollout_gpus=1)
    assert resolve_plan(own, Q7, BatchShape()).vllm_memory_utilization == 0.9
    fixed = GPUConfig(engine="vllm", vllm_placement="colocated", launch_server=True, num_gpus=1,
                      gpu_memory_utilization=0.3)
    assert resolve_plan(fixed, Q7, BatchShape()).vllm_memory_utilization == 0.3


@pytest.mark.parametrize("r, served", [(1, 1), (2, 8), (8, 8), (9, 16), (24, 32), (64, 64),
                                       (100, 128), (300, 320), (321, 512), (512, 512)])
def test_lora_rank_rounds_up_to_one_vllm_accepts(r, served):
    from selfplay_core.engines.gpu_config import vllm_lora_rank

    assert vllm_lora_rank(r) == served
    with pytest.raises(ValueError, match="exceeds vLLM's largest"):
        vllm_lora_rank(513)


@pytest.mark.parametrize("kw, batch, message", [
    (dict(tensor_parallel_size=8, rollout_gpus=8, num_gpus=9), BatchShape(),
     "does not divide Qwen2.5-Coder-7B's 28 attention heads"),
    (dict(max_model_len=1024, rollout_gpus=1, num_gpus=2), BatchShape(),
     "exceeds max_model_len=1024"),
])
def test_plan_refuses_settings_the_model_cannot_take(kw, batch, message):
    gpu = GPUConfig(engine="vllm", launch_server=True, learner_gpus=1, **kw)
    with pytest.raises(ValueError, match=message):
        resolve_plan(gpu, Q7, batch)


def test_example_gpu_configs_validate_and_plan():
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2] / "configs" / "gpu"
    files = sorted(root.glob("*.yaml"))
    assert len(files) >= 2
    for f in files:
        raw = yaml.safe_load(f.read_text())
        if "extends" in raw:  # a whole run config (the 8-GPU recipe): its own plan
            from selfplay_core.config import load_config

            plan = load_config(f).resolved_plan()
        else:
            plan = resolve_plan(GPUConfig(**raw["gpu"]), QWEN25_CODER[raw["model_shape"]],
                                BatchShape(**raw["batch"]))
        assert plan.fits, (f.name, plan.notes)
        assert "fits: yes" in plan.render()
