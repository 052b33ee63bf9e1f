import pytest
import torch

from selfplay_core.engines.base import Engine, SamplingParams
from selfplay_core.engines.hf import EngineError, HFEngine

PROMPTS = [
    "### Task\nGiven a list of numbers, take the sum.\n### Solution\ndef f(x):\n",
    "### Task\nGiven a string of comma-separated numbers, add 3 to each number, then keep the even "
    "numbers. Return the numbers as a comma-separated string.\n### Solution\ndef f(x):\n",
    "### Task\nGiven a string, reverse the string.\n### Solution\ndef f(x):\n",
]


@pytest.fixture(scope="module")
def engine(micro_model_dir):
    return HFEngine(micro_model_dir, batch_size=64)


def _forward_logprobs(engine, prompt_ids, completion_ids, temperature):
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = engine.model(input_ids=ids).logits[0].float() / temperature
    logp = torch.log_softmax(logits[:-1], -1).gather(-1, ids[0, 1:, None])[:, 0]
    return logp[len(prompt_ids) - 1:]


def test_is_an_engine(engine):
    assert isinstance(engine, Engine)


def test_logprobs_match_a_forward_pass(engine):
    # Prompts of different lengths share a left-padded batch with a KV cache; each completion's
    # logprobs must equal an unpadded forward pass over prompt + completion.
    sp = SamplingParams(temperature=0.8, max_new_tokens=40, seed=1)
    out = engine.generate(PROMPTS, 3, sp)
    assert [len(o) for o in out] == [3, 3, 3]
    for group in out:
        for c in group:
            assert len(c.token_ids) == len(c.logprobs) > 0
            ref = _forward_logprobs(engine, c.prompt_token_ids, c.token_ids, 0.8)
            assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4), (c.logprobs[:5], ref[:5])


def test_greedy_is_deterministic_argmax_and_batch_independent(engine):
    sp = SamplingParams(temperature=0.0, max_new_tokens=30)
    a = engine.generate(PROMPTS, 2, sp)
    for group in a:
        assert group[0].token_ids == group[1].token_ids
        ids = group[0].prompt_token_ids + group[0].token_ids
        with torch.no_grad():
            logits = engine.model(input_ids=torch.tensor([ids])).logits[0]
        argmax = logits[len(group[0].prompt_token_ids) - 1:-1].argmax(-1).tolist()
        assert argmax == group[0].token_ids
    one_by_one = HFEngine(engine.model, engine.tokenizer, batch_size=1)
    b = one_by_one.generate(PROMPTS, 1, sp)
    assert [g[0].token_ids for g in a] == [g[0].token_ids for g in b]


def test_seeded_sampling_is_reproducible(engine):
    sp = SamplingParams(temperature=1.0, max_new_tokens=20, seed=123)
    a = engine.generate(PROMPTS, 4, sp)
    b = engine.generate(PROMPTS, 4, sp)
    assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]
    c = engine.generate(PROMPTS, 4, SamplingParams(temperature=1.0, max_new_tokens=20, seed=124))
    assert [[x.token_ids for x in g] for g in a] != [[x.token_ids for x in g] for g in c]


def test_eos_and_length_finish_reasons(engine):
    out = engine.generate(PROMPTS[:1], 8, SamplingParams(temperature=1.0, max_new_tokens=3, seed=0))
    for c in out[0]:
        assert len(c.token_ids) <= 3
        if c.finish_reason == "length":
            assert len(c.token_ids) == 3 and engine.eos_id not in c.token_ids
        else:
            assert c.token_ids[-1] == engine.eos_id


def test_stop_sequences_cut_the_text(engine):
    sp = SamplingParams(temperature=0.0, max_new_tokens=40)
    full = engine.generate(PROMPTS[:1], 1, sp)[0][0]
    assert len(full.text) > 6
    stop = full.text[3:6]
    first = full.text.find(stop)
    cut = engine.generate(PROMPTS[:1], 1, SamplingParams(temperature=0.0, max_new_tokens=40,
                                                         stop=(stop,)))[0][0]
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[:first]
    assert cut.token_ids == full.token_ids[: len(cut.token_ids)]
    assert len(cut.token_ids) < len(full.token_ids)


def test_top_p_tiny_is_greedy(engine):
    greedy = engine.generate(PROMPTS, 1, SamplingParams(temperature=0.0, max_new_tokens=20))
    nucleus = engine.generate(PROMPTS, 1, SamplingParams(temperature=1.0, top_p=1e-6,
                                                         max_new_tokens=20, seed=5))
    assert [g[0].token_ids for g in greedy] == [g[0].token_ids for g in nucleus]


def test_load_weights_in_process(engine, micro_model_dir):
    from transformers import AutoModelForCausalLM

    fresh = AutoModelForCausalLM.from_pretrained(micro_model_dir)
    with torch.no_grad():
        for p in fresh.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    other = HFEngine(fresh, engine.tokenizer)
    sp = SamplingParams(temperature=0.0, max_new_tokens=25)
    want = [g[0].token_ids for g in engine.generate(PROMPTS, 1, sp)]
    assert [g[0].token_ids for g in other.generate(PROMPTS, 1, sp)] != want
    other.load_weights(engine.model.state_dict())
    assert [g[0].token_ids for g in other.generate(PROMPTS, 1, sp)] == want
    with pytest.raises(EngineError):
        other.load_weights({"nope.weight": torch.zeros(1)})
    name, value = next(iter(engine.model.state_dict().items()))
    with pytest.raises(EngineError):
        other.load_weights({name: torch.zeros(value.shape[0] + 1)})


def test_bad_requests_are_one_clear_error(engine):
    with pytest.raises(EngineError):
        engine.generate(PROMPTS, 0, SamplingParams())
    with pytest.raises(EngineError):
        engine.generate(PROMPTS, 1, SamplingParams(temperature=-1))
    with pytest.raises(EngineError):
        engine.generate([""], 1, SamplingParams())
    with pytest.raises(EngineError):
        engine.generate(["x " * 600], 1, SamplingParams(max_new_tokens=10))
