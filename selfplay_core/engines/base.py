"""The one interface every generation backend implements.

`generate(prompts, n, sampling)` returns, for each prompt, `n` completions with their token ids
and (when the engine can) per-token logprobs of the sampled tokens under the sampling policy's
model — what the learner needs as "old logprobs".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass
class Completion:
    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    finish_reason: str = "stop"  # "stop" | "length"
    prompt_token_ids: list[int] | None = None


@runtime_checkable
class Engine(Protocol):
    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[list[Completion]]:
        ...


def takes_seeds(engine) -> bool:
    """Whether `SamplingParams.seed` makes the engine's draws reproducible (an engine says so
    with a `takes_seeds` attribute; one that does not say is assumed to)."""
    return bool(getattr(engine, "takes_seeds", True))
