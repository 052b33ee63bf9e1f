"""Prepare a model and an Accelerator for the shared learner on GPUs: dtype, gradient
checkpointing, optional LoRA (peft). The learner itself is unchanged; this only decides what it
is handed. Multi-GPU layouts come from `accelerate launch --config_file configs/accelerate/...`.

- dtype / precision: "pure" casts the weights to the dtype (bf16 weights, grads and AdamW states:
  8 bytes per parameter, what lets a 7B model train on one 80 GB GPU); "amp" keeps float32 master
  weights and lets accelerate autocast matmuls to the dtype (16 bytes per parameter, more exact).
- gradient checkpointing: recompute each layer's activations in the backward pass (~1/3 more
  compute, activations drop from L layers to L layer inputs + one layer). Non-reentrant, so it
  works when the inputs of checkpointed blocks need no grad (frozen embeddings under LoRA).
- LoRA: peft adapters on the projections; the base is frozen, only adapters reach AdamW. peft keeps
  adapters in float32 even on a bf16 base.
"""

from __future__ import annotations

import torch

from selfplay_core.engines.gpu_config import GPUConfig, LoraSettings

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def prepare_model(model, *, dtype: str = "float32", precision: str = "pure",
                  gradient_checkpointing: bool = False, lora: LoraSettings | None = None):
    """Return the model to hand to `Learner` (the same object, or a peft wrapper of it)."""
    if precision == "pure":
        model = model.to(_DTYPES[dtype])
    else:
        model = model.to(torch.float32)
    if gradient_checkpointing:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        model.config.use_cache = False  # a KV cache is useless in training and clashes with it
    if lora is not None:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError as e:
            raise ImportError(f"LoRA needs peft ({e}): pip install 'selfplay[trl]'") from None
        model = get_peft_model(model, LoraConfig(r=lora.r, lora_alpha=lora.alpha,
                                                 lora_dropout=lora.dropout,
                                                 target_modules=list(lora.target_modules),
                                                 task_type="CAUSAL_LM"))
    return model


def prepare_for(model, gpu: GPUConfig):
    """`prepare_model` with the settings of a validated GPU deployment."""
    return prepare_model(model, dtype=gpu.dtype, precision=gpu.precision,
                         gradient_checkpointing=gpu.gradient_checkpointing, lora=gpu.lora)


def make_accelerator(gpu: GPUConfig):
    """An Accelerator for the learner: autocast only in "amp" precision. Under `accelerate
    launch` the distributed layout (DDP, ZeRO-3, FSDP) comes from the launch config file."""
    from accelerate import Accelerator

    mixed = "no"
    if gpu.precision == "amp" and gpu.dtype != "float32":
        mixed = "bf16" if gpu.dtype == "bfloat16" else "fp16"
    return Accelerator(cpu=gpu.device == "cpu", mixed_precision=mixed)


def is_checkpointing(model) -> bool:
    return any(getattr(m, "gradient_checkpointing", False) for m in model.modules())


def trainable_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
