"""A rollout as the learner sees it. Torch-free, so the stages and methods that build rollouts
(and the config, which imports the methods) load without torch; `rl.learner` re-exports it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Rollout:
    """One sampled completion with what the update needs. `old_logprobs` are the sampling
    policy's per-token logprobs of `completion_ids` (from the engine)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: list[float]
    advantage: float
    role: str = "student"
    meta: dict = field(default_factory=dict)
    temperature: float = 1.0   # the sampling temperature: the learner scores the same policy
    # The learner's own logprobs of `completion_ids` before its first step over this rollout
    # (filled by that step when TIS is on; later epochs take the ratio against them).
    learner_logprobs: list[float] | None = None
    # Per completion token, 1 = in the loss, 0 = not (e.g. a proposal's program, see
    # teacher.train_solution); None: every token.
    loss_mask: list[float] | None = None

    @property
    def n_loss_tokens(self) -> float:
        return float(sum(self.loss_mask)) if self.loss_mask is not None else float(len(self.completion_ids))
