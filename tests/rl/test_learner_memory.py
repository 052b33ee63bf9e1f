"""Memory of the learner's logprob path (issue 15, failure 5) and that it computes the same thing.

The learner scores completion tokens only, runs the output head in chunks and keeps no
[tokens, vocab] tensor for the backward pass; entropy carries no autograd graph unless an entropy
bonus needs it. Checked against a plain full-sequence log_softmax written here, and with the
live-bytes counter (tests/support/live_bytes.py: every storage an aten op returns, on CPU) against
the plan's formula (engines.gpu_config.learner_memory).
"""

import pytest
import torch
import torch.nn.functional as F

from selfplay_core.engines.gpu_config import BatchShape, GPUConfig, ModelShape, learner_memory
from selfplay_core.rl.head_scores import HeadScores, head_scores
from selfplay_core.rl.learner import token_logprobs
from tests.support.live_bytes import LiveBytes

torch.set_num_threads(1)


def model_of(vocab=64, hidden=32, tie=False, seed=0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab, hidden_size=hidden,
                                        intermediate_size=2 * hidden, num_hidden_layers=1,
                                        num_attention_heads=4, num_key_value_heads=2,
                                        max_position_embeddings=1024, tie_word_embeddings=tie))


def batch(vocab, prompt, completion, rows=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (rows, prompt + completion), generator=g)
    cmask = torch.zeros(rows, prompt + completion)
    cmask[:, prompt:] = 1
    cmask[1, prompt + completion - 2:] = 0  # a shorter completion (right padding)
    return ids, torch.ones_like(ids), cmask


def reference(model, ids, attn, temps):
    """The formula: full logits, float32 log_softmax over the vocabulary, at every position."""
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float() / temps.view(-1, 1, 1)
    logp = F.log_softmax(logits, dim=-1)
    lp = F.pad(logp.gather(-1, ids[:, 1:, None])[..., 0], (1, 0))
    ent = F.pad(-(logp.exp() * logp).sum(-1), (1, 0))
    return lp, ent


@pytest.mark.parametrize("tie", [False, True])
def test_chunked_completion_only_scores_equal_the_full_log_softmax(tie):
    model = model_of(tie=tie)
    ids, attn, cmask = batch(64, prompt=7, completion=9)
    temps = torch.tensor([1.0, 0.4, 0.7])
    lp, ent = token_logprobs(model, ids, attn, with_entropy=True, temps=temps, score_mask=cmask,
                             entropy_grad=True, chunk_tokens=5)
    ref_lp, ref_ent = reference(model, ids, attn, temps)
    assert torch.allclose(lp, ref_lp * cmask, atol=1e-5)
    assert torch.allclose(ent, ref_ent * cmask, atol=1e-5)
    # gradients of a loss on both: identical up to float rounding
    w = torch.randn(cmask.shape) * cmask
    g_new = torch.autograd.grad(((lp + 0.1 * ent) * w).sum(), list(model.parameters()))
    ref_lp, ref_ent = reference(model, ids, attn, temps)
    g_ref = torch.autograd.grad(((ref_lp + 0.1 * ref_ent) * w).sum(), list(model.parameters()))
    for a, b in zip(g_new, g_ref):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
    # without a mask every position after the first is scored (the old contract)
    lp_all, _ = token_logprobs(model, ids, attn, temps=temps)
    assert torch.allclose(lp_all, reference(model, ids, attn, temps)[0], atol=1e-5)


def test_head_gradients_pass_gradcheck_in_float64():
    torch.manual_seed(0)
    h = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(11, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(11, dtype=torch.float64, requires_grad=True)
    t = torch.tensor([1.0, 0.5, 2.0, 1.0, 0.3, 1.0], dtype=torch.float64)
    tgt = torch.tensor([0, 3, 10, 4, 4, 7])

    def f(h, w, b):
        lp, ent = HeadScores.apply(h, w, b, tgt, t, True)
        return lp, ent

    assert torch.autograd.gradcheck(f, (h, w, b))


def test_entropy_is_a_detached_metric_unless_an_entropy_bonus_needs_its_gradient():
    model = model_of()
    ids, attn, cmask = batch(64, 4, 6)
    _, ent = token_logprobs(model, ids, attn, with_entropy=True, score_mask=cmask,
                            entropy_grad=False)
    assert not ent.requires_grad and ent.grad_fn is None
    _, ent = token_logprobs(model, ids, attn, with_entropy=True, score_mask=cmask,
                            entropy_grad=True)
    assert ent.requires_grad


def _head_peak(vocab, hidden, rows, chunk, dtype=torch.float32):
    torch.manual_seed(0)
    head = torch.nn.Linear(hidden, vocab, bias=False).to(dtype)
    h = torch.randn(rows, hidden, dtype=dtype, requires_grad=True)
    tgt = torch.randint(0, vocab, (rows,))
    t = torch.ones(rows)
    with LiveBytes() as live:
        lp, _ = head_scores(head, h, tgt, t, "metric", chunk)
        lp.sum().backward()
    return live.peak


@pytest.mark.parametrize("dtype, act", [(torch.float32, 4), (torch.bfloat16, 2)])
def test_head_memory_is_one_chunk_as_the_plan_says(dtype, act):
    """Measured peak of the output head's forward + backward over 1024 completion tokens vs
    the plan's logits term C x V x (8 + dtype bytes) + V x h x grad bytes (+ small [rows, h]
    tensors): within 25 %, and independent of the number of tokens."""
    V, H, C = 4096, 32, 128
    shape = ModelShape(name="t", hidden_size=H, num_layers=1, num_heads=4, num_kv_heads=2,
                       intermediate_size=64, vocab_size=V, tie_word_embeddings=False)
    gpu = GPUConfig(device="cpu", engine="hf", dtype="float32") if act == 4 else \
        GPUConfig(engine="hf", dtype="bfloat16")
    plan = learner_memory(gpu, shape, BatchShape(micro_batch_size=1, max_prompt_len=16,
                                                 max_completion_len=1024, logits_chunk_tokens=C))
    planned = plan["logits"] * 2**30
    small = 1024 * H * 4 * 4  # h, its gradient, lp, targets
    peak = _head_peak(V, H, rows=1024, chunk=C, dtype=dtype)
    assert 0.75 * planned < peak - small < 1.25 * planned, (peak, planned)
    longer = _head_peak(V, H, rows=2048, chunk=C, dtype=dtype)
    assert longer - peak < 0.1 * planned  # more tokens: more chunks, not more memory


def test_learner_step_memory_does_not_grow_with_the_prompt():
    """The head sees completion tokens only: a 6x longer prompt adds activations (small with a
    32-wide model) but no [tokens, vocab] logits. Before, a full-sequence float32 log_softmax
    made the peak grow by ~12 bytes x vocab per prompt token."""
    from selfplay_core.rl.learner import Learner, LearnerConfig, Rollout

    V = 8192
    peaks = {}
    for prompt in (64, 384):
        model = model_of(vocab=V)
        learner = Learner(model, LearnerConfig(lr=1e-4, micro_batch_size=2,
                                               logits_chunk_tokens=64))
        g = torch.Generator().manual_seed(0)
        rs = [Rollout(torch.randint(0, V, (prompt,), generator=g).tolist(),
                      torch.randint(0, V, (64,), generator=g).tolist(), [-9.0] * 64, 1.0)
              for _ in range(2)]
        learner.step(rs)  # AdamW states exist from here on
        with LiveBytes() as live:
            learner.step(rs)
        peaks[prompt] = live.peak
    growth = peaks[384] - peaks[64]
    full_logits = 2 * 320 * V * 12  # what 320 more positions of fp32 log_softmax would cost
    assert growth < 0.15 * full_logits, (peaks, full_logits)
