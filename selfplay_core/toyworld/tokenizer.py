"""A small byte-level BPE tokenizer trained on the toy corpus, saved as a `Qwen2Tokenizer`.

transformers 5.x rebuilds a `Qwen2Tokenizer`'s normalizer and pre-tokenizer from the class, not
from the saved tokenizer.json, when it is loaded with `AutoTokenizer`. Training with any other
pre-tokenizer would make the reloaded tokenizer split text differently from training. So we train
with exactly the components a `Qwen2Tokenizer` instance builds (its regex splits every digit into
its own piece, which is what we want: one token per digit, so constants are copied, not guessed).
"""

from __future__ import annotations

from typing import Iterable

from selfplay_core.roles.common import END_OF_TEXT


def train_tokenizer(texts: Iterable[str], vocab_size: int = 640):
    """Train BPE on `texts`; returns a transformers `Qwen2Tokenizer` (call `save_pretrained`)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    if vocab_size < 300:
        raise ValueError("vocab_size must be >= 300 (256 bytes + special tokens + merges)")
    template = Qwen2Tokenizer()._tokenizer  # the components the class itself installs
    tok = Tokenizer(models.BPE())
    tok.normalizer = template.normalizer
    tok.pre_tokenizer = template.pre_tokenizer
    tok.decoder = template.decoder
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[END_OF_TEXT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    state = tok.model
    vocab = tok.get_vocab()
    merges = _merges(tok)
    del state
    return Qwen2Tokenizer(vocab=vocab, merges=merges, eos_token=END_OF_TEXT, pad_token=END_OF_TEXT,
                          unk_token=END_OF_TEXT, model_max_length=1024)


def _merges(tok) -> list[tuple[str, str]]:
    import json

    model = json.loads(tok.to_str())["model"]
    return [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
