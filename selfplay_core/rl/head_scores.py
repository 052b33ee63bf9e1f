"""Log-probabilities and entropy of chosen tokens under a causal LM's output head, with the
memory of one chunk of logits (what `learner.token_logprobs` is built on).

With a 152k vocabulary the [tokens, vocab] float32 logits, their log-softmax and the tensors
autograd keeps for them are the largest buffers of a 7B learner step (16 GiB at 4 x 2048
tokens). Here the model returns only its final hidden states, the head runs on the scored
(completion) positions, a chunk of rows at a time, and a custom autograd function keeps nothing
of a chunk but its inputs: its logits are rebuilt in the backward pass.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def final_hidden(model, ids, attn):
    """The last hidden states (after the final norm) through the model's own forward, so that
    wrappers (peft, accelerate's autocast) apply; `logits_to_keep=1` skips the full logits."""
    out = model(input_ids=ids, attention_mask=attn, output_hidden_states=True, logits_to_keep=1,
                use_cache=False)
    return out.hidden_states[-1]


def output_head(model):
    inner = getattr(model, "module", model)  # DDP / accelerate wrappers
    return inner.get_output_embeddings()


class HeadScores(torch.autograd.Function):
    """logprob of `targets` and entropy under softmax((h W^T + b) / T), for one chunk of rows.

    Saves only its inputs: the chunk's [rows, vocab] float32 logits live inside forward and
    backward and are never kept for the backward pass (autograd through logsumexp, gather and
    softmax would keep or rebuild ~8 such buffers; this needs ~3). Gradients, with p the
    softmax and z the tempered logits: d lp / dz = onehot - p; d H / dz = -p (z - E_p[z]).
    """

    @staticmethod
    def forward(ctx, h, weight, bias, targets, temps, entropy: bool):
        ctx.set_materialize_grads(False)
        z = _tempered_logits(h, weight, bias, temps)
        lse = torch.logsumexp(z, dim=-1)
        lp = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
        if entropy:
            p = torch.softmax(z, dim=-1)
            ent = lse - torch.einsum("ij,ij->i", p, z)
        else:
            ent = torch.zeros_like(lse)
        ctx.save_for_backward(h, weight, bias, targets, temps)
        return lp, ent

    @staticmethod
    def backward(ctx, g_lp, g_ent):
        h, weight, bias, targets, temps = ctx.saved_tensors
        z = _tempered_logits(h, weight, bias, temps)
        p = torch.softmax(z, dim=-1)
        g_lp = z.new_zeros(z.shape[0]) if g_lp is None else g_lp.to(z.dtype)
        if g_ent is not None:  # grad_z = -p * (g_lp + g_ent (z - E_p[z])) + g_lp onehot
            ez = torch.einsum("ij,ij->i", p, z)
            gz = z.sub_(ez.unsqueeze(-1)).mul_(g_ent.to(z.dtype).unsqueeze(-1)).add_(g_lp.unsqueeze(-1)).mul_(p)
            del p
        else:
            del z
            gz = p.mul_(g_lp.unsqueeze(-1))
        gz.neg_().scatter_add_(-1, targets.unsqueeze(-1), g_lp.unsqueeze(-1)).div_(temps.to(gz.dtype).unsqueeze(-1))
        gzc = gz.to(weight.dtype)
        grad_b = gz.sum(0).to(bias.dtype) if bias is not None and ctx.needs_input_grad[2] else None
        del gz
        grad_h = (gzc @ weight).to(h.dtype) if ctx.needs_input_grad[0] else None
        grad_w = gzc.t() @ h.to(weight.dtype) if ctx.needs_input_grad[1] else None
        return grad_h, grad_w, grad_b, None, None, None


def _tempered_logits(h, weight, bias, temps):
    """float32 (float64 for a float64 head) logits / temperature, a fresh tensor."""
    z = F.linear(h.to(weight.dtype), weight, bias)
    z = z if z.dtype == torch.float64 else z.float()
    return z.div_(temps.to(z.dtype).unsqueeze(-1))


def _module_scores(head, h, targets, temps):
    z = head(h).float() / temps.unsqueeze(-1)
    lse = torch.logsumexp(z, dim=-1)
    lp = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    return lp, lse - (torch.softmax(z, dim=-1) * z).sum(-1)


def head_scores(head, h, targets, temps, entropy: str | None, chunk_tokens: int):
    """(logprob, entropy) of each row of `h`, `chunk_tokens` rows at a time. entropy: None,
    "metric" (detached) or "grad"."""
    lps, ents = [], []
    for s in range(0, h.shape[0], max(1, chunk_tokens)):
        rows = (h[s:s + chunk_tokens], targets[s:s + chunk_tokens], temps[s:s + chunk_tokens])
        if type(head) is torch.nn.Linear:
            lp, ent = HeadScores.apply(rows[0], head.weight, head.bias, rows[1], rows[2],
                                        entropy is not None)
        else:  # a wrapped head (e.g. LoRA on lm_head): plain autograd through the module
            lp, ent = _module_scores(head, *rows)
        lps.append(lp)
        ents.append(ent if entropy == "grad" else ent.detach())
    if not lps:
        empty = h.new_zeros((0,), dtype=torch.float32)
        return empty, empty
    return torch.cat(lps), torch.cat(ents)
