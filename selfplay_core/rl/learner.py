"""The one learner shared by every self-play method: a token-level clipped policy-gradient step
over precomputed rollouts (with the sampling policy's logprobs), optional KL to a frozen
reference and entropy bonus, gradient accumulation and clipping, AdamW.

Methods differ only in how they compute each rollout's advantage (`rl.advantages`) and which
rollouts they keep; that keeps comparisons between GASP, AZR and RLVR fair.

On several processes (`gpu.distributed: ddp`, rl/distributed.py) each rank computes the loss of
its shard of the batch with the scales of the whole batch, and the gradients are summed across
ranks before clipping: the step equals one process's on the whole batch.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F

# The config lives in a torch-free module so that a config can be validated (and a bad one
# rejected) without importing torch; re-exported here for existing callers.
from selfplay_core.rl.config import LearnerConfig  # noqa: F401
from selfplay_core.rl.head_scores import final_hidden, head_scores, output_head
from selfplay_core.rl.rollout import Rollout  # torch-free: stages and methods build rollouts


def _pad_batch(rollouts: Sequence[Rollout], pad_id: int, device, kl=None) -> dict[str, torch.Tensor]:
    seqs = [r.prompt_ids + r.completion_ids for r in rollouts]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    cmask = torch.zeros((len(seqs), width), dtype=torch.float32)
    old = torch.zeros((len(seqs), width), dtype=torch.float32)
    base = torch.zeros((len(seqs), width), dtype=torch.float32)
    have_base = all(r.learner_logprobs is not None for r in rollouts)
    adv = torch.tensor([float(r.advantage) for r in rollouts], dtype=torch.float32)
    temps = torch.tensor([float(r.temperature) if r.temperature > 0 else 1.0 for r in rollouts],
                         dtype=torch.float32)
    for i, (r, s) in enumerate(zip(rollouts, seqs)):
        n, p = len(s), len(r.prompt_ids)
        ids[i, :n] = torch.tensor(s)
        attn[i, :n] = 1
        cmask[i, p:n] = 1.0 if r.loss_mask is None else torch.tensor(r.loss_mask, dtype=torch.float32)
        old[i, p:n] = torch.tensor(r.old_logprobs, dtype=torch.float32)
        if have_base:
            base[i, p:n] = torch.tensor(r.learner_logprobs, dtype=torch.float32)
    klw = torch.tensor([float(kl(r.role)) if kl else 0.0 for r in rollouts], dtype=torch.float32)
    out = dict(ids=ids, attn=attn, cmask=cmask, old=old, adv=adv, temps=temps, klw=klw)
    if have_base:
        out["base"] = base
    return {k: v.to(device) for k, v in out.items()}


def token_logprobs(model, ids: torch.Tensor, attn: torch.Tensor, with_entropy: bool = False,
                   temps: torch.Tensor | None = None, *, score_mask: torch.Tensor | None = None,
                   entropy_grad: bool = True, chunk_tokens: int = 1024):
    """Per-position logprob of each token given its prefix (position t scores token t; t=0
    gets 0), and optionally the policy's entropy at each position. `temps` (one per row)
    scores the temperature-scaled policy the engine sampled from.

    Only positions where `score_mask` is 1 are scored (default: every position after the
    first); the others read 0. Memory is what makes this more than a log_softmax: with a
    152k vocabulary, full-sequence float32 logits and their log-softmax are the largest tensors
    of a 7B step. So the model returns its final hidden states (logits for one position only),
    the output head runs on the scored positions alone, `chunk_tokens` at a time, and under
    autograd each chunk's logits are recomputed in the backward pass instead of kept. The
    entropy carries a gradient only with `entropy_grad` (an entropy bonus); otherwise it is a
    detached metric."""
    hidden = final_hidden(model, ids, attn)
    B, W = ids.shape
    want = (torch.ones_like(ids, dtype=torch.bool) if score_mask is None
            else score_mask.bool())[:, 1:]
    h = hidden[:, :-1][want]               # the state before each scored token
    targets = ids[:, 1:][want]
    t = torch.ones(B, device=h.device) if temps is None else temps.to(h.device, torch.float32)
    t = t.view(-1, 1).expand(B, W - 1)[want]
    lp_sel, ent_sel = head_scores(output_head(model), h, targets, t,
                                   "grad" if with_entropy and entropy_grad else
                                   "metric" if with_entropy else None, chunk_tokens)
    lp = F.pad(torch.zeros((B, W - 1), dtype=lp_sel.dtype, device=h.device).masked_scatter(want, lp_sel), (1, 0))
    ent = None
    if with_entropy:
        ent = F.pad(torch.zeros((B, W - 1), dtype=ent_sel.dtype, device=h.device)
                    .masked_scatter(want, ent_sel), (1, 0))
    return lp, ent


class Learner:
    """`low_precision`: how AdamW stores updates in bf16 parameters (rl.optim: "stochastic",
    "kahan" or "master"; float32 parameters always get plain AdamW). `release_cuda_cache`: hand
    the allocator's cached blocks back to the driver after each step, for a vLLM server that
    shares the GPU (colocated placement) and wakes into the memory the step used."""

    def __init__(self, model, config: LearnerConfig, *, pad_token_id: int = 0, ref_model=None,
                 accelerator=None, low_precision: str = "stochastic",
                 release_cuda_cache: bool = False, group=None):
        from accelerate import Accelerator

        from selfplay_core.rl.optim import ChangeProbe, make_adamw

        if config.needs_reference and ref_model is None:
            raise ValueError("learner.kl_coef / role_kl > 0 needs a frozen reference model (ref_model)")
        self.config = config
        self.accelerator = accelerator or Accelerator(cpu=not torch.cuda.is_available())
        # rl.distributed.LearnerGroup: this rank's shard of every batch, gradients summed
        self.group = group
        if group is not None:
            # not accelerate's prepare: under a launcher it wraps the model in DDP, whose
            # per-backward all-reduce needs equal micro-batch counts on every rank
            model = model.to(group.device)
        # Only trainable parameters reach AdamW (LoRA freezes the base: no states for it).
        trainable = [p for p in model.parameters() if p.requires_grad]
        self._trainable = trainable
        self.optimizer = make_adamw(trainable, lr=config.lr, betas=config.betas,
                                    weight_decay=config.weight_decay, rounding=low_precision)
        self._probe = ChangeProbe(trainable)
        self.release_cuda_cache = release_cuda_cache
        if group is None:
            self.model, self.optimizer = self.accelerator.prepare(model, self.optimizer)
        else:
            self.model = model
            group.broadcast_parameters(trainable)  # the replicas start equal
        self.ref_model = ref_model.eval() if ref_model is not None else None
        if self.ref_model is not None:
            self.ref_model.requires_grad_(False)
            self.ref_model.to(self.device)
        self.pad_token_id = pad_token_id
        self.steps = 0

    @property
    def unwrapped(self):
        return self.accelerator.unwrap_model(self.model)

    @property
    def device(self):
        return self.group.device if self.group is not None else self.accelerator.device

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

    def update(self, rollouts: Sequence[Rollout], epochs: int = 1) -> dict[str, float]:
        """`epochs` optimizer steps over the same rollouts (PPO epochs). Returns the last step's
        metrics plus the first step's train/inference mismatch (`mismatch/*`): only then are
        the learner's weights the ones the engine sampled with."""
        if self.group is not None and self.group.is_leader:
            self.group.send("update", list(rollouts), epochs)  # the followers step with us
        metrics: dict[str, float] = {}
        first: dict[str, float] = {}
        for e in range(epochs):
            metrics = self.step(rollouts) if e == 0 else self.step(rollouts, first_epoch=False)
            if e == 0:
                first = {k: v for k, v in metrics.items() if k.startswith("mismatch/")}
        metrics.update(first)
        return metrics

    @torch.no_grad()
    def completion_logprobs(self, rollouts: Sequence[Rollout]) -> list[list[float]]:
        """The current policy's per-token logprobs of each rollout's completion given its prompt
        (at the rollout's temperature), micro-batched. For a completion that was sampled under
        another prompt than the one it is trained on (STaR's hinted rationalizations): its
        `old_logprobs` must be the policy's under the training prompt."""
        out: list[list[float]] = []
        was_training = self.model.training
        self.model.eval()
        try:
            c = self.config
            for start in range(0, len(rollouts), c.micro_batch_size):
                mb = [Rollout(r.prompt_ids, r.completion_ids, [0.0] * len(r.completion_ids), 0.0,
                              temperature=r.temperature)     # placeholders: nothing old is read
                      for r in rollouts[start:start + c.micro_batch_size]]
                b = _pad_batch(mb, self.pad_token_id, self.device)
                lp, _ = token_logprobs(self.model, b["ids"], b["attn"], temps=b["temps"],
                                       score_mask=b["cmask"], chunk_tokens=c.logits_chunk_tokens)
                for i, r in enumerate(mb):
                    p = len(r.prompt_ids)
                    out.append(lp[i, p:p + len(r.completion_ids)].float().cpu().tolist())
        finally:
            self.model.train(was_training)
        return out

    def step(self, rollouts: Sequence[Rollout], first_epoch: bool = True) -> dict[str, float]:
        """One optimizer step over all `rollouts` (micro-batched). Returns metrics; with
        `first_epoch` also the train/inference mismatch of these rollouts (`mismatch/*`)."""
        rollouts = [r for r in rollouts if r.completion_ids]
        if not rollouts:
            return {"learner/skipped": 1.0}
        for r in rollouts:
            if len(r.old_logprobs) != len(r.completion_ids):
                raise ValueError(f"rollout has {len(r.completion_ids)} completion tokens but "
                                 f"{len(r.old_logprobs)} old logprobs")
        c = self.config
        lo, hi = 1.0 - c.clip_eps, 1.0 + (c.clip_eps_high if c.clip_eps_high is not None else c.clip_eps)
        scales = self._row_scales(rollouts)  # over the whole batch, on every rank
        n_all = len(rollouts)
        if self.group is not None:
            lo_i, hi_i = self.group.shard(n_all)
            rollouts, scales = rollouts[lo_i:hi_i], scales[lo_i:hi_i]
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums = {"loss": 0.0, "pg": 0.0, "kl": 0.0, "entropy": 0.0, "clipped": 0.0, "ratio": 0.0}
        n_tok = 0.0
        mismatch = MismatchStats() if first_epoch else None
        tis = TISStats() if c.tis_cap is not None else None
        for start in range(0, len(rollouts), c.micro_batch_size):
            mb = rollouts[start:start + c.micro_batch_size]
            b = _pad_batch(mb, self.pad_token_id, self.device, kl=c.kl_of)
            lp, ent = token_logprobs(self.model, b["ids"], b["attn"], with_entropy=True,
                                     temps=b["temps"], score_mask=b["cmask"],
                                     entropy_grad=c.entropy_coef > 0,
                                     chunk_tokens=c.logits_chunk_tokens)
            mask = b["cmask"]
            if mismatch is not None:
                mismatch.add(lp.detach(), b["old"], mask)
            weight = None
            if c.tis_cap is None:
                ratio = torch.exp(lp - b["old"]) * mask
            else:
                base = b.get("base")
                if base is None:  # the first step over these rollouts: its weights are the base
                    base = lp.detach()
                    remember_learner_logprobs(mb, base)
                ratio = torch.exp(lp - base) * mask
                weight = tis_weight(base, b["old"], mask, c.tis_cap)
                tis.add(weight, base, b["old"], mask, c.tis_cap)
            adv = b["adv"].unsqueeze(1)
            pg = -torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv)
            if weight is not None:
                pg = weight * pg
            per_tok = pg
            kl = torch.zeros_like(pg)
            if self.ref_model is not None and bool((b["klw"] > 0).any()):
                with torch.no_grad():
                    ref_lp, _ = token_logprobs(self.ref_model, b["ids"], b["attn"], temps=b["temps"],
                                               score_mask=b["cmask"],
                                               chunk_tokens=c.logits_chunk_tokens)
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
            if self.group is None:
                self.accelerator.backward(loss)
            else:
                loss.backward()
            with torch.no_grad():
                sums["loss"] += float(loss)
                sums["pg"] += float((pg * mask).sum())
                sums["kl"] += float((kl * mask).sum())
                sums["entropy"] += float((ent * mask).sum())
                sums["clipped"] += float((((ratio < lo) | (ratio > hi)).float() * mask).sum())
                sums["ratio"] += float(ratio.sum())
                n_tok += float(mask.sum())
        if self.group is None:
            grad_norm = self.accelerator.clip_grad_norm_(self.model.parameters(), c.max_grad_norm)
        else:
            self.group.sum_gradients(self._trainable)
            grad_norm = torch.nn.utils.clip_grad_norm_(self._trainable, c.max_grad_norm)
            keys = sorted(sums)
            total = self.group.reduce([sums[k] for k in keys] + [n_tok])
            sums, n_tok = dict(zip(keys, total[:-1])), total[-1]
            if mismatch is not None:
                mismatch.reduce(self.group)
            if tis is not None:
                tis.reduce(self.group)
        update = self._optimizer_step()
        self.steps += 1
        n_tok = max(n_tok, 1.0)
        gn = float(grad_norm)
        extra = {**(mismatch.result() if mismatch is not None else {}),
                 **(tis.result() if tis is not None else {})}
        return {**extra,
            "learner/loss": sums["loss"],
            "learner/pg_loss_per_token": sums["pg"] / n_tok,
            "learner/kl_per_token": sums["kl"] / n_tok,
            "learner/entropy": sums["entropy"] / n_tok,
            "learner/clip_frac": sums["clipped"] / n_tok,
            "learner/ratio_mean": sums["ratio"] / n_tok,
            "learner/grad_norm": gn if math.isfinite(gn) else float("nan"),
            "learner/tokens": n_tok,
            "learner/rollouts": float(n_all),
            **update,
        }

    def _optimizer_step(self) -> dict[str, float]:
        """AdamW's step, then what reached the weights: `learner/changed_share` is the share of
        trainable parameters whose training value (the float32 master where one is kept) the
        step changed; `learner/update_visibility` (low-precision parameters) the share of the
        intended float32 update the stored values carry, 1 when nothing was rounded away."""
        inner = getattr(self.optimizer, "optimizer", self.optimizer)  # accelerate's wrapper
        exact = hasattr(inner, "last_changed_share")
        if not exact:
            self._probe.snapshot()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        out = {"learner/changed_share": inner.last_changed_share if exact
               else self._probe.changed_share()}
        if exact:
            out["learner/update_visibility"] = inner.last_update_visibility
        self._release_cuda_cache()
        return out

    def _release_cuda_cache(self) -> None:
        """Colocated placement: the step's activations and gradients are freed by now; return
        the allocator's cached blocks so the sleeping vLLM server can wake into them."""
        if self.release_cuda_cache:
            empty_cuda_cache()

    # ---- gradients without a step (a proposer reward that reads them: CompassPlay) ----------
    def policy_gradient(self, rollouts: Sequence[Rollout], params: Sequence[torch.nn.Parameter]) -> torch.Tensor:
        """The gradient of `-sum_i advantage_i * sum_t log pi(token_it)` with respect to `params`
        only, at the current weights, flattened to float32 (the caller's advantages carry any
        normalisation). Nothing a step uses is touched: no `.grad`, no optimizer state, eval
        mode (no dropout). Only `params` require a gradient during the pass, so the backward
        stops at the earliest of them: over the last layer it costs about one forward."""
        model = self.unwrapped
        flags = [(p, p.requires_grad) for p in model.parameters()]
        was_training = model.training
        total = None
        try:
            model.eval()
            for p, _ in flags:
                p.requires_grad_(False)
            for p in params:
                p.requires_grad_(True)
            rollouts = [r for r in rollouts if r.completion_ids]
            for start in range(0, len(rollouts), self.config.micro_batch_size):
                b = _pad_batch(rollouts[start:start + self.config.micro_batch_size], self.pad_token_id,
                               self.device)
                lp, _ = token_logprobs(model, b["ids"], b["attn"], temps=b["temps"], score_mask=b["cmask"],
                                       chunk_tokens=self.config.logits_chunk_tokens)
                loss = -((lp * b["cmask"]).sum(1) * b["adv"]).sum()
                grads = torch.autograd.grad(loss, list(params), allow_unused=True)
                flat = torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1).float()
                                  for g, p in zip(grads, params)])
                total = flat if total is None else total + flat
        finally:
            for p, flag in flags:
                p.requires_grad_(flag)
            model.train(was_training)
        if total is None:
            total = torch.zeros(sum(p.numel() for p in params), device=self.device)
        return total

    # ---- state for exact resume -------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state["steps"])


def empty_cuda_cache() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ---- train/inference mismatch and truncated importance sampling -----------------------------------
class MismatchStats:
    """Per-token agreement of the engine's logprobs (the sampling policy as the engine computed it)
    with the learner's at the same weights, over the first epoch's forward passes: |delta logprob|
    mean and max, and the importance ratio pi_learner / pi_engine before any clipping (mean, std,
    min, max; k3 = E[r - 1 - log r] >= 0 estimates KL(engine || learner))."""

    def __init__(self):
        self.n = 0.0
        self.abs_sum = 0.0
        self.abs_max = 0.0
        self.r_sum = 0.0
        self.r_sq = 0.0
        self.r_min = float("inf")
        self.r_max = float("-inf")
        self.k3 = 0.0

    @torch.no_grad()
    def add(self, learner_lp: torch.Tensor, engine_lp: torch.Tensor, mask: torch.Tensor) -> None:
        on = mask > 0
        if not bool(on.any()):
            return
        d = (learner_lp - engine_lp)[on].double()
        r = torch.exp(d)
        self.n += float(d.numel())
        self.abs_sum += float(d.abs().sum())
        self.abs_max = max(self.abs_max, float(d.abs().max()))
        self.r_sum += float(r.sum())
        self.r_sq += float((r * r).sum())
        self.r_min = min(self.r_min, float(r.min()))
        self.r_max = max(self.r_max, float(r.max()))
        self.k3 += float((r - 1.0 - d).sum())

    def reduce(self, group) -> None:
        """The whole batch's statistics from every rank's share."""
        self.n, self.abs_sum, self.r_sum, self.r_sq, self.k3 = group.reduce(
            [self.n, self.abs_sum, self.r_sum, self.r_sq, self.k3])
        self.abs_max, self.r_max = group.reduce([self.abs_max, self.r_max], "max")
        (self.r_min,) = group.reduce([self.r_min], "min")

    def result(self) -> dict[str, float]:
        if not self.n:
            return {}
        mean = self.r_sum / self.n
        var = max(0.0, self.r_sq / self.n - mean * mean)
        return {"mismatch/logprob_abs_diff_mean": self.abs_sum / self.n,
                "mismatch/logprob_abs_diff_max": self.abs_max,
                "mismatch/ratio_mean": mean, "mismatch/ratio_std": math.sqrt(var),
                "mismatch/ratio_min": self.r_min, "mismatch/ratio_max": self.r_max,
                "mismatch/kl_k3": self.k3 / self.n, "mismatch/tokens": self.n}


def tis_weight(learner_lp: torch.Tensor, engine_lp: torch.Tensor, mask: torch.Tensor,
               cap: float) -> torch.Tensor:
    """min(pi_learner / pi_engine, cap) per token (no gradient), 0 off the completion."""
    return (torch.exp(learner_lp - engine_lp).clamp(max=cap) * mask).detach()


def remember_learner_logprobs(rollouts: Sequence[Rollout], lp: torch.Tensor) -> None:
    """Keep the first step's learner logprobs of each completion on its rollout (TIS base)."""
    rows = lp.detach().float().cpu()
    for i, r in enumerate(rollouts):
        p = len(r.prompt_ids)
        r.learner_logprobs = rows[i, p:p + len(r.completion_ids)].tolist()


class TISStats:
    def __init__(self):
        self.n = self.w = self.truncated = 0.0

    @torch.no_grad()
    def add(self, weight, learner_lp, engine_lp, mask, cap: float) -> None:
        on = mask > 0
        self.n += float(on.sum())
        self.w += float(weight[on].sum())
        self.truncated += float(((learner_lp - engine_lp)[on] > math.log(cap)).sum())

    def reduce(self, group) -> None:
        self.n, self.w, self.truncated = group.reduce([self.n, self.w, self.truncated])

    def result(self) -> dict[str, float]:
        n = max(self.n, 1.0)
        return {"learner/tis_weight_mean": self.w / n, "learner/tis_truncated_frac": self.truncated / n}
