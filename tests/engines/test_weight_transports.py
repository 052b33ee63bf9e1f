"""PROTOCOL tests of the weight transports that need CUDA (IPC, NCCL) and of the logprob-mode
check, against the test double of the vLLM server (fake_vllm_server.py — not vLLM).

CUDA IPC and NCCL cannot run on this machine. What is checked instead: the IPC transport sends
vLLM 0.31/0.32's routes in their order with the payload vLLM's `IPCWeightTransferUpdateInfo`
validates, and the tensors its handles name are the learner's (merged, for peft) at transfer
time (the double rebuilds them from a handle registry instead of CUDA IPC); the NCCL transport
drives TRL's client (a recording stand-in, since TRL's client needs vLLM and CUDA) and sets the
CUDA device in the thread that broadcasts (`torch.cuda.set_device` is replaced by a recorder: a
mock for a fault that needs a second GPU to happen).
"""

import base64
import pickle
import threading
from contextlib import contextmanager

import pytest
import torch

from selfplay_core.engines.base import SamplingParams
from selfplay_core.engines.errors import WeightSyncError
from selfplay_core.engines.vllm import VLLMEngine, VLLMEngineConfig
from selfplay_core.engines.weight_sync import CudaIpcSync, NcclSync

from fake_vllm_server import FakeVLLM


@pytest.fixture()
def tiny_model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, tie_word_embeddings=True))


class Registry:
    """Stands for CUDA IPC: a handle names a tensor of this process; the double rebuilds it."""

    def __init__(self):
        self.tensors = {}

    def handle_of(self, t):
        key = len(self.tensors)
        self.tensors[key] = t
        return "GPU-00000000-test", (key,)

    def rebuild(self, gpu, args):
        assert gpu == "GPU-00000000-test"
        return self.tensors[args[0]]


def ipc_engine(server, registry, **kw):
    cfg = VLLMEngineConfig(base_url=server.url, weight_sync="ipc", **kw)
    return VLLMEngine(cfg, transport=CudaIpcSync(cfg, handle_of=registry.handle_of))


@pytest.fixture()
def ipc_server(fake_vllm):
    fake_vllm.weight_transfer = "ipc"
    fake_vllm.insecure_serialization = True
    return fake_vllm


# ---- CUDA IPC ---------------------------------------------------------------------------------------
def test_ipc_push_sends_vllms_routes_in_order_with_its_payload(ipc_server, tiny_model):
    reg = Registry()
    ipc_server.rebuild = reg.rebuild
    eng = ipc_engine(ipc_server, reg)
    info = eng.sync_weights(tiny_model)
    assert info["mode"] == "ipc" and info["version"] == 1
    assert ipc_server.paths() == ["/version", "/server_info", "/init_weight_transfer_engine",
                                  "/start_weight_update", "/update_weights",
                                  "/finish_weight_update", "/reset_prefix_cache"]
    assert ipc_server.transfer_init == {"packed": False}
    upd = ipc_server.weight_updates[0]
    # The tied output layer goes under its own name too (vLLM's reload would keep it stale).
    names = [n for n, _ in tiny_model.named_parameters()] + ["lm_head.weight"]
    assert upd["names"] == names and upd["during_update"]
    assert upd["dtype_names"] == ["float32"] * len(names)  # vLLM style, not "torch.float32"
    assert upd["shapes"] == [list(p.shape) for p in tiny_model.parameters()] + [
        list(tiny_model.lm_head.weight.shape)]
    # The wire form: base64(pickle(list of {gpu uuid: rebuild args})), nothing else.
    assert set(upd) - {"handles", "tensors", "during_update"} == {
        "names", "dtype_names", "shapes", "ipc_handles_pickled"}
    assert pickle.loads(base64.b64decode(upd["ipc_handles_pickled"])) == upd["handles"]
    for (name, p) in list(tiny_model.named_parameters()) + [("lm_head.weight", tiny_model.lm_head.weight)]:
        assert torch.equal(upd["tensors"][name], p.data)
    # The handles are the learner's own storage, not copies.
    params = list(tiny_model.parameters()) + [tiny_model.lm_head.weight]
    assert all(reg.tensors[i].data_ptr() == p.data_ptr() for i, p in enumerate(params))
    eng.sync_weights(tiny_model)  # the handshake happens once per server
    assert ipc_server.paths().count("/init_weight_transfer_engine") == 1
    assert ipc_server.paths()[-4:] == ["/start_weight_update", "/update_weights",
                                       "/finish_weight_update", "/reset_prefix_cache"]


def test_ipc_sends_the_merged_peft_weights_and_unmerges_after(ipc_server, tiny_model):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_model, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]))
    q = model.base_model.model.model.layers[0].self_attn.q_proj
    with torch.no_grad():
        q.lora_B["default"].weight.fill_(0.25)
    base = q.base_layer.weight.detach().clone()
    expected = base + (q.lora_B["default"].weight @ q.lora_A["default"].weight) * q.scaling["default"]
    reg = Registry()
    ipc_server.rebuild = reg.rebuild  # the double clones each tensor when it arrives
    ipc_engine(ipc_server, reg).sync_weights(model)
    got = ipc_server.weight_updates[0]["tensors"]["model.layers.0.self_attn.q_proj.weight"]
    assert torch.allclose(got, expected, atol=1e-6)
    assert not any("lora_" in n or "base_layer" in n for n in ipc_server.weight_updates[0]["names"])
    assert torch.allclose(q.base_layer.weight, base, atol=1e-6)  # unmerged after the transfer


@pytest.mark.parametrize("setup, message", [
    (dict(weight_transfer=None), "no weight-transfer engine.*backend.*ipc"),
    (dict(weight_transfer="nccl"), "backend 'nccl'; ipc needs"),
    (dict(insecure_serialization=False), "VLLM_ALLOW_INSECURE_SERIALIZATION=1"),
    (dict(version="0.30.0"), "vLLM 0.30.0; the ipc weight transfer needs vLLM >= 0.31"),
])
def test_ipc_names_the_missing_server_setting_before_transferring(ipc_server, tiny_model, setup,
                                                                  message):
    for k, v in setup.items():
        setattr(ipc_server, k, v)
    with pytest.raises(WeightSyncError, match=message):
        ipc_engine(ipc_server, Registry()).sync_weights(tiny_model)
    assert "/update_weights" not in ipc_server.paths()


def test_ipc_refuses_weights_that_are_not_on_a_gpu(ipc_server, tiny_model):
    eng = VLLMEngine(VLLMEngineConfig(base_url=ipc_server.url, weight_sync="ipc"))
    with pytest.raises(WeightSyncError, match="not on CUDA"):
        eng.sync_weights(tiny_model)


# ---- NCCL through TRL's client -------------------------------------------------------------------
class FakeTRLClient:
    """Records what the NCCL transport asks of TRL's VLLMClient (needs vLLM + CUDA for real)."""

    made: list = []

    def __init__(self, base_url, group_port, connection_timeout):
        self.base_url, self.group_port = base_url, group_port
        self.calls = []
        FakeTRLClient.made.append(self)

    def init_communicator(self, device):
        self.calls.append(("init", device, DEVICES.get(threading.get_ident())))

    @contextmanager
    def weight_update(self):
        self.calls.append(("start",))
        yield
        self.calls.append(("finish",))

    def update_named_params(self, meta, named):
        pairs = [(n, t.clone()) for n, t in named]
        self.calls.append(("update", meta, pairs, DEVICES.get(threading.get_ident())))

    def close_communicator(self):
        self.calls.append(("close",))


DEVICES: dict = {}


@pytest.fixture()
def recorded_set_device(monkeypatch):
    DEVICES.clear()
    FakeTRLClient.made = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: DEVICES.__setitem__(threading.get_ident(), d))
    return DEVICES


def test_nccl_sets_the_cuda_device_in_the_thread_that_broadcasts(tmp_path, tiny_model,
                                                                 recorded_set_device):
    servers = [FakeVLLM(model="m").start() for _ in range(2)]
    try:
        cfg = VLLMEngineConfig(base_url=[s.url for s in servers], weight_sync="nccl",
                               nccl_device=3, nccl_group_port=52000)
        eng = VLLMEngine(cfg, transport=NcclSync(cfg, client_factory=FakeTRLClient))
        eng.sync_weights(tiny_model)
        eng.sync_weights(tiny_model)
        eng.close()
    finally:
        for s in servers:
            s.stop()
    a, b = FakeTRLClient.made
    assert (a.base_url, a.group_port, b.base_url, b.group_port) == (
        servers[0].url, 52000, servers[1].url, 52001)  # one group per data-parallel server
    for client in (a, b):
        kinds = [c[0] for c in client.calls]
        assert kinds == ["init", "start", "update", "finish", "start", "update", "finish", "close"]
        assert client.calls[0][1:] == (3, 3)
        for call in client.calls:
            if call[0] == "update":
                _, meta, pairs, device = call
                assert device == 3  # set in this (the pushing) thread, not only at init
                assert [m[0] for m in meta] == [n for n, _ in tiny_model.named_parameters()] + [
                    "lm_head.weight"]
                assert meta[0][1] == "float32" and len(pairs) == len(meta)
    for s in servers:  # then each server's prefix cache
        assert s.paths().count("/reset_prefix_cache") == 2


# ---- the logprob convention ------------------------------------------------------------------------
def test_logprob_mode_comes_from_server_info(fake_vllm):
    eng = VLLMEngine(VLLMEngineConfig(base_url=fake_vllm.url))
    assert eng.logprobs_mode() == "processed_logprobs"
    fake_vllm.logprobs_mode = "raw_logprobs"
    assert VLLMEngine(VLLMEngineConfig(base_url=fake_vllm.url)).logprobs_mode() == "raw_logprobs"
    assert "/v1/completions" not in fake_vllm.paths()


@pytest.mark.parametrize("mode", ["processed_logprobs", "raw_logprobs"])
def test_logprob_mode_is_measured_where_the_server_does_not_say(fake_vllm, mode):
    fake_vllm.dev_mode = False
    fake_vllm.logprobs_mode = mode
    eng = VLLMEngine(VLLMEngineConfig(base_url=fake_vllm.url))
    assert eng.logprobs_mode() == mode
    temps = [b["temperature"] for _, p, b in fake_vllm.requests if p == "/v1/completions"]
    assert temps == [1.0, 0.5]
    eng.generate(["x"], 1, SamplingParams(max_new_tokens=2))  # the probe left nothing behind


# ---- which transport a run takes ------------------------------------------------------------------
@pytest.mark.parametrize("want, kw, mode", [
    ("auto", dict(placement="colocated", cuda=True), "ipc"),
    ("auto", dict(placement="colocated", cuda=True, peft=True, trl_vllm=True), "ipc"),
    ("auto", dict(cuda=True, trl_vllm=True), "nccl"),
    ("auto", dict(cuda=True, trl_vllm=True, peft=True), "nccl"),
    ("auto", dict(cuda=True, peft=True), "lora"),
    ("auto", dict(cuda=True), "filesystem"),
    ("auto", dict(trl_vllm=True), "filesystem"),          # no CUDA: no NCCL
    ("auto", dict(placement="colocated"), "filesystem"),  # no CUDA: no IPC
    ("filesystem", dict(placement="colocated", cuda=True), "filesystem"),
    ("nccl", dict(), "nccl"),
])
def test_the_transport_choice_table(want, kw, mode):
    from selfplay_core.engines.weight_sync import choose_transport

    got, why = choose_transport(want, **kw)
    assert got == mode and why


def test_the_gpu_plan_names_the_transport_and_why():
    from selfplay_core.engines.gpu_config import QWEN25_CODER, BatchShape, GPUConfig, resolve_plan

    colo = GPUConfig(engine="vllm", vllm_placement="colocated", launch_server=True, num_gpus=1,
                     learner_gpus=1, gpu_memory_utilization=0.3)
    notes = resolve_plan(colo, QWEN25_CODER["7b"], BatchShape(micro_batch_size=1)).notes
    assert any(n.startswith("weight sync: ipc — the server shares the learner's GPU") for n in notes)
    server = GPUConfig(engine="vllm", launch_server=True, num_gpus=2, rollout_gpus=1)
    notes = resolve_plan(server, QWEN25_CODER["7b"], BatchShape(micro_batch_size=1)).notes
    # In this (Prefect) environment trl imports but vllm does not: filesystem, ~14 GiB a step.
    line = next(n for n in notes if n.startswith("weight sync:"))
    assert line.startswith("weight sync: filesystem") and "14.2 GiB written and re-read" in line
