"""Train/inference mismatch metrics (first PPO epoch, before clipping) and truncated importance
sampling (TIS) in the shared learner. Expected values are computed here from the model's own
logprobs, independently of the learner's code."""

import copy
import math

import pytest
import torch

from selfplay_core.rl.learner import Learner, LearnerConfig, Rollout, token_logprobs

torch.set_num_threads(1)


@pytest.fixture()
def model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=True)
    return Qwen2ForCausalLM(cfg)


def logprobs_of(model, r, temp=1.0):
    ids = torch.tensor([r.prompt_ids + r.completion_ids])
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, torch.ones_like(ids), temps=torch.tensor([temp]))
    return lp[0, len(r.prompt_ids):].tolist()


def rollouts(model, shifts, temp=0.7):
    """Two rollouts whose engine logprobs are the model's own plus a known shift per token."""
    out = []
    for prompt, comp, adv in (([1, 2, 3], [4, 5, 6], 1.0), ([2, 3], [7, 8, 9, 10], -1.0)):
        r = Rollout(prompt, comp, [0.0] * len(comp), adv, temperature=temp)
        own = logprobs_of(model, r, temp)
        r.old_logprobs = [lp + shifts.pop(0) for lp in own]
        out.append(r)
    return out


def test_mismatch_is_zero_when_the_engine_agrees_with_the_learner(model):
    rs = rollouts(model, [0.0] * 7)
    m = Learner(model, LearnerConfig(lr=1e-3)).step(rs)
    assert m["mismatch/tokens"] == 7
    assert m["mismatch/logprob_abs_diff_max"] < 1e-5
    assert abs(m["mismatch/ratio_mean"] - 1) < 1e-5 and m["mismatch/ratio_std"] < 1e-5
    assert abs(m["mismatch/kl_k3"]) < 1e-9


def test_mismatch_statistics_match_a_hand_computation(model):
    shifts = [0.1, -0.2, 0.0, 0.3, -0.05, 0.0, 0.4]  # engine = learner + shift
    rs = rollouts(model, list(shifts))
    m = Learner(model, LearnerConfig(lr=1e-3)).step(rs)
    d = [-s for s in shifts]  # learner - engine
    r = [math.exp(x) for x in d]
    mean = sum(r) / 7
    assert m["mismatch/logprob_abs_diff_mean"] == pytest.approx(sum(map(abs, d)) / 7, abs=1e-5)
    assert m["mismatch/logprob_abs_diff_max"] == pytest.approx(0.4, abs=1e-5)
    assert m["mismatch/ratio_mean"] == pytest.approx(mean, abs=1e-5)
    assert m["mismatch/ratio_std"] == pytest.approx(
        math.sqrt(sum((x - mean) ** 2 for x in r) / 7), abs=1e-5)
    assert m["mismatch/ratio_min"] == pytest.approx(math.exp(-0.4), abs=1e-5)
    assert m["mismatch/ratio_max"] == pytest.approx(math.exp(0.2), abs=1e-5)
    assert m["mismatch/kl_k3"] == pytest.approx(sum(x - 1 - y for x, y in zip(r, d)) / 7, abs=1e-6)


def test_update_reports_the_first_epochs_mismatch_not_the_last(model):
    rs = rollouts(model, [0.0] * 7)
    learner = Learner(model, LearnerConfig(lr=5e-2))
    m = learner.update(rs, epochs=3)
    # Epoch 1 scored the weights the engine sampled with: no mismatch. Later epochs moved the
    # weights (their ratio is the PPO ratio, not the mismatch).
    assert m["mismatch/logprob_abs_diff_max"] < 1e-5
    after = [lp for r in rs for lp in logprobs_of(model, r, 0.7)]
    assert max(abs(a - b) for a, b in zip(after, [x for r in rs for x in r.old_logprobs])) > 1e-3
    assert learner.steps == 3


def test_without_tis_a_large_mismatch_is_clipped_away(model):
    # The engine thought the tokens far less likely (ratio e^2 > 1 + eps): PPO's clip removes
    # the gradient of the positive-advantage rollout; the negative one is unclipped below.
    r = rollouts(model, [-2.0] * 3 + [0.0] * 4)[:1]
    m = Learner(model, LearnerConfig(lr=1e-3)).step(r)
    assert m["learner/grad_norm"] == 0.0
    assert m["mismatch/ratio_min"] == pytest.approx(math.exp(2), rel=1e-4)


def test_tis_takes_the_ratio_against_the_learner_and_weights_by_the_capped_ratio(model):
    twin = copy.deepcopy(model)
    mismatched = rollouts(model, [-2.0] * 3 + [0.0] * 4)[:1]   # pi_learner / pi_engine = e^2
    agreeing = rollouts(twin, [0.0] * 7)[:1]
    m_tis = Learner(model, LearnerConfig(lr=1e-3, tis_cap=2.0)).step(mismatched)
    m_ref = Learner(twin, LearnerConfig(lr=1e-3)).step(agreeing)
    # Against its own logprobs the ratio is 1 (nothing clipped); the weight is min(e^2, 2) = 2,
    # so the gradient is exactly twice that of an engine that agreed with the learner.
    assert m_tis["learner/tis_weight_mean"] == pytest.approx(2.0, abs=1e-6)
    assert m_tis["learner/tis_truncated_frac"] == 1.0
    assert m_tis["learner/clip_frac"] == 0.0
    assert m_tis["learner/grad_norm"] == pytest.approx(2 * m_ref["learner/grad_norm"], rel=1e-4)


def test_tis_later_epochs_use_the_first_epochs_learner_logprobs(model):
    rs = rollouts(model, [0.3] * 7)
    before = [logprobs_of(model, r, 0.7) for r in rs]
    learner = Learner(model, LearnerConfig(lr=5e-2, tis_cap=2.0))
    learner.update(rs, epochs=2)
    for r, lp in zip(rs, before):
        assert r.learner_logprobs == pytest.approx(lp, abs=1e-5)
