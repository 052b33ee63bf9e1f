"""A minimal student-only policy-gradient loop: the toy world's RL sanity check.

Not the project's learner (that one lives in `selfplay_core/rl/` and serves every method); this
is the smallest honest check that the bootstrapped model *can* learn from executor rewards:
sample a group per task, reward = all hidden tests pass, advantage = reward - group mean,
loss = -sum(A * log pi(token)) / tokens, one on-policy step per batch, then push the new
weights into the engine in-process (`HFEngine.load_weights`).
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from typing import Callable

from selfplay_core.engines.base import SamplingParams
from selfplay_core.solve import with_student_stops, score, student_prompt_for


@dataclass(frozen=True)
class PGSettings:
    steps: int = 60
    tasks_per_step: int = 16
    samples_per_task: int = 8
    lr: float = 2e-4   # 5e-4 was unstable on the 0.87M model (reward, then pass@8, collapsed)
    temperature: float = 1.0
    max_new_tokens: int = 96
    grad_clip: float = 1.0
    seed: int = 0
    time_budget_s: float | None = None   # stop early when spent (steps is the upper bound)

    def __post_init__(self):
        if self.steps < 1 or self.tasks_per_step < 1 or self.samples_per_task < 2:
            raise ValueError("need steps >= 1, tasks_per_step >= 1, samples_per_task >= 2")

    def to_dict(self) -> dict:
        return asdict(self)


def completion_logprobs(model, prompt_ids: list[list[int]], completion_ids: list[list[int]],
                        pad_id: int, temperature: float = 1.0):
    """Per-token log pi(completion token | prefix) under `model`, as a list of 1-D tensors
    (right padding, one forward pass)."""
    import torch

    seqs = [p + c for p, c in zip(prompt_ids, completion_ids)]
    width = max(len(s) for s in seqs)
    x = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(x)
    for r, s in enumerate(seqs):
        x[r, : len(s)] = torch.tensor(s)
        mask[r, : len(s)] = 1
    logits = model(input_ids=x, attention_mask=mask).logits.float() / temperature
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, x[:, 1:, None])[..., 0]
    out = []
    for r, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
        out.append(logp[r, len(p) - 1: len(p) - 1 + len(c)])
    return out


def policy_gradient(model, engine, executor, problems, settings: PGSettings,
                    progress: Callable[[int, dict], None] | None = None) -> list[dict]:
    """Train `model` in place on `problems`; keeps `engine` in sync. Returns per-step logs."""
    import torch

    rng = random.Random(f"toyworld-pg:{settings.seed}")
    torch.manual_seed(settings.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.0)
    pad = engine.pad_id
    logs, t0 = [], time.time()
    for step in range(settings.steps):
        if settings.time_budget_s is not None and time.time() - t0 > settings.time_budget_s:
            break
        batch = rng.sample(list(problems), min(settings.tasks_per_step, len(problems)))
        sp = with_student_stops(SamplingParams(temperature=settings.temperature,
                                                max_new_tokens=settings.max_new_tokens,
                                                seed=settings.seed * 100_003 + step))
        comps = engine.generate([student_prompt_for(p) for p in batch], settings.samples_per_task, sp)
        results = score(executor, batch, comps)
        items, groups_with_signal, rewards = [], 0, []
        for res in results:
            r = [float(x) for x in res.passed]
            rewards += r
            mean = sum(r) / len(r)
            if 0 < mean < 1:
                groups_with_signal += 1
                items += [(c, ri - mean) for c, ri in zip(res.completions, r)]
        log = {"step": step, "reward": sum(rewards) / len(rewards),
               "groups_with_signal": groups_with_signal / len(results), "updated": bool(items)}
        if items:
            model.train()
            lps = completion_logprobs(model, [c.prompt_token_ids for c, _ in items],
                                      [c.token_ids for c, _ in items], pad, settings.temperature)
            n_tok = sum(len(lp) for lp in lps)
            loss = -sum(a * lp.sum() for (_, a), lp in zip(items, lps)) / n_tok
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
            opt.step()
            model.eval()
            engine.load_weights(model.state_dict())
            log["loss"] = loss.item()
            log["neg_logprob"] = -sum(lp.detach().sum().item() for lp in lps) / n_tok
        log["elapsed_s"] = time.time() - t0
        logs.append(log)
        if progress:
            progress(step, log)
    return logs
