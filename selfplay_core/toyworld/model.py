"""The tiny causal LM: a standard transformers Qwen2 model, so every production code path
(engines, learner, checkpoints, evaluation) runs unchanged on it.

Defaults are the feasibility run's good base: hidden 128, 4 layers, 4 heads / 2 KV heads,
FFN 384, tied embeddings (~0.87 M parameters with a 640-token vocabulary, 3.4 MB in fp32).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ModelSettings:
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    ffn_size: int = 384
    max_positions: int = 512

    def __post_init__(self):
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError("hidden_size must divide by num_heads, num_heads by num_kv_heads")

    def to_dict(self) -> dict:
        return asdict(self)


def build_model(vocab_size: int, settings: ModelSettings, eos_token_id: int, seed: int):
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=vocab_size, hidden_size=settings.hidden_size,
        intermediate_size=settings.ffn_size, num_hidden_layers=settings.num_layers,
        num_attention_heads=settings.num_heads, num_key_value_heads=settings.num_kv_heads,
        max_position_embeddings=settings.max_positions, tie_word_embeddings=True,
        bos_token_id=eos_token_id, eos_token_id=eos_token_id, pad_token_id=eos_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(cfg)
    model.generation_config = GenerationConfig(eos_token_id=eos_token_id, pad_token_id=eos_token_id,
                                               bos_token_id=eos_token_id)
    return model


def n_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
