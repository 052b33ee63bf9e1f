"""The served weights of a LoRA-trained model, one tensor at a time, without touching the base.

A vLLM server (or the HF engine) that serves full weights needs W + scaling x B A for every
adapted projection. peft's `merge_adapter()` adds the delta into the frozen base weights in place
and `unmerge_adapter()` subtracts it again; in bf16 that round trip is not exact, so every weight
sync would move the frozen base a little further from the checkpoint, and a consumer that keeps
the merged tensors past the merge (the NCCL push) had to clone the whole model at once. Here the
base is only read: each merged tensor is computed out of place (in float32, rounded once to the
weight's dtype) when the consumer asks for it, so the extra memory is one weight matrix at a time
(the largest projection of a 7B model, 18944 x 3584 in bf16, is 136 MB) instead of the model.
"""

from __future__ import annotations

from typing import Iterator

import torch


def _lora_module(base, param_name: str):
    """The peft LoRA layer that owns `...<module>.base_layer.<weight|bias>`, or None."""
    if ".base_layer." not in param_name:
        return None
    module = base.get_submodule(param_name.rsplit(".base_layer.", 1)[0])
    return module if hasattr(module, "lora_A") and hasattr(module, "get_delta_weight") else None


def _served_name(name: str) -> str:
    return name.replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")


def _skipped(name: str) -> bool:
    return "lora_" in name or ".original_module." in name


def _active(module) -> list[str]:
    if getattr(module, "disable_adapters", False) or getattr(module, "merged", False):
        return []  # adapters off, or already merged into the base by someone else
    adapters = [a for a in module.active_adapters if a in module.lora_A]
    for a in adapters:
        if getattr(module, "use_dora", {}).get(a):
            raise NotImplementedError(f"DoRA adapter {a!r}: merged weights are not W + s B A")
        if getattr(module, "lora_bias", {}).get(a):
            raise NotImplementedError(f"adapter {a!r} trains a LoRA bias: not merged here")
    return adapters


def merged_tensor_specs(model) -> Iterator[tuple[str, torch.dtype, tuple[int, ...]]]:
    """(served name, dtype, shape) of every tensor `merged_tensors` yields, in the same order,
    without computing anything (what a streaming transport announces first)."""
    for name, p in model.get_base_model().named_parameters():
        if not _skipped(name):
            yield _served_name(name), p.dtype, tuple(p.shape)


def merged_tensors(model) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) under the names of the base model's checkpoint: adapted weights as fresh
    merged tensors, everything else as the parameter's own data (not copied)."""
    base = model.get_base_model()
    with torch.no_grad():
        for name, p in base.named_parameters():
            if _skipped(name):
                continue
            module = _lora_module(base, name)
            adapters = _active(module) if module is not None else []
            if not adapters or not name.endswith(".base_layer.weight"):
                yield _served_name(name), p.data
                continue
            merged = p.data.to(torch.float32, copy=True)
            for a in adapters:
                merged += module.get_delta_weight(a).to(torch.float32)
            yield _served_name(name), merged.to(p.dtype)
            del merged
