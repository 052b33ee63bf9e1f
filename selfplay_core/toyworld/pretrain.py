"""Causal-LM pretraining of the tiny model on the toy corpus (CPU-friendly).

Examples are batched with others of similar length (sorted within shuffled chunks) so little
compute goes to padding; the loss covers every real token, including the end-of-text token so
the model learns to stop — or, with `loss_from`, each example's tokens from a given index on (a
prompt that is context, not a target). Deterministic for a seed at a fixed thread count.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from typing import Callable


@dataclass(frozen=True)
class TrainSettings:
    epochs: float = 1.0
    batch_size: int = 32
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 30
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    max_tokens: int = 384
    # torch threads for this process; 1 was faster and steadier on a busy 2-core machine.
    threads: int = 1

    def __post_init__(self):
        if self.epochs <= 0 or self.batch_size < 1 or self.lr <= 0 or self.threads < 1:
            raise ValueError("epochs, batch_size, lr and threads must be positive")

    def to_dict(self) -> dict:
        return asdict(self)


def make_batches(lengths: list[int], batch_size: int, rng: random.Random, chunk: int = 64) -> list[list[int]]:
    """Index batches: shuffle, sort each chunk of `chunk` batches by length, shuffle batches."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    batches = []
    span = batch_size * chunk
    for s in range(0, len(order), span):
        part = sorted(order[s:s + span], key=lambda i: lengths[i])
        batches += [part[k:k + batch_size] for k in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches


def lr_at(step: int, total: int, s: TrainSettings) -> float:
    if step < s.warmup_steps:
        return s.lr * (step + 1) / s.warmup_steps
    frac = (step - s.warmup_steps) / max(1, total - s.warmup_steps)
    return s.lr * (s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def encode_with_starts(tokenizer, texts: list[str], char_starts: list[int]) -> tuple[list[list[int]], list[int]]:
    """Token ids of each text, and the index of its first token that starts at or after its
    character offset (the tokenizer's own offsets, so a merge across the boundary is never
    half-trained): one tokenization for both."""
    enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    starts = [0 if c <= 0 else next((j for j, (a, _) in enumerate(offsets) if a >= c), len(offsets))
              for offsets, c in zip(enc["offset_mapping"], char_starts)]
    return enc["input_ids"], starts


def pretrain(model, token_ids: list[list[int]], settings: TrainSettings, seed: int, pad_id: int,
             progress: Callable[[int, int, float], None] | None = None,
             loss_from: list[int] | None = None) -> list[float]:
    """Train in place; returns the loss per step. `progress(step, total, loss)` after each step.
    `loss_from[i]`: the loss of example i counts from its token loss_from[i] on (0: all)."""
    import torch

    if loss_from is not None and len(loss_from) != len(token_ids):
        raise ValueError(f"loss_from has {len(loss_from)} entries for {len(token_ids)} examples")

    torch.set_num_threads(settings.threads)
    torch.manual_seed(seed)
    rng = random.Random(f"toyworld-pretrain:{seed}")
    ids = [t[: settings.max_tokens] for t in token_ids]
    lengths = [len(t) for t in ids]
    batches = []
    for _ in range(math.ceil(settings.epochs)):
        batches += make_batches(lengths, settings.batch_size, rng)
    total = max(1, round(len(ids) * settings.epochs / settings.batch_size))
    batches = batches[:total]
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": settings.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=settings.lr, betas=(0.9, 0.98))
    model.train()
    losses = []
    for step, batch in enumerate(batches):
        width = max(lengths[i] for i in batch)
        x = torch.full((len(batch), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for r, i in enumerate(batch):
            x[r, : lengths[i]] = torch.tensor(ids[i])
            mask[r, : lengths[i]] = 1
        labels = x.masked_fill(mask == 0, -100)
        if loss_from is not None:
            for r, i in enumerate(batch):
                labels[r, : loss_from[i]] = -100
            if not (labels != -100).any():   # every example's targets cut away: nothing to learn
                losses.append(float("nan"))
                if progress:
                    progress(step + 1, total, losses[-1])
                continue
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, settings)
        loss = model(input_ids=x, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
        opt.step()
        losses.append(loss.item())
        if progress:
            progress(step + 1, total, losses[-1])
    model.eval()
    return losses
