"""CompassPlay: the reward's pieces as tables (cosine, the two loss weightings), the parameter
subset, the learner's gradient hook against a plain full backward, and the reward's
eligibility rule."""

import math
import time

import pytest
import torch

from selfplay_core.methods.compassplay import (CompassConfig, CompassReward, cosine, dr_grpo_weights,
                                               last_layer_params, nll_weights, ranks,
                                               reward_gain_pairs, spearman)
from selfplay_core.problems import Problem
from selfplay_core.records import Anchor, Proposal
from selfplay_core.engines.base import Completion


@pytest.mark.parametrize("a,b,expected", [
    ([1.0, 0.0], [1.0, 1.0], 1 / math.sqrt(2)), ([1.0, 2.0], [-2.0, 1.0], 0.0),
    ([3.0, 4.0], [-6.0, -8.0], -1.0), ([0.0, 0.0], [1.0, 0.0], 0.0),
])
def test_cosine(a, b, expected):
    assert cosine(torch.tensor(a), torch.tensor(b)) == pytest.approx(expected)


def test_the_task_and_reference_loss_weights():
    # p = 2/4, 10 tokens: (1 - 0.5) / 10 = 0.05 for a pass, -0.05 for a fail.
    assert dr_grpo_weights([True, False, False, True], [2, 2, 3, 3]) == pytest.approx([0.05, -0.05, -0.05, 0.05])
    # Two tasks: the first with two solutions of 2 and 4 tokens, the second one of 5 tokens:
    # 1 / (tasks * solutions * tokens).
    a, b = nll_weights([[2, 4], [5]])
    assert a == pytest.approx([1 / 8, 1 / 16]) and b == pytest.approx([1 / 10])


def test_the_parameter_subset_is_the_last_blocks_and_the_final_norm():
    from transformers import AutoModelForCausalLM

    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    model = AutoModelForCausalLM.from_pretrained(str(ASSET_DIR))   # the toy model: 4 blocks
    L = model.config.num_hidden_layers
    names = {id(p): n for n, p in model.named_parameters()}
    picked = [names[id(p)] for p in last_layer_params(model, 1)]
    assert picked and all(f"layers.{L - 1}." in n or n == "model.norm.weight" for n in picked)
    assert "model.norm.weight" in picked
    two = [names[id(p)] for p in last_layer_params(model, 2)]
    assert any(f"layers.{L - 2}." in n for n in two) and set(picked) < set(two)
    with pytest.raises(ValueError, match="layers"):
        last_layer_params(torch.nn.Linear(2, 2))


def test_the_gradient_hook_matches_a_full_backward_and_leaves_training_alone(micro_model_dir):
    from transformers import AutoModelForCausalLM

    from selfplay_core.rl.config import LearnerConfig
    from selfplay_core.rl.learner import Learner
    from selfplay_core.rl.rollout import Rollout

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(micro_model_dir))
    learner = Learner(model, LearnerConfig(lr=1e-3, micro_batch_size=2))
    rolls = [Rollout([5, 6, 7], [8, 9], [0.0, 0.0], 0.7, temperature=1.0),
             Rollout([5, 6], [10, 11, 12], [0.0] * 3, -0.2, temperature=0.5),
             Rollout([4], [3], [0.0], 1.5, temperature=1.0)]
    params = last_layer_params(learner.unwrapped, 1)
    got = learner.policy_gradient(rolls, params)

    # Independently: plain logits, log-softmax at each rollout's temperature, full backward.
    m = learner.unwrapped
    m.zero_grad(set_to_none=True)
    loss = 0.0
    for r in rolls:
        ids = torch.tensor([r.prompt_ids + r.completion_ids])
        logp = torch.log_softmax(m(input_ids=ids).logits[0, :-1] / r.temperature, -1)
        n = len(r.prompt_ids)
        tok = logp[n - 1:, :].gather(1, torch.tensor(r.completion_ids).view(-1, 1)).sum()
        loss = loss - r.advantage * tok
    loss.backward()
    want = torch.cat([p.grad.reshape(-1) for p in params])
    assert got.shape == want.shape and torch.allclose(got, want, atol=1e-6, rtol=1e-4)
    m.zero_grad(set_to_none=True)

    # Nothing a step uses changed: no .grad left, flags restored, the weights and AdamW as before.
    before = {k: v.clone() for k, v in m.state_dict().items()}
    m.train()
    learner.policy_gradient(rolls, params)
    assert all(p.grad is None for p in m.parameters()) and all(p.requires_grad for p in m.parameters())
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())
    assert not learner.optimizer.state_dict()["state"] and m.training   # train mode restored
    assert float(learner.policy_gradient([], params).abs().sum()) == 0.0


class _FixedGradients:
    """Stands in for the method's two gradient computations with given vectors, so the
    reward's eligibility rule and cosine are checked on their own (the gradients themselves
    are the hook test above and the integration test)."""

    def __init__(self, g_ref, by_id):
        self.config = CompassConfig(ineligible_reward=-0.25)
        self.g_ref, self.by_id = torch.tensor(g_ref), by_id
        self.calls = 0
        self.task_delay_s = 0.0

    def reference_gradient(self, ctx):
        self.calls += 1
        return self.g_ref

    def task_gradient(self, ctx, p):
        time.sleep(self.task_delay_s)   # so the per-proposal timing has a known lower bound
        return torch.tensor(self.by_id[p.id])


def _accepted(pid, p):
    q = Proposal("compass", Anchor("a", "q", "c"), "f", "harder", "", Completion("x"), id=pid)
    q.problem, q.pass_rate = Problem(pid, "call", [], entry_point="f"), p
    return q


def test_only_tasks_with_0_lt_p_lt_1_are_scored():
    fixed = _FixedGradients([1.0, 0.0], {"a": [1.0, 1.0], "b": [0.0, -2.0], "c": [5.0, 5.0]})
    fixed.task_delay_s = 0.02
    reward = CompassReward(fixed)
    props = [_accepted("a", 0.5), _accepted("b", 0.25), _accepted("c", 1.0), _accepted("d", 0.0)]
    assert reward(None, props) == pytest.approx([1 / math.sqrt(2), 0.0, -0.25, -0.25])
    assert fixed.calls == 1   # the reference gradient once per batch
    m = reward.metrics(props)
    assert m["eligible"] == 0.5 and m["cosine"] == pytest.approx(1 / (2 * math.sqrt(2)))
    assert m["time_per_proposal_s"] >= 0.02   # each eligible task gradient sleeps 0.02 s
    nobody = CompassReward(_FixedGradients([1.0], {}))
    assert nobody(None, [_accepted("c", 1.0)]) == [-0.25] and nobody.method.calls == 0


@pytest.mark.parametrize("xs,want", [
    ([3.0, 1.0, 2.0], [2.0, 0.0, 1.0]),
    ([0.5, 0.5, 0.1, 0.9], [1.5, 1.5, 0.0, 3.0]),      # a tie shares ranks 1 and 2
    ([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]),
])
def test_ranks_average_ties(xs, want):
    assert ranks(xs) == want


@pytest.mark.parametrize("a,b,want", [
    ([1, 2, 3, 4], [10, 20, 30, 40], 1.0),
    ([1, 2, 3, 4], [4, 3, 2, 1], -1.0),
    # ranks a: 0 1 2 3, b: 1 0 3 2 -> d^2 sum 4, no ties: 1 - 6*4 / (4*15) = 0.6
    ([1, 2, 3, 4], [2, 1, 4, 3], 0.6),
])
def test_spearman_by_hand(a, b, want):
    assert spearman(a, b) == pytest.approx(want)


def test_spearman_of_a_constant_is_nan():
    assert math.isnan(spearman([1, 2, 3], [0.5, 0.5, 0.5]))


def test_reward_gain_pairs_follow_consecutive_iterations():
    # [iteration, mean reward of that iteration (None: nothing eligible), pass rate before its update]
    hist = [[2, 0.3, 0.50], [0, 0.1, 0.25], [1, None, 0.375], [3, 0.2, 0.625], [5, 0.4, 0.5], [6, 0.0, 0.25]]
    # 0 -> 1: reward 0.1, gain 0.125; 1 has no reward; 2 -> 3: 0.3, 0.125; 3 -> 5 not consecutive;
    # 5 -> 6: 0.4, -0.25
    assert reward_gain_pairs(hist) == [(0.1, 0.125), (0.3, 0.125), (0.4, -0.25)]
