"""The one learner shared by every self-play method: a token-level clipped policy-gradient step
over precomputed rollouts (with the sampling policy's logprobs), optional KL to a frozen
reference and entropy bonus, gradient accumulation and clipping, AdamW.

Methods differ only in how they compute each rollout's advantage (`rl.advantages`) and which
rollouts they keep; that keeps comparisons between GASP, AZR and RLVR fair.

Multi-device training comes from `accelerate` (DDP, DeepSpeed, FSDP via `accelerate launch` and
its config files), not from this module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Sequence

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, model_validator


class LearnerConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    lr: float = Field(1e-6, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    clip_eps: float = Field(0.2, gt=0)              # PPO ratio clip (AZR: 0.2)
    clip_eps_high: float | None = None              # asymmetric upper clip (DAPO), default = clip_eps
    kl_coef: float = Field(0.0, ge=0)               # 0: no reference model is needed
    entropy_coef: float = Field(0.0, ge=0)
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
    # Per-role KL coefficient to the frozen starting weights (a role not named gets kl_coef):
    # e.g. {teacher: 0.1} anchors the teacher's update, so what it learns costs the student less.
    role_kl: dict[str, float] = Field(default_factory=dict)

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
    # Per completion token, 1 = in the loss, 0 = not (e.g. a proposal's program, see
    # teacher.train_solution); None: every token.
    loss_mask: list[float] | None = None

    @property
    def n_loss_tokens(self) -> float:
        return float(sum(self.loss_mask)) if self.loss_mask is not None else float(len(self.completion_ids))


def _pad_batch(rollouts: Sequence[Rollout], pad_id: int, device, kl=None) -> dict[str, torch.Tensor]:
    seqs = [r.prompt_ids + r.completion_ids for r in rollouts]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    cmask = torch.zeros((len(seqs), width), dtype=torch.float32)
    old = torch.zeros((len(seqs), width), dtype=torch.float32)
    adv = torch.tensor([float(r.advantage) for r in rollouts], dtype=torch.float32)
    temps = torch.tensor([float(r.temperature) if r.temperature > 0 else 1.0 for r in rollouts],
                         dtype=torch.float32)
    for i, (r, s) in enumerate(zip(rollouts, seqs)):
        n, p = len(s), len(r.prompt_ids)
        ids[i, :n] = torch.tensor(s)
        attn[i, :n] = 1
        cmask[i, p:n] = 1.0 if r.loss_mask is None else torch.tensor(r.loss_mask, dtype=torch.float32)
        old[i, p:n] = torch.tensor(r.old_logprobs, dtype=torch.float32)
    klw = torch.tensor([float(kl(r.role)) if kl else 0.0 for r in rollouts], dtype=torch.float32)
    return {k: v.to(device) for k, v in
            dict(ids=ids, attn=attn, cmask=cmask, old=old, adv=adv, temps=temps, klw=klw).items()}


def token_logprobs(model, ids: torch.Tensor, attn: torch.Tensor, with_entropy: bool = False,
                   temps: torch.Tensor | None = None):
    """Per-position logprob of each token given its prefix (position t scores token t; t=0
    gets 0), and optionally the policy's entropy at each position. `temps` (one per row)
    scores the temperature-scaled policy the engine sampled from."""
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    if temps is not None:
        logits = logits / temps.view(-1, 1, 1)
    logp_all = F.log_softmax(logits, dim=-1)
    lp = logp_all.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    lp = F.pad(lp, (1, 0))
    ent = None
    if with_entropy:
        ent = F.pad(-(logp_all.exp() * logp_all).sum(-1), (1, 0))
    return lp, ent


class Learner:
    def __init__(self, model, config: LearnerConfig, *, pad_token_id: int = 0, ref_model=None,
                 accelerator=None):
        from accelerate import Accelerator

        if config.needs_reference and ref_model is None:
            raise ValueError("learner.kl_coef / role_kl > 0 needs a frozen reference model (ref_model)")
        self.config = config
        self.accelerator = accelerator or Accelerator(cpu=not torch.cuda.is_available())
        # Only trainable parameters reach AdamW (LoRA freezes the base: no states for it).
        trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(trainable, lr=config.lr,
                                           betas=config.betas, weight_decay=config.weight_decay)
        self.model, self.optimizer = self.accelerator.prepare(model, self.optimizer)
        self.ref_model = ref_model.eval() if ref_model is not None else None
        if self.ref_model is not None:
            self.ref_model.requires_grad_(False)
            self.ref_model.to(self.accelerator.device)
        self.pad_token_id = pad_token_id
        self.steps = 0

    @property
    def unwrapped(self):
        return self.accelerator.unwrap_model(self.model)

    def _row_scales(self, rollouts: Sequence[Rollout]) -> list[float]:
        """Each rollout's factor on its summed per-token loss (seq_mean: on its token mean)."""
        c = self.config
        w = [float(c.role_weights.get(r.role, 1.0)) for r in rollouts]
        if c.loss_agg == "token_mean":
            denom = float(max(1, sum(r.n_loss_tokens for r in rollouts)))
            return [x / denom for x in w]
        if c.loss_agg == "seq_mean":
            return [x / max(1, len(rollouts)) for x in w]
        if c.loss_agg == "seq_sum_norm":
            return [x / (max(1, len(rollouts)) * c.max_completion_len) for x in w]
        per_role: dict[str, int] = {}
        for r in rollouts:
            per_role[r.role] = per_role.get(r.role, 0) + r.n_loss_tokens
        return [x / (max(1, per_role[r.role]) * len(per_role)) for x, r in zip(w, rollouts)]

    def step(self, rollouts: Sequence[Rollout]) -> dict[str, float]:
        """One optimizer step over all `rollouts` (micro-batched). Returns metrics."""
        rollouts = [r for r in rollouts if r.completion_ids]
        if not rollouts:
            return {"learner/skipped": 1.0}
        for r in rollouts:
            if len(r.old_logprobs) != len(r.completion_ids):
                raise ValueError(f"rollout has {len(r.completion_ids)} completion tokens but "
                                 f"{len(r.old_logprobs)} old logprobs")
        c = self.config
        lo, hi = 1.0 - c.clip_eps, 1.0 + (c.clip_eps_high if c.clip_eps_high is not None else c.clip_eps)
        scales = self._row_scales(rollouts)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums = {"loss": 0.0, "pg": 0.0, "kl": 0.0, "entropy": 0.0, "clipped": 0.0, "ratio": 0.0}
        n_tok = 0.0
        for start in range(0, len(rollouts), c.micro_batch_size):
            mb = rollouts[start:start + c.micro_batch_size]
            b = _pad_batch(mb, self.pad_token_id, self.accelerator.device, kl=c.kl_of)
            lp, ent = token_logprobs(self.model, b["ids"], b["attn"], with_entropy=True, temps=b["temps"])
            mask = b["cmask"]
            ratio = torch.exp(lp - b["old"]) * mask
            adv = b["adv"].unsqueeze(1)
            pg = -torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv)
            per_tok = pg
            kl = torch.zeros_like(pg)
            if self.ref_model is not None and bool((b["klw"] > 0).any()):
                with torch.no_grad():
                    ref_lp, _ = token_logprobs(self.ref_model, b["ids"], b["attn"], temps=b["temps"])
                d = ref_lp - lp
                kl = torch.exp(d) - d - 1.0  # k3 estimator, >= 0
                per_tok = per_tok + b["klw"].unsqueeze(1) * kl
            if c.entropy_coef > 0:
                per_tok = per_tok - c.entropy_coef * ent
            per_tok = per_tok * mask
            row = torch.tensor(scales[start:start + c.micro_batch_size], dtype=per_tok.dtype,
                               device=per_tok.device)
            if c.loss_agg == "seq_mean":
                row = row / mask.sum(1).clamp(min=1)
            loss = (per_tok.sum(1) * row).sum()
            self.accelerator.backward(loss)
            with torch.no_grad():
                sums["loss"] += float(loss)
                sums["pg"] += float((pg * mask).sum())
                sums["kl"] += float((kl * mask).sum())
                sums["entropy"] += float((ent * mask).sum())
                sums["clipped"] += float((((ratio < lo) | (ratio > hi)).float() * mask).sum())
                sums["ratio"] += float(ratio.sum())
                n_tok += float(mask.sum())
        grad_norm = self.accelerator.clip_grad_norm_(self.model.parameters(), c.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        n_tok = max(n_tok, 1.0)
        gn = float(grad_norm)
        return {
            "learner/loss": sums["loss"],
            "learner/pg_loss_per_token": sums["pg"] / n_tok,
            "learner/kl_per_token": sums["kl"] / n_tok,
            "learner/entropy": sums["entropy"] / n_tok,
            "learner/clip_frac": sums["clipped"] / n_tok,
            "learner/ratio_mean": sums["ratio"] / n_tok,
            "learner/grad_norm": gn if math.isfinite(gn) else float("nan"),
            "learner/tokens": n_tok,
            "learner/rollouts": float(len(rollouts)),
        }

    # ---- state for exact resume -------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state["steps"])
