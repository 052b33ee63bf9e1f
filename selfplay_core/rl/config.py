"""The learner's settings (torch-free, so `selfplay run` validates a config before any heavy
import; `selfplay_core.rl.learner` re-exports it)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from selfplay_core.frozen import FrozenConfig


class LearnerConfig(FrozenConfig):
    # AdamW learning rate.
    lr: float = Field(1e-6, gt=0)
    # AdamW weight decay.
    weight_decay: float = Field(0.0, ge=0)
    # AdamW betas.
    betas: tuple[float, float] = (0.9, 0.999)
    clip_eps: float = Field(0.2, gt=0)              # PPO ratio clip (AZR: 0.2)
    clip_eps_high: float | None = None              # asymmetric upper clip (DAPO), default = clip_eps
    kl_coef: float = Field(0.0, ge=0)               # 0: no reference model is needed
    # Weight of an entropy bonus in the loss (0: none).
    entropy_coef: float = Field(0.0, ge=0)
    # Gradients are clipped to this global norm.
    max_grad_norm: float = Field(1.0, gt=0)
    micro_batch_size: int = Field(8, ge=1)          # rollouts per forward/backward
    # token_mean: every token of the batch weighs the same (DAPO / TRL default);
    # seq_mean: average per sequence, then over sequences (original GRPO);
    # seq_sum_norm: token sum / (n_seqs * max_completion_len) (Dr. GRPO, length-unbiased).
    # role_token_mean: token mean within each role (teacher, student), then the mean over the
    # roles present, so a role does not weigh more because its completions are longer (a
    # teacher's proposal is ~3x a student's answer in the toy world).
    loss_agg: Literal["token_mean", "seq_mean", "seq_sum_norm", "role_token_mean"] = "token_mean"
    max_completion_len: int = Field(512, ge=1)      # the constant for seq_sum_norm
    # Per-role loss multiplier (a role not named weighs 1). One model plays both roles, so each
    # role's policy gradient also moves the other's behaviour.
    role_weights: dict[str, float] = Field(default_factory=dict)
    # Truncated importance sampling (Yao et al. 2025, "Your efficient RL framework secretly
    # brings you off-policy RL training"): None = off, the PPO ratio is taken against the
    # engine's logprobs. A cap C: the ratio is taken against the learner's own logprobs of the
    # first epoch, and each token's loss is weighted by min(pi_learner / pi_engine, C), which
    # corrects the train/inference mismatch (and an off-policy step) without letting a rare
    # token's weight explode.
    tis_cap: float | None = Field(None, gt=0)
    # Per-role KL coefficient to the frozen starting weights (a role not named gets kl_coef):
    # e.g. {teacher: 0.1} anchors the teacher's update, so what it learns costs the student less.
    role_kl: dict[str, float] = Field(default_factory=dict)
    # Scored positions per output-head chunk: bounds the float32 logits of a step (with a 152k
    # vocabulary, 1024 positions make 0.6 GB of float32 logits; the whole sequence would not fit).
    logits_chunk_tokens: int = Field(1024, ge=1)

    @model_validator(mode="after")
    def _check_weights(self):
        for name in ("role_weights", "role_kl"):
            bad = {k: v for k, v in getattr(self, name).items() if not (v >= 0 and math.isfinite(v))}
            if bad:
                raise ValueError(f"learner.{name} must be finite and >= 0, got {bad}")
        return self

    @property
    def needs_reference(self) -> bool:
        return self.kl_coef > 0 or any(v > 0 for v in self.role_kl.values())

    def kl_of(self, role: str) -> float:
        return float(self.role_kl.get(role, self.kl_coef))
