"""The shared learner on a tiny randomly initialised Qwen2 (production code path, no download)."""

import copy

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


def logprobs_of(model, r):
    ids = torch.tensor([r.prompt_ids + r.completion_ids])
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, torch.ones_like(ids))
    return lp[0, len(r.prompt_ids):].tolist()


def rollout(model, prompt, completion, adv):
    r = Rollout(prompt, completion, [0.0] * len(completion), adv)
    r.old_logprobs = logprobs_of(model, r)
    return r


def test_positive_advantage_raises_and_negative_lowers_the_likelihood(model):
    good = rollout(model, [1, 2, 3], [4, 5, 6], +1.0)
    bad = rollout(model, [1, 2, 3], [7, 8, 9], -1.0)
    learner = Learner(model, LearnerConfig(lr=1e-2, micro_batch_size=2))
    for _ in range(5):
        m = learner.step([good, bad])
    assert sum(logprobs_of(model, good)) > sum(good.old_logprobs) + 0.5
    assert sum(logprobs_of(model, bad)) < sum(bad.old_logprobs) - 0.5
    assert m["learner/tokens"] == 6 and m["learner/grad_norm"] > 0


def test_zero_advantage_changes_nothing(model):
    before = copy.deepcopy(model.state_dict())
    r = rollout(model, [1, 2], [3, 4], 0.0)
    Learner(model, LearnerConfig(lr=1e-2)).step([r])
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_clipping_stops_the_gradient_once_the_ratio_is_out_of_range(model):
    r = rollout(model, [1, 2], [3, 4], +1.0)
    # Pretend the sampler was far less likely to emit these tokens: ratio >> 1 + eps, so the
    # clipped branch is taken and the positive advantage gives no gradient.
    r.old_logprobs = [x - 5.0 for x in r.old_logprobs]
    before = copy.deepcopy(model.state_dict())
    m = Learner(model, LearnerConfig(lr=1e-2)).step([r])
    assert m["learner/clip_frac"] == 1.0
    assert all(torch.equal(before[k], model.state_dict()[k]) for k in before)


def test_grad_accumulation_matches_one_big_batch(model):
    rs = [rollout(model, [1, 2], [3 + i, 4, 5 + i][: 1 + i % 3], (-1) ** i * 0.5) for i in range(6)]
    m2 = copy.deepcopy(model)
    grads = []
    for m, micro in ((model, 6), (m2, 2)):
        learner = Learner(m, LearnerConfig(lr=1e-3, micro_batch_size=micro))
        # the accumulated gradient AdamW receives (Adam's first step, g / (|g| + eps), would
        # magnify float-summation noise in gradients of ~1e-9 into 1e-6 weight differences)
        learner.optimizer.optimizer.register_step_pre_hook(
            lambda opt, *_: grads.append([p.grad.clone() for g in opt.param_groups for p in g["params"]]))
        learner.step(rs)
    for a, b in zip(*grads):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-9)
    for (k, a), b in zip(model.state_dict().items(), m2.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-5), k


def test_kl_to_an_identical_reference_is_zero_and_needs_a_reference(model):
    ref = copy.deepcopy(model)
    r = rollout(model, [1, 2], [3, 4], 1.0)
    m = Learner(model, LearnerConfig(lr=1e-3, kl_coef=0.1), ref_model=ref).step([r])
    assert m["learner/kl_per_token"] == pytest.approx(0.0, abs=1e-7)
    with pytest.raises(ValueError, match="reference model"):
        Learner(model, LearnerConfig(kl_coef=0.1))


def test_mismatched_logprobs_are_a_clear_error(model):
    with pytest.raises(ValueError, match="old logprobs"):
        Learner(model, LearnerConfig()).step([Rollout([1], [2, 3], [0.0], 1.0)])


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean", "seq_sum_norm", "role_token_mean"])
def test_loss_aggregations_all_learn(model, agg):
    good = rollout(model, [1, 2, 3], [4, 5], +1.0)
    learner = Learner(model, LearnerConfig(lr=1e-2, loss_agg=agg, max_completion_len=4))
    for _ in range(3):
        learner.step([good])
    assert sum(logprobs_of(model, good)) > sum(good.old_logprobs)


def test_optimizer_state_round_trips(model):
    r = rollout(model, [1, 2], [3, 4], 1.0)
    a = Learner(model, LearnerConfig(lr=1e-3))
    a.step([r])
    b = Learner(copy.deepcopy(model), LearnerConfig(lr=1e-3))
    b.load_state_dict(a.state_dict())
    assert b.steps == 1


def _grads(model, rollouts, **cfg):
    """The gradient one learner step computes (captured before the optimizer applies it)."""
    m = copy.deepcopy(model)
    learner = Learner(m, LearnerConfig(lr=1e-3, max_grad_norm=1e9, **cfg))
    seen = []
    learner.optimizer.step = lambda: seen.append(
        torch.cat([p.grad.flatten() for p in m.parameters() if p.grad is not None]))
    learner.step(rollouts)
    return seen[0]


def test_role_token_mean_weighs_roles_equally_whatever_their_lengths(model):
    long_t = rollout(model, [1, 2], [3, 4, 5, 6, 7, 8], +1.0)
    long_t.role = "teacher"
    short_s = rollout(model, [1, 2], [9], +1.0)
    g_both = _grads(model, [long_t, short_s], loss_agg="role_token_mean", micro_batch_size=1)
    g_t = _grads(model, [long_t], loss_agg="token_mean")
    g_s = _grads(model, [short_s], loss_agg="token_mean")
    assert g_both is not None and torch.allclose(g_both, (g_t + g_s) / 2, atol=1e-6)
    # token_mean instead weighs the teacher by its 6 tokens against the student's 1
    g_tok = _grads(model, [long_t, short_s], loss_agg="token_mean")
    assert torch.allclose(g_tok, (6 * g_t + g_s) / 7, atol=1e-6)


def test_role_weights_scale_a_roles_gradient(model):
    t = rollout(model, [1, 2], [3, 4], +1.0)
    t.role = "teacher"
    s = rollout(model, [1, 2], [5, 6], -1.0)
    g = _grads(model, [t, s], loss_agg="role_token_mean", role_weights={"teacher": 0.0})
    g_s = _grads(model, [s], loss_agg="token_mean")
    assert torch.allclose(g, g_s / 2, atol=1e-6)
    with pytest.raises(ValueError, match="role_weights"):
        LearnerConfig(role_weights={"teacher": -1.0})
