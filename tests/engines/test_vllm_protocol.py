"""PROTOCOL tests of `VLLMEngine` against a test double of the vLLM server (fake_vllm_server.py).

They check what the engine sends and how it reads answers and failures; they do not run vLLM.
What a real server does with the same requests is tested in test_vllm_real.py (vLLM's CPU build):
seeding, logprob agreement, filesystem sync, sleep/wake. What cannot run on a CPU machine is
tested here only: CUDA IPC and NCCL weight transfers, and the GPU build's per-prompt seeds.
"""

import socket
import time
from pathlib import Path

import pytest
import torch

from selfplay_core.engines.base import Engine, SamplingParams
from selfplay_core.engines.errors import (EngineError, EngineTimeout, MalformedResponse,
                                          ServerHTTPError, ServerUnreachable, WeightSyncError)
from selfplay_core.engines.vllm import VLLMEngine, VLLMEngineConfig, iter_sync_tensors, prompt_seed

from fake_vllm_server import FakeVLLM, logprob_of


def engine_for(server, **kw) -> VLLMEngine:
    return VLLMEngine(VLLMEngineConfig(base_url=server.url, **kw))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def completion_bodies(server):
    return [b for _, p, b in server.requests if p == "/v1/completions"]


# ---- health --------------------------------------------------------------------------------------
def test_engine_implements_the_engine_interface(fake_vllm):
    assert isinstance(engine_for(fake_vllm), Engine)


def test_check_health_reports_the_served_model(fake_vllm):
    info = engine_for(fake_vllm).check_health()
    assert info == {"url": fake_vllm.url, "model": fake_vllm.model, "models": [fake_vllm.model],
                    "servers": [fake_vllm.url]}
    assert fake_vllm.paths() == ["/health", "/v1/models"]


def test_check_health_rejects_a_server_serving_another_model(fake_vllm):
    with pytest.raises(EngineError, match="not 'Qwen/other'"):
        engine_for(fake_vllm, model="Qwen/other").check_health()


def test_connection_refused_is_one_clear_error():
    eng = VLLMEngine(VLLMEngineConfig(base_url=f"http://127.0.0.1:{free_port()}"))
    with pytest.raises(ServerUnreachable, match="unreachable.*is it running"):
        eng.check_health()


def test_wait_until_healthy_times_out_with_the_last_error():
    eng = VLLMEngine(VLLMEngineConfig(base_url=f"http://127.0.0.1:{free_port()}"))
    with pytest.raises(EngineTimeout, match="not healthy after 0.5 s; last error: .*unreachable"):
        eng.wait_until_healthy(timeout_s=0.5, poll_s=0.1)


# ---- generation ----------------------------------------------------------------------------------
def test_generate_sends_n_logprobs_stop_seed_token_ids_and_disables_other_sampling(fake_vllm):
    eng = engine_for(fake_vllm)
    eng.generate(["def f(x):"], 3, SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=12,
                                                  stop=("\n",), seed=5))
    body = completion_bodies(fake_vllm)[0]
    # top_k, min_p and the penalties are sent disabled: left out, vLLM would take them from the
    # model's generation_config.json (Qwen2.5-Coder-Instruct: top_k 20, repetition_penalty 1.05).
    assert body == {"model": fake_vllm.model, "prompt": ["def f(x):"], "n": 3, "max_tokens": 12,
                    "temperature": 0.7, "top_p": 0.9, "top_k": -1, "min_p": 0.0,
                    "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
                    "logprobs": 0, "return_token_ids": True, "return_tokens_as_token_ids": True,
                    "stop": ["\n"], "seed": prompt_seed(5, 0)}


def test_generate_groups_n_samples_per_prompt_in_order_with_ids_and_logprobs(fake_vllm):
    out = engine_for(fake_vllm).generate(["a", "bb", "ccc"], 4,
                                         SamplingParams(max_new_tokens=8, seed=1))
    assert [len(g) for g in out] == [4, 4, 4]
    for prompt, group in zip(["a", "bb", "ccc"], out):
        for c in group:
            assert c.prompt_token_ids == [ord(ch) for ch in prompt]
            assert c.token_ids == [ord(ch) for ch in c.text]  # the double: 1 char = 1 token
            assert c.logprobs == [logprob_of(t) for t in c.token_ids]
            assert c.finish_reason == "length" and len(c.token_ids) == 8
        assert len({c.text for c in group}) > 1  # n distinct samples, not one repeated
    # The server answers choices out of order; the engine sorts them by index (prompt-major).
    again = engine_for(fake_vllm).generate(["a", "bb", "ccc"], 4,
                                           SamplingParams(max_new_tokens=8, seed=1))
    assert [[c.text for c in g] for g in again] == [[c.text for c in g] for g in out]


def test_stop_string_ends_the_text_and_sets_finish_reason(fake_vllm):
    out = engine_for(fake_vllm).generate(["p%d" % i for i in range(6)], 2,
                                         SamplingParams(max_new_tokens=40, stop=("a", "b"), seed=0))
    stopped = [c for g in out for c in g if c.finish_reason == "stop"]
    assert stopped, "40 characters from the double always hit 'a' or 'b' somewhere"
    for c in stopped:
        assert "a" not in c.text and "b" not in c.text
        # the ids include the stop token (as vLLM's do); logprobs stay aligned with the ids
        assert len(c.logprobs) == len(c.token_ids) == len(c.text) + 1


def test_greedy_samples_are_identical(fake_vllm):
    out = engine_for(fake_vllm).generate(["x"], 3, SamplingParams(temperature=0.0, max_new_tokens=6))
    assert len({c.text for c in out[0]}) == 1


def test_unseeded_prompts_are_split_into_concurrent_requests_and_reassembled(fake_vllm):
    eng = engine_for(fake_vllm, max_prompts_per_request=3, max_concurrent_requests=2)
    prompts = [f"prompt {i}" for i in range(8)]
    out = eng.generate(prompts, 2, SamplingParams(max_new_tokens=4))
    bodies = completion_bodies(fake_vllm)
    assert sorted(len(b["prompt"]) for b in bodies) == [2, 3, 3]
    assert all("seed" not in b for b in bodies)
    assert [g[0].prompt_token_ids for g in out] == [[ord(c) for c in p] for p in prompts]


def test_per_prompt_seeds_never_let_identical_prompts_share_a_stream(fake_vllm):
    """On a GPU server (the double reports device cuda) a seeded call sends one request per
    prompt with its own seed; vLLM seeds sample j with seed + j, so prompts' seed ranges must not
    overlap within a call or between calls, or identical prompts would repeat each other."""
    eng = engine_for(fake_vllm, max_prompts_per_request=3)
    assert eng.seed_mode == "per_prompt"
    same = ["def f(x):"] * 6
    first = eng.generate(same, 4, SamplingParams(max_new_tokens=10, seed=100))
    second = eng.generate(same, 4, SamplingParams(max_new_tokens=10, seed=101))  # next call
    bodies = completion_bodies(fake_vllm)
    assert [len(b["prompt"]) for b in bodies] == [1] * 12
    streams = [s for b in bodies for s in range(b["seed"], b["seed"] + 4)]
    assert len(set(streams)) == len(streams) == 48
    texts = [c.text for g in first + second for c in g]
    assert len(set(texts)) == 48  # no two samples of the identical prompt coincide
    # The same call seed reproduces the same samples (what seeding is for).
    again = eng.generate(same, 4, SamplingParams(max_new_tokens=10, seed=100))
    assert [[c.text for c in g] for g in again] == [[c.text for c in g] for g in first]


def test_a_cpu_server_gets_no_seed(fake_vllm):
    """vLLM's CPU build dies on a seeded request prefilled in chunks ("CPU Generator does not use
    offset"): the engine sends none there (the real server: test_vllm_real.py)."""
    fake_vllm.device = "cpu"
    eng = engine_for(fake_vllm)
    out = eng.generate(["same"] * 4, 2, SamplingParams(max_new_tokens=10, seed=3))
    bodies = completion_bodies(fake_vllm)
    assert eng.seed_mode == "none" and len(bodies) == 1 and "seed" not in bodies[0]
    assert len({c.text for g in out for c in g}) == 8  # unseeded samples still differ
    assert ("/server_info", {"config_format": ["json"]}) in fake_vllm.calls()


def test_a_server_that_does_not_say_its_device_gets_no_seed(fake_vllm):
    fake_vllm.dev_mode = False  # no /server_info: the device is unknown, seeds could kill it
    eng = engine_for(fake_vllm)
    eng.generate(["x"], 2, SamplingParams(max_new_tokens=3, seed=3))
    assert eng.seed_mode == "none" and "seed" not in completion_bodies(fake_vllm)[0]


def test_seed_mode_can_be_forced(fake_vllm):
    fake_vllm.device = "cpu"
    eng = engine_for(fake_vllm, seed_mode="per_prompt")
    eng.generate(["a", "b"], 1, SamplingParams(max_new_tokens=3, seed=9))
    assert sorted(b["seed"] for b in completion_bodies(fake_vllm)) == sorted(
        [prompt_seed(9, 0), prompt_seed(9, 1)])


def test_empty_prompt_list_sends_nothing(fake_vllm):
    assert engine_for(fake_vllm).generate([], 4, SamplingParams()) == []
    assert completion_bodies(fake_vllm) == []


# ---- failures ------------------------------------------------------------------------------------
def test_http_500_raises_with_the_servers_message(fake_vllm):
    eng = engine_for(fake_vllm, model=fake_vllm.model)
    fake_vllm.mode = "error500"
    with pytest.raises(ServerHTTPError, match=r"/v1/completions -> HTTP 500: CUDA out of memory") as e:
        eng.generate(["x"], 1, SamplingParams())
    assert e.value.status == 500


def test_unknown_model_404_carries_the_servers_message(fake_vllm):
    eng = engine_for(fake_vllm, model="ghost")  # skip the health check on purpose
    with pytest.raises(ServerHTTPError, match="HTTP 404: The model `ghost` does not exist"):
        eng.generate(["x"], 1, SamplingParams())


@pytest.mark.timeout(120)  # the fake server hangs for good: a missing timeout fails by this one
def test_a_server_that_never_answers_times_out(fake_vllm):
    eng = engine_for(fake_vllm, model=fake_vllm.model, request_timeout_s=0.5)
    fake_vllm.mode = "hang"
    with pytest.raises(EngineTimeout, match=r"/v1/completions: no complete answer within 0.5 s"):
        eng.generate(["x"], 1, SamplingParams())


def test_health_check_times_out_on_a_hung_server(fake_vllm):
    fake_vllm.mode = "hang"
    with pytest.raises(EngineTimeout, match="/health"):
        engine_for(fake_vllm, health_timeout_s=0.3).check_health()


@pytest.mark.parametrize("mode, message", [
    ("malformed", "answer is not JSON"),
    ("wrong_count", "expected 2 prompts x n=2 = 4 choices, got 3"),
    ("nan_logprob", "token_logprobs must be finite numbers"),
    ("no_token_ids", "no integer 'token_ids'"),
])
def test_malformed_answers_raise_one_clear_error(fake_vllm, mode, message):
    eng = engine_for(fake_vllm, model=fake_vllm.model)
    fake_vllm.mode = mode
    with pytest.raises(MalformedResponse, match=message):
        eng.generate(["x", "y"], 2, SamplingParams(max_new_tokens=3))


def test_bad_n_is_refused_before_any_request(fake_vllm):
    with pytest.raises(ValueError, match="n must be at least 1"):
        engine_for(fake_vllm).generate(["x"], 0, SamplingParams())


# ---- weight sync ---------------------------------------------------------------------------------
@pytest.fixture()
def tiny_model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, tie_word_embeddings=True))


def test_filesystem_sync_writes_a_hf_folder_then_asks_the_server_to_reload(fake_vllm, tiny_model):
    from transformers import AutoModelForCausalLM

    eng = engine_for(fake_vllm, weight_sync="filesystem", served_model_dir=fake_vllm.served_dir)
    with torch.no_grad():
        tiny_model.model.norm.weight.fill_(3.0)
    info = eng.sync_weights(tiny_model)
    assert info["mode"] == "filesystem" and info["version"] == 1 and info["bytes"] > 0
    assert fake_vllm.paths()[-2:] == ["/collective_rpc", "/reset_prefix_cache"]
    # At reload time the folder held a complete HF checkpoint (and no staging leftovers).
    assert {"config.json", "model.safetensors"} <= set(fake_vllm.reloads[0]["files"])
    assert not any(f.startswith(".") for f in fake_vllm.reloads[0]["files"])
    reloaded = AutoModelForCausalLM.from_pretrained(fake_vllm.served_dir)
    assert torch.equal(reloaded.model.norm.weight, torch.full((32,), 3.0))
    # A second sync replaces the weights in place.
    with torch.no_grad():
        tiny_model.model.norm.weight.fill_(-1.0)
    assert eng.sync_weights(tiny_model)["version"] == 2
    reloaded = AutoModelForCausalLM.from_pretrained(fake_vllm.served_dir)
    assert torch.equal(reloaded.model.norm.weight, torch.full((32,), -1.0))
    assert len(fake_vllm.reloads) == 2


def test_served_folders_are_written_untied_with_the_same_function(fake_vllm, tiny_model):
    """vLLM's in-place reload gives a tied embedding a new parameter and leaves lm_head on the old
    one (measured on vLLM's CPU build: test_vllm_real.py would fail): served folders are untied."""
    import json

    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from selfplay_core.engines.weight_sync import served_folder_problem

    assert tiny_model.lm_head.weight is tiny_model.model.embed_tokens.weight
    engine_for(fake_vllm, weight_sync="filesystem",
               served_model_dir=fake_vllm.served_dir).sync_weights(tiny_model)
    folder = fake_vllm.served_dir
    assert json.loads((Path(folder) / "config.json").read_text())["tie_word_embeddings"] is False
    tensors = load_file(str(Path(folder) / "model.safetensors"))
    assert torch.equal(tensors["lm_head.weight"], tensors["model.embed_tokens.weight"])
    reloaded = AutoModelForCausalLM.from_pretrained(folder)
    assert reloaded.lm_head.weight is not reloaded.model.embed_tokens.weight
    ids = torch.tensor([[1, 5, 9, 3]])
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, tiny_model.eval()(ids).logits)
    assert served_folder_problem(folder) is None
    tiny_model.save_pretrained(str(Path(folder).parent / "tied"))
    assert "ties its input and output embeddings" in served_folder_problem(Path(folder).parent / "tied")


def test_filesystem_sync_without_dev_mode_says_how_to_fix_it(fake_vllm, tiny_model):
    fake_vllm.dev_mode = False
    eng = engine_for(fake_vllm, weight_sync="filesystem", served_model_dir=fake_vllm.served_dir)
    with pytest.raises(WeightSyncError, match="no /collective_rpc endpoint.*VLLM_SERVER_DEV_MODE=1"):
        eng.sync_weights(tiny_model)


def test_a_refused_prefix_cache_reset_fails_the_sync(fake_vllm, tiny_model):
    eng = engine_for(fake_vllm, weight_sync="filesystem", served_model_dir=fake_vllm.served_dir)
    fake_vllm.mode = "reset_refused"
    with pytest.raises(WeightSyncError, match="did not reset its prefix cache"):
        eng.sync_weights(tiny_model)


def test_filesystem_sync_needs_the_served_folder(fake_vllm, tiny_model):
    with pytest.raises(WeightSyncError, match="needs served_model_dir"):
        engine_for(fake_vllm, weight_sync="filesystem").sync_weights(tiny_model)


def test_filesystem_sync_times_out_when_the_reload_never_returns(fake_vllm, tiny_model):
    eng = engine_for(fake_vllm, weight_sync="filesystem", served_model_dir=fake_vllm.served_dir,
                     sync_timeout_s=0.5)
    fake_vllm.mode = "hang"
    with pytest.raises(EngineTimeout, match="/collective_rpc"):
        eng.sync_weights(tiny_model)


def test_lora_sync_saves_an_adapter_loads_it_in_place_and_generates_with_it(fake_vllm, tiny_model,
                                                                            tmp_path):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"]))
    eng = engine_for(fake_vllm, weight_sync="lora", lora_dir=str(tmp_path / "adapters"),
                     keep_lora_versions=1)
    for _ in range(2):
        eng.sync_weights(model)
    loads = [b for _, p, b in fake_vllm.requests if p == "/v1/load_lora_adapter"]
    assert [b["load_inplace"] for b in loads] == [True, True]
    assert loads[1]["lora_path"].endswith("v000002") and loads[1]["lora_name"] == "policy"
    assert sorted(p.name for p in (tmp_path / "adapters").iterdir()) == ["v000002"]  # pruned
    eng.generate(["x"], 1, SamplingParams(max_new_tokens=2))
    assert completion_bodies(fake_vllm)[-1]["model"] == "policy"


def test_peft_tensors_are_merged_and_named_like_the_base_checkpoint(tiny_model):
    from peft import LoraConfig, get_peft_model

    base_names = {n for n, _ in tiny_model.named_parameters()}
    model = get_peft_model(tiny_model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    lora_b = model.base_model.model.model.layers[0].self_attn.q_proj.lora_B["default"].weight
    with torch.no_grad():
        lora_b.fill_(0.5)  # make the adapter non-zero so merging changes q_proj
    before = model.base_model.model.model.layers[0].self_attn.q_proj.base_layer.weight.clone()
    merged = dict((n, t.clone()) for n, t in iter_sync_tensors(model))
    assert set(merged) == base_names | {"lm_head.weight"}  # tied: the output layer by name too
    assert not torch.equal(merged["model.layers.0.self_attn.q_proj.weight"], before)
    after = model.base_model.model.model.layers[0].self_attn.q_proj.base_layer.weight
    assert torch.allclose(after, before, atol=1e-6)  # unmerged again (up to rounding)


def test_sync_with_weight_sync_none_refuses(fake_vllm, tiny_model):
    with pytest.raises(WeightSyncError, match="frozen model"):
        engine_for(fake_vllm, weight_sync="none").sync_weights(tiny_model)


def test_nccl_sync_without_trl_vllm_names_the_fix(fake_vllm, tiny_model, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_trl(name, *a, **k):
        if name.startswith("trl"):
            raise ImportError("No module named 'trl'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_trl)
    with pytest.raises(WeightSyncError, match="needs trl and vllm.*weight_sync='filesystem'"):
        engine_for(fake_vllm, weight_sync="nccl").sync_weights(tiny_model)


def test_auto_sync_falls_back_to_the_filesystem_without_vllm(fake_vllm, tiny_model):
    eng = engine_for(fake_vllm, served_model_dir=fake_vllm.served_dir)
    assert eng.sync_weights(tiny_model)["mode"] == "filesystem"  # no vllm/CUDA in this process


def test_sleep_and_wake_use_the_dev_endpoints_with_repeated_tags(fake_vllm):
    eng = engine_for(fake_vllm)
    eng.sleep(level=1)
    assert eng.is_sleeping()
    eng.wake_up(["weights"])
    assert eng.is_sleeping() and fake_vllm.asleep == {"kv_cache"}
    eng.wake_up(["kv_cache"])
    assert not eng.is_sleeping()
    assert fake_vllm.calls()[0] == ("/sleep", {"level": ["1"]})
    assert ("/wake_up", {"tags": ["weights"]}) in fake_vllm.calls()
    eng.sleep(1)
    eng.wake_up(["weights", "kv_cache"])  # two tags: two repeated keys, both woken
    assert fake_vllm.calls()[-1] == ("/wake_up", {"tags": ["weights", "kv_cache"]})
    assert not fake_vllm.sleeping


def test_colocated_update_sleeps_then_wakes_weights_syncs_then_wakes_the_kv_cache(fake_vllm,
                                                                                  tiny_model):
    eng = engine_for(fake_vllm, weight_sync="filesystem", served_model_dir=fake_vllm.served_dir)
    seen = []
    t0 = time.monotonic()
    with eng.colocated_update(tiny_model, after_step=lambda: seen.append(fake_vllm.paths()[-1])) as box:
        assert fake_vllm.asleep == {"weights", "kv_cache"}  # the learner steps while it sleeps
    whole = time.monotonic() - t0
    assert seen == ["/sleep"]  # after_step (empty_cache) runs before anything wakes
    calls = fake_vllm.calls()
    assert calls == [("/sleep", {"level": ["1"]}), ("/wake_up", {"tags": ["weights"]}),
                     ("/collective_rpc", {}), ("/reset_prefix_cache", {}),
                     ("/wake_up", {"tags": ["kv_cache"]}), ("/is_sleeping", {})]
    assert box["sync"]["mode"] == "filesystem" and not fake_vllm.sleeping
    # Each wake is one HTTP round trip inside the update: positive, and both within its span.
    woke, kv = box["sync"]["wake_weights_s"], box["sync"]["wake_kv_cache_s"]
    assert woke > 0 and kv > 0 and woke + kv <= whole


def test_a_failed_step_wakes_the_server_with_its_old_weights(fake_vllm, tiny_model):
    eng = engine_for(fake_vllm, weight_sync="filesystem", served_model_dir=fake_vllm.served_dir)
    with pytest.raises(RuntimeError, match="out of memory"):
        with eng.colocated_update(tiny_model):
            raise RuntimeError("CUDA out of memory (in the learner)")
    assert not fake_vllm.sleeping and fake_vllm.reloads == []


# ---- data-parallel servers ------------------------------------------------------------------------
@pytest.fixture()
def two_fakes(tmp_path):
    served = tmp_path / "dp-served"
    served.mkdir()
    servers = [FakeVLLM(model=str(served), served_dir=str(served)).start() for _ in range(2)]
    yield servers
    for s in servers:
        s.stop()


def test_prompts_are_sharded_across_data_parallel_servers_in_order(two_fakes):
    a, b = two_fakes
    eng = VLLMEngine(VLLMEngineConfig(base_url=[a.url, b.url], max_prompts_per_request=2))
    assert eng.check_health()["servers"] == [a.url, b.url]
    prompts = [f"p{i}" for i in range(7)]
    out = eng.generate(prompts, 2, SamplingParams(max_new_tokens=3))
    got_a = [p for body in completion_bodies(a) for p in body["prompt"]]
    got_b = [p for body in completion_bodies(b) for p in body["prompt"]]
    # contiguous, near-equal shards (requests of one server may arrive in any order)
    assert sorted(got_a) == prompts[:4] and sorted(got_b) == prompts[4:]
    assert [g[0].prompt_token_ids for g in out] == [[ord(c) for c in p] for p in prompts]


def test_per_prompt_seeds_do_not_depend_on_the_number_of_servers(two_fakes, fake_vllm):
    a, b = two_fakes
    dp = VLLMEngine(VLLMEngineConfig(base_url=[a.url, b.url]))
    dp.generate(["x"] * 5, 1, SamplingParams(max_new_tokens=3, seed=7))
    engine_for(fake_vllm).generate(["x"] * 5, 1, SamplingParams(max_new_tokens=3, seed=7))
    dp_seeds = sorted(body["seed"] for s in (a, b) for body in completion_bodies(s))
    assert dp_seeds == sorted(body["seed"] for body in completion_bodies(fake_vllm))


def test_weights_are_written_once_and_reloaded_on_every_server(two_fakes, tiny_model):
    a, b = two_fakes
    eng = VLLMEngine(VLLMEngineConfig(base_url=[a.url, b.url], weight_sync="filesystem",
                                      served_model_dir=a.served_dir))
    eng.sync_weights(tiny_model)
    for s in (a, b):
        assert s.paths()[-2:] == ["/collective_rpc", "/reset_prefix_cache"]
        assert {"config.json", "model.safetensors"} <= set(s.reloads[0]["files"])
    assert a.reloads[0]["weights_sha256"] == b.reloads[0]["weights_sha256"]


def test_data_parallel_servers_must_serve_the_same_model(tmp_path):
    a = FakeVLLM(model="one").start()
    b = FakeVLLM(model="two").start()
    try:
        with pytest.raises(EngineError, match="serves .*two.*not 'one'.*same model"):
            VLLMEngine(VLLMEngineConfig(base_url=[a.url, b.url])).check_health()
    finally:
        a.stop()
        b.stop()


def test_a_dead_data_parallel_server_is_one_clear_error(two_fakes):
    a, b = two_fakes
    url = f"http://127.0.0.1:{free_port()}"
    eng = VLLMEngine(VLLMEngineConfig(base_url=[a.url, url], model=a.model))
    with pytest.raises(ServerUnreachable, match=url.replace(".", r"\.")):
        eng.generate(["x", "y"], 1, SamplingParams(max_new_tokens=2))


def test_the_loops_colocated_turn_sleeps_steps_then_push_wakes_weights_syncs_kv(fake_vllm,
                                                                               tiny_model):
    """VLLMSetup.learner_turn + push, the loop's use of the protocol above (stages.update)."""
    from types import SimpleNamespace

    from selfplay_core.loop.engine_setup import VLLMSetup

    eng = engine_for(fake_vllm, weight_sync="filesystem", served_model_dir=fake_vllm.served_dir)
    setup = SimpleNamespace(colocated=True, asleep=False, engine=eng,
                            _sync_metrics=VLLMSetup._sync_metrics)
    with VLLMSetup.learner_turn(setup):
        assert fake_vllm.asleep == {"weights", "kv_cache"} and setup.asleep
    metrics = VLLMSetup.push(setup, tiny_model, None)
    assert [p for p, _ in fake_vllm.calls()] == ["/sleep", "/wake_up", "/collective_rpc",
                                                 "/reset_prefix_cache", "/wake_up", "/is_sleeping"]
    assert not fake_vllm.sleeping and not setup.asleep
    assert {"engine/wake_weights_s", "engine/wake_kv_cache_s", "engine/weight_sync_s",
            "engine/weight_version"} <= set(metrics)
    # A server placement (or an awake server) is only synced.
    setup.colocated = False
    with VLLMSetup.learner_turn(setup):
        pass
    assert set(VLLMSetup.push(setup, tiny_model, None)) == {"engine/weight_sync_s",
                                                            "engine/weight_version"}
