"""The served weights of a LoRA learner (issue 15, failure 7: the PEFT merge).

Merged tensors are W + s B A, computed out of place one at a time: equal to peft's own
merge_and_unload(); the frozen bf16 base is bit-identical after any number of syncs (peft's
merge_adapter/unmerge_adapter round trip in bf16 is not, so every sync used to move it); and a
streaming consumer (the NCCL push) never holds more than one merged tensor (it used to clone all
of them at once).
"""

import copy
import gc
import weakref

import pytest
import torch

from selfplay_core.engines.gpu_config import LoraSettings
from selfplay_core.engines.vllm import VLLMEngine, VLLMEngineConfig, iter_sync_tensors
from selfplay_core.rl.gpu import prepare_model
from selfplay_core.engines.lora import merged_tensor_specs

torch.set_num_threads(1)


def lora_model(dtype="float32", seed=0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    base = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=64, intermediate_size=128,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, tie_word_embeddings=False))
    model = prepare_model(base, dtype=dtype, precision="pure",
                          lora=LoraSettings(r=8, alpha=16, target_modules=("q_proj", "v_proj", "down_proj")))
    with torch.no_grad():  # lora_B starts at zero; give the adapters something to merge
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    return model


def test_merged_tensors_equal_peft_merge_and_unload():
    model = lora_model()
    ours = dict(iter_sync_tensors(model))
    theirs = copy.deepcopy(model).merge_and_unload().state_dict()
    assert set(ours) == set(theirs)
    for name, t in theirs.items():
        assert torch.allclose(ours[name], t, atol=1e-6), name
    assert [n for n, *_ in merged_tensor_specs(model)] == list(ours)
    assert [(d, s) for _, d, s in merged_tensor_specs(model)] == [(t.dtype, tuple(t.shape)) for t in ours.values()]


def test_syncing_leaves_the_frozen_bf16_base_bit_identical():
    model = lora_model("bfloat16")
    base = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    for _ in range(3):
        for _ in iter_sync_tensors(model):
            pass
    after = {n: p.detach() for n, p in model.named_parameters() if "lora_" not in n}
    changed = [n for n in base if not torch.equal(base[n], after[n])]
    assert changed == []


class StreamingClient:
    """Stands in for TRL's VLLMClient (NCCL cannot run on a CPU machine): consumes the tensor
    iterator one item at a time, as its broadcast loop does, and records how many tensors that
    are not the model's own parameters (merged or cloned copies) were alive at each arrival."""

    def __init__(self, model):
        self.own = {p.data_ptr() for p in model.parameters()}
        self.alive_max = 0
        self.names = []
        self.meta = None

    def weight_update(self):
        from contextlib import nullcontext
        return nullcontext()

    def update_named_params(self, meta, tensors):
        self.meta = meta
        copies = []
        for name, t in tensors:
            self.names.append(name)
            if t.data_ptr() not in self.own:
                copies.append(weakref.ref(t))
            del t  # "sent": the consumer keeps nothing
            gc.collect()
            self.alive_max = max(self.alive_max, sum(r() is not None for r in copies))


def test_nccl_push_of_a_lora_model_holds_one_merged_tensor_at_a_time(monkeypatch):
    from selfplay_core.engines.weight_sync import NcclSync

    model = lora_model()
    client = StreamingClient(model)
    client.init_communicator = lambda device: None
    cfg = VLLMEngineConfig(base_url="http://127.0.0.1:9", weight_sync="nccl")
    transport = NcclSync(cfg, client_factory=lambda **kw: client)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: None)  # no GPU here (stand-in)
    info = transport.push(model, None, [VLLMEngine(cfg).http])
    merged = [n for n in client.names if n.endswith(("q_proj.weight", "v_proj.weight", "down_proj.weight"))]
    assert len(merged) == 6 and client.alive_max <= 1
    assert [m[0] for m in client.meta] == client.names
    expected = sum(t.numel() * t.element_size() for _, t in iter_sync_tensors(model))
    assert info["bytes"] == expected
