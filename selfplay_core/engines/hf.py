"""`HFEngine`: batched sampling with transformers on CPU or GPU (the default engine).

A hand-written decoding loop over the model's KV cache rather than `model.generate`, because the
learner needs exactly what was sampled and how likely it was: token ids, the log-probability of
each sampled token, and string stop sequences checked per sequence. Finished sequences leave the
batch (their cache rows are dropped), so a batch costs what its longest live sequence costs.

Logprobs are `log_softmax(logits / T)` of the sampled token (T = the sampling temperature, 1
when greedy), the convention TRL's GRPO uses when it recomputes them; top-p truncation is not
reflected in them.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Mapping

from selfplay_core.engines.base import Completion, SamplingParams
from selfplay_core.engines.errors import EngineError, InvalidRequest

__all__ = ["EngineError", "HFEngine", "InvalidRequest"]


class HFEngine:
    takes_seeds = True   # per-call torch generators: the same seed draws the same samples

    def __init__(self, model, tokenizer=None, *, device: str | None = None, dtype=None,
                 batch_size: int = 64, threads: int | None = None, max_length: int | None = None):
        """`model`: a path to a `save_pretrained` folder or a loaded causal LM; `tokenizer`
        defaults to the one saved with the model. `batch_size` counts sequences per forward."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads is not None:
            torch.set_num_threads(threads)
        if batch_size < 1:
            raise InvalidRequest("batch_size must be >= 1")
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if isinstance(model, (str, Path)):
            path = str(model)
            self.model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32)
            self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(path)
        else:
            if tokenizer is None:
                raise InvalidRequest("pass the tokenizer along with an in-memory model")
            self.model, self.tokenizer = model, tokenizer
        self.model.to(self.device).eval()
        self.batch_size = batch_size
        self.eos_id = self.tokenizer.eos_token_id
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_id
        # transformers 5.x renamed the forward's `past_key_values` to `cache`; accept both.
        params = inspect.signature(self.model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self.max_length = max_length or getattr(self.model.config, "max_position_embeddings", None) or 4096

    # -- weights ---------------------------------------------------------------------------------
    def load_weights(self, state_dict) -> None:
        """Copy new weights in place (no reload from disk); keys must match the model's. Takes a
        mapping or an iterable of (name, tensor) pairs, consumed one pair at a time (a LoRA
        model's merged tensors are made as they are asked for)."""
        import torch

        own = self.model.state_dict()
        if isinstance(state_dict, Mapping):
            unknown = set(state_dict) - set(own)
            if unknown:
                raise InvalidRequest(f"unknown weight names: {sorted(unknown)[:5]}")
        pairs = state_dict.items() if isinstance(state_dict, Mapping) else state_dict
        with torch.no_grad():
            for name, value in pairs:
                if name not in own:
                    raise InvalidRequest(f"unknown weight name: {name}")
                if own[name].shape != value.shape:
                    raise InvalidRequest(f"weight {name}: shape {tuple(value.shape)} != {tuple(own[name].shape)}")
                own[name].copy_(value.to(own[name].device, own[name].dtype))

    update_weights = load_weights

    # -- generation ------------------------------------------------------------------------------
    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[list[Completion]]:
        import torch

        if n < 1:
            raise InvalidRequest("n must be >= 1")
        if sampling.temperature < 0 or not 0 < sampling.top_p <= 1 or sampling.max_new_tokens < 1:
            raise InvalidRequest("need temperature >= 0, 0 < top_p <= 1, max_new_tokens >= 1")
        encoded = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        for k, ids in enumerate(encoded):
            if not ids:
                raise InvalidRequest(f"prompt {k} is empty")
            if len(ids) + sampling.max_new_tokens > self.max_length:
                raise InvalidRequest(f"prompt {k}: {len(ids)} tokens + max_new_tokens "
                                     f"{sampling.max_new_tokens} exceeds the model's context of "
                                     f"{self.max_length} tokens (lower the max_new_tokens setting)")
        jobs = [(k, j) for k in range(len(prompts)) for j in range(n)]
        # Similar prompt lengths share a batch: less padding.
        jobs.sort(key=lambda kj: len(encoded[kj[0]]))
        gen = None
        if sampling.seed is not None:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(sampling.seed)
        results: list[list[Completion | None]] = [[None] * n for _ in prompts]
        for s in range(0, len(jobs), self.batch_size):
            chunk = jobs[s:s + self.batch_size]
            outs = self._generate_batch([encoded[k] for k, _ in chunk], sampling, gen)
            for (k, j), c in zip(chunk, outs):
                c.prompt_token_ids = encoded[k]
                results[k][j] = c
        return results  # type: ignore[return-value]

    def _generate_batch(self, prompt_ids: list[list[int]], sp: SamplingParams, gen) -> list[Completion]:
        import torch

        B = len(prompt_ids)
        width = max(len(p) for p in prompt_ids)
        dev = self.device
        ids = torch.full((B, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((B, width), dtype=torch.long)
        for r, p in enumerate(prompt_ids):  # left padding: every prompt ends at the last column
            ids[r, width - len(p):] = torch.tensor(p)
            mask[r, width - len(p):] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        tokens: list[list[int]] = [[] for _ in range(B)]
        logps: list[list[float]] = [[] for _ in range(B)]
        finish = ["length"] * B
        stop_cut: list[int | None] = [None] * B
        live = torch.arange(B, device=dev)
        temp = sp.temperature if sp.temperature > 0 else 1.0
        max_stop = max((len(s) for s in sp.stop), default=0)
        with torch.inference_mode():
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
            cache, logits = _cache_of(out), out.logits[:, -1, :]
            next_pos = pos[:, -1] + 1
            for step in range(sp.max_new_tokens):
                logp = torch.log_softmax(logits.float() / temp, dim=-1)
                if sp.greedy:
                    tok = logp.argmax(-1)
                else:
                    tok = self._sample(logp, sp.top_p, gen)
                chosen = logp.gather(-1, tok[:, None])[:, 0]
                keep = []
                for r, (row, t, lp) in enumerate(zip(live.tolist(), tok.tolist(), chosen.tolist())):
                    tokens[row].append(t)
                    logps[row].append(lp)
                    done = False
                    if t == self.eos_id:
                        finish[row], done = "stop", True
                    elif sp.stop:
                        tail = self.tokenizer.decode(tokens[row][-(max_stop + 2):])
                        if any(s in tail for s in sp.stop):
                            finish[row], done, stop_cut[row] = "stop", True, 1
                    if not done:
                        keep.append(r)
                if not keep or step == sp.max_new_tokens - 1:
                    break
                if len(keep) < len(live):
                    idx = torch.tensor(keep, device=dev)
                    live, tok, next_pos, mask = live[idx], tok[idx], next_pos[idx], mask[idx]
                    cache.batch_select_indices(idx)
                mask = torch.cat([mask, torch.ones((len(live), 1), dtype=mask.dtype, device=dev)], dim=1)
                out = self.model(input_ids=tok[:, None], attention_mask=mask,
                                 position_ids=next_pos[:, None], use_cache=True,
                                 **{self._cache_kw: cache})
                cache, logits = _cache_of(out), out.logits[:, -1, :]
                next_pos = next_pos + 1
        comps = []
        for r in range(B):
            text = self.tokenizer.decode(tokens[r], skip_special_tokens=True)
            if stop_cut[r] is not None:
                text = _cut_at_stop(text, sp.stop)
            comps.append(Completion(text=text, token_ids=tokens[r], logprobs=logps[r],
                                    finish_reason=finish[r]))
        return comps

    @staticmethod
    def _sample(logp, top_p: float, gen):
        import torch

        probs = logp.exp()
        if top_p < 1.0:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            # keep the smallest prefix whose mass reaches top_p (always the top token)
            drop = sorted_p.cumsum(-1) - sorted_p >= top_p
            sorted_p = sorted_p.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        return torch.multinomial(probs, 1, generator=gen)[:, 0]


def _cache_of(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _cut_at_stop(text: str, stops) -> str:
    cut = len(text)
    for s in stops:
        k = text.find(s)
        if k != -1:
            cut = min(cut, k)
    return text[:cut]

