"""Do a benchmark's prompts fit a checkpoint's context? Checked before an evaluation starts, so
a benchmark the model cannot take (HumanEval+ with its 1,024 new tokens on the toy model's
512-token window) is one clear error, not a failure deep inside generation.

The rule is the hf engine's (`HFEngine.generate`): a prompt's tokens (no special tokens) plus
`max_new_tokens` must not exceed the model's `max_position_embeddings`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from selfplay_core.problems import InputError, Problem


def context_window(model_dir: str | Path) -> int | None:
    """The checkpoint's `max_position_embeddings` from its config.json (None: unknown)."""
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = cfg.get("max_position_embeddings") or (cfg.get("text_config") or {}).get("max_position_embeddings")
    return int(value) if value else None


def load_tokenizer(model_dir: str | Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))


def prompt_lengths(tokenizer, prompts: Sequence[str]) -> list[int]:
    return [len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]


def check_prompts_fit(benchmark: str, problems: Sequence[Problem], template, *, tokenizer,
                      window: int | None, max_new_tokens: int, checkpoint: str) -> None:
    """InputError naming the benchmark, how many prompts do not fit, the longest, the window,
    and what would fit, when any prompt plus `max_new_tokens` exceeds `window`."""
    if window is None or not problems:
        return
    lengths = prompt_lengths(tokenizer, [template.render(p, benchmark) for p in problems])
    over = [n for n in lengths if n + max_new_tokens > window]
    if not over:
        return
    longest = max(lengths)
    room = window - longest
    hint = (f"max_new_tokens <= {room} would fit every prompt" if room > 0
            else "no max_new_tokens fits its longest prompt")
    raise InputError(
        f"{benchmark}: {len(over)} of {len(lengths)} prompts do not fit checkpoint {checkpoint}: "
        f"the longest is {longest} tokens, + max_new_tokens {max_new_tokens} > its context of "
        f"{window} tokens ({hint}). Evaluate a checkpoint with a longer context, lower "
        f"max_new_tokens, or leave {benchmark} out"
        + (" (the toy checkpoint is for benchmark 'toy')." if checkpoint == "toy" else "."))


def prompt_problems(name: str, data: str | Path | None = None, **lcb) -> list[Problem] | None:
    """A benchmark's problems with their prompts, read without running anything (no expected
    outputs); None for benchmarks whose problems only exist after sandbox work (HumanEval and
    MBPP: checked after loading instead)."""
    if name in ("humanevalplus", "mbppplus"):
        from selfplay_core.datasets.evalplus import load_humanevalplus, load_mbppplus

        problems, _ = {"humanevalplus": load_humanevalplus, "mbppplus": load_mbppplus}[name](data)
        return problems
    if name == "lcb":
        from selfplay_core.datasets.livecodebench import load_lcb

        return load_lcb(data, **lcb).problems
    return None
