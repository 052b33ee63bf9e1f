"""Prepare a model, its optimizer's rounding and an Accelerator for the shared learner on a GPU:
dtype, precision, gradient checkpointing, optional LoRA (peft). The learner itself is unchanged;
this only decides what it is handed. On several GPUs the learner is a group of torchrun ranks
(gpu.distributed: ddp, rl/distributed.py); a launch whose config does not ask for one stops at
once (`engines.gpu_config.refuse_distributed_launch`).

- precision (engines.gpu_config.GPUConfig): "pure", "kahan" and "master" keep the weights in
  `dtype` (bf16) and differ in how AdamW stores updates the bf16 grid would round away at lr 1e-6
  (rl/optim.py: stochastic rounding, a Kahan compensation buffer, float32 master weights);
  "amp" keeps float32 weights and lets accelerate autocast matmuls to `dtype`.
- gradient checkpointing: recompute each layer's activations in the backward pass (~1/3 more
  compute, activations drop from L layers to L layer inputs + one layer). Non-reentrant, so it
  works when the inputs of checkpointed blocks need no grad (frozen embeddings under LoRA).
- LoRA: peft adapters on the projections; the base is frozen, only adapters reach AdamW. peft
  creates the adapters in float32 on a bf16 base (autocast_adapter_dtype), so their updates are
  exact with torch's AdamW.
"""

from __future__ import annotations

import torch

from selfplay_core.engines.gpu_config import GPUConfig, LoraSettings

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# how LowPrecisionAdamW stores updates of bf16 parameters, by GPUConfig.precision
_ROUNDING = {"pure": "stochastic", "kahan": "kahan", "master": "master", "amp": "stochastic"}
def low_precision_rounding(gpu: GPUConfig | None) -> str:
    """The rl.optim rounding for bf16 parameters under this GPU config (stochastic without one)."""
    return _ROUNDING[gpu.precision] if gpu is not None else "stochastic"


def prepare_model(model, *, dtype: str = "float32", precision: str = "pure",
                  gradient_checkpointing: bool = False, lora: LoraSettings | None = None):
    """Return the model to hand to `Learner` (the same object, or a peft wrapper of it)."""
    if precision == "amp":
        model = model.to(torch.float32)
    else:
        model = model.to(_DTYPES[dtype])
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
                                                 task_type="CAUSAL_LM"),
                               autocast_adapter_dtype=True)
    return model


def prepare_for(model, gpu: GPUConfig):
    """`prepare_model` with the settings of a validated GPU deployment."""
    return prepare_model(model, dtype=gpu.dtype, precision=gpu.precision,
                         gradient_checkpointing=gpu.gradient_checkpointing, lora=gpu.lora)


def make_accelerator(gpu: GPUConfig):
    """An Accelerator for the learner: autocast only in "amp" precision."""
    from accelerate import Accelerator

    mixed = "no"
    if gpu.precision == "amp" and gpu.dtype != "float32":
        mixed = "bf16" if gpu.dtype == "bfloat16" else "fp16"
    return Accelerator(cpu=gpu.device == "cpu", mixed_precision=mixed)


def is_checkpointing(model) -> bool:
    return any(getattr(m, "gradient_checkpointing", False) for m in model.modules())


def trainable_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
