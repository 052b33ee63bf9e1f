"""Checkpoints that tests build from the committed toy model."""

from pathlib import Path


def random_toy_model(out: Path, seed: int = 1234) -> Path:
    """The toy model's architecture and tokenizer with freshly initialised weights: a policy
    whose own proposals never parse."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from selfplay_core.toyworld.bootstrap import ASSET_DIR

    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(ASSET_DIR)).save_pretrained(out)
    AutoTokenizer.from_pretrained(ASSET_DIR).save_pretrained(out)
    return out
