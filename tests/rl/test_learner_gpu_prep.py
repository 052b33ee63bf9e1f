"""The learner's GPU options (dtype, gradient checkpointing, LoRA) on CPU. What they change is
checked against the plain model on the same rollouts."""

import copy
import pytest
import torch

from selfplay_core.engines.gpu_config import GPUConfig, LoraSettings
from selfplay_core.rl.gpu import (is_checkpointing, make_accelerator, prepare_for, prepare_model,
                                  trainable_parameters)
from selfplay_core.rl.learner import Learner, LearnerConfig, Rollout

torch.set_num_threads(1)


@pytest.fixture()
def model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=32, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, max_position_embeddings=64,
                                        tie_word_embeddings=True))


ROLLOUTS = [Rollout([1, 2, 3], [4, 5, 6], [-3.0, -3.0, -3.0], +1.0),
            Rollout([1, 2], [7, 8, 9, 10], [-3.0] * 4, -0.5)]


def grads_after_one_step(model):
    learner = Learner(model, LearnerConfig(lr=1e-3, micro_batch_size=2, max_grad_norm=1e9))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    m = learner.step(ROLLOUTS)
    return m, {n: p.detach() - before[n] for n, p in model.named_parameters()}


def test_gradient_checkpointing_gives_the_same_update(model):
    plain = copy.deepcopy(model)
    ckpt = prepare_model(model, gradient_checkpointing=True)
    assert is_checkpointing(ckpt) and ckpt.config.use_cache is False
    m1, d1 = grads_after_one_step(plain)
    m2, d2 = grads_after_one_step(ckpt)
    assert m1["learner/loss"] == pytest.approx(m2["learner/loss"], rel=1e-5)
    for n in d1:
        assert torch.allclose(d1[n], d2[n], atol=1e-6), n


def test_lora_trains_only_the_adapters(model):
    peft_model = prepare_model(model, lora=LoraSettings(r=4, target_modules=("q_proj", "v_proj")))
    trainable = {n for n, p in peft_model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    learner = Learner(peft_model, LearnerConfig(lr=1e-2, micro_batch_size=2))
    n_opt = sum(p.numel() for g in learner.optimizer.param_groups for p in g["params"])
    assert n_opt == trainable_parameters(peft_model)  # no AdamW states for the frozen base
    before = {n: p.detach().clone() for n, p in peft_model.named_parameters()}
    for _ in range(2):  # lora_B starts at zero: the second step moves lora_A too
        learner.step(ROLLOUTS)
    changed = {n for n, p in peft_model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and changed <= trainable


def test_pure_bf16_casts_weights_and_still_steps(model):
    bf16 = prepare_model(model, dtype="bfloat16", precision="pure", gradient_checkpointing=True)
    assert {p.dtype for p in bf16.parameters()} == {torch.bfloat16}
    m, _ = grads_after_one_step(bf16)
    assert torch.isfinite(torch.tensor(m["learner/loss"])) and m["learner/grad_norm"] > 0


def test_prepare_for_follows_the_gpu_config(model):
    gpu = GPUConfig(device="cpu", engine="hf", dtype="float32", gradient_checkpointing=True,
                    lora=LoraSettings(r=2, target_modules=("q_proj",)))
    out = prepare_for(model, gpu)
    assert hasattr(out, "peft_config") and is_checkpointing(out)
    acc = make_accelerator(gpu)
    assert acc.mixed_precision == "no" and acc.device.type == "cpu"
